//! Property and race tests of the call state machine: random interleavings compared with a plain
//! model (S1), racing threads (S1, S2), and the `on_cancel` slot (X2, X4).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;

fn record() -> Arc<CallRecord> {
    CallRecord::new("c".into(), "t".into(), CancellationToken::new(), false)
}

/// xorshift64*: a seeded generator, so a failing interleaving can be replayed by its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// The state machine of spec 3.0, written out plainly, to compare the record against.
#[derive(Debug, Clone, PartialEq)]
enum Model {
    Pending,
    Queued,
    Running,
    Stopping(Option<CancelReason>),
    Finished(ToolCallState),
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Approve,
    Start,
    Complete,
    Fail,
    Decline,
    Cancel(CancelReason),
    TimeOut,
    Settle(bool),
    Register,
}

fn random_op(rng: &mut Rng) -> Op {
    match rng.below(9) {
        0 => Op::Approve,
        1 => Op::Start,
        2 => Op::Complete,
        3 => Op::Fail,
        4 => Op::Decline,
        5 => Op::Cancel(if rng.below(2) == 0 {
            CancelReason::User
        } else {
            CancelReason::Reply
        }),
        6 => Op::TimeOut,
        7 => Op::Settle(rng.below(2) == 0),
        _ => Op::Register,
    }
}

/// Applies `op` to the record and to the model; panics when they disagree.
fn step(r: &CallRecord, model: &mut Model, op: Op, seed: u64) {
    let declined = ToolCallState::Declined { reason: None };
    let context = format!("seed {seed}, {op:?} in {model:?}");
    match op {
        Op::Approve => {
            let expected = *model == Model::Pending;
            assert_eq!(r.approve(), expected, "{context}");
            if expected {
                *model = Model::Queued;
            }
        }
        Op::Start => {
            let expected = *model == Model::Queued;
            assert_eq!(r.start(), expected, "{context}");
            if expected {
                *model = Model::Running;
            }
        }
        Op::Complete | Op::Fail | Op::Decline => {
            let state = match op {
                Op::Complete => ToolCallState::Completed,
                Op::Fail => ToolCallState::Failed,
                _ => declined.clone(),
            };
            let expected = matches!(model, Model::Pending | Model::Queued | Model::Running);
            assert_eq!(r.finish(state.clone()), expected, "{context}");
            if expected {
                *model = Model::Finished(state);
            }
        }
        Op::Cancel(reason) => {
            let mut announced = 0;
            let commit = r.cancel(reason, || announced += 1);
            match model.clone() {
                Model::Pending | Model::Queued => {
                    assert!(
                        matches!(commit, CancelCommit::BeforeStart { was_pending_approval }
                            if was_pending_approval == (*model == Model::Pending)),
                        "{context}"
                    );
                    *model = Model::Finished(ToolCallState::Cancelled {
                        phase: CancelPhase::BeforeStart,
                        partial: false,
                        reason,
                    });
                }
                Model::Running => {
                    assert!(matches!(commit, CancelCommit::Running), "{context}");
                    *model = Model::Stopping(Some(reason));
                }
                Model::Stopping(Some(_)) | Model::Finished(ToolCallState::Cancelled { .. }) => {
                    assert!(
                        matches!(commit, CancelCommit::Refused(CancelOutcome::AlreadyCancelled)),
                        "{context}"
                    );
                }
                // The timeout won; its partial flag is not known until on_cancel answers.
                Model::Stopping(None) => assert!(
                    matches!(commit, CancelCommit::Refused(CancelOutcome::AlreadyTimingOut)),
                    "{context}"
                ),
                Model::Finished(state) => assert!(
                    matches!(&commit, CancelCommit::Refused(CancelOutcome::AlreadyFinished(Some(s))) if *s == state),
                    "{context}"
                ),
            }
            let accepted = !matches!(commit, CancelCommit::Refused(_));
            assert_eq!(
                announced,
                usize::from(accepted),
                "announced once, only when accepted: {context}"
            );
        }
        Op::TimeOut => {
            let expected = *model == Model::Running;
            assert_eq!(r.time_out(Duration::from_secs(1)), expected, "{context}");
            if expected {
                *model = Model::Stopping(None);
            }
        }
        Op::Settle(partial) => {
            let expected = match model {
                Model::Stopping(Some(reason)) => Some(ToolCallState::Cancelled {
                    phase: CancelPhase::Running,
                    partial,
                    reason: *reason,
                }),
                Model::Stopping(None) => Some(ToolCallState::TimedOut { partial }),
                _ => None,
            };
            assert_eq!(r.settle(partial), expected, "{context}");
            if let Some(state) = expected {
                *model = Model::Finished(state);
            }
        }
        Op::Register => {
            let expected = *model == Model::Running;
            assert_eq!(r.set_on_cancel_box(Box::new(|| None)), expected, "X2: {context}");
        }
    }
    let terminal = match model {
        Model::Finished(state) => Some(state.clone()),
        _ => None,
    };
    assert_eq!(r.terminal(), terminal, "{context}");
    assert_eq!(
        r.token.is_cancelled(),
        matches!(
            model,
            Model::Stopping(_)
                | Model::Finished(ToolCallState::Cancelled { .. } | ToolCallState::TimedOut { .. })
        ),
        "the token is cancelled exactly when a cancel or timeout was accepted: {context}"
    );
}

