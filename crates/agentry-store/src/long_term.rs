//! Long-term memory in the session database, one user's: found by words (SQLite full-text
//! search, bm25) and by meaning (embeddings compared in memory), the two rankings merged.

use std::sync::Arc;

use agentry::embedding::{EmbedPurpose, Embedder};
use agentry::memory::MemoryError;
use agentry::memory::long_term::{LongTermMemory, MemoryRecord, RecordSource};
use async_trait::async_trait;

use crate::search::embed_or_words;
use crate::search::fusion::fuse;
use crate::search::vectors::VectorCache;
use crate::sqlite::{MemoryState, NewMemory};
use crate::{SqliteStore, StoreError};

/// How many candidates each ranking offers the fusion, per memory asked for.
const CANDIDATES_PER_RESULT: usize = 4;

/// One user's long-term memory in a [`SqliteStore`]: give it to
/// [`ReActAgentBuilder::long_term_memory`](agentry::agent::ReActAgentBuilder::long_term_memory).
///
/// Without an embedder, retrieval is by words only; with one, a question that shares no word
/// with a memory ("what is my pet called?", "the user's dog is Rex") still finds it. A memory
/// whose text could not be embedded is kept and found by its words.
///
/// ```
/// use agentry::memory::long_term::{LongTermMemory, RecordSource};
/// use agentry_store::{SqliteStore, StoredLongTermMemory};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = SqliteStore::in_memory().unwrap();
/// let memory = StoredLongTermMemory::new(store, "ada", None);
/// memory.record(vec!["Ada's dog is called Rex.".into()], RecordSource::User).await.unwrap();
/// let found = memory.retrieve("dog's name", 5).await.unwrap();
/// assert_eq!(found[0].content, "Ada's dog is called Rex.");
/// # });
/// ```
pub struct StoredLongTermMemory {
    store: SqliteStore,
    user: String,
    session_id: Option<String>,
    embedder: Option<Arc<dyn Embedder>>,
    /// The user's vectors, and the state of the table they were read at.
    vectors: VectorCache<MemoryState>,
}

impl std::fmt::Debug for StoredLongTermMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredLongTermMemory")
            .field("user", &self.user)
            .field(
                "embedder",
                &self.embedder.as_ref().map(|e| e.model_id().to_owned()),
            )
            .finish()
    }
}

impl StoredLongTermMemory {
    /// `user`'s memories in `store`, embedded with `embedder` when there is one.
    pub fn new(store: SqliteStore, user: impl Into<String>, embedder: Option<Arc<dyn Embedder>>) -> Self {
        StoredLongTermMemory {
            store,
            user: user.into(),
            session_id: None,
            embedder,
            vectors: VectorCache::default(),
        }
    }

    /// `user`'s memories on the same store and embedder (a server keeps one per user of its
    /// token file).
    pub fn for_user(&self, user: impl Into<String>) -> Self {
        StoredLongTermMemory::new(self.store.clone(), user, self.embedder.clone())
    }

    /// Records made from now on name this session as where they come from.
    pub fn in_session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// The user whose memories these are.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The user's memories, newest first.
    pub async fn list(&self, limit: usize) -> Result<Vec<MemoryRecord>, StoreError> {
        self.store.memories(&self.user, limit).await
    }

    /// Deletes one of the user's memories; whether it existed.
    pub async fn forget(&self, id: i64) -> Result<bool, StoreError> {
        let forgotten = self.store.forget_memory(&self.user, id).await?;
        if forgotten {
            self.vectors
                .update(|state, vectors| {
                    vectors.remove(id);
                    state.count -= 1;
                    state.changes += 1;
                })
                .await;
        }
        Ok(forgotten)
    }

    /// Embeds `texts`, or says why not (the caller goes on without vectors).
    async fn embed(&self, texts: Vec<String>, purpose: EmbedPurpose) -> Option<(String, Vec<Vec<f32>>)> {
        embed_or_words(
            self.embedder.as_ref(),
            texts,
            purpose,
            "memories are searched and kept",
        )
        .await
    }

    /// The nearest memories to `query` by meaning, reading the user's vectors again when
    /// another writer changed them.
    async fn nearest(
        &self,
        state: MemoryState,
        query: Vec<f32>,
        model: &str,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let set = self
            .vectors
            .fresh(state, query.len(), || {
                self.store.memory_vectors(&self.user, model)
            })
            .await?;
        // A vector at a right angle or beyond shares nothing with the query.
        Ok(set
            .nearest(&query, limit)
            .into_iter()
            .filter(|(_, score)| *score > 0.0)
            .map(|(id, _)| id)
            .collect())
    }
}

fn storage(error: StoreError) -> MemoryError {
    MemoryError::Storage(error.to_string())
}

#[async_trait]
impl LongTermMemory for StoredLongTermMemory {
    async fn record(&self, contents: Vec<String>, source: RecordSource) -> Result<usize, MemoryError> {
        let contents: Vec<String> = contents
            .into_iter()
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect();
        if contents.is_empty() {
            return Ok(0);
        }
        let embedded = self.embed(contents.clone(), EmbedPurpose::Document).await;
        let memories: Vec<NewMemory> = contents
            .into_iter()
            .enumerate()
            .map(|(i, content)| NewMemory {
                content,
                source,
                session_id: self.session_id.clone(),
                embedding: embedded
                    .as_ref()
                    .and_then(|(model, vectors)| Some((model.clone(), vectors.get(i)?.clone()))),
            })
            .collect();
        let before = self.store.memory_state(&self.user).await.map_err(storage)?;
        let ids = self
            .store
            .record_memories(&self.user, memories.clone())
            .await
            .map_err(storage)?;
        // Our own records join the cached vectors; anyone else's make them stale.
        self.vectors
            .update(|state, set| {
                if *state != before {
                    return;
                }
                for (id, memory) in ids.iter().zip(&memories) {
                    if let Some((_, vector)) = &memory.embedding {
                        set.push(*id, vector);
                    }
                }
                state.count += ids.len() as i64;
                state.changes += ids.len() as i64;
            })
            .await;
        Ok(ids.len())
    }

    async fn retrieve(&self, query: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError> {
        if query.trim().is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let state = self.store.memory_state(&self.user).await.map_err(storage)?;
        // Someone with no memories is answered without embedding the query.
        if state.count == 0 {
            return Ok(Vec::new());
        }
        let candidates = limit * CANDIDATES_PER_RESULT;
        let lexical = self
            .store
            .lexical_memories(&self.user, query, candidates)
            .await
            .map_err(storage)?;
        let semantic = match self.embed(vec![query.to_owned()], EmbedPurpose::Query).await {
            Some((model, mut vectors)) if !vectors.is_empty() => {
                let vector = vectors.swap_remove(0);
                self.nearest(state, vector, &model, candidates)
                    .await
                    .map_err(storage)?
            }
            _ => Vec::new(),
        };
        let fused = fuse(&[&semantic, &lexical]);
        let best: Vec<(i64, f32)> = fused.into_iter().take(limit).collect();
        let mut records = self
            .store
            .memories_by_id(&self.user, best.iter().map(|(id, _)| *id).collect())
            .await
            .map_err(storage)?;
        for record in &mut records {
            record.score = best.iter().find(|(id, _)| *id == record.id).map(|(_, s)| *s);
        }
        Ok(records)
    }
}
