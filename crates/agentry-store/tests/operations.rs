//! The [`SessionStore`]'s operations one by one, on every backend: messages in order, call
//! records that never change once terminal, decisions, usage, the event log, owners and names.

use std::sync::Arc;
use std::time::Duration;

use agentry::message::{ContentBlock, Msg, Role, ToolResultBlock, ToolUseBlock};
use agentry::model::ChatUsage;
use agentry::tool::{ApprovalDecision, ApprovalRequest, CancelPhase, DecisionSource, ToolCallState};
use agentry_store::{
    CallRecord, CallStatus, Grant, GrantKind, Lease, PendingApprovals, SessionId, SessionInfo, SessionStore,
    StoreError, StoredEvent,
};
use serde_json::json;

use crate::backends::{TestDb, conformance};

/// A new session named `name` and its lease.
async fn leased(store: &Arc<dyn SessionStore>, name: &str) -> (SessionInfo, Lease) {
    let session = store.create_session(name, &json!({"model": "m"})).await.unwrap();
    let lease = store.acquire(&session.id).await.unwrap();
    (session, lease)
}

fn texts(msgs: &[Msg]) -> Vec<String> {
    msgs.iter().map(|m| m.text().unwrap_or_default()).collect()
}

async fn insert_before_keeps_order_and_skips_known_ids(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let [a, b, c, d] = ["a", "b", "c", "d"].map(Msg::user);
    assert_eq!(
        store
            .append_messages(&lease, &[a.clone(), d.clone()])
            .await
            .unwrap(),
        2
    );
    let added = store
        .insert_messages_before(&lease, &d.id, &[b.clone(), c.clone(), a.clone(), b.clone()])
        .await
        .unwrap();
    assert_eq!(added, 2, "a is stored and b comes twice");
    assert_eq!(
        texts(&store.messages(&session.id).await.unwrap()),
        ["a", "b", "c", "d"]
    );
    // Before an unknown id: appended.
    store
        .insert_messages_before(&lease, "nope", &[Msg::user("e")])
        .await
        .unwrap();
    assert_eq!(
        store
            .delete_messages(&lease, &[b.id.clone(), "x".into()])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        texts(&store.messages(&session.id).await.unwrap()),
        ["a", "c", "d", "e"]
    );
    store.clear_messages(&lease).await.unwrap();
    assert!(store.messages(&session.id).await.unwrap().is_empty());
}
conformance!(insert_before_keeps_order_and_skips_known_ids);

async fn a_terminal_call_record_never_changes(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let mut call = CallRecord::new("c1", "search", json!({"q": "x"}));
    assert!(store.record_call(&lease, &call).await.unwrap());
    call.status = CallStatus::Running;
    call.progress = Some("half".into());
    assert!(store.record_call(&lease, &call).await.unwrap());
    call.status = CallStatus::Finished(ToolCallState::Completed);
    assert!(store.record_call(&lease, &call).await.unwrap());
    call.status = CallStatus::Finished(ToolCallState::Failed);
    assert!(
        !store.record_call(&lease, &call).await.unwrap(),
        "S1: the first terminal state stays"
    );
    let stored = store.calls(&session.id).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].status, CallStatus::Finished(ToolCallState::Completed));
    assert_eq!(stored[0].progress.as_deref(), Some("half"));
    assert_eq!(stored[0].arguments, json!({"q": "x"}));
}
conformance!(a_terminal_call_record_never_changes);

