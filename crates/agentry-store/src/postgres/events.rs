//! A session's event log: events as a server handed them out, for clients that resume a stream
//! after a restart or on another node.

use deadpool_postgres::Object as Client;
use deadpool_postgres::Object;

use super::sql;
use super::tx::{commit, found};
use super::{Ctx, Inner};
use crate::{SessionId, StoreError, StoredEvent};

/// Appends each session's events, all in one statement whatever the number of sessions (a
/// busy server writes the events of a thousand sessions at once, and one round trip keeps
/// the delay to the streams short). The events of a session whose lease was taken over are
/// refused, as any write with a stale token, and those of a session deleted meanwhile go with
/// it; the other sessions' are written. The notices go out at the commit, to every process
/// listening (see `notices`).
pub(super) async fn append_events(
    client: &Client,
    ctx: &Ctx,
    batches: &[((SessionId, i64), Vec<StoredEvent>)],
) -> Result<(), StoreError> {
    let (sessions, tokens): (Vec<&str>, Vec<i64>) = batches
        .iter()
        .map(|((id, token), _)| (id.as_str(), *token))
        .unzip();
    let mut rows = EventRows::default();
    for ((id, _), events) in batches {
        for event in events {
            rows.session.push(id.as_str());
            rows.id
                .push(i64::try_from(event.id).map_err(|_| StoreError::Encode {
                    what: "event id",
                    detail: format!("{} is too large", event.id),
                })?);
            rows.body.push(event.body.as_str());
            rows.at.push(event.recorded_at);
        }
    }
    // The lease rows are locked (shared) in the order of their ids, as every lock of many
    // lease rows is, so two such writes never wait for each other in a circle.
    let statement = client
        .prepare_cached(
            "WITH held AS (
                 SELECT session_id FROM session_leases
                 WHERE (session_id, token) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
                 ORDER BY session_id FOR SHARE
             ), written AS (
                 INSERT INTO session_events (session_id, event_id, body, created_at)
                 SELECT e.session, e.id, e.body, coalesce(e.at, now())
                 FROM unnest($3::text[], $4::bigint[], $5::text[], $6::timestamptz[]) AS e(session, id, body, at)
                 WHERE e.session IN (SELECT session_id FROM held)
                 ON CONFLICT (session_id, event_id) DO NOTHING
             )
             SELECT session_id, pg_notify($7, session_id)::text FROM held",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let held = client
        .query(
            &statement,
            &[
                &sessions,
                &tokens,
                &rows.session,
                &rows.id,
                &rows.body,
                &rows.at,
                &super::notices::CHANNEL,
            ],
        )
        .await
        .map_err(|e| ctx.err(e))?
        .len();
    if held < sessions.len() {
        tracing::warn!(
            sessions = sessions.len() - held,
            "events of sessions taken over by another node were not kept"
        );
    }
    Ok(())
}

/// The columns of the events one write inserts.
#[derive(Default)]
struct EventRows<'a> {
    session: Vec<&'a str>,
    id: Vec<i64>,
    body: Vec<&'a str>,
    at: Vec<Option<chrono::DateTime<chrono::Utc>>>,
}

/// The stored events after `after`, oldest first, at most `limit`.
pub(super) async fn events_after(
    client: &Client,
    ctx: &Ctx,
    id: &SessionId,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let statement = client
        .prepare_cached(
            "SELECT e.event_id, e.body, e.created_at FROM sessions s
             LEFT JOIN LATERAL (
                 SELECT event_id, body, created_at FROM session_events
                 WHERE session_id = s.id AND event_id > $2 ORDER BY event_id LIMIT $3
             ) e ON true
             WHERE s.id = $1 ORDER BY e.event_id",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let rows = client
        .query(&statement, &[&id.as_str(), &after, &limit])
        .await
        .map_err(|e| ctx.err(e))?;
    found(!rows.is_empty(), id)?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let event_id: Option<i64> = row.get(0);
            let body: Option<String> = row.get(1);
            Some(StoredEvent {
                id: u64::try_from(event_id?).unwrap_or(0),
                body: body?,
                recorded_at: row.get(2),
            })
        })
        .collect())
}

