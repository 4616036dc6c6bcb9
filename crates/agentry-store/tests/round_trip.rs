//! A session written, closed and read back.

use agentry::memory::{Memory, check_tool_pairs};
use agentry::message::{ContentBlock, MediaSource, Msg, Role};
use agentry::tool::{CancelPhase, CancelReason, DecisionSource, ToolCallState};
use agentry_store::{CallRecord, CallStatus, SessionMemory, StoreError};
use serde_json::json;

use crate::backends::{TestDb, conformance};
use crate::common::{calls, result, texts};

async fn a_session_round_trips_with_messages_and_calls(db: TestDb) {
    let store = db.open().await;
    let config = json!({"model": "qwen", "sys_prompt": "be brief", "max_iters": 5});
    let session = store.create_session("work", &config).await.unwrap();
    let lease = store.acquire(&session.id).await.unwrap();

    let mut user = Msg::user("look this up");
    user.metadata.insert("k".into(), json!([1, 2]));
    let call_msg = calls(&["c1", "c2"]);
    let picture = Msg::new(
        "bot",
        Role::Assistant,
        vec![
            ContentBlock::thinking("hmm"),
            ContentBlock::text("here"),
            ContentBlock::Image {
                source: MediaSource::Url {
                    url: "https://example.com/a.png".into(),
                },
            },
        ],
    );
    let written = vec![
        user,
        call_msg.clone(),
        result("c1", "one"),
        result("c2", "two"),
        picture,
    ];

    let mut c1 = CallRecord::new("c1", "t", json!({"n": "c1"}));
    c1.message_id = Some(call_msg.id.clone());
    c1.reply_id = Some("r1".into());
    c1.idempotent = true;
    c1.decision_source = Some(DecisionSource::Auto);
    c1.started_at = Some(chrono::Utc::now());
    c1.status = CallStatus::Finished(ToolCallState::Completed);
    c1.finished_at = Some(chrono::Utc::now());
    let mut c2 = CallRecord::new("c2", "t", json!({"n": "c2"}));
    c2.status = CallStatus::Finished(ToolCallState::Cancelled {
        phase: CancelPhase::Running,
        partial: true,
        reason: CancelReason::User,
    });
    c2.partial_result = Some("half of it".into());
    store.record_call(&lease, &c1).await.unwrap();
    store.record_call(&lease, &c2).await.unwrap();
    // After the records, so the results find their calls closed already (S1: kept as written).
    store.append_messages(&lease, &written).await.unwrap();
    drop(lease);
    drop(store);

    let store = db.open().await;
    let found = store.session_named("work").await.unwrap().unwrap();
    assert_eq!(found.id, session.id);
    assert_eq!(found.config, config);
    assert_eq!(found.message_count, 5);
    let read = store.messages(&session.id).await.unwrap();
    assert_eq!(read, written, "every message, in order, exactly as written");
    assert_eq!(check_tool_pairs(&read), Ok(()));
    let records = store.calls(&session.id).await.unwrap();
    // Times are stored to the microsecond.
    fn cut(t: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap()
    }
    let micros = |mut r: CallRecord| {
        r.created_at = cut(r.created_at);
        r.started_at = r.started_at.map(cut);
        r.finished_at = r.finished_at.map(cut);
        r
    };
    assert_eq!(records, vec![micros(c1), micros(c2.clone())]);
    assert_eq!(records[1].status.phase(), Some(CancelPhase::Running));
    assert_eq!(records[1].status.partial(), Some(true));
    assert_eq!(records[1].status.stop_reason(), Some("user"));
    assert_eq!(store.sessions().await.unwrap().len(), 1);
}
conformance!(a_session_round_trips_with_messages_and_calls);

async fn session_memory_reopens_with_the_same_messages_in_order(db: TestDb) {
    let memory = SessionMemory::open_or_create(db.open().await, "chat", &json!({}))
        .await
        .unwrap();
    let first = Msg::user("1");
    let tail = Msg::user("4");
    memory
        .add(vec![first.clone(), calls(&["a"]), tail.clone()])
        .await
        .unwrap();
    // Parallel results are stored in call order before what follows them.
    memory
        .insert_before(&tail.id, vec![result("a", "3")])
        .await
        .unwrap();
    memory.add(vec![first.clone()]).await.unwrap();
    let before = memory.messages().await.unwrap();
    assert_eq!(texts(&before), ["1", "", "3", "4"]);
    drop(memory);

    // Another store instance on the same database: what a new process sees.
    let store = db.open().await;
    let config = json!({});
    let again = db
        .once_released(|| SessionMemory::open_or_create(store.clone(), "chat", &config))
        .await
        .unwrap();
    assert!(again.recovery().is_empty());
    assert_eq!(again.messages().await.unwrap(), before);
    assert_eq!(again.size().await.unwrap(), 4);
    again.delete(std::slice::from_ref(&first.id)).await.unwrap();
    again.clear().await.unwrap();
    assert!(
        again
            .store()
            .messages(&again.session().id)
            .await
            .unwrap()
            .is_empty()
    );
}
conformance!(session_memory_reopens_with_the_same_messages_in_order);

async fn names_are_unique_and_deleting_removes_everything(db: TestDb) {
    let store = db.open().await;
    let session = store.create_session("a", &json!({})).await.unwrap();
    let taken = store.create_session("a", &json!({})).await;
    assert!(
        matches!(taken, Err(agentry_store::StoreError::NameTaken(_))),
        "{taken:?}"
    );
    let lease = store.acquire(&session.id).await.unwrap();
    store.append_messages(&lease, &[Msg::user("x")]).await.unwrap();
    drop(lease);
    assert!(store.delete_session(&session.id).await.unwrap());
    assert!(store.session(&session.id).await.unwrap().is_none());
    let gone = store.messages(&session.id).await;
    assert!(
        matches!(gone, Err(agentry_store::StoreError::SessionNotFound(_))),
        "{gone:?}"
    );
    assert!(!store.delete_session(&session.id).await.unwrap());
}
conformance!(names_are_unique_and_deleting_removes_everything);

