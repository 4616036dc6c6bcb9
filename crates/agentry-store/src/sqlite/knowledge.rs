//! Knowledge bases in the session database: bases, documents, chunks, their full-text index and
//! their vectors.

use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::rows::ts;
use super::tx::{commit, write_tx};
use super::{Ctx, SqliteStore, search_rows};
use crate::StoreError;
use crate::search::terms::{indexed_text, search_terms};
use crate::search::vectors::to_bytes;

/// A knowledge base as `agentry kb list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KnowledgeBaseInfo {
    /// Its id in the database.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// How many documents it holds.
    pub documents: i64,
    /// How many chunks.
    pub chunks: i64,
    /// When it was made.
    pub created_at: String,
}

/// A chunk to keep: its text, and its vector with the model that made it.
#[derive(Debug, Clone)]
pub struct NewChunk {
    /// The text.
    pub content: String,
    /// Its vector, when one could be made.
    pub embedding: Option<(String, Vec<f32>)>,
}

/// A stored chunk as retrieval reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChunk {
    /// The chunk's id.
    pub id: i64,
    /// The text.
    pub content: String,
    /// The document's path.
    pub path: String,
}

const BASE_INFO: &str = "SELECT b.id, b.name, b.created_at,
        (SELECT count(*) FROM knowledge_documents d WHERE d.base_id = b.id),
        (SELECT count(*) FROM knowledge_chunks c WHERE c.base_id = b.id)
     FROM knowledge_bases b";

fn base_info(row: &rusqlite::Row<'_>) -> rusqlite::Result<KnowledgeBaseInfo> {
    Ok(KnowledgeBaseInfo {
        id: row.get(0)?,
        name: row.get(1)?,
        created_at: row.get(2)?,
        documents: row.get(3)?,
        chunks: row.get(4)?,
    })
}

impl SqliteStore {
    /// The base named `name`, made if there is none.
    pub async fn open_knowledge_base(&self, name: &str) -> Result<KnowledgeBaseInfo, StoreError> {
        let name = name.to_owned();
        self.run(move |conn, ctx| {
            let tx = write_tx(conn, ctx)?;
            tx.execute(
                "INSERT INTO knowledge_bases (name, created_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
                params![name, ts(Utc::now())],
            )
            .map_err(|e| ctx.err(e))?;
            let info = tx
                .query_row(&format!("{BASE_INFO} WHERE b.name = ?1"), params![name], base_info)
                .map_err(|e| ctx.err(e))?;
            commit(tx, ctx)?;
            Ok(info)
        })
        .await
    }

    /// The base named `name`, if there is one.
    pub async fn knowledge_base(&self, name: &str) -> Result<Option<KnowledgeBaseInfo>, StoreError> {
        let name = name.to_owned();
        self.run(move |conn, ctx| {
            conn.query_row(
                &format!("{BASE_INFO} WHERE b.name = ?1"),
                params![name],
                base_info,
            )
            .optional()
            .map_err(|e| ctx.err(e))
        })
        .await
    }