/// S1: random interleavings of approve / start / complete / fail / decline / cancel /
/// timeout / settle / register, 2 000 seeds of 12 steps, each step compared with the plain
/// state machine: once terminal, the state never changes, and every call ends with exactly
/// one terminal transition.
#[test]
fn s1_random_interleavings_reach_exactly_one_terminal_state() {
    for seed in 1..=2000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let pending = rng.below(2) == 0;
        let r = CallRecord::new("c".into(), "t".into(), CancellationToken::new(), pending);
        let mut model = if pending { Model::Pending } else { Model::Queued };
        let mut transitions = 0;
        let mut first = None;
        for _ in 0..12 {
            let before = r.terminal();
            step(&r, &mut model, random_op(&mut rng), seed);
            let after = r.terminal();
            if before.is_none() && after.is_some() {
                transitions += 1;
                first = after.clone();
            }
            if before.is_some() {
                assert_eq!(after, before, "seed {seed}: a terminal state changed");
            }
        }
        // Whatever happened, a reply cancel and the runtime's settle close the call.
        step(&r, &mut model, Op::Cancel(CancelReason::Reply), seed);
        step(&r, &mut model, Op::Settle(false), seed);
        let end = r.terminal();
        if first.is_none() {
            transitions += 1;
        } else {
            assert_eq!(end, first, "seed {seed}");
        }
        assert_eq!(transitions, 1, "seed {seed}: one terminal transition");
        assert!(end.is_some(), "seed {seed}");
        assert!(
            r.take_on_cancel().is_none()
                || matches!(
                    model,
                    Model::Finished(
                        ToolCallState::Cancelled {
                            phase: CancelPhase::Running,
                            ..
                        } | ToolCallState::TimedOut { .. }
                    )
                )
        );
    }
}

