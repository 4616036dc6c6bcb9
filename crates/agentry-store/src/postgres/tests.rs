//! What only a store shared by processes does: leases that expire and are taken over, with
//! the old holder's writes refused. Needs `AGENTRY_TEST_POSTGRES`.

use std::time::Duration;

use agentry::Msg;

use super::{PostgresOptions, PostgresStore};
use crate::{SessionStore, StoreError};

/// Two stores on one fresh schema (as two nodes), the first renewing its leases only when it
/// writes, with a lease of 300 ms.
async fn two_nodes() -> Option<(PostgresStore, PostgresStore, PostgresStore)> {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES") else {
        assert!(
            std::env::var("AGENTRY_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "AGENTRY_REQUIRE_POSTGRES=1 but AGENTRY_TEST_POSTGRES is not set"
        );
        eprintln!("skipped: AGENTRY_TEST_POSTGRES is not set");
        return None;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let options = PostgresOptions::new(url).schema(schema);
    let stalled = PostgresStore::connect_with(
        options
            .clone()
            .lease_ttl(Duration::from_millis(300))
            .renew_leases(false),
    )
    .await
    .unwrap();
    let b = PostgresStore::connect_with(options.clone()).await.unwrap();
    let c = PostgresStore::connect_with(options).await.unwrap();
    Some((stalled, b, c))
}

/// The texts of a session's messages, in order.
async fn texts(store: &PostgresStore, id: &crate::SessionId) -> Vec<String> {
    store
        .messages(id)
        .await
        .unwrap()
        .iter()
        .filter_map(Msg::text)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_taken_by_one_node_and_the_old_holder_is_refused() {
    let Some((stalled, b, c)) = two_nodes().await else {
        return;
    };
    let session = stalled.create_session("s", &serde_json::json!({})).await.unwrap();
    let old = stalled.acquire(&session.id).await.unwrap();
    stalled.append_messages(&old, &[Msg::user("one")]).await.unwrap();
    // While the lease lives, nobody else gets it.
    assert!(matches!(
        b.acquire(&session.id).await,
        Err(StoreError::SessionBusy { .. })
    ));
    // Once it expired, B and C race for it: exactly one wins.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (winner, loser) = loop {
        assert!(tokio::time::Instant::now() < deadline, "the lease never expired");
        let (by_b, by_c) = tokio::join!(b.acquire(&session.id), c.acquire(&session.id));
        match (by_b, by_c) {
            (Ok(lease), Err(StoreError::SessionBusy { .. })) => break ((b.clone(), lease), c.clone()),
            (Err(StoreError::SessionBusy { .. }), Ok(lease)) => break ((c.clone(), lease), b.clone()),
            (Err(StoreError::SessionBusy { .. }), Err(StoreError::SessionBusy { .. })) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("both won, or an error: {other:?}"),
        }
    };
    let (winner, new) = winner;
    assert!(new.fencing_token() > old.fencing_token());
    // The stalled node's writes are refused from now on, and change nothing.
    let refused = stalled.append_messages(&old, &[Msg::user("two")]).await;
    assert!(
        matches!(refused, Err(StoreError::LeaseLost { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        loser.acquire(&session.id).await,
        Err(StoreError::SessionBusy { .. })
    ));
    // Its events of the session it lost are not kept; those of a session it still holds, in
    // the same write, are.
    let other = stalled.create_session("t", &serde_json::json!({})).await.unwrap();
    let held = stalled.acquire(&other.id).await.unwrap();
    let event = |id| crate::StoredEvent {
        id,
        body: "{}".into(),
        recorded_at: None,
    };
    stalled
        .append_events(vec![(&old, vec![event(7)]), (&held, vec![event(1)])])
        .await
        .unwrap();
    assert!(winner.events_after(&session.id, 0, 10).await.unwrap().is_empty());
    assert_eq!(winner.events_after(&other.id, 0, 10).await.unwrap().len(), 1);
    winner.append_messages(&new, &[Msg::user("three")]).await.unwrap();
    assert_eq!(texts(&winner, &session.id).await, ["one", "three"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_told_of_events_appended_by_another() {
    let Some((a, b, _)) = two_nodes().await else {
        return;
    };
    let session = a.create_session("s", &serde_json::json!({})).await.unwrap();
    let mut notices = b.event_notices().unwrap();
    // The first notice says the listening connection is up.
    let first = tokio::time::timeout(Duration::from_secs(10), notices.recv()).await;
    assert!(matches!(first, Ok(Ok(crate::EventNotice::Resync))), "{first:?}");
    let lease = a.acquire(&session.id).await.unwrap();
    let event = crate::StoredEvent {
        id: 1,
        body: "{}".into(),
        recorded_at: None,
    };
    a.append_events(vec![(&lease, vec![event])]).await.unwrap();
    let notice = tokio::time::timeout(Duration::from_secs(10), notices.recv()).await;
    assert_eq!(
        notice.ok().and_then(Result::ok),
        Some(crate::EventNotice::Appended(session.id.clone()))
    );
    assert_eq!(b.events_after(&session.id, 0, 10).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_at_once_share_transactions_and_each_gets_its_own_answer() {
    let Some((stalled, b, _)) = two_nodes().await else {
        return;
    };
    // A session the stalled node will lose, and twenty it keeps.
    let lost = stalled
        .create_session("lost", &serde_json::json!({}))
        .await
        .unwrap();
    let old = stalled.acquire(&lost.id).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let _taken = loop {
        assert!(tokio::time::Instant::now() < deadline, "the lease never expired");
        match b.acquire(&lost.id).await {
            Ok(lease) => break lease,
            Err(StoreError::SessionBusy { .. }) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    };
    let mut kept = Vec::new();
    for n in 0..20 {
        let session = stalled
            .create_session(&format!("s{n}"), &serde_json::json!({}))
            .await
            .unwrap();
        let lease = stalled.acquire(&session.id).await.unwrap();
        kept.push((session, lease));
    }
    let grouped_before = stalled.inner.grouped.load(std::sync::atomic::Ordering::Relaxed);
    // Three rounds of writes, all sessions at once, the lost one among them.
    for round in 0..3 {
        let msgs: Vec<[Msg; 1]> = kept.iter().map(|_| [Msg::user(format!("{round}"))]).collect();
        let writes = kept
            .iter()
            .zip(&msgs)
            .map(|((_, lease), msg)| stalled.append_messages(lease, msg));
        let never = [Msg::user("never")];
        let lost_write = stalled.append_messages(&old, &never);
        let (answers, lost_answer) = tokio::join!(futures::future::join_all(writes), lost_write);
        for answer in answers {
            assert_eq!(answer.unwrap(), 1);
        }
        assert!(
            matches!(lost_answer, Err(StoreError::LeaseLost { .. })),
            "{lost_answer:?}"
        );
    }
    assert!(
        stalled.inner.grouped.load(std::sync::atomic::Ordering::Relaxed) > grouped_before,
        "no two writes shared a transaction"
    );
    for (session, _) in &kept {
        assert_eq!(texts(&b, &session.id).await, ["0", "1", "2"]);
    }
    assert!(b.messages(&lost.id).await.unwrap().is_empty());
}

/// Controls sent, taken, answered and read back at the same moment share statements; each
/// still reaches its own session, in the order it was sent, and each answer its own sender. A
/// control to a session that does not exist is refused alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_at_once_each_reach_their_session_and_each_answer_its_sender() {
    let Some((_, holder, sender)) = two_nodes().await else {
        return;
    };
    let mut sessions = Vec::new();
    for n in 0..8 {
        let session = holder
            .create_session(&format!("s{n}"), &serde_json::json!({}))
            .await
            .unwrap();
        let lease = holder.acquire(&session.id).await.unwrap();
        sessions.push((session.id, lease));
    }
    let sent = futures::future::join_all(sessions.iter().enumerate().map(|(n, (id, _))| {
        let sender = sender.clone();
        async move {
            let mut ids = Vec::new();
            for k in 0..3 {
                ids.push(sender.send_control(id, &format!("{n}.{k}")).await.unwrap());
            }
            ids
        }
    }));
    let nowhere = crate::SessionId::random();
    let missing = sender.send_control(&nowhere, "lost");
    let (sent, missing) = tokio::join!(sent, missing);
    assert!(
        matches!(missing, Err(StoreError::SessionNotFound(_))),
        "{missing:?}"
    );
    let taken =
        futures::future::join_all(sessions.iter().map(|(_, lease)| holder.take_controls(lease))).await;
    for (n, (taken, ids)) in taken.into_iter().zip(&sent).enumerate() {
        let expected: Vec<(u64, String)> = ids
            .iter()
            .enumerate()
            .map(|(k, id)| (*id, format!("{n}.{k}")))
            .collect();
        assert_eq!(taken.unwrap(), expected);
    }
    // Taken once only.
    assert!(holder.take_controls(&sessions[0].1).await.unwrap().is_empty());
    let all: Vec<u64> = sent.iter().flatten().copied().collect();
    let (answered, unanswered) = all.split_at(all.len() - 1);
    let holder = &holder;
    futures::future::join_all(
        answered
            .iter()
            .map(|id| async move { holder.answer_control(*id, &format!("answer to {id}")).await }),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<()>, _>>()
    .unwrap();
    let read = futures::future::join_all(all.iter().map(|id| sender.control_answer(*id))).await;
    for (id, answer) in all.iter().zip(read) {
        let expected = (!unanswered.contains(id)).then(|| format!("answer to {id}"));
        assert_eq!(answer.unwrap(), expected);
    }
}
