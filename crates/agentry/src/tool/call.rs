//! The life of one tool call: its state machine (spec `cancellation.md` 3.0), its cancellation
//! token and its `on_cancel` slot.
//!
//! Every transition happens under one lock, so when completion, cancellation, timeout and
//! decline race, the first committed transition wins and the others change nothing (S1, S2).

use crate::CallId;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The model-visible result of a declined call (spec 3.0).
pub const DECLINED: &str =
    "The user declined this tool call, so it was not run. Do not call it again unless the user asks for it.";
/// The model-visible result of a call cancelled before it started.
pub const CANCELLED_BEFORE_START: &str =
    "The user cancelled this tool call before it started, so it was not run.";
/// The model-visible result of a call cancelled while running, without partial results.
pub const CANCELLED_RUNNING: &str =
    "The user cancelled this tool call while it was running. It may have partly run; no result is available.";
/// The model-visible result of a call stopped because the agent stopped (e.g. a restart).
pub const INTERRUPTED_RESTART: &str = "This tool call was interrupted because the agent stopped before it finished. \
     It may have partly run; no result is available.";

/// The model-visible result of a timed-out call (spec T2).
pub fn timed_out_text(timeout: Duration, partial: Option<&str>) -> String {
    let secs = timeout.as_secs_f64();
    let secs = if secs.fract() == 0.0 {
        format!("{secs:.0}")
    } else {
        format!("{secs}")
    };
    let mut text =
        format!("This tool call timed out after {secs} s and was stopped. It may have partly run.");
    if let Some(partial) = partial {
        text.push_str("\nPartial result:\n");
        text.push_str(partial);
    }
    text
}

/// The model-visible result of a declined call: `DECLINED`, plus the user's reason.
pub fn declined_text(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!("{DECLINED}\nUser's reason: {reason}"),
        None => DECLINED.to_owned(),
    }
}

pub use crate::protocol::{CancelCause, CancelOutcome, CancelPhase, CancelReason, ToolCallState};

/// A callback that hands back partial results when the call is cancelled.
pub type OnCancel = Box<dyn FnOnce() -> Option<String> + Send + 'static>;

/// Where a call is in its life.
pub(crate) enum Phase {
    PendingApproval,
    Queued,
    Running,
    /// A running call was cancelled or timed out: the outcome is decided, results are discarded,
    /// and `on_cancel` (taken from the slot at the moment of the cancel) is to be run.
    Stopping(CancelCause),
    Finished(ToolCallState),
}

struct Inner {
    phase: Phase,
    on_cancel: Option<OnCancel>,
    /// The callback returns within a bound of its own (the runtime's MCP notification), so it
    /// needs no `on_cancel` slot (L4).
    on_cancel_bounded: bool,
    /// When the body last reported progress (renewable timeouts, T4).
    progressed_at: Option<tokio::time::Instant>,
}

/// One call's shared record: state, token and `on_cancel` slot.
pub(crate) struct CallRecord {
    pub(crate) call_id: CallId,
    pub(crate) tool_name: String,
    pub(crate) token: CancellationToken,
    inner: Mutex<Inner>,
}

/// The result of committing a cancel on a record.
pub(crate) enum CancelCommit {
    /// Cancelled before start: the record is finished.
    BeforeStart { was_pending_approval: bool },
    /// Cancelled while running: the record is stopping.
    Running,
    /// Nothing changed.
    Refused(CancelOutcome),
}

impl CallRecord {
    pub(crate) fn new(
        call_id: CallId,
        tool_name: String,
        token: CancellationToken,
        pending_approval: bool,
    ) -> Arc<Self> {
        Arc::new(CallRecord {
            call_id,
            tool_name,
            token,
            inner: Mutex::new(Inner {
                phase: if pending_approval {
                    Phase::PendingApproval
                } else {
                    Phase::Queued
                },
                on_cancel: None,
                on_cancel_bounded: false,
                progressed_at: None,
            }),
        })
    }

    // Every mutation below completes before anything can panic, so a poisoned lock still holds
    // consistent data.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The terminal state, if the call has one.
    pub(crate) fn terminal(&self) -> Option<ToolCallState> {
        match &self.lock().phase {
            Phase::Finished(state) => Some(state.clone()),
            _ => None,
        }
    }

    pub(crate) fn is_pending_approval(&self) -> bool {
        matches!(self.lock().phase, Phase::PendingApproval)
    }

    pub(crate) fn is_running(&self) -> bool {
        matches!(self.lock().phase, Phase::Running)
    }

    /// Queued → PendingApproval: the call as it will run needs approval (decided after the
    /// `pre_acting` hooks, spec S3). False when it was cancelled meanwhile.
    pub(crate) fn request_approval(&self) -> bool {
        let mut inner = self.lock();
        if matches!(inner.phase, Phase::Queued) {
            inner.phase = Phase::PendingApproval;
            true
        } else {
            false
        }
    }

