//! The SQLite schema and its migrations.
//!
//! The version is `PRAGMA user_version`; `MIGRATIONS[i]` takes a database from version `i` to
//! `i + 1`. All pending migrations run in one `BEGIN IMMEDIATE` transaction on open, so a crash
//! mid-migration leaves the old version, and two processes opening an old file at once migrate
//! it once. A file of a newer version is refused before anything is written. The
//! `application_id` marks the file as ours, so a `--db` pointing at another program's
//! database is refused rather than filled with our tables.
//!
//! Migrations are append-only: a released one is never edited.

use rusqlite::{Connection, Transaction, TransactionBehavior, params};

use super::Ctx;
use crate::StoreError;
use crate::search::terms::indexed_text;

/// `PRAGMA application_id` of an Agentry session database ("AgSt").
pub(crate) const APPLICATION_ID: i64 = 0x4167_5374;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Version 1, the first release.
///
/// Times are RFC 3339 UTC text (sortable, readable with the `sqlite3` shell); JSON columns hold
/// the core's serde shapes (`Msg`, `ToolCallState`, `ApprovalDecision`, `ApprovalRequest`), the
/// same as the protocol, so an export is those documents as they are.
pub(super) const V1: &str = "
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    config      TEXT NOT NULL            -- JSON object: the agent configuration to resume with
) STRICT;

CREATE TABLE messages (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,        -- order in the conversation
    id          TEXT NOT NULL,           -- Msg.id
    role        TEXT NOT NULL,
    created_at  TEXT NOT NULL,           -- Msg.timestamp
    body        TEXT NOT NULL,           -- JSON: the whole Msg
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, id)
) STRICT, WITHOUT ROWID;

CREATE TABLE tool_calls (
    session_id      TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    call_id         TEXT NOT NULL,
    reply_id        TEXT,
    message_id      TEXT,                -- the assistant message holding the call
    tool_name       TEXT NOT NULL,
    arguments       TEXT NOT NULL,       -- JSON
    state           TEXT NOT NULL,       -- pending_approval | queued | running | completed | failed
                                         -- | declined | cancelled | timed_out
    terminal        INTEGER NOT NULL,    -- 1 once the state is terminal; never changes after (S1)
    outcome         TEXT,                -- JSON ToolCallState, when terminal
    phase           TEXT,                -- before_start | running, for a cancelled call (Y3)
    partial         INTEGER,             -- on_cancel handed back a partial result (Y3)
    stop_reason     TEXT,                -- user | reply | restart | timeout (Y3)
    partial_result  TEXT,
    decision        TEXT,                -- JSON ApprovalDecision
    decision_source TEXT,                -- user | auto | session_grant | no_decision (| rule, v4)
    idempotent      INTEGER NOT NULL DEFAULT 0,
    progress        TEXT,
    created_at      TEXT NOT NULL,
    started_at      TEXT,
    finished_at     TEXT,
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (session_id, call_id)
) STRICT;
CREATE INDEX tool_calls_live ON tool_calls (session_id) WHERE terminal = 0;

CREATE TABLE pending_approvals (
    session_id    TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    request       TEXT NOT NULL,         -- JSON ApprovalRequest: what the user is asked
    requested_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, call_id),
    FOREIGN KEY (session_id, call_id) REFERENCES tool_calls (session_id, call_id) ON DELETE CASCADE
) STRICT;

CREATE TABLE session_grants (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    kind        TEXT NOT NULL,           -- JSON GrantKind
    created_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
) STRICT;

CREATE TABLE usage (
    id             INTEGER PRIMARY KEY,
    session_id     TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    reply_id       TEXT,
    input_tokens   INTEGER NOT NULL,
    output_tokens  INTEGER NOT NULL,
    time_ms        REAL NOT NULL,
    recorded_at    TEXT NOT NULL
) STRICT;
CREATE INDEX usage_session ON usage (session_id);
";

/// Version 2: a session's event log, for clients that resume a stream after a restart
/// (`agentry serve`'s `Last-Event-ID`). `event_ids_reserved` is the highest event id a server
/// may have handed out: ids are reserved in blocks before use, so a server that died never
/// hands out an id again that a client may have seen.
const V2: &str = "
CREATE TABLE session_events (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    event_id    INTEGER NOT NULL,
    body        TEXT NOT NULL,           -- JSON: the protocol's AgentEvent
    PRIMARY KEY (session_id, event_id)
) STRICT, WITHOUT ROWID;
ALTER TABLE sessions ADD COLUMN event_ids_reserved INTEGER NOT NULL DEFAULT 0;
";

/// Version 3: the usage ledger keeps cached and reasoning tokens, and the cost in US dollars
/// when the model's price was known.
const V3: &str = "
ALTER TABLE usage ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage ADD COLUMN cost_usd REAL;
";

/// Version 4: a call keeps the explanation of its approval decision (the approval request's
/// message, A5), also after the question is answered and for automatic decisions.
const V4: &str = "
ALTER TABLE tool_calls ADD COLUMN explanation TEXT;
";