async fn the_first_decision_wins_and_is_kept_with_its_source(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let call_id: agentry::CallId = "c1".into();
    let unknown = store
        .request_approval(&lease, &call_id, &ApprovalRequest::new("?"))
        .await;
    assert!(matches!(unknown, Err(StoreError::CallNotFound(_))), "{unknown:?}");
    store
        .record_call(&lease, &CallRecord::new("c1", "rm", json!({"path": "/tmp/x"})))
        .await
        .unwrap();
    let request = ApprovalRequest::new("Delete /tmp/x?");
    store.request_approval(&lease, &call_id, &request).await.unwrap();
    let pending = store.pending_approvals(&session.id).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].request, request);
    assert_eq!(pending[0].tool_name, "rm");

    let decline = ApprovalDecision::Decline {
        reason: Some("no".into()),
    };
    let call = store
        .resolve_approval(&lease, &call_id, &decline, DecisionSource::User)
        .await
        .unwrap();
    assert_eq!(
        call.status,
        CallStatus::Finished(ToolCallState::Declined {
            reason: Some("no".into())
        })
    );
    let again = store
        .resolve_approval(&lease, &call_id, &ApprovalDecision::Approve, DecisionSource::User)
        .await;
    assert!(matches!(again, Err(StoreError::NotPending(_))), "{again:?}");
    let stored = &store.calls(&session.id).await.unwrap()[0];
    assert_eq!(stored.decision, Some(decline));
    assert_eq!(stored.decision_source, Some(DecisionSource::User));
    assert!(store.pending_approvals(&session.id).await.unwrap().is_empty());
}
conformance!(the_first_decision_wins_and_is_kept_with_its_source);

async fn usage_adds_up(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    for n in 1..=3 {
        let usage = ChatUsage {
            input_tokens: 10 * n,
            output_tokens: n,
            time: Duration::from_millis(n),
            cache_read_tokens: n,
            cache_write_tokens: 2 * n,
            reasoning_tokens: 3 * n,
        };
        // A reply whose price was unknown adds no cost.
        let cost = (n != 2).then_some(0.25 * n as f64);
        store.record_usage(&lease, None, &usage, cost).await.unwrap();
    }
    let totals = store.usage(&session.id).await.unwrap();
    assert_eq!(
        (totals.calls, totals.input_tokens, totals.output_tokens),
        (3, 60, 6)
    );
    assert_eq!(
        (
            totals.cache_read_tokens,
            totals.cache_write_tokens,
            totals.reasoning_tokens
        ),
        (6, 12, 18)
    );
    assert_eq!(totals.cost_usd, Some(1.0));
    assert!((totals.time_ms - 6.0).abs() < 1e-9);
}
conformance!(usage_adds_up);

async fn an_approved_call_is_running_from_the_decision_in_one_commit(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    for id in ["yes", "no"] {
        store
            .record_call(&lease, &CallRecord::new(id, "rm", json!({"path": id})))
            .await
            .unwrap();
        // Asked about the arguments as a hook rewrote them before the question.
        let asked = CallRecord::new(id, "rm", json!({"path": "rewritten"}));
        store
            .request_approval_for(&lease, &asked, &ApprovalRequest::new("?"))
            .await
            .unwrap();
    }
    let mut start = CallRecord::new("yes", "rm", json!({"path": "rewritten"}));
    start.reply_id = Some("r1".into());
    start.started_at = Some(chrono::Utc::now());
    let approved = store
        .resolve_approval_and_start(
            &lease,
            &"yes".into(),
            &ApprovalDecision::Approve,
            DecisionSource::User,
            &start,
        )
        .await
        .unwrap();
    assert_eq!(
        approved.status,
        CallStatus::Running,
        "not queued: its body starts"
    );
    let decline = ApprovalDecision::Decline { reason: None };
    let mut no_start = start.clone();
    no_start.call_id = "no".into();
    let declined = store
        .resolve_approval_and_start(&lease, &"no".into(), &decline, DecisionSource::User, &no_start)
        .await
        .unwrap();
    assert_eq!(
        declined.status,
        CallStatus::Finished(ToolCallState::Declined { reason: None })
    );

    let stored = store.calls(&session.id).await.unwrap();
    assert_eq!(stored[0].status, CallStatus::Running);
    assert_eq!(
        stored[0].started_at.map(|t| t.timestamp_micros()),
        start.started_at.map(|t| t.timestamp_micros())
    );
    assert_eq!(
        stored[0].reply_id.as_ref().map(ToString::to_string).as_deref(),
        Some("r1")
    );
    assert_eq!(stored[0].arguments, json!({"path": "rewritten"}));
    assert_eq!(stored[0].decision, Some(ApprovalDecision::Approve));
    assert!(stored[1].started_at.is_none(), "a declined call never started");
    assert!(store.pending_approvals(&session.id).await.unwrap().is_empty());

    // The process stops while the approved call runs: it may have partly run.
    let recovered = store.recover(&lease, PendingApprovals::Keep).await.unwrap();
    assert_eq!(recovered.report.interrupted, ["yes"]);
    let closed = &store.calls(&session.id).await.unwrap()[0];
    assert_eq!(closed.status.phase(), Some(CancelPhase::Running));
}
conformance!(an_approved_call_is_running_from_the_decision_in_one_commit);

