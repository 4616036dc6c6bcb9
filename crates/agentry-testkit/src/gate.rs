//! Gates: points in a scripted stream where the fake server waits until the test opens them.

use std::sync::Arc;

use tokio::sync::watch;

/// A point in a stream where the server waits until the test opens it.
#[derive(Debug, Clone)]
pub struct Gate {
    open: Arc<watch::Sender<bool>>,
    reached: Arc<watch::Sender<bool>>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Gate {
            open: Arc::new(watch::channel(false).0),
            reached: Arc::new(watch::channel(false).0),
        }
    }

    /// Lets the stream go on.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Resolves once a stream is waiting at this gate (or has passed it).
    pub async fn reached(&self) {
        let mut rx = self.reached.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    pub(crate) async fn wait(&self) {
        self.reached.send_replace(true);
        let mut rx = self.open.subscribe();
        let _ = rx.wait_for(|o| *o).await;
    }
}
