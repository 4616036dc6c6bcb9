//! The server's sessions: those loaded (an agent on a durable memory, its event log, its reply)
//! and how one is loaded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use agentry::ReActAgent;
use agentry::agent::{ReActAgentBuilder, ReplyRun};
use agentry::tool::Toolkit;
use agentry_store::{PendingApprovals, SessionId, SessionMemory, SessionStore};
use tokio::sync::Mutex;

use crate::error::ApiError;
use crate::events::{EventLog, EventWriter, LogCore};
use crate::users::Caller;

/// Starts the agent of a session: its model, tools, prompt and hooks, given the user the
/// session belongs to ([`SessionInfo::owner`](agentry_store::SessionInfo::owner): `None` for
/// the server's own user), whose long-term memory it should have. The server attaches the
/// session to it ([`SessionMemory::attach`]).
pub type AgentFactory = Arc<dyn Fn(Option<&str>) -> ReActAgentBuilder + Send + Sync>;

/// A session loaded by the server: it holds the session's writer lease.
pub struct LiveSession {
    pub memory: Arc<SessionMemory>,
    pub agent: ReActAgent,
    pub events: Arc<EventLog>,
    replying: Arc<AtomicBool>,
    /// Told when a reply ends.
    reply_ended: Arc<tokio::sync::Notify>,
    /// On a store shared by several nodes: the server that unloads the session once its reply
    /// ended, so that its lease lets any node run the next one.
    unload_when_idle: Option<Weak<AppState>>,
    /// Counts the uses of the session (requests, replies ended): one that did not change for
    /// the idle time lets it be unloaded (see [`crate::idle`]).
    uses: Arc<std::sync::atomic::AtomicU64>,
}

impl LiveSession {
    /// Resolves once no reply runs.
    pub async fn reply_done(&self) {
        loop {
            let ended = self.reply_ended.notified();
            if !self.is_replying() {
                return;
            }
            ended.await;
        }
    }

    /// Counts a use of the session.
    pub(crate) fn touch(&self) {
        self.uses.fetch_add(1, Ordering::Relaxed);
    }

    /// The uses of the session so far.
    pub(crate) fn uses(&self) -> u64 {
        self.uses.load(Ordering::Relaxed)
    }

    /// Whether a reply runs.
    pub fn is_replying(&self) -> bool {
        self.replying.load(Ordering::SeqCst)
    }

    /// Drives `start`'s reply in the background, its events into the log; false (nothing
    /// started) when a reply runs already.
    pub fn start(&self, start: impl FnOnce(&ReActAgent) -> ReplyRun) -> bool {
        if self
            .replying
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return false;
        }
        let mut run = start(&self.agent);
        let events = Arc::clone(&self.events);
        let replying = Arc::clone(&self.replying);
        let ended = Arc::clone(&self.reply_ended);
        let memory = Arc::clone(&self.memory);
        let unload = self.unload_when_idle.clone();
        let uses = Arc::clone(&self.uses);
        tokio::spawn(async move {
            let mut finished = false;
            while let Some(event) = run.next_event().await {
                if let agentry::agent::AgentEvent::ReplyFinished { .. } = &event {
                    // The session is free before it is announced (its hook has recorded the
                    // ledger already): a client that sees `reply_finished` may start the next
                    // reply at once.
                    replying.store(false, Ordering::SeqCst);
                    ended.notify_waiters();
                    finished = true;
                }
                let asks = matches!(event, agentry::agent::AgentEvent::ApprovalRequested { .. });
                events.push(&event).await;
                // A decision sent by another node, maybe while this one took the session over.
                if asks && let Some(state) = unload.as_ref().and_then(Weak::upgrade) {
                    crate::control::serve_controls(&state, &memory.session().id).await;
                }
            }
            if let Err(e) = run.finish().await {
                tracing::warn!(session = %memory.session().name, error = %e, "a reply failed");
            }
            if !finished {
                replying.store(false, Ordering::SeqCst);
                ended.notify_waiters();
            }
            uses.fetch_add(1, Ordering::Relaxed);
            // This task's hold on the session goes first: unloading gives its lease back.
            let id = memory.session().id.clone();
            drop(memory);
            if let Some(state) = unload.and_then(|s| s.upgrade()) {
                state.unload_if_idle(&id).await;
            }
        });
        true
    }
}