/// An approval is bound to the tool and arguments it was asked for, used by one start, and
/// expires with a call that never started: a changed argument needs a new approval, and no
/// retry or replay starts an approved call twice.
async fn an_approval_is_bound_to_its_arguments_and_used_once(db: TestDb) {
    use agentry_store::ApprovalState;
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let call = |id: &str, path: &str| CallRecord::new(id, "rm", json!({ "path": path }));
    let state = |records: Vec<agentry_store::ApprovalRecord>, id: &str| {
        records
            .into_iter()
            .find(|r| r.call_id.as_str() == id)
            .map(|r| r.state)
    };
    for id in ["a", "b", "c"] {
        store.record_call(&lease, &call(id, "x")).await.unwrap();
        store
            .request_approval_for(&lease, &call(id, "x"), &ApprovalRequest::new("?"))
            .await
            .unwrap();
    }
    assert_eq!(
        state(store.approvals(&session.id).await.unwrap(), "a"),
        Some(ApprovalState::Pending)
    );

    // Started with other arguments than asked: refused, and nothing changed.
    let refused = store
        .resolve_approval_and_start(
            &lease,
            &"a".into(),
            &ApprovalDecision::Approve,
            DecisionSource::User,
            &call("a", "y"),
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::ApprovalMismatch(_))),
        "{refused:?}"
    );
    assert_eq!(
        state(store.approvals(&session.id).await.unwrap(), "a"),
        Some(ApprovalState::Pending)
    );
    assert_eq!(store.pending_approvals(&session.id).await.unwrap().len(), 3);

    // Approved, then used once by a start with the asked arguments.
    store
        .resolve_approval(
            &lease,
            &"a".into(),
            &ApprovalDecision::Approve,
            DecisionSource::User,
        )
        .await
        .unwrap();
    assert_eq!(
        state(store.approvals(&session.id).await.unwrap(), "a"),
        Some(ApprovalState::Approved)
    );
    let other = store.call_started(&lease, &call("a", "y")).await;
    assert!(matches!(other, Err(StoreError::ApprovalMismatch(_))), "{other:?}");
    assert!(store.call_started(&lease, &call("a", "x")).await.unwrap());
    let used = store.approvals(&session.id).await.unwrap();
    assert_eq!(state(used.clone(), "a"), Some(ApprovalState::Consumed));
    assert!(
        used.iter()
            .find(|r| r.call_id.as_str() == "a")
            .unwrap()
            .consumed_at
            .is_some()
    );
    let again = store.call_started(&lease, &call("a", "x")).await;
    assert!(matches!(again, Err(StoreError::NotApproved { .. })), "{again:?}");

    // Declined: never starts.
    let decline = ApprovalDecision::Decline { reason: None };
    store
        .resolve_approval(&lease, &"b".into(), &decline, DecisionSource::User)
        .await
        .unwrap();
    assert_eq!(
        state(store.approvals(&session.id).await.unwrap(), "b"),
        Some(ApprovalState::Declined)
    );
    // Its call ended with the decline: a start changes nothing.
    assert!(!store.call_started(&lease, &call("b", "x")).await.unwrap());
    let b = &store.calls(&session.id).await.unwrap()[1];
    assert!(b.status.is_terminal() && b.started_at.is_none(), "{b:?}");

    // Still pending when the process stopped: closed by recovery, its approval expired.
    store.recover(&lease, PendingApprovals::Close).await.unwrap();
    assert_eq!(
        state(store.approvals(&session.id).await.unwrap(), "c"),
        Some(ApprovalState::Expired)
    );
    assert_eq!(
        state(store.approvals(&session.id).await.unwrap(), "a"),
        Some(ApprovalState::Consumed)
    );
}
conformance!(an_approval_is_bound_to_its_arguments_and_used_once);

