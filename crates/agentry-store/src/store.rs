//! The [`SessionStore`] trait: what any durable store (SQLite here, Postgres later) provides.

use std::any::Any;
use std::fmt;

use agentry::message::Msg;
use agentry::model::ChatUsage;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use agentry::{CallId, ReplyId};
use async_trait::async_trait;
use serde_json::Value;

use crate::{
    CallRecord, Grant, PendingApproval, PendingApprovals, Recovered, SessionId, SessionInfo, StoreError,
    StoredEvent, UsageTotals,
};

/// The right to write one session: one writer per session at a time, across processes.
///
/// Obtained from [`SessionStore::acquire`]; every write takes it, so code that only reads (a
/// `sessions show` next to a running chat) cannot write by mistake. Dropping it releases the
/// session. A lease also ends with its process, however the process ends, so a crash never
/// leaves a session locked: the SQLite store uses an OS file lock, which the kernel releases on
/// `kill -9`; the PostgreSQL store a row with an expiry that its holder renews, which another
/// node takes over once it expired, with a new fencing token that refuses the old holder's
/// writes from then on.
pub struct Lease {
    session: SessionId,
    store: u128,
    token: u64,
    // What keeps the session locked (a locked file, a connection); released on drop.
    _guard: Box<dyn Any + Send + Sync>,
}

impl Lease {
    /// A lease on `session` for the store identified by `store`, held by `guard`. For store
    /// implementations.
    pub fn new(session: SessionId, store: u128, guard: Box<dyn Any + Send + Sync>) -> Self {
        Self::fenced(session, store, 0, guard)
    }

    /// A lease as [`new`](Self::new) makes it, with the fencing token its store gave it: every
    /// lease of a session gets a greater one than the leases before.
    pub fn fenced(session: SessionId, store: u128, token: u64, guard: Box<dyn Any + Send + Sync>) -> Self {
        Lease {
            session,
            store,
            token,
            _guard: guard,
        }
    }

    /// The session this lease writes.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// The id of the store instance that issued it.
    pub fn store(&self) -> u128 {
        self.store
    }

    /// Its fencing token (0 for a store whose leases cannot be taken over).
    pub fn fencing_token(&self) -> u64 {
        self.token
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("session", &self.session)
            .field("token", &self.token)
            .finish()
    }
}

/// A durable store of sessions: conversations, tool calls, approvals, grants and usage.
///
/// Every write is one transaction, committed before the method returns (write-ahead: the caller
/// announces a step only after the store returned). Writes take the session's [`Lease`];
/// reads take the session id and can run from any process while a writer works.
#[async_trait]
pub trait SessionStore: Send + Sync {
    // ---- sessions ----

    /// Creates a session named `name` with its agent configuration (a JSON object), for the
    /// store's own user. [`StoreError::NameTaken`] if the name is used.
    async fn create_session(&self, name: &str, config: &Value) -> Result<SessionInfo, StoreError> {
        self.create_owned_session(name, config, None).await
    }
    /// Creates a session as [`create_session`](Self::create_session) does, belonging to
    /// `owner` (see [`SessionInfo::owner`]). A name is unique among one owner's sessions:
    /// another owner's session of the same name is another session.
    async fn create_owned_session(
        &self,
        name: &str,
        config: &Value,
        owner: Option<&str>,
    ) -> Result<SessionInfo, StoreError>;
    /// The session with this id.
    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>, StoreError>;
    /// Whether session `id` exists, and whose it is: `None` when there is no such session,
    /// `Some(None)` for a session of the store's own user (no owner). A server asks this on
    /// every request, so it reads one row, where [`session`](Self::session) also counts the
    /// session's messages.
    async fn session_owner(&self, id: &SessionId) -> Result<Option<Option<String>>, StoreError> {
        Ok(self.session(id).await?.map(|info| info.owner))
    }
    /// The store's own user's session with this name (the sessions of `--session NAME`; a
    /// server's users' sessions are found by id).
    async fn session_named(&self, name: &str) -> Result<Option<SessionInfo>, StoreError>;
    /// Every session, most recently updated first.
    async fn sessions(&self) -> Result<Vec<SessionInfo>, StoreError>;
    /// Deletes a session and everything of it (messages, calls, approvals, grants, usage).
    /// Refused with [`StoreError::SessionBusy`] while a writer holds it, including this caller:
    /// drop the lease first. Returns whether it existed.
    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError>;
    /// Replaces the session's agent configuration.
    async fn set_config(&self, lease: &Lease, config: &Value) -> Result<(), StoreError>;

