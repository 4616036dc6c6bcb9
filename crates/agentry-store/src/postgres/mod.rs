//! The PostgreSQL session store: several `agentry serve` nodes on one database.
//!
//! The same semantics as the SQLite store (the store conformance suite runs on both), with what
//! a store shared by several machines needs besides:
//! - a session's writer holds a **lease with an expiry and a fencing token** (see
//!   [`leases`](self::leases)): a node that dies stops renewing it, another node takes the
//!   session over once it expired, and from then on every write of the old holder is refused
//!   with [`StoreError::LeaseLost`], so two nodes never interleave writes to one session;
//! - the schema is migrated under an advisory lock, so nodes starting together on an empty
//!   database migrate it once.
//!
//! Connections come from a pool; each operation is one transaction (writes also renew the
//! lease and check its token in that transaction), and each read is one statement, so it sees
//! one snapshot.
//!
//! ```no_run
//! use agentry_store::{PostgresStore, SessionStore};
//!
//! # async fn demo() -> Result<(), agentry_store::StoreError> {
//! let store = PostgresStore::connect("postgres://agentry@127.0.0.1:5432/agentry").await?;
//! let session = store.create_session("demo", &serde_json::json!({})).await?;
//! let lease = store.acquire(&session.id).await?;
//! store.append_messages(&lease, &[agentry::Msg::user("hi")]).await?;
//! # Ok(()) }
//! ```

mod approvals;
mod batches;
mod calls;
mod controls;
mod events;
mod group_commit;
mod leases;
mod ledger;
mod messages;
mod notices;
mod recover;
mod rows;
mod schema;
mod sessions;
mod sql;
mod text;
mod tx;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentry::message::Msg;
use agentry::model::ChatUsage;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use agentry::{CallId, ReplyId};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use serde_json::Value;
use tokio_postgres::error::SqlState;

use crate::{
    CallRecord, Grant, Lease, PendingApproval, PendingApprovals, Recovered, SessionId, SessionInfo,
    SessionStore, StoreError, StoredEvent, UsageTotals,
};
pub use schema::POSTGRES_SCHEMA_VERSION;

/// Connections of the live path (events read, controls), beside the pool of
/// [`PostgresOptions::pool_size`].
const LIVE_POOL_SIZE: usize = 4;
/// Connections of the delivery path: a server has one event writer and one reader.
const DELIVERY_POOL_SIZE: usize = 2;

/// Settings of a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    url: String,
    schema: Option<String>,
    lease_ttl: Duration,
    pool_size: usize,
    renew_leases: bool,
}

impl PostgresOptions {
    /// The database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, or libpq's
    /// `key=value` form), with the default settings.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresOptions {
            url: url.into(),
            schema: None,
            lease_ttl: Duration::from_secs(8),
            pool_size: 16,
            renew_leases: true,
        }
    }

    /// Keeps the store's tables in this schema (made if missing) instead of the connection's
    /// default one: several stores can then share one database.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// How long a session's lease lasts without being renewed (default 8 s): after a node
    /// dies, its sessions can be taken over by another once this has passed. The holder renews
    /// its leases every third of it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl.max(Duration::from_millis(300));
        self
    }

    /// Whether the store renews its leases in the background (default true). Off, a lease
    /// expires after its lifetime however much its holder writes, as if the process stalled:
    /// for tests of takeover.
    pub fn renew_leases(mut self, renew: bool) -> Self {
        self.renew_leases = renew;
        self
    }

    /// How many connections the store opens at most (default 16).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }
}

/// What error messages need to know about the database.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// The server and database, without the password.
    pub(crate) target: String,
}

impl Ctx {
    /// Turns a client error into the case a user can act on.
    pub(crate) fn err(&self, error: tokio_postgres::Error) -> StoreError {
        match error.code() {
            Some(code) if *code == SqlState::DISK_FULL || *code == SqlState::OUT_OF_MEMORY => {
                StoreError::DiskFull {
                    path: self.target.clone().into(),
                }
            }
            Some(_) => StoreError::Database(format!("{}: {}", self.target, db_message(&error))),
            None if error.is_closed() || io_cause(&error) => StoreError::Unreachable {
                target: self.target.clone(),
                detail: db_message(&error),
            },
            None => StoreError::Database(format!("{}: {}", self.target, db_message(&error))),
        }
    }