async fn starts_are_written_with_the_messages_in_one_transaction(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let call = Msg::new(
        "bot",
        Role::Assistant,
        vec![ContentBlock::ToolUse(ToolUseBlock {
            id: "c1".into(),
            name: "t".into(),
            input: json!({"n": 1}),
            raw_input: None,
        })],
    );
    store.append_messages(&lease, &[call]).await.unwrap();
    let mut start = CallRecord::new("c1", "t", json!({"n": 2}));
    start.reply_id = Some("r1".into());
    start.started_at = Some(chrono::Utc::now());
    let result = Msg::tool_result(ToolResultBlock {
        id: "c1".into(),
        name: "t".into(),
        output: vec![ContentBlock::text("ok")],
        is_error: false,
    });
    let added = store
        .insert_messages_with_starts(
            &lease,
            None,
            std::slice::from_ref(&start),
            std::slice::from_ref(&result),
        )
        .await
        .unwrap();
    assert_eq!(added, 1);
    let stored = &store.calls(&session.id).await.unwrap()[0];
    assert_eq!(stored.status, CallStatus::Finished(ToolCallState::Completed));
    assert_eq!(stored.arguments, json!({"n": 2}), "the arguments it ran with");
    assert!(stored.reply_id.is_some() && stored.started_at.is_some());
    // Messages all stored already: the starts are still written.
    let mut other = start.clone();
    other.call_id = "c2".into();
    let added = store
        .insert_messages_with_starts(&lease, None, &[other], &[result])
        .await
        .unwrap();
    assert_eq!(added, 0);
    assert_eq!(store.calls(&session.id).await.unwrap().len(), 2);
}
conformance!(starts_are_written_with_the_messages_in_one_transaction);