/// The events of each session after its own id, in one query (see
/// [`SessionStore::events_after_each`](crate::SessionStore::events_after_each)).
pub(super) async fn events_after_each(
    client: &Client,
    ctx: &Ctx,
    from: &[(SessionId, u64)],
    limit: usize,
) -> Result<Vec<(SessionId, Vec<StoredEvent>)>, StoreError> {
    let (sessions, afters): (Vec<&str>, Vec<i64>) = from
        .iter()
        .map(|(id, after)| (id.as_str(), i64::try_from(*after).unwrap_or(i64::MAX)))
        .unzip();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let statement = client
        .prepare_cached(
            "SELECT s.id, e.event_id, e.body, e.created_at
             FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS c(session, after, n)
             JOIN sessions s ON s.id = c.session
             LEFT JOIN LATERAL (
                 SELECT event_id, body, created_at FROM session_events
                 WHERE session_id = s.id AND event_id > c.after ORDER BY event_id LIMIT $3
             ) e ON true
             ORDER BY c.n, e.event_id",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let rows = client
        .query(&statement, &[&sessions, &afters, &limit])
        .await
        .map_err(|e| ctx.err(e))?;
    let mut each: Vec<(SessionId, Vec<StoredEvent>)> = Vec::new();
    for row in &rows {
        let session: String = row.get(0);
        if each.last().is_none_or(|(id, _)| id.as_str() != session) {
            each.push((SessionId::new(session), Vec::new()));
        }
        let (Some(event_id), Some(body)) = (row.get::<_, Option<i64>>(1), row.get::<_, Option<String>>(2))
        else {
            continue;
        };
        if let Some((_, events)) = each.last_mut() {
            events.push(StoredEvent {
                id: u64::try_from(event_id).unwrap_or(0),
                body,
                recorded_at: row.get(3),
            });
        }
    }
    Ok(each)
}

/// The id of the last stored event and the highest reserved id (0 and 0 for none).
pub(super) async fn event_ids(client: &Client, ctx: &Ctx, id: &SessionId) -> Result<(u64, u64), StoreError> {
    let row = sql::query_opt(
        client,
        ctx,
        "SELECT (SELECT coalesce(max(event_id), 0) FROM session_events WHERE session_id = $1)::bigint,
                    event_ids_reserved FROM sessions WHERE id = $1",
        &[&id.as_str()],
    )
    .await?;
    let Some(row) = row else {
        return Err(StoreError::SessionNotFound(id.to_string()));
    };
    Ok((
        u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
        u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
    ))
}

/// Records that event ids up to `up_to` may be handed out (never lowers the mark).
pub(super) async fn reserve_event_ids(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    up_to: u64,
) -> Result<(), StoreError> {
    let ctx = &inner.ctx;
    let up_to = i64::try_from(up_to).unwrap_or(i64::MAX);
    let tx = super::tx::write_tx(client, inner, id, token).await?;
    sql::execute(
        &tx,
        ctx,
        "UPDATE sessions SET event_ids_reserved = greatest(event_ids_reserved, $2) WHERE id = $1",
        &[&id.as_str(), &up_to],
    )
    .await?;
    commit(tx, ctx).await
}

/// Deletes what is older than `before` (see [`SessionStore::purge`](crate::SessionStore::purge)):
/// sessions nobody writes whose calls all ended, then old events and controls.
pub(super) async fn purge(
    client: &Client,
    ctx: &Ctx,
    before: chrono::DateTime<chrono::Utc>,
) -> Result<crate::Purged, StoreError> {
    let sessions = sql::execute(
        client,
        ctx,
        "DELETE FROM sessions s WHERE updated_at < $1
               AND NOT EXISTS (SELECT 1 FROM session_leases l WHERE l.session_id = s.id)
               AND NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.session_id = s.id AND NOT c.terminal)",
        &[&before],
    )
    .await?;
    let events = sql::execute(
        client,
        ctx,
        "DELETE FROM session_events WHERE created_at < $1",
        &[&before],
    )
    .await?;
    sql::execute(
        client,
        ctx,
        "DELETE FROM session_controls WHERE created_at < $1",
        &[&before],
    )
    .await?;
    Ok(crate::Purged { sessions, events })
}

/// Lowers the reserved mark to `last` (not below the last stored event).
pub(super) async fn settle_event_ids(
    client: &mut Object,
    inner: &Inner,
    id: &SessionId,
    token: i64,
    last: u64,
) -> Result<(), StoreError> {
    let ctx = &inner.ctx;
    let last = i64::try_from(last).unwrap_or(i64::MAX);
    let tx = super::tx::write_tx(client, inner, id, token).await?;
    sql::execute(
        &tx,
        ctx,
        "UPDATE sessions SET event_ids_reserved = greatest($2,
             (SELECT coalesce(max(event_id), 0) FROM session_events WHERE session_id = $1))
         WHERE id = $1",
        &[&id.as_str(), &last],
    )
    .await?;
    commit(tx, ctx).await
}