    fn pool_err(&self, error: deadpool_postgres::PoolError) -> StoreError {
        match error {
            deadpool_postgres::PoolError::Backend(e) => self.err(e),
            other => StoreError::Unreachable {
                target: self.target.clone(),
                detail: other.to_string(),
            },
        }
    }
}

/// The server's own message when there is one (the client's `Display` says only "db error").
fn db_message(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

fn io_cause(error: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

pub(crate) struct Inner {
    pool: Pool,
    /// Where writes wait for the transaction they share (see [`group_commit`]).
    writes: group_commit::Queue,
    /// Writes committed in a transaction shared with others, so far.
    grouped: std::sync::atomic::AtomicU64,
    /// Connections of the delivery path only: the node's event writer and the node's one
    /// reader for all its streams ([`events_after_each`](SessionStore::events_after_each)).
    /// The writes of a thousand replies' steps, what they lock, and streams that start, never
    /// hold up the events clients wait for.
    delivery: Pool,
    /// Connections of the live path only (events read, controls): a thousand
    /// replies writing their steps never make a stream or a cancel wait for a connection.
    live: Pool,
    ctx: Ctx,
    /// Tells this store's leases from another's, in this process and in the database.
    id: uuid::Uuid,
    lease_ttl: Duration,
    /// The leases this store holds, by session, with their tokens (renewed together).
    held: Mutex<HashMap<SessionId, i64>>,
    /// For the connection that listens for event notices.
    config: tokio_postgres::Config,
    notices: tokio::sync::broadcast::Sender<crate::EventNotice>,
    listener: Mutex<Option<tokio::task::AbortHandle>>,
    /// Where control requests wait for the statement they share (see [`controls`]).
    controls: controls::ControlBatches,
}

impl Inner {
    /// A connection of `pool` (one of this store's).
    async fn checkout(&self, pool: &Pool) -> Result<Object, StoreError> {
        pool.get().await.map_err(|e| self.ctx.pool_err(e))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(listener) = self
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            listener.abort();
        }
    }
}

/// A [`SessionStore`] on a PostgreSQL database, shared by any number of processes and machines.
/// Cheap to clone (clones share the pool and the leases).
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.ctx.target)
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` with default options, migrating its schema.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(PostgresOptions::new(url)).await
    }

    /// Connects as `options` say: checks that the server answers, migrates the schema, and
    /// starts renewing the leases this store will hold. A database of a newer Agentry is refused
    /// before anything is written to it.
    pub async fn connect_with(options: PostgresOptions) -> Result<Self, StoreError> {
        let mut config =
            tokio_postgres::Config::from_str(&options.url).map_err(|e| StoreError::Unreachable {
                target: "the PostgreSQL URL".into(),
                detail: db_message(&e),
            })?;
        let ctx = Ctx {
            target: describe(&config),
        };
        if let Some(schema) = &options.schema {
            config.options(format!("-c search_path={}", schema::quote_ident(schema)));
        }
        if config.get_application_name().is_none() {
            config.application_name("agentry");
        }
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .build()
            .map_err(|e| StoreError::Database(format!("{}: {e}", ctx.target)))?;
        let pool_of = |size: usize| {
            Pool::builder(Manager::from_config(
                config.clone(),
                tokio_postgres::NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            ))
            .max_size(size)
            .build()
            .map_err(|e| StoreError::Database(format!("{}: {e}", ctx.target)))
        };
        let live = pool_of(LIVE_POOL_SIZE)?;
        let delivery = pool_of(DELIVERY_POOL_SIZE)?;
        let mut client = pool.get().await.map_err(|e| ctx.pool_err(e))?;
        schema::migrate(&mut client, &ctx, options.schema.as_deref()).await?;
        drop(client);
        let (writes, waiting) = group_commit::queue();
        let (controls, control_ends) = controls::control_batches();
        let inner = Arc::new(Inner {
            writes,
            grouped: std::sync::atomic::AtomicU64::new(0),
            pool,
            live,
            delivery,
            ctx,
            id: uuid::Uuid::new_v4(),
            lease_ttl: options.lease_ttl,
            held: Mutex::default(),
            config,
            notices: notices::channel(),
            listener: Mutex::default(),
            controls,
        });
        group_commit::start(&inner, waiting);
        control_ends.start(&inner);
        if options.renew_leases {
            leases::start_renewing(&inner);
        }
        Ok(PostgresStore { inner })
    }

    /// The server and database this store writes (`USER@HOST:PORT/DB`, no password).
    pub fn target(&self) -> &str {
        &self.inner.ctx.target
    }

    /// A pooled connection.
    async fn client(&self) -> Result<Object, StoreError> {
        self.inner.checkout(&self.inner.pool).await
    }

    /// A connection of the live path (see [`Inner::live`]).
    async fn live_client(&self) -> Result<Object, StoreError> {
        self.inner.checkout(&self.inner.live).await
    }

    /// A connection of the delivery path (see [`Inner::delivery`]).
    async fn delivery_client(&self) -> Result<Object, StoreError> {
        self.inner.checkout(&self.inner.delivery).await
    }

    /// The session a write may touch, and its lease's token: the lease must be ours.
    fn leased(&self, lease: &Lease) -> Result<(SessionId, i64), StoreError> {
        if lease.store() != self.inner.id.as_u128() {
            return Err(StoreError::ForeignLease);
        }
        let token = i64::try_from(lease.fencing_token()).map_err(|_| StoreError::ForeignLease)?;
        Ok((lease.session().clone(), token))
    }
}

/// `user@host:port/db` of a configuration, for messages (never the password).
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn create_owned_session(
        &self,
        name: &str,
        config: &Value,
        owner: Option<&str>,
    ) -> Result<SessionInfo, StoreError> {
        let config = serde_json::to_string(config).map_err(|e| StoreError::encode("session config", e))?;
        let client = self.client().await?;
        sessions::create_session(&client, &self.inner.ctx, name, &config, owner).await
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>, StoreError> {
        let client = self.client().await?;
        sessions::session_where(&client, &self.inner.ctx, "s.id = $1", id.as_str()).await
    }

    async fn session_owner(&self, id: &SessionId) -> Result<Option<Option<String>>, StoreError> {
        let client = self.client().await?;
        sessions::session_owner(&client, &self.inner.ctx, id).await
    }

    async fn session_named(&self, name: &str) -> Result<Option<SessionInfo>, StoreError> {
        let client = self.client().await?;
        sessions::session_where(&client, &self.inner.ctx, "s.name = $1 AND s.owner IS NULL", name).await
    }

    async fn sessions(&self) -> Result<Vec<SessionInfo>, StoreError> {
        let client = self.client().await?;
        sessions::sessions(&client, &self.inner.ctx).await
    }

    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        // Refused while anyone writes it: taking the lease keeps a writer from starting.
        let lease = match self.acquire(id).await {
            Ok(lease) => lease,
            Err(StoreError::SessionNotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        let (id, token) = self.leased(&lease)?;
        let mut client = self.client().await?;
        sessions::delete_session(&mut client, &self.inner, &id, token).await
    }

    async fn set_config(&self, lease: &Lease, config: &Value) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let config = serde_json::to_string(config).map_err(|e| StoreError::encode("session config", e))?;
        let mut client = self.client().await?;
        sessions::set_config(&mut client, &self.inner, &id, token, &config).await
    }

    async fn acquire(&self, id: &SessionId) -> Result<Lease, StoreError> {
        leases::acquire(&self.inner, id).await
    }

    async fn recover(&self, lease: &Lease, pending: PendingApprovals) -> Result<Recovered, StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        recover::recover(&mut client, &self.inner, &id, token, pending).await
    }

    async fn messages(&self, id: &SessionId) -> Result<Vec<Msg>, StoreError> {
        let client = self.client().await?;
        messages::messages(&client, &self.inner.ctx, id).await
    }

    async fn append_messages(&self, lease: &Lease, msgs: &[Msg]) -> Result<usize, StoreError> {
        self.insert_messages_with_starts(lease, None, &[], msgs).await
    }

    async fn insert_messages_before(
        &self,
        lease: &Lease,
        before: &str,
        msgs: &[Msg],
    ) -> Result<usize, StoreError> {
        self.insert_messages_with_starts(lease, Some(before), &[], msgs)
            .await
    }

    async fn insert_messages_with_starts(
        &self,
        lease: &Lease,
        before: Option<&str>,
        started: &[CallRecord],
        msgs: &[Msg],
    ) -> Result<usize, StoreError> {
        let (id, token) = self.leased(lease)?;
        let started = started
            .iter()
            .map(rows::CallColumns::new)
            .collect::<Result<Vec<_>, _>>()?;
        let msgs = msgs
            .iter()
            .map(messages::Encoded::new)
            .collect::<Result<Vec<_>, _>>()?;
        let before = before.map(str::to_owned);
        group_commit::write(
            &self.inner,
            id,
            token,
            (before, started, msgs),
            |tx, ctx, id, (before, started, msgs)| {
                Box::pin(messages::insert_messages(
                    tx,
                    ctx,
                    id,
                    before.as_deref(),
                    started,
                    msgs,
                ))
            },
        )
        .await
    }

    async fn delete_messages(&self, lease: &Lease, ids: &[String]) -> Result<usize, StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        messages::delete_messages(&mut client, &self.inner, &id, token, Some(ids)).await
    }

    async fn clear_messages(&self, lease: &Lease) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        messages::delete_messages(&mut client, &self.inner, &id, token, None)
            .await
            .map(|_| ())
    }

    async fn record_call(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError> {
        let (id, token) = self.leased(lease)?;
        let call = rows::CallColumns::new(call)?;
        group_commit::write(&self.inner, id, token, call, |tx, ctx, id, call| {
            Box::pin(calls::write_call(tx, ctx, id, call))
        })
        .await
    }

    async fn call_started(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError> {
        let (id, token) = self.leased(lease)?;
        let call = rows::CallColumns::new(call)?;
        group_commit::write(&self.inner, id, token, call, |tx, ctx, id, call| {
            Box::pin(calls::write_start(tx, ctx, id, call))
        })
        .await
    }

    async fn calls(&self, id: &SessionId) -> Result<Vec<CallRecord>, StoreError> {
        let client = self.client().await?;
        calls::calls(&client, &self.inner.ctx, id).await
    }

    async fn request_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        calls::request_approval(&mut client, &self.inner, &id, token, call_id, request, None).await
    }

    async fn resolve_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        decision: &ApprovalDecision,
        source: DecisionSource,
    ) -> Result<CallRecord, StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        calls::resolve_approval(
            &mut client,
            &self.inner,
            &id,
            token,
            call_id,
            decision,
            source,
            None,
        )
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
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        calls::resolve_approval(
            &mut client,
            &self.inner,
            &id,
            token,
            call_id,
            decision,
            source,
            Some(start),
        )
        .await
    }

    async fn pending_approvals(&self, id: &SessionId) -> Result<Vec<PendingApproval>, StoreError> {
        let client = self.client().await?;
        calls::pending_approvals(&client, &self.inner.ctx, id).await
    }

    async fn approvals(&self, id: &SessionId) -> Result<Vec<crate::ApprovalRecord>, StoreError> {
        let client = self.client().await?;
        approvals::approvals(&client, &self.inner.ctx, id).await
    }

    async fn request_approval_for(
        &self,
        lease: &Lease,
        call: &CallRecord,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        calls::request_approval(
            &mut client,
            &self.inner,
            &id,
            token,
            &call.call_id,
            request,
            Some(call),
        )
        .await
    }

    async fn put_grant(&self, lease: &Lease, grant: &Grant) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        ledger::put_grant(&mut client, &self.inner, &id, token, grant).await
    }

    async fn revoke_grant(&self, lease: &Lease, key: &str) -> Result<bool, StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        ledger::revoke_grant(&mut client, &self.inner, &id, token, key).await
    }

    async fn grants(&self, id: &SessionId) -> Result<Vec<Grant>, StoreError> {
        let client = self.client().await?;
        ledger::grants(&client, &self.inner.ctx, id).await
    }

    async fn record_usage(
        &self,
        lease: &Lease,
        reply_id: Option<&ReplyId>,
        usage: &ChatUsage,
        cost: Option<f64>,
    ) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let reply_id = reply_id.cloned();
        group_commit::write(
            &self.inner,
            id,
            token,
            (reply_id, usage.clone(), cost),
            |tx, ctx, id, (reply_id, usage, cost)| {
                Box::pin(ledger::record_usage(tx, ctx, id, reply_id.as_ref(), usage, *cost))
            },
        )
        .await
    }

    async fn usage(&self, id: &SessionId) -> Result<UsageTotals, StoreError> {
        let client = self.client().await?;
        ledger::usage(&client, &self.inner.ctx, id).await
    }

    async fn purge(&self, before: chrono::DateTime<chrono::Utc>) -> Result<crate::Purged, StoreError> {
        let client = self.client().await?;
        events::purge(&client, &self.inner.ctx, before).await
    }

    async fn append_events(&self, batches: Vec<(&Lease, Vec<StoredEvent>)>) -> Result<(), StoreError> {
        let batches = batches
            .into_iter()
            .map(|(lease, events)| Ok((self.leased(lease)?, events)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let client = self.delivery_client().await?;
        events::append_events(&client, &self.inner.ctx, &batches).await
    }

    async fn events_after(
        &self,
        id: &SessionId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let client = self.live_client().await?;
        events::events_after(&client, &self.inner.ctx, id, after, limit).await
    }

    async fn events_after_each(
        &self,
        from: &[(SessionId, u64)],
        limit: usize,
    ) -> Result<Vec<(SessionId, Vec<StoredEvent>)>, StoreError> {
        let client = self.delivery_client().await?;
        events::events_after_each(&client, &self.inner.ctx, from, limit).await
    }

    async fn event_ids(&self, id: &SessionId) -> Result<(u64, u64), StoreError> {
        let client = self.live_client().await?;
        events::event_ids(&client, &self.inner.ctx, id).await
    }

    async fn reserve_event_ids(&self, lease: &Lease, up_to: u64) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        events::reserve_event_ids(&mut client, &self.inner, &id, token, up_to).await
    }

    async fn settle_event_ids(&self, lease: &Lease, last: u64) -> Result<(), StoreError> {
        let (id, token) = self.leased(lease)?;
        let mut client = self.client().await?;
        events::settle_event_ids(&mut client, &self.inner, &id, token, last).await
    }

    fn event_notices(&self) -> Option<tokio::sync::broadcast::Receiver<crate::EventNotice>> {
        Some(notices::subscribe(&self.inner))
    }

    async fn expired_leases(&self) -> Result<Vec<SessionId>, StoreError> {
        let client = self.client().await?;
        leases::expired(&client, &self.inner.ctx).await
    }

    async fn lease_holder(&self, id: &SessionId) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        controls::lease_holder(&client, &self.inner.ctx, id).await
    }

    async fn send_control(&self, id: &SessionId, body: &str) -> Result<u64, StoreError> {
        controls::send_control(&self.inner, id, body).await
    }

    async fn take_controls(&self, lease: &Lease) -> Result<Vec<(u64, String)>, StoreError> {
        let (id, token) = self.leased(lease)?;
        controls::take_controls(&self.inner, &id, token).await
    }

    async fn answer_control(&self, control: u64, answer: &str) -> Result<(), StoreError> {
        controls::answer_control(&self.inner, control, answer).await
    }

    async fn control_answer(&self, control: u64) -> Result<Option<String>, StoreError> {
        controls::control_answer(&self.inner, control).await
    }
}

#[cfg(test)]
mod tests;