fn event(id: u64) -> StoredEvent {
    StoredEvent {
        id,
        body: format!(r#"{{"type":"approval_withdrawn","reply_id":"r","call_id":"c{id}"}}"#),
        recorded_at: None,
    }
}

async fn the_event_log_keeps_events_in_order_and_the_reserved_ids_only_grow(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    assert_eq!(store.event_ids(&session.id).await.unwrap(), (0, 0));
    store.reserve_event_ids(&lease, 1024).await.unwrap();
    let (other, other_lease) = leased(&store, "t").await;
    store
        .append_events(vec![
            (&lease, vec![event(1), event(2), event(3)]),
            (&other_lease, vec![event(1)]),
        ])
        .await
        .unwrap();
    assert_eq!(store.event_ids(&other.id).await.unwrap(), (1, 0));
    // An id stored twice (a retried batch) is kept once; a session deleted meanwhile does not
    // keep the others' events from being written.
    db.delete_session_row(&other.id).await;
    store
        .append_events(vec![
            (&other_lease, vec![event(2)]),
            (&lease, vec![event(3), event(5)]),
        ])
        .await
        .unwrap();
    let after_one: Vec<u64> = store
        .events_after(&session.id, 1, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(after_one, [2, 3, 5]);
    let page = store.events_after(&session.id, 2, 1).await.unwrap();
    assert_eq!(
        page.iter().map(|e| (e.id, e.body.clone())).collect::<Vec<_>>(),
        [(3, event(3).body)]
    );
    store.reserve_event_ids(&lease, 10).await.unwrap();
    assert_eq!(
        store.event_ids(&session.id).await.unwrap(),
        (5, 1024),
        "never lowered"
    );
    assert_eq!(db.rows_of("session_events", &other.id).await, 0);

    // The log goes with its session.
    drop(lease);
    assert!(store.delete_session(&session.id).await.unwrap());
    assert_eq!(db.rows_of("session_events", &session.id).await, 0);
}
conformance!(the_event_log_keeps_events_in_order_and_the_reserved_ids_only_grow);

/// Several sessions' logs read at once: each after its own id, at most the limit each, in the
/// order asked; an unknown session is left out, and a session with nothing new is there empty.
async fn the_logs_of_several_sessions_are_read_at_once(db: TestDb) {
    let store = db.open().await;
    let (a, a_lease) = leased(&store, "a").await;
    let (b, b_lease) = leased(&store, "b").await;
    let (c, _c_lease) = leased(&store, "c").await;
    store
        .append_events(vec![
            (&a_lease, vec![event(1), event(2), event(3)]),
            (&b_lease, vec![event(1), event(2)]),
        ])
        .await
        .unwrap();
    let unknown = agentry_store::SessionId::new("no such session");
    let each = store
        .events_after_each(
            &[
                (b.id.clone(), 0),
                (unknown, 0),
                (a.id.clone(), 1),
                (c.id.clone(), 0),
            ],
            1,
        )
        .await
        .unwrap();
    let ids: Vec<(String, Vec<u64>)> = each
        .iter()
        .map(|(id, events)| (id.to_string(), events.iter().map(|e| e.id).collect()))
        .collect();
    assert_eq!(
        ids,
        [
            (b.id.to_string(), vec![1]),
            (a.id.to_string(), vec![2]),
            (c.id.to_string(), vec![]),
        ]
    );
    assert_eq!(each[1].1[0].body, event(2).body);
}
conformance!(the_logs_of_several_sessions_are_read_at_once);

/// A session made for a user says so when found by id, by name and in the list; one made
/// for the store's own user has no owner.
async fn a_session_keeps_the_user_it_was_made_for(db: TestDb) {
    let store = db.open().await;
    let owned = store
        .create_owned_session("hers", &json!({}), Some("ada"))
        .await
        .unwrap();
    let own = store.create_session("mine", &json!({})).await.unwrap();
    assert_eq!(owned.owner.as_deref(), Some("ada"));
    assert_eq!(own.owner, None);
    drop(store);
    let store = db.open().await;
    let found = store.session(&owned.id).await.unwrap().unwrap();
    assert_eq!(found.owner.as_deref(), Some("ada"));
    let named = store.session_named("mine").await.unwrap().unwrap();
    assert_eq!(named.owner, None);
    assert_eq!(
        store.session_owner(&owned.id).await.unwrap(),
        Some(Some("ada".into()))
    );
    assert_eq!(store.session_owner(&own.id).await.unwrap(), Some(None));
    assert_eq!(store.session_owner(&SessionId::random()).await.unwrap(), None);
    let owners: Vec<Option<String>> = store
        .sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.owner)
        .collect();
    assert!(
        owners.contains(&Some("ada".into())) && owners.contains(&None),
        "{owners:?}"
    );
}
conformance!(a_session_keeps_the_user_it_was_made_for);

/// A session name is unique among one owner's sessions only: a name one user took tells
/// another nothing. `session_named` finds the store's own user's.
async fn a_session_name_is_unique_per_owner(db: TestDb) {
    let store = db.open().await;
    let config = json!({});
    let own = store.create_session("notes", &config).await.unwrap();
    let ada = store
        .create_owned_session("notes", &config, Some("ada"))
        .await
        .unwrap();
    let bob = store
        .create_owned_session("notes", &config, Some("bob"))
        .await
        .unwrap();
    assert_ne!(ada.id, bob.id);
    for owner in [None, Some("ada")] {
        let again = store.create_owned_session("notes", &config, owner).await;
        assert!(
            matches!(again, Err(StoreError::NameTaken(_))),
            "{owner:?}: {again:?}"
        );
    }
    assert_eq!(store.session_named("notes").await.unwrap().unwrap().id, own.id);
}
conformance!(a_session_name_is_unique_per_owner);

/// The approval policy keys a grant of one call's arguments as `tool\u{0}arguments`: such a
/// key is kept, listed and revoked as written.
async fn a_grant_key_with_a_nul_character_is_kept_as_written(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let key = format!("write_file\u{0}{}", json!({"path": "a"}));
    let grant = Grant {
        key: key.clone(),
        tool_name: "write_file".into(),
        kind: GrantKind::Allow,
        created_at: chrono::Utc::now(),
    };
    store.put_grant(&lease, &grant).await.unwrap();
    let keys: Vec<String> = store
        .grants(&session.id)
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.key)
        .collect();
    assert_eq!(keys, std::slice::from_ref(&key));
    assert!(store.revoke_grant(&lease, &key).await.unwrap());
    assert!(store.grants(&session.id).await.unwrap().is_empty());
}
conformance!(a_grant_key_with_a_nul_character_is_kept_as_written);

