//! One writer per session across nodes: a lease row with an expiry and a fencing token.
//!
//! Why a row and not an advisory lock: a session-level advisory lock lives on one connection,
//! so a node serving 3,000 sessions would hold 3,000 connections. A row costs nothing while
//! held; its holder renews all its leases in one statement every third of their lifetime (a
//! write only checks its token, see [`tx`](super::tx)). A node that dies stops renewing, and once the
//! lease expired another node takes it with a new token from a sequence: the old holder's
//! writes carry the old token and are refused, so even a node that was only paused (not dead)
//! cannot write over the new holder.
//!
//! Times are the database server's clock (`now()`), so the nodes' clocks need not agree.
//!
//! A lease dropped in this process is released in the database by a background task; until
//! that lands, this store may take it again at once (its row names this store), while other
//! nodes wait for the release or the expiry. A process that ends before that task ran (a
//! `run` that finished, a `kill -9`) leaves its row behind: a process on the same machine takes
//! it at once when the holder's process is gone (the row names the machine by its boot id and
//! pid namespace, so a pid is never read in the wrong place); elsewhere it expires.

use std::sync::{Arc, PoisonError, Weak};

use chrono::Utc;

use super::Inner;
use super::sql;
use super::tx::ttl_ms;
use crate::{Lease, SessionId, StoreError};

/// Holds a session's lease while alive.
struct LeaseGuard {
    inner: Arc<Inner>,
    id: SessionId,
    token: i64,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let mut held = self.inner.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.get(&self.id) == Some(&self.token) {
            held.remove(&self.id);
        }
        drop(held);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // expires on its own
        };
        let (inner, id, token) = (Arc::clone(&self.inner), self.id.clone(), self.token);
        runtime.spawn(async move {
            let released = async {
                let client = inner.checkout(&inner.pool).await?;
                sql::execute(
                    &client,
                    &inner.ctx,
                    "DELETE FROM session_leases WHERE session_id = $1 AND token = $2",
                    &[&id.as_str(), &token],
                )
                .await
            };
            if let Err(e) = released.await {
                tracing::debug!(session = %id, error = %e, "a lease was left to expire");
            }
        });
    }
}

/// Takes the lease of `id`, or says who holds it.
pub(super) async fn acquire(inner: &Arc<Inner>, id: &SessionId) -> Result<Lease, StoreError> {
    {
        // Reserved here first (token 0 matches no row), so two acquires of this store never
        // both reach the database.
        let mut held = inner.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(id) {
            return Err(StoreError::SessionBusy {
                session: id.clone(),
                holder: Some("this process".into()),
            });
        }
        held.insert(id.clone(), 0);
    }
    let taken = take(inner, id).await;
    let mut held = inner.held.lock().unwrap_or_else(PoisonError::into_inner);
    let token = match taken {
        Ok(token) => token,
        Err(e) => {
            held.remove(id);
            return Err(e);
        }
    };
    held.insert(id.clone(), token);
    drop(held);
    let guard = LeaseGuard {
        inner: Arc::clone(inner),
        id: id.clone(),
        token,
    };
    Ok(Lease::fenced(
        id.clone(),
        inner.id.as_u128(),
        u64::try_from(token).unwrap_or(0),
        Box::new(guard),
    ))
}

/// Takes the lease row; returns its new token.
async fn take(inner: &Inner, id: &SessionId) -> Result<i64, StoreError> {
    let ctx = &inner.ctx;
    let client = inner.checkout(&inner.pool).await?;
    let host = host_id();
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let holder = format!(
        "process {} on {} since {}",
        std::process::id(),
        host_name(),
        Utc::now().format("%Y-%m-%d %H:%M:%S UTC")
    );
    // Taken when free, expired, left by this store (a release still on its way), or held with
    // the token `$7`, of a holder known to be dead.
    let take = client
        .prepare_cached(
            "INSERT INTO session_leases (session_id, token, store_id, host_id, pid, holder, expires_at)
             SELECT id, nextval('lease_tokens'), $2, $3, $4, $5, now() + $6 * interval '1 millisecond'
             FROM sessions WHERE id = $1
             ON CONFLICT (session_id) DO UPDATE SET
                 token = excluded.token, store_id = excluded.store_id, host_id = excluded.host_id,
                 pid = excluded.pid, holder = excluded.holder, expires_at = excluded.expires_at
             WHERE session_leases.expires_at < now() OR session_leases.store_id = $2
                 OR session_leases.token = $7
             RETURNING token",
        )
        .await
        .map_err(|e| ctx.err(e))?;
    let mut dead_holder = -1_i64;
    let mut released_meanwhile = 0;
    loop {
        let row = client
            .query_opt(
                &take,
                &[
                    &id.as_str(),
                    &inner.id,
                    &host,
                    &pid,
                    &holder,
                    &ttl_ms(inner),
                    &dead_holder,
                ],
            )
            .await
            .map_err(|e| ctx.err(e))?;
        if let Some(row) = row {
            return Ok(row.get(0));
        }
        let held = sql::query_opt(
            &client,
            ctx,
            "SELECT holder, token, host_id, pid FROM session_leases WHERE session_id = $1",
            &[&id.as_str()],
        )
        .await?;
        let Some(held) = held else {
            // Released between the two statements: take it now (or find the session gone).
            released_meanwhile += 1;
            if released_meanwhile <= 3 {
                continue;
            }
            return Err(StoreError::SessionNotFound(id.to_string()));
        };
        let (token, their_host, their_pid): (i64, String, i32) = (held.get(1), held.get(2), held.get(3));
        // Once only: a holder that died is tried again with its token, nothing else.
        if dead_holder == -1 && their_host == host && their_pid != pid && !process_alive(their_pid) {
            tracing::debug!(session = %id, pid = their_pid, "taking over the lease of a process that ended");
            dead_holder = token;
            continue;
        }
        return Err(StoreError::SessionBusy {
            session: id.clone(),
            holder: Some(held.get(0)),
        });
    }
}

