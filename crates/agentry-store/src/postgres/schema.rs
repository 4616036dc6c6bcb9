//! The PostgreSQL schema and its migrations.
//!
//! The version is the one row of `agentry_schema`; `MIGRATIONS[i]` takes a database from
//! version `i` to `i + 1`. Pending migrations run in one transaction under a transaction-level
//! advisory lock, so nodes that start at the same moment on an empty database migrate it once
//! (the others wait for the lock, then find it done), and a crash mid-migration leaves the old
//! version (PostgreSQL's DDL is transactional). A database of a newer version is refused.
//!
//! Migrations are append-only: a released one is never edited. The tables mirror the SQLite
//! store's (same columns, same JSON documents); times are `timestamptz`, and `ord` columns
//! keep the order in which rows were registered where SQLite reads its rowid.

use deadpool_postgres::ClientWrapper as Client;

use super::Ctx;
use crate::StoreError;

/// The advisory lock key migrations take ("AgSt", as the SQLite application id).
const MIGRATION_LOCK: i64 = 0x4167_5374;

/// Version 1: sessions, their leases, messages, calls, approvals, grants, usage and events.
const V1: &str = "
CREATE TABLE sessions (
    id                  text PRIMARY KEY,
    name                text NOT NULL,
    owner               text,                    -- NULL: the store's own user
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    config              text NOT NULL,           -- JSON object: the agent configuration
    event_ids_reserved  bigint NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX sessions_owner_name ON sessions ((coalesce(owner, '')), name);

-- The writer of each session: a row its holder renews, taken over once expired; each taking
-- gets a new token from the sequence, and a write carrying an older token is refused.
CREATE SEQUENCE lease_tokens;
CREATE TABLE session_leases (
    session_id  text PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
    token       bigint NOT NULL,
    store_id    uuid NOT NULL,                   -- the store instance (process) holding it
    host_id     text NOT NULL,                   -- its machine's boot and pid namespace
    pid         integer NOT NULL,                -- its process there
    holder      text NOT NULL,                   -- who, for error messages
    expires_at  timestamptz NOT NULL
);

CREATE TABLE messages (
    session_id  text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq         bigint NOT NULL,
    id          text NOT NULL,
    role        text NOT NULL,
    created_at  timestamptz NOT NULL,
    body        text NOT NULL,                   -- JSON: the whole Msg
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, id)
);

CREATE TABLE tool_calls (
    session_id      text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    call_id         text NOT NULL,
    ord             bigint GENERATED ALWAYS AS IDENTITY,
    reply_id        text,
    message_id      text,
    tool_name       text NOT NULL,
    arguments       text NOT NULL,               -- JSON
    state           text NOT NULL,
    terminal        boolean NOT NULL,
    outcome         text,                        -- JSON ToolCallState, when terminal
    phase           text,
    partial         boolean,
    stop_reason     text,
    partial_result  text,
    decision        text,                        -- JSON ApprovalDecision
    decision_source text,
    explanation     text,
    idempotent      boolean NOT NULL DEFAULT false,
    progress        text,
    created_at      timestamptz NOT NULL,
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (session_id, call_id)
);
CREATE INDEX tool_calls_order ON tool_calls (session_id, ord);

CREATE TABLE pending_approvals (
    session_id    text NOT NULL,
    call_id       text NOT NULL,
    request       text NOT NULL,                 -- JSON ApprovalRequest
    requested_at  timestamptz NOT NULL,
    PRIMARY KEY (session_id, call_id),
    FOREIGN KEY (session_id, call_id) REFERENCES tool_calls (session_id, call_id) ON DELETE CASCADE
);

CREATE TABLE session_grants (
    session_id  text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    key         text NOT NULL,
    ord         bigint GENERATED ALWAYS AS IDENTITY,
    tool_name   text NOT NULL,
    kind        text NOT NULL,                   -- JSON GrantKind
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (session_id, key)
);

