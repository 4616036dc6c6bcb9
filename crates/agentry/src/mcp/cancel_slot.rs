//! The cancel notification of one MCP request (M1, M4, L4).

use std::future::Future;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Context;
use std::time::Duration;

use rmcp::model::{CancelledNotification, CancelledNotificationParam, RequestId};
use rmcp::{Peer, RoleClient};

/// The cancel notification of one request: enqueued at most once, never after the response
/// (M1, M4), and before `on_cancel` returns, hence before the agent records the cancelled
/// result (L4).
pub(crate) struct CancelSlot {
    state: Mutex<Slot>,
    handed_over: Condvar,
    /// Where the rest of a send goes once the notification is queued.
    runtime: tokio::runtime::Handle,
    /// How long a cancel waits for a request being handed over: within the agent's
    /// `on_cancel` budget, so the notification is queued before the agent stops waiting.
    handover_wait: Duration,
    /// Called once per notification queued (the client's count, for tests and `mcp list`).
    on_queued: Box<dyn Fn() + Send + Sync>,
}

enum Slot {
    /// The request is on its way to the transport; a cancel now waits for its id.
    Sending,
    /// The request went out: a cancel notifies the server.
    Sent { peer: Peer<RoleClient>, id: RequestId },
    /// Answered, notified, or never sent: nothing more to send.
    Closed,
}

/// The longest a cancel waits for a request that is being handed to the transport.
const HANDOVER_WAIT: Duration = Duration::from_millis(100);

impl CancelSlot {
    /// A slot whose cancel runs within `budget` (the agent's `on_cancel` budget): it waits at
    /// most half of it for a request being handed over.
    pub(crate) fn new(
        runtime: tokio::runtime::Handle,
        budget: Duration,
        on_queued: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        CancelSlot {
            state: Mutex::new(Slot::Sending),
            handed_over: Condvar::new(),
            runtime,
            handover_wait: HANDOVER_WAIT.min(budget / 2),
            on_queued: Box::new(on_queued),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The request was handed to the transport; `cancelled`: the call was cancelled meanwhile.
    pub(crate) fn sent(&self, peer: Peer<RoleClient>, id: RequestId, cancelled: Option<&'static str>) {
        let mut state = self.lock();
        if matches!(*state, Slot::Sending) {
            *state = match cancelled {
                Some(reason) => {
                    self.enqueue(&peer, id, reason);
                    Slot::Closed
                }
                None => Slot::Sent { peer, id },
            };
        }
        self.handed_over.notify_all();
    }

    /// No notification may follow: the response came, or the request was never sent.
    /// Whether the caller may use the response (no cancel notification went out first).
    pub(crate) fn close(&self) -> bool {
        let mut state = self.lock();
        let usable = !matches!(*state, Slot::Closed);
        *state = Slot::Closed;
        self.handed_over.notify_all();
        usable
    }

    /// Cancels the request: enqueues `notifications/cancelled` if it went out and was not
    /// answered. Blocks (at most the hand-over wait) while the request is being handed over, so
    /// the notification is queued before this returns; otherwise the request's sender sends it.
    pub(crate) fn cancel(&self, reason: &'static str) {
        let mut state = self.lock();
        if matches!(*state, Slot::Sending) {
            state = self
                .handed_over
                .wait_timeout_while(state, self.handover_wait, |s| matches!(s, Slot::Sending))
                .map(|(state, _)| state)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        // Still `Sending` after the wait: `sent` finds the context cancelled and notifies.
        if matches!(*state, Slot::Sent { .. })
            && let Slot::Sent { peer, id } = std::mem::replace(&mut *state, Slot::Closed)
        {
            self.enqueue(&peer, id, reason);
        }
    }

    /// Puts the notification in rmcp's outgoing queue now, without waiting for the write:
    /// the first poll of `send_notification` enqueues it (the queue has room unless 1024
    /// messages wait), the rest only waits for the transport's confirmation and goes to the
    /// runtime.
    fn enqueue(&self, peer: &Peer<RoleClient>, id: RequestId, reason: &'static str) {
        let notification =
            CancelledNotification::new(CancelledNotificationParam::new(Some(id), Some(reason.to_owned())));
        let peer = peer.clone();
        let mut send = Box::pin(tokio::task::unconstrained(async move {
            if let Err(e) = peer.send_notification(notification.into()).await {
                tracing::debug!(error = %e, "could not send notifications/cancelled");
            }
        }));
        let waker = futures::task::noop_waker();
        if send.as_mut().poll(&mut Context::from_waker(&waker)).is_pending() {
            self.runtime.spawn(send);
        }
        (self.on_queued)();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc as std_mpsc;

    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;

    /// A connected rmcp client whose server side answers `initialize` and then hands every
    /// line it reads to the returned channel; both run on `runtime`.
    fn connected_peer(runtime: &tokio::runtime::Runtime) -> (Peer<RoleClient>, std_mpsc::Receiver<String>) {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let (lines_tx, lines_rx) = std_mpsc::channel();
        runtime.spawn(async move {
            let (read, mut write) = tokio::io::split(server_io);
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let message: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if message["method"] == "initialize" {
                    let answer = serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {
                            "protocolVersion": "2025-03-26",
                            "capabilities": {},
                            "serverInfo": {"name": "lines", "version": "0"}
                        }
                    });
                    let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
                    continue;
                }
                let _ = lines_tx.send(line);
            }
        });
        let (read, write) = tokio::io::split(client_io);
        let service = runtime
            .block_on(rmcp::serve_client((), (read, write)))
            .unwrap_or_else(|e| panic!("the client did not connect: {e}"));
        let peer = service.peer().clone();
        // The running service keeps the connection; it ends with the runtime.
        runtime.spawn(async move { service.waiting().await });
        (peer, lines_rx)
    }

    /// L4: a cancel racing the hand-over never waits as long as the agent waits for
    /// `on_cancel`, so the notification is queued before the agent gives up on the callback.
    #[test]
    fn l4_the_handover_wait_stays_within_the_on_cancel_budget() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        for budget in [
            Duration::from_millis(10),
            Duration::from_millis(100),
            Duration::from_secs(5),
        ] {
            let slot = CancelSlot::new(runtime.handle().clone(), budget, || {});
            assert!(slot.handover_wait < budget, "{budget:?}");
            assert!(slot.handover_wait <= HANDOVER_WAIT, "{budget:?}");
        }
    }

    /// L4, decisively: `cancel` puts the notification on the connection before it returns. The
    /// slot's own runtime is never driven, so a notification merely handed to a task there
    /// would never leave; the connection's runtime delivers what was queued.
    #[test]
    fn l4_cancel_queues_the_notification_before_it_returns() {
        let connection = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let (peer, lines) = connected_peer(&connection);
        let idle = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let queued = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&queued);
        let slot = CancelSlot::new(idle.handle().clone(), Duration::from_millis(100), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        slot.sent(peer, RequestId::Number(7), None);
        slot.cancel("user cancelled");
        assert_eq!(queued.load(Ordering::SeqCst), 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let cancel = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.contains("notifications/cancelled") => break line,
                Ok(_) => continue,
                Err(e) => panic!("no notifications/cancelled reached the server: {e}"),
            }
        };
        assert!(cancel.contains("\"requestId\":7"), "{cancel}");
        assert!(cancel.contains("user cancelled"), "{cancel}");
        // A second cancel, or a late response, sends nothing more (M1, M4).
        slot.cancel("user cancelled");
        assert!(
            !slot.close(),
            "the response must not be used after the notification"
        );
        assert_eq!(queued.load(Ordering::SeqCst), 1);
        connection.shutdown_background();
    }
}