/// What tools and models write may hold a NUL character: a call's arguments, progress,
/// partial result and explanation, and a message, are kept as written.
async fn tool_text_with_a_nul_character_is_kept_as_written(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let mut call = CallRecord::new("c1", "t", json!({"text": "a\u{0}b"}));
    call.progress = Some("page\u{0}1".into());
    call.explanation = Some("why\u{0}not".into());
    call.partial_result = Some("half\u{0}done".into());
    call.status = CallStatus::Finished(ToolCallState::Cancelled {
        phase: CancelPhase::Running,
        partial: true,
        reason: agentry::tool::CancelReason::User,
    });
    assert!(store.record_call(&lease, &call).await.unwrap());
    let stored = &store.calls(&session.id).await.unwrap()[0];
    assert_eq!(stored.arguments, json!({"text": "a\u{0}b"}));
    assert_eq!(stored.progress.as_deref(), Some("page\u{0}1"));
    assert_eq!(stored.explanation.as_deref(), Some("why\u{0}not"));
    assert_eq!(stored.partial_result.as_deref(), Some("half\u{0}done"));
    let msg = Msg::user("a\u{0}b");
    store
        .append_messages(&lease, std::slice::from_ref(&msg))
        .await
        .unwrap();
    assert_eq!(store.messages(&session.id).await.unwrap(), [msg]);
}
conformance!(tool_text_with_a_nul_character_is_kept_as_written);