    // ---- the writer ----

    /// Takes the session for writing. Fails at once with [`StoreError::SessionBusy`] when
    /// another writer (another process, or another lease of this one) holds it: two writers
    /// are never interleaved.
    async fn acquire(&self, id: &SessionId) -> Result<Lease, StoreError>;
    /// Recovery on load (spec Y4), in one transaction: every call found pending approval,
    /// queued or running is closed as `Cancelled{reason: Restart}` with `INTERRUPTED_RESTART`
    /// (or, when its result was stored already, marked as that result says); a call without a
    /// result gets one, right after its message; orphan results are removed. Nothing is re-run.
    /// Returns what it did and the messages as they now are (so a loader reads them once).
    async fn recover(&self, lease: &Lease, pending: PendingApprovals) -> Result<Recovered, StoreError>;

    // ---- messages ----

    /// The session's messages, in order.
    async fn messages(&self, id: &SessionId) -> Result<Vec<Msg>, StoreError>;
    /// Appends messages in order, skipping those whose id is stored; returns how many were added.
    async fn append_messages(&self, lease: &Lease, msgs: &[Msg]) -> Result<usize, StoreError>;
    /// Inserts messages right before the stored message `before` (appends when it is not
    /// stored), skipping ids already stored; returns how many were added.
    async fn insert_messages_before(
        &self,
        lease: &Lease,
        before: &str,
        msgs: &[Msg],
    ) -> Result<usize, StoreError>;
    /// [`append_messages`](Self::append_messages), or with `before`
    /// [`insert_messages_before`](Self::insert_messages_before), with the starts of calls (each
    /// as [`call_started`](Self::call_started) takes it) written first, in the same transaction.
    ///
    /// For the starts the loop reported since the last write, whose results are in `msgs`: a
    /// call's start then costs no commit of its own (see [`CallRecorder`](crate::CallRecorder)).
    /// The default writes them one by one before the messages; a store overrides it to write
    /// them together.
    async fn insert_messages_with_starts(
        &self,
        lease: &Lease,
        before: Option<&str>,
        started: &[CallRecord],
        msgs: &[Msg],
    ) -> Result<usize, StoreError> {
        for call in started {
            self.call_started(lease, call).await?;
        }
        match before {
            Some(before) => self.insert_messages_before(lease, before, msgs).await,
            None => self.append_messages(lease, msgs).await,
        }
    }
    /// Deletes messages by id; returns how many were deleted.
    async fn delete_messages(&self, lease: &Lease, ids: &[String]) -> Result<usize, StoreError>;
    /// Deletes every message of the session (its calls, approvals and grants stay).
    async fn clear_messages(&self, lease: &Lease) -> Result<(), StoreError>;

    // ---- tool calls ----

