//! Progress of one call: notifications to a client that asked for them with a progress token,
//! or the status message of the task the call runs as.

use agentry::message::truncate_chars;
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use rmcp::task_manager::TaskContext;

/// Longest text of one progress message; longer texts are cut (the client shows them as a
/// status line, and the final result carries everything).
const MESSAGE_CHARS: usize = 2_000;

/// Sends a call's progress: each message a step further.
pub(crate) struct Progress {
    target: Option<(Peer<RoleServer>, ProgressToken)>,
    task: Option<TaskContext>,
    sent: u32,
}

impl Progress {
    /// Progress for the request of `context`: nothing is sent unless it carries a token.
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Self {
        Self {
            target: context
                .meta
                .get_progress_token()
                .map(|token| (context.peer.clone(), token)),
            task: None,
            sent: 0,
        }
    }

    /// Progress of a call that runs as `task`: its status message, which `tasks/get` shows.
    pub(crate) fn of_task(task: TaskContext) -> Self {
        Self {
            target: None,
            task: Some(task),
            sent: 0,
        }
    }

    /// Sends `message`, cut to a status line's length, as the next step. A client gone away is
    /// not an error of the call: the call still ends as it would.
    pub(crate) async fn send(&mut self, message: &str) {
        self.send_whole(&truncate_chars(message, MESSAGE_CHARS)).await;
    }

    /// Sends `message` whole as the next step: a cancelled call's partial result, which the
    /// client gets no other way.
    pub(crate) async fn send_whole(&mut self, message: &str) {
        if let Some(task) = &self.task {
            task.set_status_message(message);
            return;
        }
        let Some((peer, token)) = &self.target else {
            return;
        };
        self.sent += 1;
        let param = ProgressNotificationParam::new(token.clone(), f64::from(self.sent)).with_message(message);
        if let Err(e) = peer.notify_progress(param).await {
            tracing::debug!(error = %e, "a progress notification was not sent");
        }
    }
}