/// `purge` deletes old events and the old sessions that nobody writes and whose calls all
/// ended; a session being written, or with a call waiting for approval, stays.
async fn purge_deletes_old_events_and_finished_sessions_only(db: TestDb) {
    let store = db.open().await;
    let (finished, lease) = leased(&store, "finished").await;
    store.append_messages(&lease, &[Msg::user("hi")]).await.unwrap();
    store
        .append_events(vec![(
            &lease,
            vec![StoredEvent {
                id: 1,
                body: "{}".into(),
                recorded_at: None,
            }],
        )])
        .await
        .unwrap();
    drop(lease);
    let (waiting, lease) = leased(&store, "waiting").await;
    store
        .record_call(&lease, &CallRecord::new("q", "rm", json!({})))
        .await
        .unwrap();
    store
        .request_approval(&lease, &"q".into(), &ApprovalRequest::new("?"))
        .await
        .unwrap();
    drop(lease);
    let (written, lease) = leased(&store, "written").await;
    store
        .append_events(vec![(
            &lease,
            vec![StoredEvent {
                id: 1,
                body: "{}".into(),
                recorded_at: None,
            }],
        )])
        .await
        .unwrap();

    // Nothing is older than an hour ago.
    let none = store
        .purge(chrono::Utc::now() - chrono::Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(none, agentry_store::Purged::default());
    assert_eq!(store.sessions().await.unwrap().len(), 3);

    // Everything is older than an hour from now: what may go, goes.
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let purged = db
        .once_released(|| {
            let store = store.clone();
            let finished = finished.clone();
            async move {
                let purged = store.purge(later).await?;
                match store.session(&finished.id).await? {
                    Some(_) => Err(StoreError::SessionBusy {
                        session: finished.id.clone(),
                        holder: None,
                    }),
                    None => Ok(purged),
                }
            }
        })
        .await
        .unwrap();
    assert!(purged.sessions >= 1, "{purged:?}");
    assert!(store.session(&finished.id).await.unwrap().is_none());
    assert!(
        store.session(&waiting.id).await.unwrap().is_some(),
        "a call waits in it"
    );
    assert!(
        store.session(&written.id).await.unwrap().is_some(),
        "it is being written"
    );
    assert!(
        store.events_after(&written.id, 0, 10).await.unwrap().is_empty(),
        "its old events went"
    );
    drop(lease);
}
conformance!(purge_deletes_old_events_and_finished_sessions_only);

/// An event keeps the time the server recorded it (a client on another node measures its
/// delivery with it).
async fn an_event_keeps_when_it_was_recorded(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let at = chrono::DateTime::from_timestamp_micros(1_790_000_000_123_456).unwrap();
    let mut recorded = event(1);
    recorded.recorded_at = Some(at);
    store
        .append_events(vec![(&lease, vec![recorded, event(2)])])
        .await
        .unwrap();
    let kept = store.events_after(&session.id, 0, 10).await.unwrap();
    assert_eq!(kept[0].recorded_at, Some(at));
    assert!(kept[1].recorded_at.is_some(), "unknown: the time it was kept");
}
conformance!(an_event_keeps_when_it_was_recorded);

/// A writer that stored every event it handed out gives its reserved ids back: the next one
/// continues right after the last, never below a stored event.
async fn settled_event_ids_continue_after_the_last_stored(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    store.reserve_event_ids(&lease, 1024).await.unwrap();
    store
        .append_events(vec![(&lease, vec![event(1), event(2)])])
        .await
        .unwrap();
    store.settle_event_ids(&lease, 2).await.unwrap();
    assert_eq!(store.event_ids(&session.id).await.unwrap(), (2, 2));
    store.settle_event_ids(&lease, 1).await.unwrap();
    assert_eq!(
        store.event_ids(&session.id).await.unwrap(),
        (2, 2),
        "not below a stored event"
    );
}
conformance!(settled_event_ids_continue_after_the_last_stored);

/// A running call that left a resume point keeps it, also when its start is written again
/// without one, and recovery keeps it open for `start_resumed_reply` instead of closing it.
async fn a_resumable_running_call_survives_a_restart_open(db: TestDb) {
    let store = db.open().await;
    let (session, lease) = leased(&store, "s").await;
    let msgs = vec![
        Msg::user("q"),
        Msg::new(
            "bot",
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUseBlock {
                id: "t".into(),
                name: "research".into(),
                input: json!({}),
                raw_input: None,
            })],
        ),
    ];
    store.append_messages(&lease, &msgs).await.unwrap();
    let mut start = CallRecord::new("t", "research", json!({}));
    start.status = CallStatus::Running;
    start.resume = Some(json!({"mcp_task": {"task_id": "task-1", "session": "s-1"}}));
    store.record_call(&lease, &start).await.unwrap();
    start.resume = None;
    store.record_call(&lease, &start).await.unwrap();
    let stored = store.calls(&session.id).await.unwrap();
    assert_eq!(
        stored[0].resume.as_ref().unwrap()["mcp_task"]["task_id"],
        "task-1"
    );

    let recovered = store.recover(&lease, PendingApprovals::Keep).await.unwrap();
    assert_eq!(recovered.report.resumable_kept, ["t"]);
    assert!(recovered.report.interrupted.is_empty());
    assert_eq!(
        store.calls(&session.id).await.unwrap()[0].status,
        CallStatus::Running
    );
}
conformance!(a_resumable_running_call_survives_a_restart_open);
