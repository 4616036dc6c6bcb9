//! Recovery of a session on load (spec Y4): what a dead process left unfinished is closed, in
//! one write, before anyone reads the session.

use agentry::message::Msg;
use chrono::Utc;
use rusqlite::{Connection, params};

use super::Ctx;
use super::calls::{stored_calls, write_call};
use super::messages::{Encoded, insert_at, next_seq, stored_messages};
use super::rows::EncodedCall;
use super::tx::{commit, snapshot, touch, write_tx};
use crate::recovery;
use crate::{PendingApprovals, Recovered, SessionId, StoreError};

/// Recovery on load (Y4). The caller holds the lease, so nobody else writes this session: the
/// plan is made from a read, and only a session that needs repair takes the write lock.
pub(super) fn recover(
    conn: &mut Connection,
    ctx: &Ctx,
    id: &SessionId,
    pending: PendingApprovals,
) -> Result<Recovered, StoreError> {
    let (stored, calls) = {
        let tx = snapshot(conn, ctx, id)?;
        (stored_messages(&tx, ctx, id)?, stored_calls(&tx, ctx, id)?)
    };
    let (seqs, mut msgs): (Vec<i64>, Vec<Msg>) = stored.into_iter().unzip();
    let plan = recovery::plan(&msgs, &calls, Utc::now(), pending);
    if plan.tail.is_none() && plan.calls.is_empty() {
        return Ok(Recovered {
            report: plan.report,
            messages: msgs,
        });
    }
    let tx = write_tx(conn, ctx)?;
    if let Some((at, tail)) = plan.tail {
        let from = match seqs.get(at) {
            Some(&seq) => seq,
            None => next_seq(&tx, ctx, id)?,
        };
        tx.execute(
            "DELETE FROM messages WHERE session_id = ?1 AND seq >= ?2",
            params![id.as_str(), from],
        )
        .map_err(|e| ctx.err(e))?;
        let encoded = tail.iter().map(Encoded::new).collect::<Result<Vec<_>, _>>()?;
        insert_at(&tx, ctx, id, from, &encoded)?;
        msgs.truncate(at);
        msgs.extend(tail);
    }
    for call in &plan.calls {
        write_call(&tx, ctx, id, &EncodedCall::new(call)?)?;
    }
    touch(&tx, ctx, id)?;
    commit(tx, ctx)?;
    if !plan.report.is_empty() {
        tracing::info!(
            session = %id,
            interrupted = plan.report.interrupted.len(),
            settled = plan.report.settled.len(),
            orphans = plan.report.orphan_results_removed,
            "recovered a session left unfinished"
        );
    }
    Ok(Recovered {
        report: plan.report,
        messages: msgs,
    })
}