/// What every handler shares.
pub struct AppState {
    pub store: Arc<dyn SessionStore>,
    factory: AgentFactory,
    /// The tools an agent of this server has (for `GET /v1/tools`).
    pub toolkit: Toolkit,
    live: Mutex<HashMap<SessionId, Arc<LiveSession>>>,
    /// One gate per session being loaded: a load takes many store round trips, and holding
    /// the map meanwhile made every request of every session wait for it.
    loading: std::sync::Mutex<HashMap<SessionId, Arc<Mutex<()>>>>,
    /// The sessions whose lease this node is giving back (their events being written), each
    /// with what wakes the requests waiting for it.
    unloading: std::sync::Mutex<HashMap<SessionId, Arc<tokio::sync::Notify>>>,
    /// The sessions unloaded here, while something of this process (a call still winding
    /// down) keeps their memory, and so their lease, alive.
    released: std::sync::Mutex<HashMap<SessionId, std::sync::Weak<SessionMemory>>>,
    /// On a store of this node alone: how long a session stays loaded without use (see
    /// [`crate::idle`]).
    pub(crate) idle_unload: Option<std::time::Duration>,
    /// The event logs of the sessions unloaded while idle that clients still stream from: a
    /// load continues them.
    pub(crate) cores: std::sync::Mutex<HashMap<SessionId, std::sync::Weak<LogCore>>>,
    /// Writes the sessions' events to the store (started with the first session loaded).
    event_writer: std::sync::OnceLock<EventWriter>,
    /// Cancelled when the server stops: new replies and streams are refused.
    pub stopping: tokio_util::sync::CancellationToken,
    /// On a store shared by several nodes, its notices of appended events: streams then read
    /// the store's log, whichever node runs the reply, and a session is loaded only while a
    /// reply runs (see [`crate::cluster`]).
    pub notices: Option<std::sync::Mutex<tokio::sync::broadcast::Receiver<agentry_store::EventNotice>>>,
    /// The tails of the logs this node streams, read as the notices name them.
    pub(crate) tails: Option<Arc<crate::log_tails::LogTails>>,
    /// This node's requests waiting for another node's answer to their control.
    pub(crate) answers: crate::control::Answers,
    /// Who the agent is, for its A2A card.
    pub(crate) identity: crate::a2a::AgentIdentity,
    /// The A2A tasks run here.
    pub(crate) a2a: Arc<crate::a2a::Tasks>,
}

impl AppState {
    pub fn new(store: Arc<dyn SessionStore>, factory: AgentFactory, toolkit: Toolkit) -> Self {
        let notices = store.event_notices();
        AppState {
            tails: notices
                .as_ref()
                .map(|n| crate::log_tails::LogTails::start(Arc::clone(&store), n.resubscribe())),
            notices: notices.map(std::sync::Mutex::new),
            store,
            factory,
            toolkit,
            live: Mutex::new(HashMap::new()),
            loading: std::sync::Mutex::default(),
            unloading: std::sync::Mutex::default(),
            released: std::sync::Mutex::default(),
            idle_unload: None,
            cores: std::sync::Mutex::default(),
            event_writer: std::sync::OnceLock::new(),
            stopping: tokio_util::sync::CancellationToken::new(),
            answers: crate::control::Answers::default(),
            identity: crate::a2a::AgentIdentity::default(),
            a2a: Arc::default(),
        }
    }