/// S1, S2 with threads: completion, failure, cancel and timeout of a running call, released
/// together 500 times; exactly one of them is committed. Decline, approve and cancel of a
/// pending call likewise.
#[test]
fn s1_s2_racing_transitions_commit_exactly_one() {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};
    for i in 0..500 {
        let r = record();
        r.start();
        let barrier = Arc::new(Barrier::new(4));
        let wins = Arc::new(AtomicUsize::new(0));
        let racers: Vec<_> = (0..4)
            .map(|k| {
                let (r, barrier, wins) = (Arc::clone(&r), Arc::clone(&barrier), Arc::clone(&wins));
                std::thread::spawn(move || {
                    barrier.wait();
                    let won = match k {
                        0 => r.finish(ToolCallState::Completed),
                        1 => r.finish(ToolCallState::Failed),
                        2 => matches!(r.cancel(CancelReason::User, || {}), CancelCommit::Running),
                        _ => r.time_out(Duration::from_secs(1)),
                    };
                    if won {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for racer in racers {
            assert!(racer.join().is_ok());
        }
        assert_eq!(wins.load(Ordering::SeqCst), 1, "iteration {i}");
        let _ = r.settle(false);
        assert!(r.terminal().is_some(), "iteration {i}");
    }
    for i in 0..500 {
        let r = CallRecord::new("c".into(), "t".into(), CancellationToken::new(), true);
        let barrier = Arc::new(Barrier::new(3));
        let wins = Arc::new(AtomicUsize::new(0));
        let racers: Vec<_> = (0..3)
            .map(|k| {
                let (r, barrier, wins) = (Arc::clone(&r), Arc::clone(&barrier), Arc::clone(&wins));
                std::thread::spawn(move || {
                    barrier.wait();
                    let won = match k {
                        0 => r.finish(ToolCallState::Declined { reason: None }),
                        1 => r.approve(),
                        _ => matches!(
                            r.cancel(CancelReason::User, || {}),
                            CancelCommit::BeforeStart { .. }
                        ),
                    };
                    if won {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for racer in racers {
            assert!(racer.join().is_ok());
        }
        // Approval is not terminal: a cancel or decline after it may still commit once.
        let n = wins.load(Ordering::SeqCst);
        assert!(n == 1 || (n == 2 && r.terminal().is_some()), "iteration {i}: {n}");
    }
}

/// X2: a callback registered before the body runs, or after the call ended, is never kept.
#[test]
fn x2_registration_outside_running_is_not_kept() {
    let pending = CallRecord::new("c".into(), "t".into(), CancellationToken::new(), true);
    assert!(!pending.set_on_cancel_box(Box::new(|| Some("too early".into()))));
    assert!(pending.approve());
    assert!(!pending.set_on_cancel_box(Box::new(|| Some("still too early".into()))));
    assert!(pending.start());
    assert!(matches!(
        pending.cancel(CancelReason::User, || {}),
        CancelCommit::Running
    ));
    assert!(
        pending.take_on_cancel().is_none(),
        "a callback from before the start"
    );

    let done = record();
    done.start();
    assert!(done.finish(ToolCallState::Completed));
    assert!(!done.set_on_cancel_box(Box::new(|| Some("too late".into()))));
    assert!(done.take_on_cancel().is_none(), "a callback from after the end");

    let stopping = record();
    stopping.start();
    assert!(stopping.set_on_cancel_box(Box::new(|| Some("in time".into()))));
    assert!(matches!(
        stopping.cancel(CancelReason::User, || {}),
        CancelCommit::Running
    ));
    assert!(!stopping.set_on_cancel_box(Box::new(|| Some("after the cancel".into()))));
    stopping.clear_on_cancel();
    assert_eq!(
        stopping.take_on_cancel().map(|f| f()),
        Some(Some("in time".to_owned())),
        "neither replaced nor cleared once the cancel is committed"
    );
}

/// X4: the slot is emptied at every terminal state, so nothing of a finished call is kept.
#[test]
fn x4_the_slot_is_cleared_at_every_terminal_state() {
    let finishes: [fn(&CallRecord); 4] = [
        |r| assert!(r.finish(ToolCallState::Completed)),
        |r| assert!(r.finish(ToolCallState::Failed)),
        |r| {
            assert!(matches!(
                r.cancel(CancelReason::User, || {}),
                CancelCommit::Running
            ));
            assert!(r.settle(false).is_some());
        },
        |r| {
            assert!(r.time_out(Duration::from_secs(1)));
            assert!(r.settle(false).is_some());
        },
    ];
    for (i, finish) in finishes.iter().enumerate() {
        let r = record();
        r.start();
        let kept = Arc::new(());
        let held = Arc::clone(&kept);
        assert!(r.set_on_cancel_box(Box::new(move || {
            drop(held);
            None
        })));
        finish(&r);
        if i >= 2 {
            // A stopping call hands its callback to the runtime, which takes it.
            drop(r.take_on_cancel());
        }
        assert_eq!(
            Arc::strong_count(&kept),
            1,
            "case {i}: the callback is still held"
        );
    }
}
