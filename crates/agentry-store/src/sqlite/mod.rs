//! The SQLite session store: one file, WAL, foreign keys on, a busy timeout, a versioned schema.
//!
//! ```
//! use agentry_store::{SessionStore, SqliteStore};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqliteStore::open(dir.path().join("sessions.db")).unwrap();
//! let session = store.create_session("demo", &serde_json::json!({})).await.unwrap();
//! let lease = store.acquire(&session.id).await.unwrap();
//! store.append_messages(&lease, &[agentry::Msg::user("hi")]).await.unwrap();
//! assert_eq!(store.messages(&session.id).await.unwrap().len(), 1);
//! # });
//! ```

mod approvals;
mod calls;
#[cfg(feature = "crash-points")]
mod crash;
mod derived;
mod events;
mod grants;
mod group_commit;
mod knowledge;
mod lease;
mod memories;
mod messages;
mod recover;
mod rows;
pub(crate) mod schema;
mod search_rows;
mod sessions;
mod tx;
mod usage;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentry::message::Msg;
use agentry::model::ChatUsage;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use agentry::{CallId, ReplyId};
use async_trait::async_trait;
use rusqlite::Connection;
use rusqlite::ffi::ErrorCode;
use serde_json::Value;

use crate::{
    CallRecord, Grant, Lease, PendingApproval, PendingApprovals, Recovered, SessionId, SessionInfo,
    SessionStore, StoreError, StoredEvent, UsageTotals,
};
pub use knowledge::{KnowledgeBaseInfo, NewChunk, StoredChunk};
use lease::Leases;
pub use memories::{MemoryState, NewMemory};
pub use schema::SCHEMA_VERSION;

/// The connection's page cache, in KiB as SQLite's negative `cache_size` takes it (filled only
/// as pages are read).
const PAGE_CACHE_KIB: i64 = -65_536;

/// How much a commit waits for the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit reaches the disk before it returns (`PRAGMA synchronous=FULL`): an
    /// acknowledged step survives a power loss, not only a crash of the process. The default.
    #[default]
    Full,
    /// Commits survive a crash of the process, and the database stays consistent after a power
    /// loss, which may however roll back the last commits (`synchronous=NORMAL`). Faster.
    Normal,
}

/// Settings of a [`SqliteStore`].
#[derive(Debug, Clone, Copy)]
pub struct SqliteOptions {
    busy_timeout: Duration,
    synchronous: Synchronous,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Full,
        }
    }
}

impl SqliteOptions {
    /// How long an operation waits for another process's lock on the database before it fails
    /// with [`StoreError::Locked`] (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How much a commit waits for the disk (default [`Synchronous::Full`]).
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }
}

/// What error messages need to know about the database.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) path: PathBuf,
    pub(crate) busy: Duration,
}

impl Ctx {
    /// Turns an SQLite error into the case a user can act on.
    pub(crate) fn err(&self, error: rusqlite::Error) -> StoreError {
        let path = self.path.clone();
        match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked {
                path,
                waited: self.busy,
            },
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
                path,
                detail: error.to_string(),
            },
            Some(ErrorCode::DiskFull) => StoreError::DiskFull { path },
            _ => StoreError::Database(format!("{}: {error}", path.display())),
        }
    }
}

struct Inner {
    conn: Mutex<Connection>,
    /// Writes waiting for the writer thread (see [`group_commit`]).
    writes: Arc<group_commit::Queue>,
    ctx: Ctx,
    leases: Leases,
    /// Tells this store's leases from another's.
    id: u128,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.writes.close();
    }
}

/// A [`SessionStore`] in one SQLite file. Cheap to clone (clones share the connection).
///
/// Reads run on tokio's blocking pool when called inside a runtime (SQLite calls block, and may
/// wait up to the busy timeout for another process's lock), inline otherwise. Writes to a
/// session run on the store's writer thread, which commits those waiting at the same moment
/// together (see [`group_commit`]); any executor can wait for them.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.ctx.path)
            .finish()
    }
}