    /// The loaded session `id`, loading it first if needed. Loading takes the session's writer
    /// lease, closes what a dead process left running (Y4), and asks again about calls that
    /// were waiting for approval: their reply resumes at once.
    pub async fn live(self: &Arc<Self>, id: &SessionId) -> Result<Arc<LiveSession>, ApiError> {
        if let Some(session) = self.loaded(id).await {
            session.touch();
            return Ok(session);
        }
        let gate = Arc::clone(
            self.loading
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(id.clone())
                .or_default(),
        );
        let loading = gate.lock().await;
        let loaded = self.load(id).await;
        self.loading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
        drop(loading);
        loaded
    }

    /// Loads session `id` (see [`AppState::live`]), its gate held.
    async fn load(self: &Arc<Self>, id: &SessionId) -> Result<Arc<LiveSession>, ApiError> {
        // Loaded by the request that held the gate before.
        if let Some(session) = self.loaded(id).await {
            return Ok(session);
        }
        self.unloaded(id).await;
        if self.store.session(id).await?.is_none() {
            return Err(ApiError::no_session(id.as_str()));
        }
        let memory =
            Arc::new(SessionMemory::open_with(Arc::clone(&self.store), id, PendingApprovals::Keep).await?);
        let agent = memory
            .attach((self.factory)(memory.session().owner.as_deref()))
            .await?
            .build()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let recovery = memory.recovery();
        let waiting = !(recovery.pending_kept.is_empty() && recovery.resumable_kept.is_empty());
        let writer = self
            .event_writer
            .get_or_init(|| EventWriter::start(Arc::clone(&self.store)))
            .clone();
        let events = Arc::new(match self.is_clustered() {
            true => EventLog::durable(&memory, writer).await?.final_only(),
            false => match crate::idle::core_of(self, id) {
                Some(core) => EventLog::durable_continuing(&memory, writer, core).await?,
                None => EventLog::durable(&memory, writer).await?,
            },
        });
        let session = Arc::new(LiveSession {
            memory,
            agent,
            events,
            replying: Arc::new(AtomicBool::new(false)),
            reply_ended: Arc::new(tokio::sync::Notify::new()),
            unload_when_idle: self.is_clustered().then(|| Arc::downgrade(self)),
            uses: Arc::default(),
        });
        self.live.lock().await.insert(id.clone(), Arc::clone(&session));
        crate::idle::watch(self, id, &session);
        if waiting {
            session.start(ReActAgent::start_resumed_reply);
        } else if self.is_clustered() {
            crate::control::serve_controls(self, id).await;
        }
        Ok(session)
    }

