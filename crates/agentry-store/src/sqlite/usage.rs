//! A session's token and cost ledger.

use agentry::ReplyId;
use agentry::model::ChatUsage;
use chrono::Utc;
use rusqlite::{Connection, params};

use super::Ctx;
use super::rows::ts;
use super::tx::{commit, snapshot, touch, write_tx};
use crate::{SessionId, StoreError, UsageTotals};

pub(super) fn record_usage(
    conn: &Connection,
    ctx: &Ctx,
    id: &SessionId,
    reply_id: Option<&ReplyId>,
    usage: &ChatUsage,
    cost: Option<f64>,
) -> Result<(), StoreError> {
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let tx = write_tx(conn, ctx)?;
    tx.prepare_cached(
        "INSERT INTO usage (session_id, reply_id, input_tokens, output_tokens, time_ms, recorded_at,
                            cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut s| {
        s.execute(params![
            id.as_str(),
            reply_id.map(ReplyId::as_str),
            tokens(usage.input_tokens),
            tokens(usage.output_tokens),
            usage.time.as_secs_f64() * 1000.0,
            ts(Utc::now()),
            tokens(usage.cache_read_tokens),
            tokens(usage.cache_write_tokens),
            tokens(usage.reasoning_tokens),
            cost.filter(|c| c.is_finite()),
        ])
    })
    .map_err(|e| ctx.err(e))?;
    touch(&tx, ctx, id)?;
    commit(tx, ctx)
}

pub(super) fn usage(conn: &mut Connection, ctx: &Ctx, id: &SessionId) -> Result<UsageTotals, StoreError> {
    let tx = snapshot(conn, ctx, id)?;
    type Sums = (i64, i64, i64, f64, i64, i64, i64, Option<f64>);
    let (calls, input, output, time_ms, cache_read, cache_write, reasoning, cost): Sums = tx
        .query_row(
            "SELECT count(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
                    COALESCE(SUM(time_ms), 0.0), COALESCE(SUM(cache_read_tokens), 0),
                    COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(reasoning_tokens), 0),
                    SUM(cost_usd)
             FROM usage WHERE session_id = ?1",
            [id.as_str()],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                ))
            },
        )
        .map_err(|e| ctx.err(e))?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(UsageTotals {
        calls: count(calls),
        input_tokens: count(input),
        output_tokens: count(output),
        time_ms,
        cache_read_tokens: count(cache_read),
        cache_write_tokens: count(cache_write),
        reasoning_tokens: count(reasoning),
        cost_usd: cost,
    })
}