/// Version 5: long-term memories, per user and across sessions (no foreign key: a memory
/// outlives the session it was recorded in). `terms` is the text as full-text search indexes it
/// (see `search::terms`); `embedding` a unit vector of little-endian `f32`s from `model`.
const V5: &str = "
CREATE TABLE memories (
    id          INTEGER PRIMARY KEY,
    user_name   TEXT NOT NULL,
    content     TEXT NOT NULL,
    source      TEXT NOT NULL,           -- agent | reply | user
    session_id  TEXT,
    created_at  TEXT NOT NULL,
    model       TEXT,
    embedding   BLOB
) STRICT;
CREATE INDEX memories_user ON memories (user_name, id);
CREATE VIRTUAL TABLE memories_fts USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 2');
";

/// Version 6: knowledge bases: documents (by path, with the hash of the content they were
/// read from) cut into chunks, each with its full-text terms and vector, as for memories.
const V6: &str = "
CREATE TABLE knowledge_bases (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
) STRICT;
CREATE TABLE knowledge_documents (
    id          INTEGER PRIMARY KEY,
    base_id     INTEGER NOT NULL REFERENCES knowledge_bases(id) ON DELETE CASCADE,
    path        TEXT NOT NULL,
    hash        TEXT NOT NULL,           -- SHA-256 of the file as read
    title       TEXT,
    added_at    TEXT NOT NULL,
    UNIQUE (base_id, path)
) STRICT;
CREATE TABLE knowledge_chunks (
    id          INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES knowledge_documents(id) ON DELETE CASCADE,
    base_id     INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    content     TEXT NOT NULL,
    model       TEXT,
    embedding   BLOB
) STRICT;
CREATE INDEX knowledge_chunks_document ON knowledge_chunks (document_id);
CREATE INDEX knowledge_chunks_base ON knowledge_chunks (base_id, id);
CREATE VIRTUAL TABLE knowledge_fts USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 2');
";