impl SqliteStore {
    /// The default database file: `sessions.db` in `agentry` under the user's data directory
    /// (`~/.local/share/agentry/sessions.db` on Linux).
    pub fn default_path() -> Result<PathBuf, StoreError> {
        let dir = dirs::data_dir().ok_or(StoreError::NoDataDir)?;
        Ok(dir.join("agentry").join("sessions.db"))
    }

    /// Opens (creating it and its directory if needed) the default database file.
    pub fn open_default() -> Result<Self, StoreError> {
        Self::open(Self::default_path()?)
    }

    /// Opens (creating it if needed) the database file at `path`, with default options.
    ///
    /// Blocks: it may wait up to the busy timeout for another process migrating the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating it if needed) the database file at `path`.
    ///
    /// A file from a newer Agentry, a file that is not a database and another program's
    /// database are refused with a clear error before anything is written to them.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_owned();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_owned(),
                source,
            })?;
        }
        let ctx = Ctx {
            path: path.clone(),
            busy: options.busy_timeout,
        };
        let conn = Connection::open(&path).map_err(|e| ctx.err(e))?;
        let leases = Leases::files(&path);
        Self::setup(conn, ctx, options, leases)
    }

    /// A store in memory, for tests and throwaway agents: nothing survives the process.
    pub fn in_memory() -> Result<Self, StoreError> {
        let ctx = Ctx {
            path: PathBuf::from(":memory:"),
            busy: SqliteOptions::default().busy_timeout,
        };
        let conn = Connection::open_in_memory().map_err(|e| ctx.err(e))?;
        Self::setup(conn, ctx, SqliteOptions::default(), Leases::in_process())
    }

    fn setup(
        mut conn: Connection,
        ctx: Ctx,
        options: SqliteOptions,
        leases: Leases,
    ) -> Result<Self, StoreError> {
        conn.busy_timeout(options.busy_timeout).map_err(|e| ctx.err(e))?;
        // Reads only, before anything could write: a newer, foreign or corrupt file stays as
        // it is (switching to WAL alone would rewrite its header).
        let version = schema::check(&conn, &ctx)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(|e| ctx.err(e))?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            tracing::warn!(path = %ctx.path.display(), mode, "the session database could not use WAL");
        }
        let synchronous = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous)
            .map_err(|e| ctx.err(e))?;
        // The full-text indexes of 100,000 memories or chunks are tens of megabytes: within
        // SQLite's default 2 MB page cache, every search read its pages again from the OS.
        conn.pragma_update(None, "cache_size", PAGE_CACHE_KIB)
            .map_err(|e| ctx.err(e))?;
        if version < SCHEMA_VERSION {
            // Off while migrating (the bundled SQLite starts with them on): a migration may
            // make a table again, and dropping the old one would delete its rows' children.
            conn.pragma_update(None, "foreign_keys", false)
                .map_err(|e| ctx.err(e))?;
            schema::migrate(&mut conn, &ctx)?;
        }
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(|e| ctx.err(e))?;
        search_rows::create_term_counts(&conn, &ctx)?;
        // The bundled SQLite plans with STAT4, which re-prepares a statement whenever a bound
        // value could change its plan: every cached statement was parsed again on each use
        // (8 % of a step's CPU in agentry-bench --db). The plans here do not depend on values.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|e| ctx.err(e))?;
        conn.set_prepared_statement_cache_capacity(64);
        let inner = Arc::new(Inner {
            conn: Mutex::new(conn),
            writes: Arc::default(),
            ctx,
            leases,
            id: uuid::Uuid::new_v4().as_u128(),
        });
        group_commit::start_writer(&inner)?;
        Ok(SqliteStore { inner })
    }

    /// The database file (`:memory:` for an in-memory store).
    pub fn path(&self) -> &Path {
        &self.inner.ctx.path
    }

    /// Runs `f` on the connection: on tokio's blocking pool inside a runtime, inline otherwise.
    async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Ctx) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let job = move || {
            // A panic while holding the lock leaves no half-written transaction behind
            // (rusqlite rolls back on drop), so a poisoned connection is still usable.
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut conn, &inner.ctx)
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(job)
                .await
                .map_err(|e| StoreError::Task(e.to_string()))?,
            Err(_) => job(),
        }
    }

    /// Runs the write `f` in a transaction it may share with other sessions' writes waiting at
    /// the same moment (see [`group_commit`]).
    async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Ctx) -> Result<T, StoreError> + Send + 'static,
    {
        group_commit::write(&self.inner, f).await
    }

    /// The session a write may touch: the lease's, if the lease is ours.
    fn leased(&self, lease: &Lease) -> Result<SessionId, StoreError> {
        if lease.store() != self.inner.id {
            return Err(StoreError::ForeignLease);
        }
        Ok(lease.session().clone())
    }

    #[cfg(test)]
    fn with_conn<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        let conn = self.inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
        f(&conn)
    }
}