CREATE TABLE usage (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id          text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    reply_id            text,
    input_tokens        bigint NOT NULL,
    output_tokens       bigint NOT NULL,
    cache_read_tokens   bigint NOT NULL,
    cache_write_tokens  bigint NOT NULL,
    reasoning_tokens    bigint NOT NULL,
    time_ms             double precision NOT NULL,
    cost_usd            double precision,
    recorded_at         timestamptz NOT NULL
);
CREATE INDEX usage_session ON usage (session_id);

CREATE TABLE session_events (
    session_id  text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    event_id    bigint NOT NULL,
    body        text NOT NULL,                   -- JSON: the protocol's AgentEvent
    PRIMARY KEY (session_id, event_id)
);
";

/// Version 2: controls (a cancel, an approval decision) sent by any node to the node that runs
/// a session's reply, kept until taken, with the answer for the sender.
const V2: &str = "
CREATE TABLE session_controls (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    body        text NOT NULL,                   -- JSON, as the server writes it
    created_at  timestamptz NOT NULL DEFAULT now(),
    taken_at    timestamptz,
    answer      text                             -- JSON, as the server writes it
);
CREATE INDEX session_controls_queued ON session_controls (session_id, id) WHERE taken_at IS NULL;
";

/// Version 3: approval records, bound to the digest of the tool and arguments they were asked
/// for, consumed by their call's start (as SQLite's version 11).
const V3: &str = "
CREATE TABLE approvals (
    session_id    text NOT NULL,
    call_id       text NOT NULL,
    digest        text NOT NULL,
    state         text NOT NULL,                 -- pending | approved | declined | expired | consumed
    requested_at  timestamptz NOT NULL,
    decided_at    timestamptz,
    consumed_at   timestamptz,
    PRIMARY KEY (session_id, call_id),
    FOREIGN KEY (session_id, call_id) REFERENCES tool_calls (session_id, call_id) ON DELETE CASCADE
);
";

/// Version 4: when each event was logged, so that old events can be deleted (`--retain`).
const V4: &str = "
ALTER TABLE session_events ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX session_events_time ON session_events (created_at);
CREATE INDEX session_controls_time ON session_controls (created_at);
";

/// Version 5: how a running call can be found again after a restart (as SQLite's version 13).
const V5: &str = "
ALTER TABLE tool_calls ADD COLUMN resume text;
";

/// The migrations, oldest first.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5];

/// The schema version this build writes and reads.
pub const POSTGRES_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Makes `schema` if given, then brings it to [`POSTGRES_SCHEMA_VERSION`], in one transaction.
pub(super) async fn migrate(client: &mut Client, ctx: &Ctx, schema: Option<&str>) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(|e| ctx.err(e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| ctx.err(e))?;
    if let Some(schema) = schema {
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema)))
            .await
            .map_err(|e| ctx.err(e))?;
    }
    tx.batch_execute("CREATE TABLE IF NOT EXISTS agentry_schema (version bigint NOT NULL)")
        .await
        .map_err(|e| ctx.err(e))?;
    let version: Option<i64> = tx
        .query_opt("SELECT version FROM agentry_schema", &[])
        .await
        .map_err(|e| ctx.err(e))?
        .map(|row| row.get(0));
    let version = version.unwrap_or(0);
    if version > POSTGRES_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: ctx.target.clone().into(),
            found: version,
            supported: POSTGRES_SCHEMA_VERSION,
        });
    }
    if version == POSTGRES_SCHEMA_VERSION {
        return Ok(());
    }
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(migration).await.map_err(|e| ctx.err(e))?;
        tracing::debug!(from, to = from + 1, "session store migrated");
    }
    tx.execute("DELETE FROM agentry_schema", &[])
        .await
        .map_err(|e| ctx.err(e))?;
    tx.execute(
        "INSERT INTO agentry_schema (version) VALUES ($1)",
        &[&POSTGRES_SCHEMA_VERSION],
    )
    .await
    .map_err(|e| ctx.err(e))?;
    tx.commit().await.map_err(|e| ctx.err(e))
}

/// `name` as an SQL identifier, quoted.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
