//! What other threads tell a running script, read by the engine's interrupt handler.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::ScriptError;

/// How long a script that keeps the engine busy gets to yield before it is interrupted so that
/// its `onCancel` can answer a cancel: none, as the body's result is ignored after a cancel
/// anyway, and the engine asks its interrupt handler only every few milliseconds.
const CANCEL_YIELD: Duration = Duration::ZERO;
/// How long `onCancel` itself may run.
const ON_CANCEL_LIMIT: Duration = Duration::from_secs(1);

/// Shared between a run's thread, its interrupt handler and whoever stops or cancels it.
#[derive(Debug)]
pub(crate) struct Signals {
    epoch: Instant,
    deadline: Option<Instant>,
    /// The result is no longer wanted: stop at once.
    abandoned: AtomicBool,
    /// When (nanoseconds after `epoch`, plus one) a cancel started waiting for `onCancel`;
    /// 0 when none waits.
    cancel_waiting: AtomicU64,
    /// When `onCancel` started running; 0 when it does not run.
    in_on_cancel: AtomicU64,
    /// The body was interrupted: it will never settle.
    body_stopped: AtomicBool,
    /// The script has an `onCancel`.
    on_cancel_registered: AtomicBool,
    /// `onCancel` was asked (the agent asks once).
    on_cancel_asked: AtomicBool,
}

impl Signals {
    /// Signals for a run that may take until `deadline`.
    pub(crate) fn new(deadline: Option<Instant>) -> Self {
        Signals {
            epoch: Instant::now(),
            deadline,
            abandoned: AtomicBool::new(false),
            cancel_waiting: AtomicU64::new(0),
            in_on_cancel: AtomicU64::new(0),
            body_stopped: AtomicBool::new(false),
            on_cancel_registered: AtomicBool::new(false),
            on_cancel_asked: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    fn older_than(&self, since: u64, limit: Duration) -> bool {
        since != 0 && self.now().saturating_sub(since) > u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether the engine should stop the code it runs now.
    pub(crate) fn should_interrupt(&self) -> bool {
        if self.abandoned.load(Ordering::Relaxed) || self.past_deadline() {
            self.body_stopped.store(true, Ordering::Relaxed);
            return true;
        }
        let on_cancel = self.in_on_cancel.load(Ordering::Relaxed);
        if on_cancel != 0 {
            return self.older_than(on_cancel, ON_CANCEL_LIMIT);
        }
        if self.older_than(self.cancel_waiting.load(Ordering::Relaxed), CANCEL_YIELD) {
            // The body's result would be ignored anyway (the call is cancelled): stop it so that
            // the engine is free to run `onCancel`.
            self.body_stopped.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    pub(crate) fn set_on_cancel_registered(&self, registered: bool) {
        self.on_cancel_registered.store(registered, Ordering::Relaxed);
    }

    /// Whether the agent will still ask the script's `onCancel`.
    pub(crate) fn on_cancel_pending(&self) -> bool {
        self.on_cancel_registered.load(Ordering::Relaxed) && !self.on_cancel_asked.load(Ordering::Relaxed)
    }

    /// The result is no longer wanted.
    pub(crate) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    /// A cancel waits for `onCancel` (its request is already queued).
    pub(crate) fn cancel_requested(&self) {
        self.cancel_waiting.store(self.now(), Ordering::Relaxed);
    }

    pub(crate) fn on_cancel_started(&self) {
        self.on_cancel_asked.store(true, Ordering::Relaxed);
        self.cancel_waiting.store(0, Ordering::Relaxed);
        self.in_on_cancel.store(self.now(), Ordering::Relaxed);
    }

    pub(crate) fn on_cancel_ended(&self) {
        self.in_on_cancel.store(0, Ordering::Relaxed);
    }

    /// The body was interrupted, or the result is no longer wanted.
    pub(crate) fn body_stopped(&self) -> bool {
        self.body_stopped.load(Ordering::Relaxed) || self.abandoned.load(Ordering::Relaxed)
    }

    pub(crate) fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|deadline| Instant::now() >= deadline)
    }

    pub(crate) fn until_deadline(&self) -> Option<Duration> {
        self.deadline
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// `error`, unless the script was stopped (then its error is the stop's doing) or ran out
    /// of memory.
    pub(crate) fn stopped_or(
        &self,
        error: ScriptError,
        out_of_memory: impl Fn() -> ScriptError,
    ) -> ScriptError {
        if self.body_stopped() || self.past_deadline() {
            return ScriptError::Stopped;
        }
        match &error {
            ScriptError::Threw(text) if text.contains("out of memory") => out_of_memory(),
            _ => error,
        }
    }
}