async fn calls_are_read_off_the_messages_in_the_same_transaction(db: TestDb) {
    let store = db.open().await;
    let session = store.create_session("s", &json!({})).await.unwrap();
    let lease = store.acquire(&session.id).await.unwrap();
    let made = calls(&["a", "b"]);
    store
        .append_messages(&lease, &[Msg::user("go"), made.clone()])
        .await
        .unwrap();
    let records = store.calls(&session.id).await.unwrap();
    assert_eq!(records.len(), 2);
    for record in &records {
        assert_eq!(record.message_id.as_deref(), Some(made.id.as_str()));
        assert_eq!(record.status, CallStatus::Running, "made, perhaps started");
    }
    assert_eq!(records[1].arguments, json!({"n": "b"}));

    let mut cut = result("a", "half");
    cut.metadata.insert(
        "tool_call".into(),
        json!({"state": "cancelled", "phase": "running", "partial": true, "reason": "user",
               "decision": "user", "started_at": "2026-11-24T08:00:00Z"}),
    );
    store
        .append_messages(&lease, &[cut, result("b", "ok")])
        .await
        .unwrap();
    let records = store.calls(&session.id).await.unwrap();
    assert_eq!(
        records[0].status,
        CallStatus::Finished(ToolCallState::Cancelled {
            phase: CancelPhase::Running,
            partial: true,
            reason: CancelReason::User,
        })
    );
    assert_eq!(records[0].partial_result.as_deref(), Some("half"));
    assert_eq!(records[0].decision_source, Some(DecisionSource::User));
    assert_eq!(
        records[0].started_at.map(|t| t.to_rfc3339()),
        Some("2026-11-24T08:00:00+00:00".to_owned())
    );
    assert_eq!(records[1].status, CallStatus::Finished(ToolCallState::Completed));
    assert_eq!(
        records[1].arguments,
        json!({"n": "b"}),
        "closing keeps what the call said"
    );
}
conformance!(calls_are_read_off_the_messages_in_the_same_transaction);

async fn a_stored_result_ends_its_calls_approval_question(db: TestDb) {
    let store = db.open().await;
    let session = store.create_session("s", &json!({})).await.unwrap();
    let lease = store.acquire(&session.id).await.unwrap();
    store
        .append_messages(&lease, &[Msg::user("go"), calls(&["a"])])
        .await
        .unwrap();
    store
        .request_approval(
            &lease,
            &"a".into(),
            &agentry::tool::ApprovalRequest::new("Run a?"),
        )
        .await
        .unwrap();
    assert_eq!(store.pending_approvals(&session.id).await.unwrap().len(), 1);
    // Cancelled while it waited: the result is all that closes it.
    store
        .append_messages(&lease, &[result("a", "cancelled")])
        .await
        .unwrap();
    assert_eq!(store.pending_approvals(&session.id).await.unwrap(), []);
}
conformance!(a_stored_result_ends_its_calls_approval_question);

async fn an_export_imports_as_an_equal_session(db: TestDb) {
    use agentry_store::{Grant, GrantKind, SessionExport};
    let store = db.open().await;
    let session = store
        .create_session("work", &json!({"model": "m"}))
        .await
        .unwrap();
    let lease = store.acquire(&session.id).await.unwrap();
    let made = calls(&["a", "b"]);
    store
        .append_messages(&lease, &[Msg::user("go"), made, result("a", "one")])
        .await
        .unwrap();
    store
        .request_approval(
            &lease,
            &"b".into(),
            &agentry::tool::ApprovalRequest::new("Run b?"),
        )
        .await
        .unwrap();
    store
        .put_grant(
            &lease,
            &Grant {
                key: "t".into(),
                tool_name: "t".into(),
                kind: GrantKind::Allow,
                created_at: chrono::Utc::now(),
            },
        )
        .await
        .unwrap();
    drop(lease);

    let exported = SessionExport::read(store.as_ref(), &session.id).await.unwrap();
    let text = serde_json::to_string(&exported).unwrap();
    let parsed = SessionExport::from_json(&text).unwrap();
    assert_eq!(parsed, exported, "the document reads back as written");
    let copy = parsed.import(store.as_ref(), Some("copy")).await.unwrap();
    assert_ne!(copy.id, session.id);
    let again = SessionExport::read(store.as_ref(), &copy.id).await.unwrap();
    assert_eq!(again.messages, exported.messages);
    assert_eq!(again.calls, exported.calls);
    assert_eq!(again.grants, exported.grants);
    assert_eq!(again.pending_approvals.len(), 1);
    assert_eq!(
        again.pending_approvals[0].request,
        exported.pending_approvals[0].request
    );
    assert_eq!(again.session.config, json!({"model": "m"}));

    assert!(matches!(
        parsed.import(store.as_ref(), None).await,
        Err(StoreError::NameTaken(_))
    ));
    assert!(SessionExport::from_json(r#"{"format": "other", "version": 1}"#).is_err());
    assert!(SessionExport::from_json(r#"{"format": "agentry-session", "version": 9}"#).is_err());
    assert_eq!(
        store.sessions().await.unwrap().len(),
        2,
        "a refused import leaves nothing behind"
    );
}
conformance!(an_export_imports_as_an_equal_session);
