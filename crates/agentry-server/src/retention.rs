//! `--retain`: what is older than the retention goes, so that a server's store stays bounded.

use std::sync::Arc;
use std::time::Duration;

use crate::state::AppState;

/// The longest wait between two purges.
const MAX_PERIOD: Duration = Duration::from_secs(3600);

/// Purges at once, then every quarter of `retain` (at most hourly), until the server stops.
pub(crate) fn start(state: &Arc<AppState>, retain: Duration) {
    let Ok(age) = chrono::Duration::from_std(retain) else {
        return; // longer than anything stored
    };
    let period = (retain / 4).clamp(Duration::from_millis(100), MAX_PERIOD);
    state.every(period, move |state| async move {
        match state.store.purge(chrono::Utc::now() - age).await {
            Ok(purged) if purged.sessions + purged.events > 0 => tracing::info!(
                sessions = purged.sessions,
                events = purged.events,
                "deleted what is older than the retention"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not delete what is older than the retention"),
        }
    });
}