/// Messages serialized before they go to the blocking pool.
fn encode_messages(msgs: &[Msg]) -> Result<Vec<messages::Encoded>, StoreError> {
    msgs.iter().map(messages::Encoded::new).collect()
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn create_owned_session(
        &self,
        name: &str,
        config: &Value,
        owner: Option<&str>,
    ) -> Result<SessionInfo, StoreError> {
        let (name, owner) = (name.to_owned(), owner.map(str::to_owned));
        let config = serde_json::to_string(config).map_err(|e| StoreError::encode("session config", e))?;
        self.run(move |conn, ctx| sessions::create_session(conn, ctx, &name, &config, owner.as_deref()))
            .await
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| sessions::session_where(conn, ctx, "s.id = ?1", id.as_str()))
            .await
    }

    async fn session_owner(&self, id: &SessionId) -> Result<Option<Option<String>>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| sessions::session_owner(conn, ctx, &id))
            .await
    }

    async fn session_named(&self, name: &str) -> Result<Option<SessionInfo>, StoreError> {
        let name = name.to_owned();
        self.run(move |conn, ctx| {
            sessions::session_where(conn, ctx, "s.name = ?1 AND s.owner IS NULL", &name)
        })
        .await
    }

    async fn sessions(&self) -> Result<Vec<SessionInfo>, StoreError> {
        self.run(sessions::sessions).await
    }

    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        let id = id.clone();
        let store = self.clone();
        self.run(move |conn, ctx| {
            // Refused while anyone writes it; holding the lease while deleting keeps a writer
            // from starting meanwhile.
            let guard = store.inner.leases.try_lock(&id)?;
            let deleted = sessions::delete_session(conn, ctx, &id)?;
            guard.forget();
            Ok(deleted)
        })
        .await
    }

    async fn set_config(&self, lease: &Lease, config: &Value) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        let config = serde_json::to_string(config).map_err(|e| StoreError::encode("session config", e))?;
        self.write(move |conn, ctx| sessions::set_config(conn, ctx, &id, &config))
            .await
    }

    async fn acquire(&self, id: &SessionId) -> Result<Lease, StoreError> {
        let id = id.clone();
        let store = self.clone();
        self.run(move |conn, ctx| {
            let guard = store.inner.leases.try_lock(&id)?;
            // Checked under the lease: a session deleted meanwhile is not found.
            if sessions::session_where(conn, ctx, "s.id = ?1", id.as_str())?.is_none() {
                return Err(StoreError::SessionNotFound(id.to_string()));
            }
            Ok(Lease::new(id, store.inner.id, Box::new(guard)))
        })
        .await
    }

    async fn recover(&self, lease: &Lease, pending: PendingApprovals) -> Result<Recovered, StoreError> {
        let id = self.leased(lease)?;
        self.run(move |conn, ctx| recover::recover(conn, ctx, &id, pending))
            .await
    }

    async fn messages(&self, id: &SessionId) -> Result<Vec<Msg>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| messages::messages(conn, ctx, &id))
            .await
    }

    async fn append_messages(&self, lease: &Lease, msgs: &[Msg]) -> Result<usize, StoreError> {
        let id = self.leased(lease)?;
        let msgs = encode_messages(msgs)?;
        self.write(move |conn, ctx| messages::insert_messages(conn, ctx, &id, None, &[], msgs))
            .await
    }

    async fn insert_messages_before(
        &self,
        lease: &Lease,
        before: &str,
        msgs: &[Msg],
    ) -> Result<usize, StoreError> {
        let id = self.leased(lease)?;
        let msgs = encode_messages(msgs)?;
        let before = before.to_owned();
        self.write(move |conn, ctx| messages::insert_messages(conn, ctx, &id, Some(&before), &[], msgs))
            .await
    }

    async fn insert_messages_with_starts(
        &self,
        lease: &Lease,
        before: Option<&str>,
        started: &[CallRecord],
        msgs: &[Msg],
    ) -> Result<usize, StoreError> {
        let id = self.leased(lease)?;
        let started = started
            .iter()
            .map(rows::EncodedCall::new)
            .collect::<Result<Vec<_>, _>>()?;
        let msgs = encode_messages(msgs)?;
        let before = before.map(str::to_owned);
        self.write(move |conn, ctx| {
            messages::insert_messages(conn, ctx, &id, before.as_deref(), &started, msgs)
        })
        .await
    }

    async fn delete_messages(&self, lease: &Lease, ids: &[String]) -> Result<usize, StoreError> {
        let id = self.leased(lease)?;
        let ids = ids.to_vec();
        self.write(move |conn, ctx| messages::delete_messages(conn, ctx, &id, Some(&ids)))
            .await
    }

    async fn clear_messages(&self, lease: &Lease) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        self.write(move |conn, ctx| messages::delete_messages(conn, ctx, &id, None).map(|_| ()))
            .await
    }

    async fn record_call(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError> {
        let id = self.leased(lease)?;
        let call = rows::EncodedCall::new(call)?;
        self.write(move |conn, ctx| calls::record_call(conn, ctx, &id, &call))
            .await
    }

    async fn call_started(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError> {
        let id = self.leased(lease)?;
        let call = rows::EncodedCall::new(call)?;
        self.write(move |conn, ctx| calls::call_started(conn, ctx, &id, &call))
            .await
    }

    async fn calls(&self, id: &SessionId) -> Result<Vec<CallRecord>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| calls::calls(conn, ctx, &id)).await
    }

    async fn request_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        let call_id = call_id.clone();
        let explanation = request.message.clone();
        let request =
            serde_json::to_string(request).map_err(|e| StoreError::encode("approval request", e))?;
        self.write(move |conn, ctx| {
            calls::request_approval(conn, ctx, &id, &call_id, &request, &explanation, None)
        })
        .await
    }

    async fn request_approval_for(
        &self,
        lease: &Lease,
        call: &CallRecord,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        let call = call.clone();
        let explanation = request.message.clone();
        let request =
            serde_json::to_string(request).map_err(|e| StoreError::encode("approval request", e))?;
        self.write(move |conn, ctx| {
            let call_id = call.call_id.clone();
            calls::request_approval(conn, ctx, &id, &call_id, &request, &explanation, Some(call))
        })
        .await
    }

    async fn resolve_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        decision: &ApprovalDecision,
        source: DecisionSource,
    ) -> Result<CallRecord, StoreError> {
        let id = self.leased(lease)?;
        let call_id = call_id.clone();
        let decision = decision.clone();
        self.write(move |conn, ctx| calls::resolve_approval(conn, ctx, &id, &call_id, decision, source, None))
            .await
    }

    async fn resolve_approval_and_start(
        &self,
        lease: &Lease,
        call_id: &CallId,
        decision: &ApprovalDecision,
        source: DecisionSource,
        start: &CallRecord,
    ) -> Result<CallRecord, StoreError> {
        let id = self.leased(lease)?;
        let call_id = call_id.clone();
        let decision = decision.clone();
        let start = start.clone();
        self.write(move |conn, ctx| {
            calls::resolve_approval(conn, ctx, &id, &call_id, decision, source, Some(start))
        })
        .await
    }

    async fn pending_approvals(&self, id: &SessionId) -> Result<Vec<PendingApproval>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| calls::pending_approvals(conn, ctx, &id))
            .await
    }

    async fn approvals(&self, id: &SessionId) -> Result<Vec<crate::ApprovalRecord>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| approvals::approvals(conn, ctx, &id))
            .await
    }

    async fn put_grant(&self, lease: &Lease, grant: &Grant) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        let grant = grant.clone();
        self.write(move |conn, ctx| grants::put_grant(conn, ctx, &id, &grant))
            .await
    }

    async fn revoke_grant(&self, lease: &Lease, key: &str) -> Result<bool, StoreError> {
        let id = self.leased(lease)?;
        let key = key.to_owned();
        self.write(move |conn, ctx| grants::revoke_grant(conn, ctx, &id, &key))
            .await
    }

    async fn grants(&self, id: &SessionId) -> Result<Vec<Grant>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| grants::grants(conn, ctx, &id)).await
    }

    async fn record_usage(
        &self,
        lease: &Lease,
        reply_id: Option<&ReplyId>,
        usage: &ChatUsage,
        cost: Option<f64>,
    ) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        let reply_id = reply_id.cloned();
        let usage = usage.clone();
        self.write(move |conn, ctx| usage::record_usage(conn, ctx, &id, reply_id.as_ref(), &usage, cost))
            .await
    }

    async fn usage(&self, id: &SessionId) -> Result<UsageTotals, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| usage::usage(conn, ctx, &id)).await
    }

    async fn purge(&self, before: chrono::DateTime<chrono::Utc>) -> Result<crate::Purged, StoreError> {
        let store = self.clone();
        self.run(move |conn, ctx| {
            let before = rows::ts(before);
            let finished: Vec<SessionId> = conn
                .prepare(
                    "SELECT id FROM sessions s WHERE updated_at < ?1
                     AND NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.session_id = s.id AND c.terminal = 0)",
                )
                .and_then(|mut s| {
                    s.query_map([&before], |row| row.get::<_, String>(0))?
                        .collect::<Result<Vec<_>, _>>()
                })
                .map_err(|e| ctx.err(e))?
                .into_iter()
                .map(SessionId::new)
                .collect();
            let mut purged = crate::Purged::default();
            for id in finished {
                // Only a session nobody writes: its lease is taken while it goes.
                let Ok(guard) = store.inner.leases.try_lock(&id) else {
                    continue;
                };
                if sessions::delete_session(conn, ctx, &id)? {
                    purged.sessions += 1;
                }
                guard.forget();
            }
            let tx = tx::write_tx(conn, ctx)?;
            purged.events = events::purge_events(&tx, ctx, &before)?;
            tx::commit(tx, ctx)?;
            Ok(purged)
        })
        .await
    }

    async fn append_events(&self, batches: Vec<(&Lease, Vec<StoredEvent>)>) -> Result<(), StoreError> {
        let batches = batches
            .into_iter()
            .map(|(lease, events)| Ok((self.leased(lease)?, events)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.write(move |conn, ctx| events::append_events(conn, ctx, &batches))
            .await
    }

    async fn events_after(
        &self,
        id: &SessionId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| events::events_after(conn, ctx, &id, after, limit))
            .await
    }

    async fn event_ids(&self, id: &SessionId) -> Result<(u64, u64), StoreError> {
        let id = id.clone();
        self.run(move |conn, ctx| events::event_ids(conn, ctx, &id)).await
    }

    async fn reserve_event_ids(&self, lease: &Lease, up_to: u64) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        self.write(move |conn, ctx| events::reserve_event_ids(conn, ctx, &id, up_to))
            .await
    }

    async fn settle_event_ids(&self, lease: &Lease, last: u64) -> Result<(), StoreError> {
        let id = self.leased(lease)?;
        self.write(move |conn, ctx| events::settle_event_ids(conn, ctx, &id, last))
            .await
    }
}

#[cfg(test)]
mod tests;