    /// PendingApproval → Queued (approved).
    pub(crate) fn approve(&self) -> bool {
        let mut inner = self.lock();
        if matches!(inner.phase, Phase::PendingApproval) {
            inner.phase = Phase::Queued;
            true
        } else {
            false
        }
    }

    /// Queued → Running.
    pub(crate) fn start(&self) -> bool {
        let mut inner = self.lock();
        if matches!(inner.phase, Phase::Queued) {
            inner.phase = Phase::Running;
            true
        } else {
            false
        }
    }

    /// A non-terminal, non-stopping call → `state`. Clears the `on_cancel` slot (X4).
    pub(crate) fn finish(&self, state: ToolCallState) -> bool {
        let mut inner = self.lock();
        match inner.phase {
            Phase::PendingApproval | Phase::Queued | Phase::Running => {
                inner.phase = Phase::Finished(state);
                inner.on_cancel = None;
                true
            }
            Phase::Stopping(_) | Phase::Finished(_) => false,
        }
    }

    /// Stopping → its final state, once `on_cancel` has answered.
    pub(crate) fn settle(&self, partial: bool) -> Option<ToolCallState> {
        let mut inner = self.lock();
        let state = match &inner.phase {
            Phase::Stopping(CancelCause::TimedOut { .. }) => ToolCallState::TimedOut { partial },
            Phase::Stopping(cause) => ToolCallState::Cancelled {
                phase: CancelPhase::Running,
                partial,
                reason: cause.reason().unwrap_or(CancelReason::Reply),
            },
            _ => return None,
        };
        inner.phase = Phase::Finished(state.clone());
        Some(state)
    }

    /// Commits a cancel (C1-C3). `announce` runs under the lock once the cancel is accepted, so
    /// its event comes before any `ToolFinished` of this call (C7); the token is cancelled after.
    pub(crate) fn cancel(&self, reason: CancelReason, announce: impl FnOnce()) -> CancelCommit {
        let mut inner = self.lock();
        let commit = match &inner.phase {
            Phase::PendingApproval | Phase::Queued => {
                let was_pending_approval = matches!(inner.phase, Phase::PendingApproval);
                inner.phase = Phase::Finished(ToolCallState::Cancelled {
                    phase: CancelPhase::BeforeStart,
                    partial: false,
                    reason,
                });
                inner.on_cancel = None;
                CancelCommit::BeforeStart { was_pending_approval }
            }
            Phase::Running => {
                inner.phase = Phase::Stopping(CancelCause::from(reason));
                CancelCommit::Running
            }
            // Its partial flag is known only once `on_cancel` has answered (defect: it used to be
            // reported as `partial: false` whatever `on_cancel` gave).
            Phase::Stopping(CancelCause::TimedOut { .. }) => {
                return CancelCommit::Refused(CancelOutcome::AlreadyTimingOut);
            }
            Phase::Stopping(_) => {
                return CancelCommit::Refused(CancelOutcome::AlreadyCancelled);
            }
            Phase::Finished(ToolCallState::Cancelled { .. }) => {
                return CancelCommit::Refused(CancelOutcome::AlreadyCancelled);
            }
            Phase::Finished(state) => {
                return CancelCommit::Refused(CancelOutcome::AlreadyFinished(Some(state.clone())));
            }
        };
        announce();
        drop(inner);
        self.token.cancel();
        commit
    }

    /// Running → Stopping(timeout) (T2); false when another transition won (T3).
    pub(crate) fn time_out(&self, after: Duration) -> bool {
        let mut inner = self.lock();
        if !matches!(inner.phase, Phase::Running) {
            return false;
        }
        inner.phase = Phase::Stopping(CancelCause::TimedOut { after });
        drop(inner);
        self.token.cancel();
        true
    }

    /// The callback registered for this call, taken out of the slot (at most once, X5).
    pub(crate) fn take_on_cancel(&self) -> Option<OnCancel> {
        self.take_on_cancel_bounded().map(|(callback, _)| callback)
    }

    /// [`Self::take_on_cancel`], and whether the callback returns within a bound of its own.
    pub(crate) fn take_on_cancel_bounded(&self) -> Option<(OnCancel, bool)> {
        let mut inner = self.lock();
        let bounded = std::mem::take(&mut inner.on_cancel_bounded);
        inner.on_cancel.take().map(|callback| (callback, bounded))
    }

    /// Registers `on_cancel` if the call is running (X2, X3); `bounded` when it returns within
    /// a bound of its own.
    pub(crate) fn set_on_cancel(&self, callback: OnCancel, bounded: bool) -> bool {
        let mut inner = self.lock();
        if matches!(inner.phase, Phase::Running) {
            inner.on_cancel = Some(callback);
            inner.on_cancel_bounded = bounded;
            true
        } else {
            false
        }
    }

