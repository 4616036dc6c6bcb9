//! One writer per session across store instances on one database, as across processes: a
//! session leased by one instance is busy for the others until released, and a lease works
//! only with the instance that issued it. On PostgreSQL besides: a held lease is renewed past
//! its lifetime, and once its holder died another instance takes the session over and the old
//! holder's writes are refused.

use agentry::message::Msg;
use agentry_store::{CallRecord, SessionId, StoreError};
use serde_json::json;

use crate::backends::{TestDb, conformance};

/// Asserts that `outcome` is [`StoreError::SessionBusy`] for `id`, naming this process as the
/// holder.
#[track_caller]
fn assert_busy<T: std::fmt::Debug>(outcome: Result<T, StoreError>, id: &SessionId) {
    match outcome {
        Err(StoreError::SessionBusy { session, holder }) => {
            assert_eq!(&session, id);
            let holder = holder.unwrap_or_default();
            assert!(
                holder.contains(&std::process::id().to_string()),
                "names the holder: {holder}"
            );
        }
        other => panic!("expected SessionBusy, got {other:?}"),
    }
}

async fn a_session_leased_by_one_store_is_busy_for_another_until_released(db: TestDb) {
    let one = db.open().await;
    let two = db.open().await;
    let session = one.create_session("s", &json!({})).await.unwrap();
    let id = session.id.clone();
    let first = one.acquire(&id).await.unwrap();
    assert_busy(two.acquire(&id).await, &id);
    assert_busy(two.delete_session(&id).await, &id);
    // The holder writes meanwhile, and the other store is still refused.
    one.append_messages(&first, &[Msg::user("one's")]).await.unwrap();
    assert_busy(two.acquire(&id).await, &id);

    drop(first);
    let second = db
        .once_released(|| two.acquire(&id))
        .await
        .expect("the session is free once its lease is dropped");
    two.append_messages(&second, &[Msg::user("two's")]).await.unwrap();
    // Now the first store is the one refused.
    assert_busy(one.acquire(&id).await, &id);
    let texts: Vec<_> = one
        .messages(&id)
        .await
        .unwrap()
        .iter()
        .map(|m| m.text().unwrap_or_default())
        .collect();
    assert_eq!(texts, ["one's", "two's"]);
}
conformance!(a_session_leased_by_one_store_is_busy_for_another_until_released);

async fn a_lease_is_refused_by_every_store_but_the_one_that_issued_it(db: TestDb) {
    let one = db.open().await;
    let two = db.open().await;
    let session = one.create_session("s", &json!({})).await.unwrap();
    let lease = one.acquire(&session.id).await.unwrap();
    let foreign = |outcome: Result<_, StoreError>| {
        assert!(matches!(outcome, Err(StoreError::ForeignLease)), "{outcome:?}");
    };
    // Another instance on the same database.
    foreign(two.append_messages(&lease, &[Msg::user("x")]).await.map(drop));
    foreign(
        two.record_call(&lease, &CallRecord::new("c", "t", json!({})))
            .await
            .map(drop),
    );
    foreign(two.set_config(&lease, &json!({"model": "other"})).await);
    foreign(two.reserve_event_ids(&lease, 10).await);
    // A store of another database.
    let elsewhere = db.another();
    let three = elsewhere.open().await;
    foreign(three.append_messages(&lease, &[Msg::user("x")]).await.map(drop));
    drop(three);
    elsewhere.finish().await;

    // Nothing was written, and the lease works where it belongs.
    assert!(one.messages(&session.id).await.unwrap().is_empty());
    assert!(one.calls(&session.id).await.unwrap().is_empty());
    assert_eq!(one.session(&session.id).await.unwrap().unwrap().config, json!({}));
    assert_eq!(one.append_messages(&lease, &[Msg::user("x")]).await.unwrap(), 1);
}
conformance!(a_lease_is_refused_by_every_store_but_the_one_that_issued_it);

/// PostgreSQL only (an SQLite lease is a file lock: it never expires, it ends with its
/// process). A store whose leases last 1 s keeps its session for 3 s (it renews them); then
/// its "process" dies (the runtime running its renewal stops) and another store takes the
/// session over once the lease expired, with a greater fencing token; the dead holder's lease,
/// used again, is refused with `LeaseLost`, and dropping it does not free the new holder's.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_lease_is_renewed_while_its_holder_lives_and_taken_over_once_it_died() {
    use std::time::Duration;

    use agentry_store::SessionStore;

    let Some(db) = TestDb::postgres(module_path!()) else {
        return;
    };
    let ttl = Duration::from_secs(1);
    // The holder's "process": a runtime on a thread of its own, stopped to kill it.
    let (handed, taken) = std::sync::mpsc::channel();
    let (kill, killed) = tokio::sync::oneshot::channel::<()>();
    let holder = std::thread::spawn({
        let db = db.clone();
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let store = db.open_postgres(|o| o.lease_ttl(ttl)).await.unwrap();
                let session = store.create_session("s", &json!({})).await.unwrap();
                let lease = store.acquire(&session.id).await.unwrap();
                handed.send((store, session.id, lease)).unwrap();
                let _ = killed.await;
            });
        }
    });
    let (dead, id, stale) = taken.recv().unwrap();

    let other = db.open().await;
    let renewed_until = tokio::time::Instant::now() + 3 * ttl;
    while tokio::time::Instant::now() < renewed_until {
        assert_busy(other.acquire(&id).await, &id);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    kill.send(()).unwrap();
    holder.join().unwrap();
    let deadline = tokio::time::Instant::now() + 10 * ttl;
    let lease = loop {
        match other.acquire(&id).await {
            Ok(lease) => break lease,
            Err(StoreError::SessionBusy { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            outcome => panic!("the expired lease was not taken over: {outcome:?}"),
        }
    };
    assert!(
        lease.fencing_token() > stale.fencing_token(),
        "{} after {}",
        lease.fencing_token(),
        stale.fencing_token()
    );

    let refused = dead.append_messages(&stale, &[Msg::user("late")]).await;
    assert!(
        matches!(&refused, Err(StoreError::LeaseLost { session }) if *session == id),
        "{refused:?}"
    );
    other
        .append_messages(&lease, &[Msg::user("new holder")])
        .await
        .unwrap();
    let texts: Vec<_> = other
        .messages(&id)
        .await
        .unwrap()
        .iter()
        .map(|m| m.text().unwrap_or_default())
        .collect();
    assert_eq!(texts, ["new holder"]);

    // The dead holder's lease, dropped, releases nothing of the new holder's.
    drop(stale);
    let third = db.open().await;
    let until = tokio::time::Instant::now() + 3 * ttl;
    while tokio::time::Instant::now() < until {
        assert!(
            matches!(third.acquire(&id).await, Err(StoreError::SessionBusy { .. })),
            "the new holder's lease was released by the old one's drop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop((lease, other, third, dead));
    db.finish().await;
}
