//! What an agent tells the world while it works.

use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

pub use crate::protocol::{AgentEvent, CancelTarget, StopReason};

/// Fans events out to subscribers.
#[derive(Default)]
pub(crate) struct EventHub {
    subscribers: Mutex<Vec<mpsc::UnboundedSender<AgentEvent>>>,
    count: AtomicUsize,
}

impl EventHub {
    pub(crate) fn has_subscribers(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn subscribe(&self) -> EventStream {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.push(tx);
        self.count.store(subscribers.len(), Ordering::Relaxed);
        EventStream { rx }
    }

    pub(crate) fn emit(&self, event: &AgentEvent) {
        if !self.has_subscribers() {
            return;
        }
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.retain(|s| s.send(event.clone()).is_ok());
        self.count.store(subscribers.len(), Ordering::Relaxed);
    }
}

/// A stream of [`AgentEvent`]s, from [`ReActAgent::subscribe`](super::ReActAgent::subscribe).
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<AgentEvent>,
}

impl EventStream {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<AgentEvent>) -> Self {
        EventStream { rx }
    }

    /// The next event, or `None` once the sender side is gone.
    pub async fn recv(&mut self) -> Option<AgentEvent> {
        self.rx.recv().await
    }

    /// An event that is already waiting, without blocking.
    pub fn try_recv(&mut self) -> Option<AgentEvent> {
        self.rx.try_recv().ok()
    }
}

impl Stream for EventStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        self.rx.poll_recv(cx)
    }
}
