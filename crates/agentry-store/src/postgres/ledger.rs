//! A session's approval grants (spec A12-A14) and its token and cost ledger.

use agentry::ReplyId;
use agentry::model::ChatUsage;
use deadpool_postgres::Object as Client;
use deadpool_postgres::{Object, Transaction};

use super::sql;
use super::text::{from_db, to_db};
use super::tx::{commit, found, touch, write_tx};
use super::{Ctx, Inner};
use crate::codec::{from_json, json};
use crate::{Grant, GrantKind, SessionId, StoreError, UsageTotals};

pub(super) async fn put_grant(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    grant: &Grant,
) -> Result<(), StoreError> {
    let ctx = &inner.ctx;
    let kind = json("grant", &grant.kind)?;
    let tx = write_tx(client, inner, id, token).await?;
    sql::execute(&tx, ctx, "INSERT INTO session_grants (session_id, key, tool_name, kind, created_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (session_id, key) DO UPDATE SET
             tool_name = excluded.tool_name, kind = excluded.kind, created_at = excluded.created_at", &[
            &id.as_str(),
            &to_db(&grant.key),
            &to_db(&grant.tool_name),
            &kind,
            &grant.created_at,
        ]).await?;
    touch(&tx, ctx, id).await?;
    commit(tx, ctx).await
}

pub(super) async fn revoke_grant(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    key: &str,
) -> Result<bool, StoreError> {
    let ctx = &inner.ctx;
    let tx = write_tx(client, inner, id, token).await?;
    let deleted = sql::execute(
        &tx,
        ctx,
        "DELETE FROM session_grants WHERE session_id = $1 AND key = $2",
        &[&id.as_str(), &to_db(key)],
    )
    .await?;
    touch(&tx, ctx, id).await?;
    commit(tx, ctx).await?;
    Ok(deleted > 0)
}

pub(super) async fn grants(client: &Client, ctx: &Ctx, id: &SessionId) -> Result<Vec<Grant>, StoreError> {
    let rows = sql::query(
        client,
        ctx,
        "SELECT g.key, g.tool_name, g.kind, g.created_at FROM sessions s
             LEFT JOIN session_grants g ON g.session_id = s.id
             WHERE s.id = $1 ORDER BY g.created_at, g.ord",
        &[&id.as_str()],
    )
    .await?;
    found(!rows.is_empty(), id)?;
    let mut grants = Vec::new();
    for row in &rows {
        let Some(key) = row.get::<_, Option<String>>(0) else {
            continue;
        };
        let kind: String = row.get(2);
        grants.push(Grant {
            key: from_db(key),
            tool_name: from_db(row.get(1)),
            kind: from_json::<GrantKind>("grant", &kind)?,
            created_at: row.get(3),
        });
    }
    Ok(grants)
}

/// Adds to the ledger, within a write transaction.
pub(super) async fn record_usage(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &SessionId,
    reply_id: Option<&ReplyId>,
    usage: &ChatUsage,
    cost: Option<f64>,
) -> Result<(), StoreError> {
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let statement = tx
        .prepare_cached(
            "INSERT INTO usage (session_id, reply_id, input_tokens, output_tokens, time_ms, recorded_at,
                                cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd)
             VALUES ($1, $2, $3, $4, $5, now(), $6, $7, $8, $9)",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    tx.execute(
        &statement,
        &[
            &id.as_str(),
            &reply_id.map(ReplyId::as_str),
            &tokens(usage.input_tokens),
            &tokens(usage.output_tokens),
            &(usage.time.as_secs_f64() * 1000.0),
            &tokens(usage.cache_read_tokens),
            &tokens(usage.cache_write_tokens),
            &tokens(usage.reasoning_tokens),
            &cost.filter(|c| c.is_finite()),
        ],
    )
    .await
    .map_err(|e| ctx.err(e))?;
    Ok(())
}

pub(super) async fn usage(client: &Client, ctx: &Ctx, id: &SessionId) -> Result<UsageTotals, StoreError> {
    let row = sql::query_opt(client, ctx, "SELECT count(u.id), COALESCE(SUM(u.input_tokens), 0)::bigint, COALESCE(SUM(u.output_tokens), 0)::bigint,
                    COALESCE(SUM(u.time_ms), 0.0)::float8, COALESCE(SUM(u.cache_read_tokens), 0)::bigint,
                    COALESCE(SUM(u.cache_write_tokens), 0)::bigint, COALESCE(SUM(u.reasoning_tokens), 0)::bigint,
                    SUM(u.cost_usd)::float8
             FROM sessions s LEFT JOIN usage u ON u.session_id = s.id WHERE s.id = $1 GROUP BY s.id", &[&id.as_str()]).await?;
    let Some(row) = row else {
        return Err(StoreError::SessionNotFound(id.to_string()));
    };
    let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
    Ok(UsageTotals {
        calls: count(0),
        input_tokens: count(1),
        output_tokens: count(2),
        time_ms: row.get(3),
        cache_read_tokens: count(4),
        cache_write_tokens: count(5),
        reasoning_tokens: count(6),
        cost_usd: row.get(7),
    })
}
