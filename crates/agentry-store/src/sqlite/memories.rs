//! Long-term memories in the session database: rows, their full-text index, their vectors.

use agentry::memory::long_term::{MemoryRecord, RecordSource};
use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};

use super::rows::ts;
use super::tx::{commit, write_tx};
use super::{Ctx, SqliteStore, search_rows};
use crate::StoreError;
use crate::search::terms::{indexed_text, search_terms};
use crate::search::vectors::to_bytes;

/// A memory to keep.
#[derive(Debug, Clone)]
pub struct NewMemory {
    /// What to remember.
    pub content: String,
    /// Who records it.
    pub source: RecordSource,
    /// The session it comes from, if any.
    pub session_id: Option<String>,
    /// Its vector and the model that made it, when one could be made.
    pub embedding: Option<(String, Vec<f32>)>,
}

/// What [`SqliteStore::memory_state`] tells: enough to know whether cached vectors are stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryState {
    /// How many memories the user has.
    pub count: i64,
    /// How many memories were ever added to or removed from the user's.
    pub changes: i64,
}

fn source_of(text: &str) -> RecordSource {
    match text {
        "agent" => RecordSource::Agent,
        "reply" => RecordSource::Reply,
        _ => RecordSource::User,
    }
}

fn record_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<MemoryRecord> {
    let source: String = row.get(3)?;
    Ok(MemoryRecord::new(
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        source_of(&source),
        None,
    ))
}

impl SqliteStore {
    /// Keeps `memories` for `user` in one transaction; their ids, in order.
    pub async fn record_memories(
        &self,
        user: &str,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<i64>, StoreError> {
        let user = user.to_owned();
        self.run(move |conn, ctx| insert(conn, ctx, &user, &memories))
            .await
    }

    /// The ids of `user`'s memories that share words with `query`, best first (bm25).
    pub async fn lexical_memories(
        &self,
        user: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let terms = search_terms(query);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let user = user.to_owned();
        self.run(move |conn, ctx| {
            search_rows::lexical_ids(conn, ctx, &search_rows::MEMORIES, terms, &user, limit)
        })
        .await
    }

    /// Every vector of `user`'s memories made by `model`, with its id, oldest first.
    pub async fn memory_vectors(&self, user: &str, model: &str) -> Result<Vec<(i64, Vec<f32>)>, StoreError> {
        let (user, model) = (user.to_owned(), model.to_owned());
        self.run(move |conn, ctx| {
            search_rows::vectors(
                conn,
                ctx,
                "SELECT id, embedding FROM memories
                 WHERE user_name = ?1 AND model = ?2 AND embedding IS NOT NULL ORDER BY id",
                params![user, model],
            )
        })
        .await
    }

    /// How many memories `user` has, and how many changes they have seen.
    pub async fn memory_state(&self, user: &str) -> Result<MemoryState, StoreError> {
        let scope = format!("memories:{user}");
        self.run(move |conn, ctx| {
            let (count, changes) = search_rows::scope_state(conn, ctx, &scope)?;
            Ok(MemoryState { count, changes })
        })
        .await
    }

    /// `user`'s memories with these ids, in the order of `ids` (ids of others are left out).
    pub async fn memories_by_id(&self, user: &str, ids: Vec<i64>) -> Result<Vec<MemoryRecord>, StoreError> {
        let user = user.to_owned();
        self.run(move |conn, ctx| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT id, content, created_at, source FROM memories WHERE id = ?1 AND user_name = ?2",
                )
                .map_err(|e| ctx.err(e))?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(record) = statement
                    .query_row(params![id, user], record_of)
                    .optional()
                    .map_err(|e| ctx.err(e))?
                {
                    out.push(record);
                }
            }
            Ok(out)
        })
        .await
    }

    /// `user`'s memories, newest first, at most `limit`.
    pub async fn memories(&self, user: &str, limit: usize) -> Result<Vec<MemoryRecord>, StoreError> {
        let user = user.to_owned();
        self.run(move |conn, ctx| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT id, content, created_at, source FROM memories WHERE user_name = ?1
                     ORDER BY id DESC LIMIT ?2",
                )
                .map_err(|e| ctx.err(e))?;
            let records = statement
                .query_map(params![user, limit as i64], record_of)
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| ctx.err(e))?;
            Ok(records)
        })
        .await
    }

    /// Deletes `user`'s memory `id`; whether there was one (another user's is never touched).
    pub async fn forget_memory(&self, user: &str, id: i64) -> Result<bool, StoreError> {
        let user = user.to_owned();
        self.run(move |conn, ctx| {
            let tx = write_tx(conn, ctx)?;
            let deleted = tx
                .execute(
                    "DELETE FROM memories WHERE id = ?1 AND user_name = ?2",
                    params![id, user],
                )
                .map_err(|e| ctx.err(e))?;
            if deleted > 0 {
                tx.execute("DELETE FROM memories_fts WHERE rowid = ?1", params![id])
                    .map_err(|e| ctx.err(e))?;
            }
            commit(tx, ctx)?;
            Ok(deleted > 0)
        })
        .await
    }
}

fn insert(
    conn: &mut Connection,
    ctx: &Ctx,
    user: &str,
    memories: &[NewMemory],
) -> Result<Vec<i64>, StoreError> {
    let tx = write_tx(conn, ctx)?;
    let now = ts(Utc::now());
    let mut ids = Vec::with_capacity(memories.len());
    {
        let mut row = tx
            .prepare_cached(
                "INSERT INTO memories (user_name, content, source, session_id, created_at, model, embedding)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .map_err(|e| ctx.err(e))?;
        let mut terms = tx
            .prepare_cached("INSERT INTO memories_fts (rowid, terms) VALUES (?1, ?2)")
            .map_err(|e| ctx.err(e))?;
        for memory in memories {
            let (model, vector) = match &memory.embedding {
                Some((model, vector)) => (Some(model.as_str()), Some(to_bytes(vector))),
                None => (None, None),
            };
            row.execute(params![
                user,
                memory.content,
                memory.source.as_str(),
                memory.session_id,
                now,
                model,
                vector
            ])
            .map_err(|e| ctx.err(e))?;
            let id = tx.last_insert_rowid();
            terms
                .execute(params![id, indexed_text(&memory.content)])
                .map_err(|e| ctx.err(e))?;
            ids.push(id);
        }
    }
    commit(tx, ctx)?;
    Ok(ids)
}
