//! Crash points for the crash-safety tests (cargo feature `crash-points`, never in a release
//! build of the CLI): `AGENTRY_CRASH_AT=before:N` aborts the process in the middle of its N-th
//! write transaction, with the changes made and not committed; `after:N` right after the N-th
//! commit, before anyone is told. The process dies as under `kill -9`: no destructor runs.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where in a write transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Moment {
    BeforeCommit,
    AfterCommit,
}

fn target() -> Option<(Moment, u64)> {
    static TARGET: OnceLock<Option<(Moment, u64)>> = OnceLock::new();
    *TARGET.get_or_init(|| {
        let spec = std::env::var("AGENTRY_CRASH_AT").ok()?;
        let (moment, n) = spec.split_once(':')?;
        let moment = match moment {
            "before" => Moment::BeforeCommit,
            "after" => Moment::AfterCommit,
            _ => return None,
        };
        Some((moment, n.parse().ok()?))
    })
}

static COMMITS: AtomicU64 = AtomicU64::new(0);

/// Called before and after every commit; aborts the process at the chosen point.
pub(super) fn point(moment: Moment) {
    let Some((at, n)) = target() else { return };
    let count = match moment {
        Moment::BeforeCommit => COMMITS.fetch_add(1, Ordering::SeqCst) + 1,
        Moment::AfterCommit => COMMITS.load(Ordering::SeqCst),
    };
    if at == moment && count == n {
        eprintln!("agentry: crash point {moment:?} {n} reached");
        std::process::abort();
    }
}