    /// Runs `job` at once, then every `period`, until the server stops or is gone.
    pub(crate) fn every<F, Fut>(self: &Arc<Self>, period: std::time::Duration, job: F)
    where
        F: Fn(Arc<AppState>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let weak = Arc::downgrade(self);
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stopping.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                let Some(state) = weak.upgrade() else { return };
                job(state).await;
            }
        });
    }

    /// A receiver of the store's notices, on a store shared with other nodes.
    pub(crate) fn notice_receiver(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<agentry_store::EventNotice>> {
        self.notices
            .as_ref()
            .map(|n| n.lock().unwrap_or_else(|e| e.into_inner()).resubscribe())
    }

    /// Whether the store is shared with other nodes (see [`AppState::notices`]).
    pub fn is_clustered(&self) -> bool {
        self.notices.is_some()
    }

    /// Unloads session `id` unless a reply runs in it, after writing its events: its lease
    /// goes back to the store.
    pub async fn unload_if_idle(&self, id: &SessionId) {
        let session = {
            let mut live = self.live.lock().await;
            match live.get(id) {
                Some(session) if !session.is_replying() => live.remove(id),
                _ => None,
            }
        };
        let Some(session) = session else { return };
        let events = Arc::clone(&session.events);
        let memory = Arc::downgrade(&session.memory);
        self.give_back(id, session, async move {
            events.close().await;
            self.released
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id.clone(), memory);
        })
        .await;
    }

    /// Unloads session `session`, loaded as `id`, if nothing else uses it (no request holds it,
    /// no reply runs): its events are written and its memory and lease given back, while its
    /// streams stay open on its log's core (see [`crate::idle`]).
    pub(crate) async fn unload_unused(&self, id: &SessionId, session: Arc<LiveSession>) {
        {
            let mut live = self.live.lock().await;
            // Here and in the map only: a request holding it is about to use it.
            let unused = live.get(id).is_some_and(|s| Arc::ptr_eq(s, &session))
                && Arc::strong_count(&session) == 2
                && !session.is_replying();
            if !unused {
                return;
            }
            live.remove(id);
        }
        let events = Arc::clone(&session.events);
        self.give_back(id, session, async move { events.release().await })
            .await;
        tracing::debug!(session = %id, "unloaded while idle");
    }

    /// Gives back session `session`, just taken out of the map as `id`, once `finishing` (the
    /// writing of its events) is done: its memory, and so its lease, goes with it. A request
    /// arriving meanwhile waits for the lease to be given back here rather than find it held
    /// (see `load`).
    async fn give_back(
        &self,
        id: &SessionId,
        session: Arc<LiveSession>,
        finishing: impl Future<Output = ()>,
    ) {
        let unloaded = Arc::new(tokio::sync::Notify::new());
        self.unloading().insert(id.clone(), Arc::clone(&unloaded));
        finishing.await;
        drop(session);
        self.unloading().remove(id);
        unloaded.notify_waiters();
    }

    /// Whether session `id`, unloaded here, is still held by this process (its lease not
    /// given back yet).
    pub(crate) fn still_held_here(&self, id: &SessionId) -> bool {
        let mut released = self
            .released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        released.retain(|_, memory| memory.strong_count() > 0);
        released.contains_key(id)
    }

    fn unloading(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Arc<tokio::sync::Notify>>> {
        self.unloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until session `id` is not being unloaded here.
    async fn unloaded(&self, id: &SessionId) {
        loop {
            let Some(unloading) = self.unloading().get(id).cloned() else {
                return;
            };
            let done = unloading.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if !self.unloading().contains_key(id) {
                return;
            }
            done.await;
        }
    }

    /// Fails with 404 unless session `id` exists and is `caller`'s: to anyone else, another
    /// user's session does not exist.
    pub async fn check_owner(&self, caller: &Caller, id: &SessionId) -> Result<(), ApiError> {
        let owned = match self.loaded(id).await {
            Some(live) => caller.owns(live.memory.session()),
            None => self
                .store
                .session_owner(id)
                .await?
                .is_some_and(|owner| caller.owns_as(owner.as_deref())),
        };
        match owned {
            true => Ok(()),
            false => Err(ApiError::no_session(id.as_str())),
        }
    }

    /// The ids of the sessions loaded here.
    pub async fn loaded_ids(&self) -> Vec<SessionId> {
        self.live.lock().await.keys().cloned().collect()
    }

    /// The loaded session `id`, if it is loaded.
    pub async fn loaded(&self, id: &SessionId) -> Option<Arc<LiveSession>> {
        self.live.lock().await.get(id).cloned()
    }

    /// The server stops: new streams are refused, open ones end, and each running reply is
    /// cancelled (its tools told, as a user's cancel does) and waited for, so that everything
    /// it did is committed. Waits at most `grace` for the replies.
    pub async fn stop(&self, grace: std::time::Duration) {
        self.stopping.cancel();
        let sessions: Vec<Arc<LiveSession>> = self.live.lock().await.values().cloned().collect();
        for session in &sessions {
            let _ = session.agent.handle().cancel_reply();
        }
        let all_done = async {
            for session in &sessions {
                session.reply_done().await;
            }
        };
        if tokio::time::timeout(grace, all_done).await.is_err() {
            tracing::warn!("a reply did not end within the grace period");
        }
        for session in &sessions {
            session.events.close().await;
        }
        crate::idle::close_unloaded(self);
    }

    /// Unloads session `id` (its lease is given back once nothing uses it).
    pub async fn unload(&self, id: &SessionId) -> Option<Arc<LiveSession>> {
        self.live.lock().await.remove(id)
    }
}