    /// Writes a call's record (inserting it or updating it). A terminal record never changes
    /// (spec S1): writing over one returns `Ok(false)` and changes nothing.
    async fn record_call(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError>;
    /// Marks a live call as running from `at` in reply `reply` (its body is about to start, as
    /// far as the agent's hooks can tell: see [`CallRecorder`](crate::CallRecorder)), with the
    /// arguments it runs with; registers it if unknown. A terminal call is left alone:
    /// `Ok(false)`.
    async fn call_started(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError>;
    /// The session's calls, in the order they were registered.
    async fn calls(&self, id: &SessionId) -> Result<Vec<CallRecord>, StoreError>;

    // ---- approvals ----

    /// Marks a recorded, live call as waiting for approval with `request` (what the user is
    /// asked). [`StoreError::CallNotFound`] for an unknown call; a terminal call is refused
    /// with [`StoreError::NotPending`].
    async fn request_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError>;
    /// [`request_approval`](Self::request_approval) for `call` as it will run: its tool and
    /// arguments (which hooks may have changed since the model's message was stored) are
    /// recorded with the question, in the same transaction, and the approval is bound to them.
    async fn request_approval_for(
        &self,
        lease: &Lease,
        call: &CallRecord,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        self.request_approval(lease, &call.call_id, request).await
    }
    /// Records the decision for a pending call: approved calls become queued, declined ones
    /// `Declined` (the decision and its source are kept, Y3). The first decision wins: a call
    /// not pending is refused with [`StoreError::NotPending`] (A16). Returns the updated record.
    async fn resolve_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        decision: &ApprovalDecision,
        source: DecisionSource,
    ) -> Result<CallRecord, StoreError>;
    /// [`resolve_approval`](Self::resolve_approval), except that an approved call becomes
    /// running from `start` (as [`call_started`](Self::call_started) would mark it) instead of
    /// queued, in the same transaction: its body starts now, so a crash from here on may leave
    /// it partly run. The default resolves, then marks the start.
    async fn resolve_approval_and_start(
        &self,
        lease: &Lease,
        call_id: &CallId,
        decision: &ApprovalDecision,
        source: DecisionSource,
        start: &CallRecord,
    ) -> Result<CallRecord, StoreError> {
        let mut record = self.resolve_approval(lease, call_id, decision, source).await?;
        if record.status == crate::CallStatus::Queued {
            self.call_started(lease, start).await?;
            record.status = crate::CallStatus::Running;
            record.started_at = start.started_at;
        }
        Ok(record)
    }
    /// The calls waiting for approval, in order.
    async fn pending_approvals(&self, id: &SessionId) -> Result<Vec<PendingApproval>, StoreError>;
    /// The session's approval records, in the order of their calls: each bound to the
    /// arguments it was asked for, and used at most once (see [`ApprovalState`](crate::ApprovalState)).
    async fn approvals(&self, id: &SessionId) -> Result<Vec<crate::ApprovalRecord>, StoreError>;

    // ---- session grants (spec A12-A14) ----

    /// Stores a grant (replacing one with the same key).
    async fn put_grant(&self, lease: &Lease, grant: &Grant) -> Result<(), StoreError>;
    /// Revokes a grant; returns whether there was one.
    async fn revoke_grant(&self, lease: &Lease, key: &str) -> Result<bool, StoreError>;
    /// The session's grants, oldest first.
    async fn grants(&self, id: &SessionId) -> Result<Vec<Grant>, StoreError>;

    // ---- usage ----

    /// Records the token use of one model call or reply, and its cost when known.
    async fn record_usage(
        &self,
        lease: &Lease,
        reply_id: Option<&ReplyId>,
        usage: &ChatUsage,
        cost: Option<f64>,
    ) -> Result<(), StoreError>;
    /// The session's total token use.
    async fn usage(&self, id: &SessionId) -> Result<UsageTotals, StoreError>;

    // ---- the event log (for clients that resume after a restart) ----

    /// Appends events a server handed out, for one or more sessions, in one write (ids
    /// increasing per session; an id already stored is skipped, and so are the events of a
    /// session deleted meanwhile, or taken over by another process: the other sessions' are
    /// written). The default keeps nothing: a store without an event log only lets clients
    /// resume within one process.
    async fn append_events(&self, batches: Vec<(&Lease, Vec<StoredEvent>)>) -> Result<(), StoreError> {
        let _ = batches;
        Ok(())
    }
    /// The stored events after id `after`, oldest first, at most `limit`.
    async fn events_after(
        &self,
        id: &SessionId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let _ = (id, after, limit);
        Ok(Vec::new())
    }
    /// The stored events of several sessions at once, each after its own id: the events of
    /// `(session, after)` are those [`events_after`](Self::events_after) gives, at most
    /// `limit` per session. Unknown sessions are left out. A node streaming a thousand
    /// sessions reads them all in one query where the store can.
    async fn events_after_each(
        &self,
        from: &[(SessionId, u64)],
        limit: usize,
    ) -> Result<Vec<(SessionId, Vec<StoredEvent>)>, StoreError> {
        let mut each = Vec::with_capacity(from.len());
        for (id, after) in from {
            match self.events_after(id, *after, limit).await {
                Ok(events) => each.push((id.clone(), events)),
                Err(StoreError::SessionNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(each)
    }
    /// The id of the last stored event, and the highest id reserved with
    /// [`reserve_event_ids`](Self::reserve_event_ids) (0 for none).
    async fn event_ids(&self, id: &SessionId) -> Result<(u64, u64), StoreError> {
        let _ = id;
        Ok((0, 0))
    }
    /// Records, before they are handed out, that event ids up to `up_to` may be: a server that
    /// starts again continues above it, so no client sees one id for two events.
    async fn reserve_event_ids(&self, lease: &Lease, up_to: u64) -> Result<(), StoreError> {
        let _ = (lease, up_to);
        Ok(())
    }

    /// Lowers the reserved mark to `last`, the last event id handed out, once every event up
    /// to it is stored: the next writer of the session continues right after it, with no gap.
    async fn settle_event_ids(&self, lease: &Lease, last: u64) -> Result<(), StoreError> {
        let _ = (lease, last);
        Ok(())
    }

    // ---- bounded growth ----

    /// Deletes what is older than `before`: the events logged before it (a client can no
    /// longer resume from them), and the sessions last written before it that nobody writes
    /// and whose calls all ended, with everything of theirs. Long-term memories and knowledge
    /// bases are the users', not the sessions': they stay.
    async fn purge(&self, before: chrono::DateTime<chrono::Utc>) -> Result<Purged, StoreError>;

    // ---- several processes on one store ----

    /// Notices of events appended to sessions' logs by any process using this store (this one
    /// included), for a server whose clients stream a session that another node runs. `None`:
    /// the store serves one process (SQLite), whose own log is the only source.
    fn event_notices(&self) -> Option<tokio::sync::broadcast::Receiver<EventNotice>> {
        None
    }

    /// The sessions whose writer's lease expired without being released: their writer died (or
    /// lost the database) in the middle of something, and a process should take them over
    /// ([`acquire`](Self::acquire), then [`recover`](Self::recover)). Always empty for a store
    /// whose leases end with their process.
    async fn expired_leases(&self) -> Result<Vec<SessionId>, StoreError> {
        Ok(Vec::new())
    }

    /// Who holds the session's lease, expired or not (`None`: nobody writes it).
    async fn lease_holder(&self, id: &SessionId) -> Result<Option<String>, StoreError> {
        let _ = id;
        Ok(None)
    }

    /// Queues a control (a JSON document the application defines: a cancel, a decision) for
    /// the process that runs the session's reply, and tells every process
    /// ([`EventNotice::Controls`]); returns its id. Refused by a store for one process.
    async fn send_control(&self, id: &SessionId, body: &str) -> Result<u64, StoreError> {
        let _ = (id, body);
        Err(StoreError::Database(
            "this store serves one process: there is nobody to send a control to".into(),
        ))
    }

    /// Takes the queued controls of the lease's session, oldest first: each is taken once, by
    /// the session's writer (a lease taken over takes nothing, so a node that lost a session
    /// never applies what was meant for the one that took it).
    async fn take_controls(&self, lease: &Lease) -> Result<Vec<(u64, String)>, StoreError> {
        let _ = lease;
        Ok(Vec::new())
    }

    /// Answers control `control` (tells its sender, [`EventNotice::Answered`]).
    async fn answer_control(&self, control: u64, answer: &str) -> Result<(), StoreError> {
        let _ = (control, answer);
        Ok(())
    }

    /// The answer to control `control`, once given.
    async fn control_answer(&self, control: u64) -> Result<Option<String>, StoreError> {
        let _ = control;
        Ok(None)
    }
}

/// What [`SessionStore::purge`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Sessions, with their messages, calls, approvals, grants, usage and events.
    pub sessions: u64,
    /// Events of the sessions that stay.
    pub events: u64,
}

/// What [`SessionStore::event_notices`] tells.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventNotice {
    /// The session's log has new events.
    Appended(SessionId),
    /// Controls were queued for the session ([`SessionStore::send_control`]).
    Controls(SessionId),
    /// A control was answered ([`SessionStore::answer_control`]).
    Answered(u64),
    /// Notices may have been missed (the connection that receives them was made again): read
    /// every log that is followed.
    Resync,
}
