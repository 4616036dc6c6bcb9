//! A knowledge base in the session database, searched by words and by meaning like long-term
//! memory ([`crate::StoredLongTermMemory`]).

use std::collections::HashMap;
use std::sync::Arc;

use agentry::embedding::{EmbedPurpose, Embedder};
use agentry::knowledge::{KnowledgeBase, KnowledgeChunk, KnowledgeError};
use async_trait::async_trait;

use crate::search::embed_or_words;
use crate::search::fusion::fuse;
use crate::search::vectors::VectorCache;
use crate::{SqliteStore, StoreError};

/// How many candidates each ranking offers the fusion, per chunk asked for.
const CANDIDATES_PER_RESULT: usize = 4;

/// How long a base found empty is taken to stay empty: every reply retrieves from its bases,
/// and asking the database again each time cost a busy agent 8 % of its client CPU per step.
/// Documents added meanwhile (by `agentry kb add`) are seen after this.
const EMPTY_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// One knowledge base of a [`SqliteStore`] (made with `agentry kb add`, or
/// [`SqliteStore::open_knowledge_base`] and [`SqliteStore::replace_document`]): give it to
/// [`ReActAgentBuilder::knowledge`](agentry::agent::ReActAgentBuilder::knowledge).
///
/// A chunk's score is the cosine similarity of its vector and the query's; without an
/// embedder (or for a chunk without a vector) it is a rank-based score below 0.05.
pub struct StoredKnowledgeBase {
    store: SqliteStore,
    id: i64,
    name: String,
    embedder: Option<Arc<dyn Embedder>>,
    /// The base's vectors and the (count, changes) of its chunks they were read at.
    vectors: VectorCache<(i64, i64)>,
    /// When the base was last found empty.
    found_empty: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl std::fmt::Debug for StoredKnowledgeBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKnowledgeBase")
            .field("name", &self.name)
            .finish()
    }
}

impl StoredKnowledgeBase {
    /// The base named `name` in `store`; [`StoreError::Decode`]-free: `None` when there is no
    /// such base.
    pub async fn open(
        store: SqliteStore,
        name: &str,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<Option<Self>, StoreError> {
        let Some(info) = store.knowledge_base(name).await? else {
            return Ok(None);
        };
        Ok(Some(StoredKnowledgeBase {
            store,
            id: info.id,
            name: info.name,
            embedder,
            vectors: VectorCache::default(),
            found_empty: std::sync::Mutex::new(None),
        }))
    }

    async fn search(
        &self,
        query: &str,
        limit: usize,
        score_threshold: Option<f32>,
    ) -> Result<Vec<KnowledgeChunk>, StoreError> {
        let recently_empty = self
            .found_empty
            .lock()
            .ok()
            .and_then(|found| *found)
            .is_some_and(|at| at.elapsed() < EMPTY_RECHECK);
        if recently_empty {
            return Ok(Vec::new());
        }
        let state = self.store.chunk_state(self.id).await?;
        // An empty base answers nothing: the query is not embedded.
        if state.0 == 0 {
            if let Ok(mut found) = self.found_empty.lock() {
                *found = Some(tokio::time::Instant::now());
            }
            return Ok(Vec::new());
        }
        let candidates = limit * CANDIDATES_PER_RESULT;
        let lexical = self.store.lexical_chunks(self.id, query, candidates).await?;
        let query_vector = embed_or_words(
            self.embedder.as_ref(),
            vec![query.to_owned()],
            EmbedPurpose::Query,
            "the knowledge base is searched",
        )
        .await
        .and_then(|(model, mut vectors)| (!vectors.is_empty()).then(|| (model, vectors.swap_remove(0))));
        let mut cosines: HashMap<i64, f32> = HashMap::new();
        let mut semantic = Vec::new();
        if let Some((model, vector)) = &query_vector {
            let set = self
                .vectors
                .fresh(state, vector.len(), || self.store.chunk_vectors(self.id, model))
                .await?;
            for (id, score) in set.nearest(vector, candidates) {
                if score > 0.0 {
                    semantic.push(id);
                }
                cosines.insert(id, score);
            }
            cosines.extend(set.scores(&lexical, vector));
        }
        let fused = fuse(&[&semantic, &lexical]);
        let order: Vec<(i64, f32)> = fused
            .into_iter()
            .map(|(id, rank_score)| (id, cosines.get(&id).copied().unwrap_or(rank_score)))
            .filter(|(_, score)| score_threshold.is_none_or(|t| *score >= t))
            .take(limit)
            .collect();
        let chunks = self
            .store
            .chunks_by_id(self.id, order.iter().map(|(id, _)| *id).collect())
            .await?;
        Ok(chunks
            .into_iter()
            .map(|chunk| {
                let score = order
                    .iter()
                    .find(|(id, _)| *id == chunk.id)
                    .map_or(0.0, |(_, s)| *s);
                KnowledgeChunk::new(chunk.content, chunk.path, self.name.clone(), score)
            })
            .collect())
    }
}

#[async_trait]
impl KnowledgeBase for StoredKnowledgeBase {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(
        &self,
        query: &str,
        limit: usize,
        score_threshold: Option<f32>,
    ) -> Result<Vec<KnowledgeChunk>, KnowledgeError> {
        if query.trim().is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        self.search(query, limit, score_threshold)
            .await
            .map_err(|e| KnowledgeError {
                base: self.name.clone(),
                reason: e.to_string(),
            })
    }
}
