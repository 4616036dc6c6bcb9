//! Recovery of a session on load (spec Y4): what a dead process (or node) left unfinished is
//! closed, in one write, before anyone reads the session.

use agentry::message::Msg;
use chrono::Utc;
use deadpool_postgres::Object;

use super::Inner;
use super::calls::{stored_calls, write_call};
use super::messages::{Encoded, insert_at, next_seq, stored_messages};
use super::rows::CallColumns;
use super::sql;
use super::tx::{commit, found, touch, write_tx};
use crate::recovery;
use crate::{PendingApprovals, Recovered, SessionId, StoreError};

/// Recovery on load (Y4). The caller holds the lease, so nobody else writes this session: the
/// plan is made from a read, and the repair is written with the lease's token.
pub(super) async fn recover(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    pending: PendingApprovals,
) -> Result<Recovered, StoreError> {
    let ctx = &inner.ctx;
    let stored = stored_messages(client, ctx, id).await?;
    let calls = stored_calls(client, ctx, id).await?;
    found(stored.is_some() && calls.is_some(), id)?;
    let (seqs, mut msgs): (Vec<i64>, Vec<Msg>) = stored.unwrap_or_default().into_iter().unzip();
    let calls = calls.unwrap_or_default();
    let plan = recovery::plan(&msgs, &calls, Utc::now(), pending);
    if plan.tail.is_none() && plan.calls.is_empty() {
        return Ok(Recovered {
            report: plan.report,
            messages: msgs,
        });
    }
    let tx = write_tx(client, inner, id, token).await?;
    if let Some((at, tail)) = plan.tail {
        let from = match seqs.get(at) {
            Some(&seq) => seq,
            None => next_seq(&tx, ctx, id).await?,
        };
        sql::execute(
            &tx,
            ctx,
            "DELETE FROM messages WHERE session_id = $1 AND seq >= $2",
            &[&id.as_str(), &from],
        )
        .await?;
        let encoded = tail.iter().map(Encoded::new).collect::<Result<Vec<_>, _>>()?;
        insert_at(&tx, ctx, id, from, &encoded.iter().collect::<Vec<_>>()).await?;
        msgs.truncate(at);
        msgs.extend(tail);
    }
    for call in &plan.calls {
        write_call(&tx, ctx, id, &CallColumns::new(call)?).await?;
    }
    touch(&tx, ctx, id).await?;
    commit(tx, ctx).await?;
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