/// This machine's boot and pid namespace: where a pid means the same process. Empty where it
/// cannot be told (then no pid is checked, and leases expire).
fn host_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
    let namespace = std::fs::read_link("/proc/self/ns/pid").ok();
    match (boot, namespace) {
        (Some(boot), Some(namespace)) => format!("{} {}", boot.trim(), namespace.display()),
        _ => String::new(),
    }
}

/// Whether process `pid` of this pid namespace runs (a reused pid reads as alive: the lease
/// then expires, the safe way to be wrong). A zombie (killed, not yet reaped by its parent)
/// runs no more.
fn process_alive(pid: i32) -> bool {
    if host_id().is_empty() || pid <= 0 {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name, which may hold anything.
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// How soon a renewal tries again the leases a write held.
const RENEW_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// Renews every lease the store holds, every third of their lifetime, until the store is gone.
pub(super) fn start_renewing(inner: &Arc<Inner>) {
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let period = inner.lease_ttl / 3;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A connection of its own: a busy pool (a thousand replies writing) never holds up
        // the renewal until the leases expire under their live holder.
        let mut connection: Option<tokio_postgres::Client> = None;
        loop {
            ticks.tick().await;
            let Some(inner) = weak.upgrade() else { return };
            if let Err(e) = renew(&inner, &mut connection).await {
                connection = None;
                tracing::warn!(error = %e, "could not renew the session leases");
            }
        }
    });
}

async fn renew(inner: &Inner, connection: &mut Option<tokio_postgres::Client>) -> Result<(), StoreError> {
    let (ids, tokens): (Vec<String>, Vec<i64>) = {
        let held = inner.held.lock().unwrap_or_else(PoisonError::into_inner);
        // Token 0: an acquire on its way, nothing to renew yet.
        held.iter()
            .filter(|(_, token)| **token > 0)
            .map(|(id, token)| (id.to_string(), *token))
            .unzip()
    };
    if ids.is_empty() {
        return Ok(());
    }
    let ctx = &inner.ctx;
    let client = match connection {
        Some(client) if !client.is_closed() => client,
        _ => {
            let (client, driver) = inner
                .config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| ctx.err(e))?;
            tokio::spawn(async move {
                if let Err(e) = driver.await {
                    tracing::debug!(error = %e, "the lease renewal connection ended");
                }
            });
            connection.insert(client)
        }
    };
    // Only the leases no write holds at the moment, never waiting: a renewal waiting for
    // one busy lease would hold the others it locked meanwhile, and every write of those
    // sessions (the events of a whole node among them) would wait behind it. The busy ones
    // are tried again a little later, until a third of the lifetime has passed. The rows are
    // locked in the order of their ids, as every lock of many lease rows is.
    let mut renewed: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut pending = (ids.clone(), tokens.clone());
    let give_up = tokio::time::Instant::now() + inner.lease_ttl / 3;
    loop {
        let rows = client
            .query(
                "UPDATE session_leases l SET expires_at = now() + $3 * interval '1 millisecond'
                 FROM (
                     SELECT session_id FROM session_leases
                     WHERE (session_id, token) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
                     ORDER BY session_id FOR NO KEY UPDATE SKIP LOCKED
                 ) AS h
                 WHERE l.session_id = h.session_id
                 RETURNING l.session_id",
                &[&pending.0, &pending.1, &ttl_ms(inner)],
            )
            .await
            .map_err(|e| ctx.err(e))?;
        renewed.extend(rows.iter().map(|row| row.get::<_, String>(0)));
        pending = ids
            .iter()
            .zip(&tokens)
            .filter(|(id, _)| !renewed.contains(*id))
            .map(|(id, token)| (id.clone(), *token))
            .unzip();
        if pending.0.is_empty() || tokio::time::Instant::now() >= give_up {
            break;
        }
        tokio::time::sleep(RENEW_RETRY).await;
    }
    if pending.0.is_empty() {
        return Ok(());
    }
    // Not renewed: still ours (a write held it all along: renewed next time), released
    // meanwhile (not lost either), or taken over.
    let still_ours: std::collections::HashSet<String> = client
        .query(
            "SELECT session_id FROM session_leases
             WHERE (session_id, token) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))",
            &[&pending.0, &pending.1],
        )
        .await
        .map_err(|e| ctx.err(e))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let lost = {
        let held = inner.held.lock().unwrap_or_else(PoisonError::into_inner);
        pending
            .0
            .iter()
            .zip(&pending.1)
            .filter(|(id, token)| {
                !still_ours.contains(*id) && held.get(&SessionId::new(id.as_str())) == Some(*token)
            })
            .count()
    };
    if lost > 0 {
        tracing::warn!(
            lost,
            "leases were taken over by another node; their writes will be refused"
        );
    }
    Ok(())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this host".into())
}

/// The sessions whose lease expired without being released (see
/// [`SessionStore::expired_leases`](crate::SessionStore::expired_leases)).
pub(super) async fn expired(
    client: &deadpool_postgres::Object,
    ctx: &super::Ctx,
) -> Result<Vec<SessionId>, StoreError> {
    let rows = sql::query(
        client,
        ctx,
        "SELECT session_id FROM session_leases WHERE expires_at < now() ORDER BY expires_at",
        &[],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| SessionId::new(row.get::<_, String>(0)))
        .collect())
}
