//! Several nodes on one store (PostgreSQL): any node answers any request for any session.
//!
//! - A reply runs on the node that holds the session's lease; the node loads the session for
//!   the reply and unloads it once the reply ended, so the next message may go to any node.
//! - A client's event stream reads the store's log, whichever node writes it: the store's
//!   notices ([`SessionStore::event_notices`](agentry_store::SessionStore::event_notices))
//!   wake it, the log gives the data (read once per node for all its streams, see
//!   [`crate::log_tails`]), so `Last-Event-ID` resumes on any node.
//! - A node that dies stops renewing its leases; every node looks for expired leases each
//!   second and takes their sessions over: recovery (spec Y4) closes what was left running,
//!   and a reply waiting for approval asks again.

use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::Duration;

use agentry_store::{SessionId, StoreError, StoredEvent};
use axum::response::sse::Event;
use futures::Stream;
use tokio::sync::watch;

use crate::error::ApiError;
use crate::events::last_handed_out;
use crate::log_tails::{FromTail, LogTails};
use crate::state::{AppState, LiveSession};

/// Events read from the log at a time.
const PAGE: usize = 512;
/// How often a node looks for sessions whose node died.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long a message waits for the node that ran the last reply to give the session back.
const HANDOVER_WAIT: Duration = Duration::from_secs(2);
/// How long it waits for this node itself to give the session back, once its reply ended.
const LOCAL_HANDOVER_WAIT: Duration = Duration::from_secs(10);

/// The session loaded for a new reply: when another node still holds it, its last reply may be
/// ending (the lease goes back right after its last event), so this waits a little for it
/// before telling the client that a reply runs.
pub(crate) async fn live_for_reply(
    state: &Arc<AppState>,
    id: &SessionId,
) -> Result<Arc<LiveSession>, ApiError> {
    let started = tokio::time::Instant::now();
    loop {
        match state.live(id).await {
            // Its last reply here has ended, but a call of it still winds down in this
            // process: the lease goes back once it has.
            Err(e)
                if e.is_session_busy()
                    && state.still_held_here(id)
                    && started.elapsed() < LOCAL_HANDOVER_WAIT =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) if e.is_session_busy() && started.elapsed() < HANDOVER_WAIT => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) if e.is_session_busy() => {
                return Err(ApiError::conflict(
                    "reply_running",
                    "a reply runs in this session: wait for its end or cancel it",
                ));
            }
            other => return other,
        }
    }
}

/// The session's events from the store's log, after `after`, then as any node appends them.
pub(crate) async fn stream_from_store(
    state: &Arc<AppState>,
    id: SessionId,
    after: u64,
) -> Result<impl Stream<Item = Result<Event, Infallible>> + Send + 'static, ApiError> {
    // Watched before the first read: a notice sent meanwhile is not missed.
    let tails = state
        .tails
        .clone()
        .ok_or_else(|| ApiError::internal("the store sends no notices"))?;
    let wakes = tails.watch(&id);
    let last = last_handed_out(state.store.event_ids(&id).await?);
    if after > last {
        return Err(ApiError::conflict(
            "unknown_event_id",
            format!("no event {after} yet (the last is {last}): reload the session"),
        ));
    }
    let follow = Follow {
        state: Arc::downgrade(state),
        stopping: state.stopping.clone(),
        tails,
        id,
        sent: after,
        page: Vec::new().into_iter(),
        wakes,
    };
    Ok(futures::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        follow.sent = event.id;
        let mut sse = Event::default();
        if let Some(at) = event.recorded_at {
            // When the node running the reply recorded it, as a local stream says (see
            // `events`): a client measures delivery across nodes with it.
            sse = sse.comment(format!("at_us={}", at.timestamp_micros()));
        }
        let sse = sse.id(event.id.to_string()).event("agent").data(event.body);
        Some((Ok(sse), follow))
    }))
}

/// Where one client's stream of the log is.
struct Follow {
    state: Weak<AppState>,
    stopping: tokio_util::sync::CancellationToken,
    tails: Arc<LogTails>,
    id: SessionId,
    sent: u64,
    page: std::vec::IntoIter<StoredEvent>,
    /// Changes when the session's log may have new events.
    wakes: watch::Receiver<u64>,
}

impl Follow {
    /// The next event, waiting for one; `None` once the stream ends (the server stops, the
    /// session is deleted, the store fails).
    async fn next(&mut self) -> Option<StoredEvent> {
        loop {
            if let Some(event) = self.page.next() {
                return Some(event);
            }
            // Seen before the read: a wake from now on is for events the read may miss.
            let seen = *self.wakes.borrow_and_update();
            match self.tails.after(&self.id, self.sent) {
                FromTail::Events(events) => {
                    self.page = events.into_iter();
                    continue;
                }
                FromTail::UpToDate => {}
                FromTail::Unknown => {
                    let store = Arc::clone(&self.state.upgrade()?.store);
                    match store.events_after(&self.id, self.sent, PAGE).await {
                        Ok(page) if !page.is_empty() => {
                            self.page = page.into_iter();
                            continue;
                        }
                        // At the end: from now on the node's tail can follow it.
                        Ok(_) => self.tails.reached_end(&self.id, self.sent, seen),
                        Err(StoreError::SessionNotFound(_)) => return None,
                        Err(e) => {
                            tracing::warn!(session = %self.id, error = %e, "a stream could not read the event log");
                            return None;
                        }
                    }
                }
            }
            // Nothing new: wait for a notice of this session's log (or of missed ones).
            tokio::select! {
                _ = self.stopping.cancelled() => return None,
                changed = self.wakes.changed() => changed.ok()?,
            }
        }
    }
}

/// Takes over, every second, the sessions whose node died (their lease expired unreleased),
/// until the server is gone or stops.
pub(crate) fn start_sweeping(state: &Arc<AppState>) {
    state.every(SWEEP_EVERY, |state| async move { sweep(&state).await });
}

/// One look for orphaned sessions.
async fn sweep(state: &Arc<AppState>) {
    let expired = match state.store.expired_leases().await {
        Ok(expired) => expired,
        Err(e) => {
            tracing::warn!(error = %e, "could not look for sessions whose node died");
            return;
        }
    };
    for id in expired {
        match state.live(&id).await {
            Ok(session) => {
                tracing::info!(session = %id, resumed = session.is_replying(), "took over a session whose node died");
                state.unload_if_idle(&id).await;
            }
            // Another node was quicker, or the session is gone.
            Err(e) if e.is_session_busy() || e.is_not_found() => {}
            Err(e) => tracing::warn!(session = %id, error = %e, "could not take over a session"),
        }
    }
}