/// Version 7: Chinese, Japanese and Korean text is indexed with the pairs of neighbouring
/// characters too ([`indexed_text`]): the full-text terms of every memory and chunk are
/// written again.
fn v7_reindex_terms(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    for (table, fts) in [
        ("memories", "memories_fts"),
        ("knowledge_chunks", "knowledge_fts"),
    ] {
        let rows = tx
            .prepare(&format!("SELECT id, content FROM {table}"))?
            .query_map([], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        tx.execute(&format!("DELETE FROM {fts}"), [])?;
        let mut insert = tx.prepare(&format!("INSERT INTO {fts} (rowid, terms) VALUES (?1, ?2)"))?;
        for (id, content) in rows {
            insert.execute(params![id, indexed_text(&content)])?;
        }
    }
    Ok(())
}

/// Version 8: the rows of each memory owner and knowledge base and a count of their changes,
/// kept by triggers. Whether cached vectors are stale was told by a count over all the rows,
/// which took 10 ms of every retrieval among 100,000 memories.
const V8: &str = "
CREATE TABLE search_scopes (
    scope       TEXT PRIMARY KEY,        -- 'memories:' || user_name, or 'chunks:' || base_id
    row_count   INTEGER NOT NULL,
    changes     INTEGER NOT NULL         -- rows added or removed so far
) STRICT, WITHOUT ROWID;
INSERT INTO search_scopes
    SELECT 'memories:' || user_name, count(*), count(*) FROM memories GROUP BY user_name;
INSERT INTO search_scopes
    SELECT 'chunks:' || base_id, count(*), count(*) FROM knowledge_chunks GROUP BY base_id;
CREATE TRIGGER memories_scope_in AFTER INSERT ON memories BEGIN
    INSERT INTO search_scopes VALUES ('memories:' || NEW.user_name, 1, 1)
    ON CONFLICT (scope) DO UPDATE SET row_count = row_count + 1, changes = changes + 1;
END;
CREATE TRIGGER memories_scope_out AFTER DELETE ON memories BEGIN
    UPDATE search_scopes SET row_count = row_count - 1, changes = changes + 1
    WHERE scope = 'memories:' || OLD.user_name;
END;
CREATE TRIGGER chunks_scope_in AFTER INSERT ON knowledge_chunks BEGIN
    INSERT INTO search_scopes VALUES ('chunks:' || NEW.base_id, 1, 1)
    ON CONFLICT (scope) DO UPDATE SET row_count = row_count + 1, changes = changes + 1;
END;
CREATE TRIGGER chunks_scope_out AFTER DELETE ON knowledge_chunks BEGIN
    UPDATE search_scopes SET row_count = row_count - 1, changes = changes + 1
    WHERE scope = 'chunks:' || OLD.base_id;
END;
";

/// Version 9: the user a session belongs to, for a server with several users (NULL: the
/// store's own user, as every session was before).
const V9: &str = "
ALTER TABLE sessions ADD COLUMN owner TEXT;
";

/// Version 10: a session name is unique per owner, not across the store, so that a name one
/// user took tells another nothing. SQLite cannot drop a column's UNIQUE, so the table is made
/// again (SQLite's own procedure: foreign keys are off while migrations run, see
/// [`migrate`]), its rows copied, and the other tables' references find it under its name.
const V10: &str = "
CREATE TABLE sessions_v10 (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    config              TEXT NOT NULL,   -- JSON object: the agent configuration to resume with
    event_ids_reserved  INTEGER NOT NULL DEFAULT 0,
    owner               TEXT             -- NULL: the store's own user
) STRICT;
INSERT INTO sessions_v10 (id, name, created_at, updated_at, config, event_ids_reserved, owner)
    SELECT id, name, created_at, updated_at, config, event_ids_reserved, owner FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_v10 RENAME TO sessions;
CREATE UNIQUE INDEX sessions_owner_name ON sessions (ifnull(owner, ''), name);
";

/// Version 11: approval records. An approval is bound to the digest of the tool and arguments it
/// was asked for, and goes pending, then approved or declined, then consumed by its call's
/// start (in the same transaction) or expired with the call (see `ApprovalState`).
const V11: &str = "
CREATE TABLE approvals (
    session_id    TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    digest        TEXT NOT NULL,         -- SHA-256 of the tool name and canonical arguments
    state         TEXT NOT NULL,         -- pending | approved | declined | expired | consumed
    requested_at  TEXT NOT NULL,
    decided_at    TEXT,
    consumed_at   TEXT,
    PRIMARY KEY (session_id, call_id),
    FOREIGN KEY (session_id, call_id) REFERENCES tool_calls (session_id, call_id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
";

/// Version 12: when each event was logged, so that old events can be deleted (`--retain`);
/// NULL for the events of before, which go with their session's age.
const V12: &str = "
ALTER TABLE session_events ADD COLUMN created_at TEXT;
CREATE INDEX session_events_time ON session_events (created_at);
";

/// Version 13: how a running call can be found again after a restart (JSON, the tool's own
/// shape: an MCP task's id and session, say); NULL for calls that cannot.
const V13: &str = "
ALTER TABLE tool_calls ADD COLUMN resume TEXT;
";

/// One step of the schema: SQL, or Rust where the new rows are computed by the code.
enum Migration {
    Sql(&'static str),
    Rust(fn(&Transaction<'_>) -> rusqlite::Result<()>),
}

impl Migration {
    fn apply(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        match self {
            Migration::Sql(sql) => tx.execute_batch(sql),
            Migration::Rust(step) => step(tx),
        }
    }
}

/// The migrations, oldest first.
const MIGRATIONS: &[Migration] = &[
    Migration::Sql(V1),
    Migration::Sql(V2),
    Migration::Sql(V3),
    Migration::Sql(V4),
    Migration::Sql(V5),
    Migration::Sql(V6),
    Migration::Rust(v7_reindex_terms),
    Migration::Sql(V8),
    Migration::Sql(V9),
    Migration::Sql(V10),
    Migration::Sql(V11),
    Migration::Sql(V12),
    Migration::Sql(V13),
];

/// Makes a database at schema `version` on `conn`, for the migration tests.
#[cfg(test)]
pub(super) fn create_at(conn: &mut Connection, version: usize) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    for migration in MIGRATIONS.iter().take(version) {
        migration.apply(&tx)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.pragma_update(None, "user_version", version as i64)?;
    tx.commit()
}

/// Refuses files we must not touch (newer, foreign, corrupt) using reads only.
pub(super) fn check(conn: &Connection, ctx: &Ctx) -> Result<i64, StoreError> {
    let path = &ctx.path;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| ctx.err(e))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.clone(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < 0 {
        return Err(StoreError::Foreign { path: path.clone() });
    }
    if version > 0 {
        let id: i64 = conn
            .pragma_query_value(None, "application_id", |row| row.get(0))
            .map_err(|e| ctx.err(e))?;
        if id != APPLICATION_ID {
            return Err(StoreError::Foreign { path: path.clone() });
        }
    } else {
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
            .map_err(|e| ctx.err(e))?;
        if tables > 0 {
            return Err(StoreError::Foreign { path: path.clone() });
        }
    }
    Ok(version)
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction. Foreign keys must be off on
/// `conn` (a table made again would otherwise take its rows' children with it when the old one
/// is dropped); the references are checked before the commit.
pub(super) fn migrate(conn: &mut Connection, ctx: &Ctx) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| ctx.err(e))?;
    // Read again under the write lock: another process may have migrated meanwhile.
    let version = check(&tx, ctx)?;
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        migration.apply(&tx).map_err(|e| ctx.err(e))?;
        tracing::debug!(from, to = from + 1, "session store migrated");
    }
    let dangling: i64 = tx
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| {
            row.get(0)
        })
        .map_err(|e| ctx.err(e))?;
    if dangling > 0 {
        return Err(StoreError::Database(format!(
            "{}: migrating would leave {dangling} rows whose session is gone; nothing was changed",
            ctx.path.display()
        )));
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(|e| ctx.err(e))?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(|e| ctx.err(e))?;
    tx.commit().map_err(|e| ctx.err(e))
}
