//! Sessions unloaded while idle, on a store of this node alone (a store shared with other
//! nodes unloads a session as soon as its reply ends, see [`crate::cluster`]).
//!
//! A loaded session holds its agent, a copy of its conversation and its writer lease; a server
//! of thousands of sessions, most of them idle, would hold them all. A session unused for the
//! idle time (no request, no reply) is unloaded: its events are written, its memory and lease
//! given back. Its clients' streams stay open: they read the log's core, which the session's
//! next load continues, so they get the next reply's events with the ids following on.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, Weak};

use agentry_store::SessionId;

use crate::events::LogCore;
use crate::state::{AppState, LiveSession};

/// The default idle time of `agentry serve`.
pub const DEFAULT_IDLE_UNLOAD: std::time::Duration = std::time::Duration::from_secs(60);

/// The log core of session `id` from its previous load, if a client still streams from it.
pub(crate) fn core_of(state: &AppState, id: &SessionId) -> Option<Arc<LogCore>> {
    cores(state).get(id).and_then(Weak::upgrade)
}

/// Keeps the log core of `session`, just loaded as `id`, for its next load, and unloads the
/// session once it was not used for the server's idle time.
pub(crate) fn watch(state: &Arc<AppState>, id: &SessionId, session: &Arc<LiveSession>) {
    if state.is_clustered() {
        return;
    }
    {
        let mut cores = cores(state);
        cores.retain(|_, core| core.strong_count() > 0);
        cores.insert(id.clone(), Arc::downgrade(session.events.core()));
    }
    let Some(idle) = state.idle_unload else {
        return;
    };
    let stopping = state.stopping.clone();
    let (state, session, id) = (Arc::downgrade(state), Arc::downgrade(session), id.clone());
    tokio::spawn(async move {
        let mut seen = match session.upgrade() {
            Some(session) => session.uses(),
            None => return,
        };
        loop {
            tokio::select! {
                _ = stopping.cancelled() => return,
                _ = tokio::time::sleep(idle) => {}
            }
            let (Some(state), Some(session)) = (state.upgrade(), session.upgrade()) else {
                return;
            };
            let uses = session.uses();
            if uses != seen || session.is_replying() {
                seen = uses;
                continue;
            }
            state.unload_unused(&id, session).await;
            // Unloaded, or in use after all: a load watches it afresh.
            if state.loaded(&id).await.is_none() {
                return;
            }
        }
    });
}

/// Ends the streams of the sessions unloaded while idle (the server stops).
pub(crate) fn close_unloaded(state: &AppState) {
    let cores: Vec<Arc<LogCore>> = cores(state).values().filter_map(Weak::upgrade).collect();
    for core in cores {
        core.close();
    }
}

fn cores(state: &AppState) -> std::sync::MutexGuard<'_, HashMap<SessionId, Weak<LogCore>>> {
    state.cores.lock().unwrap_or_else(PoisonError::into_inner)
}