    /// [`Self::set_on_cancel`] of a callback with no bound of its own, as tools register them.
    #[cfg(test)]
    pub(crate) fn set_on_cancel_box(&self, callback: OnCancel) -> bool {
        self.set_on_cancel(callback, false)
    }

    /// Removes the registered `on_cancel` if the call is running.
    pub(crate) fn clear_on_cancel(&self) {
        let mut inner = self.lock();
        if matches!(inner.phase, Phase::Running) {
            inner.on_cancel = None;
        }
    }

    /// Runs `f` while the call is running, under the lock (so nothing after a cancel slips out),
    /// and notes that the call made progress.
    pub(crate) fn while_running(&self, f: impl FnOnce()) -> bool {
        let mut inner = self.lock();
        if matches!(inner.phase, Phase::Running) {
            inner.progressed_at = Some(tokio::time::Instant::now());
            f();
            true
        } else {
            false
        }
    }

    /// Runs `f` while the call waits for approval, under the lock, so that a cancel cannot
    /// commit in between; `None` when it no longer waits.
    pub(crate) fn while_pending_approval<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let inner = self.lock();
        matches!(inner.phase, Phase::PendingApproval).then(f)
    }

    /// When the body last reported progress.
    pub(crate) fn progressed_at(&self) -> Option<tokio::time::Instant> {
        self.lock().progressed_at
    }

    /// Why the token was cancelled, while the call is stopping or once it ended cancelled.
    pub(crate) fn cancel_cause(&self) -> Option<CancelCause> {
        match &self.lock().phase {
            Phase::Stopping(cause) => Some(*cause),
            Phase::Finished(ToolCallState::Cancelled { reason, .. }) => Some(CancelCause::from(*reason)),
            _ => None,
        }
    }
}

// The property and race tests of the state machine (S1, S2, X2, X4).
#[cfg(test)]
#[path = "call_props.rs"]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Arc<CallRecord> {
        CallRecord::new("c".into(), "t".into(), CancellationToken::new(), false)
    }

    #[test]
    fn s1_terminal_state_never_changes() {
        let r = record();
        assert!(r.start());
        assert!(r.finish(ToolCallState::Completed));
        assert!(!r.finish(ToolCallState::Failed));
        assert!(matches!(
            r.cancel(CancelReason::User, || {}),
            CancelCommit::Refused(CancelOutcome::AlreadyFinished(Some(ToolCallState::Completed)))
        ));
        assert!(!r.time_out(Duration::from_secs(1)));
        assert_eq!(r.terminal(), Some(ToolCallState::Completed));
        assert!(
            !r.token.is_cancelled(),
            "a refused cancel does not touch the token"
        );
    }

    #[test]
    fn cancel_before_start_and_while_running() {
        let queued = record();
        assert!(matches!(
            queued.cancel(CancelReason::User, || {}),
            CancelCommit::BeforeStart {
                was_pending_approval: false
            }
        ));
        assert!(!queued.start(), "a cancelled call never starts (P1)");
        let running = record();
        running.start();
        assert!(running.set_on_cancel_box(Box::new(|| Some("partial".into()))));
        assert!(matches!(
            running.cancel(CancelReason::Reply, || {}),
            CancelCommit::Running
        ));
        assert!(running.token.is_cancelled());
        assert!(
            !running.finish(ToolCallState::Completed),
            "a late completion loses (S2)"
        );
        assert!(
            !running.set_on_cancel_box(Box::new(|| None)),
            "no registration after the cancel (X2)"
        );
        assert_eq!(
            running.take_on_cancel().map(|f| f()),
            Some(Some("partial".to_owned()))
        );
        assert!(running.take_on_cancel().is_none(), "taken once (X5)");
        assert!(matches!(
            running.cancel(CancelReason::User, || {}),
            CancelCommit::Refused(CancelOutcome::AlreadyCancelled)
        ));
        assert_eq!(
            running.settle(true),
            Some(ToolCallState::Cancelled {
                phase: CancelPhase::Running,
                partial: true,
                reason: CancelReason::Reply
            })
        );
    }

    #[test]
    fn texts_are_exact() {
        assert_eq!(
            timed_out_text(Duration::from_secs(30), None),
            "This tool call timed out after 30 s and was stopped. It may have partly run."
        );
        assert_eq!(
            timed_out_text(Duration::from_millis(1500), Some("p")),
            "This tool call timed out after 1.5 s and was stopped. It may have partly run.\nPartial result:\np"
        );
        assert_eq!(
            declined_text(Some("  too risky ")),
            format!("{DECLINED}\nUser's reason: too risky")
        );
        assert_eq!(declined_text(Some(" ")), DECLINED);
    }
}