    /// Every base, by name.
    pub async fn knowledge_bases(&self) -> Result<Vec<KnowledgeBaseInfo>, StoreError> {
        self.run(move |conn, ctx| {
            let mut statement = conn
                .prepare(&format!("{BASE_INFO} ORDER BY b.name"))
                .map_err(|e| ctx.err(e))?;
            let bases = statement
                .query_map([], base_info)
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| ctx.err(e))?;
            Ok(bases)
        })
        .await
    }

    /// Deletes the base named `name` and everything in it; whether it existed.
    pub async fn delete_knowledge_base(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.run(move |conn, ctx| {
            let tx = write_tx(conn, ctx)?;
            tx.execute(
                "DELETE FROM knowledge_fts WHERE rowid IN (SELECT c.id FROM knowledge_chunks c
                 JOIN knowledge_bases b ON b.id = c.base_id WHERE b.name = ?1)",
                params![name],
            )
            .map_err(|e| ctx.err(e))?;
            tx.execute(
                "DELETE FROM knowledge_chunks WHERE base_id IN (SELECT id FROM knowledge_bases WHERE name = ?1)",
                params![name],
            )
            .map_err(|e| ctx.err(e))?;
            let deleted = tx
                .execute("DELETE FROM knowledge_bases WHERE name = ?1", params![name])
                .map_err(|e| ctx.err(e))?;
            commit(tx, ctx)?;
            Ok(deleted > 0)
        })
        .await
    }

    /// The hash the document at `path` was stored with in base `base_id`, if it is stored.
    pub async fn document_hash(&self, base_id: i64, path: &str) -> Result<Option<String>, StoreError> {
        let path = path.to_owned();
        self.run(move |conn, ctx| {
            conn.query_row(
                "SELECT hash FROM knowledge_documents WHERE base_id = ?1 AND path = ?2",
                params![base_id, path],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| ctx.err(e))
        })
        .await
    }

    /// Stores the document at `path` with its chunks, replacing what was stored for that path,
    /// in one transaction (an interrupted ingest leaves every document whole or absent).
    pub async fn replace_document(
        &self,
        base_id: i64,
        path: &str,
        hash: &str,
        title: Option<&str>,
        chunks: Vec<NewChunk>,
    ) -> Result<(), StoreError> {
        let (path, hash, title) = (path.to_owned(), hash.to_owned(), title.map(str::to_owned));
        self.run(move |conn, ctx| replace(conn, ctx, base_id, &path, &hash, title.as_deref(), &chunks))
            .await
    }

    /// The ids of base `base_id`'s chunks that share words with `query`, best first (bm25).
    pub async fn lexical_chunks(
        &self,
        base_id: i64,
        query: &str,
        limit: usize,
    ) -> Result<Vec<i64>, StoreError> {
        let terms = search_terms(query);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        self.run(move |conn, ctx| {
            search_rows::lexical_ids(conn, ctx, &search_rows::CHUNKS, terms, &base_id, limit)
        })
        .await
    }

    /// Every vector of base `base_id` made by `model`, with its chunk id.
    pub async fn chunk_vectors(&self, base_id: i64, model: &str) -> Result<Vec<(i64, Vec<f32>)>, StoreError> {
        let model = model.to_owned();
        self.run(move |conn, ctx| {
            search_rows::vectors(
                conn,
                ctx,
                "SELECT id, embedding FROM knowledge_chunks
                 WHERE base_id = ?1 AND model = ?2 AND embedding IS NOT NULL ORDER BY id",
                params![base_id, model],
            )
        })
        .await
    }

    /// How many chunks base `base_id` has, and how many were ever added or removed (to tell
    /// cached vectors stale).
    pub async fn chunk_state(&self, base_id: i64) -> Result<(i64, i64), StoreError> {
        let scope = format!("chunks:{base_id}");
        self.run(move |conn, ctx| search_rows::scope_state(conn, ctx, &scope))
            .await
    }

    /// The chunks with these ids in base `base_id`, in the order of `ids`.
    pub async fn chunks_by_id(&self, base_id: i64, ids: Vec<i64>) -> Result<Vec<StoredChunk>, StoreError> {
        self.run(move |conn, ctx| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT c.id, c.content, d.path FROM knowledge_chunks c
                     JOIN knowledge_documents d ON d.id = c.document_id WHERE c.id = ?1 AND c.base_id = ?2",
                )
                .map_err(|e| ctx.err(e))?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(chunk) = statement
                    .query_row(params![id, base_id], |row| {
                        Ok(StoredChunk {
                            id: row.get(0)?,
                            content: row.get(1)?,
                            path: row.get(2)?,
                        })
                    })
                    .optional()
                    .map_err(|e| ctx.err(e))?
                {
                    out.push(chunk);
                }
            }
            Ok(out)
        })
        .await
    }
}

fn replace(
    conn: &mut Connection,
    ctx: &Ctx,
    base_id: i64,
    path: &str,
    hash: &str,
    title: Option<&str>,
    chunks: &[NewChunk],
) -> Result<(), StoreError> {
    let tx = write_tx(conn, ctx)?;
    let old: Option<i64> = tx
        .query_row(
            "SELECT id FROM knowledge_documents WHERE base_id = ?1 AND path = ?2",
            params![base_id, path],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| ctx.err(e))?;
    if let Some(old) = old {
        tx.execute(
            "DELETE FROM knowledge_fts WHERE rowid IN (SELECT id FROM knowledge_chunks WHERE document_id = ?1)",
            params![old],
        )
        .map_err(|e| ctx.err(e))?;
        tx.execute(
            "DELETE FROM knowledge_chunks WHERE document_id = ?1",
            params![old],
        )
        .map_err(|e| ctx.err(e))?;
        tx.execute("DELETE FROM knowledge_documents WHERE id = ?1", params![old])
            .map_err(|e| ctx.err(e))?;
    }
    tx.execute(
        "INSERT INTO knowledge_documents (base_id, path, hash, title, added_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![base_id, path, hash, title, ts(Utc::now())],
    )
    .map_err(|e| ctx.err(e))?;
    let document = tx.last_insert_rowid();
    {
        let mut row = tx
            .prepare_cached(
                "INSERT INTO knowledge_chunks (document_id, base_id, seq, content, model, embedding)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(|e| ctx.err(e))?;
        let mut terms = tx
            .prepare_cached("INSERT INTO knowledge_fts (rowid, terms) VALUES (?1, ?2)")
            .map_err(|e| ctx.err(e))?;
        for (seq, chunk) in chunks.iter().enumerate() {
            let (model, vector) = match &chunk.embedding {
                Some((model, vector)) => (Some(model.as_str()), Some(to_bytes(vector))),
                None => (None, None),
            };
            row.execute(params![
                document,
                base_id,
                seq as i64,
                chunk.content,
                model,
                vector
            ])
            .map_err(|e| ctx.err(e))?;
            let id = tx.last_insert_rowid();
            terms
                .execute(params![id, indexed_text(&chunk.content)])
                .map_err(|e| ctx.err(e))?;
        }
    }
    commit(tx, ctx)
}
