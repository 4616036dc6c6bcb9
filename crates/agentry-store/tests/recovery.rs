//! Recovery on load (spec Y4): what a process that stopped mid-reply leaves is closed as
//! interrupted, with exactly one result per call, and nothing is re-run.

use agentry::memory::{Memory, check_tool_pairs};
use agentry::message::Msg;
use agentry::tool::{ApprovalRequest, CancelPhase, CancelReason, INTERRUPTED_RESTART, ToolCallState};
use agentry_store::{CallRecord, CallStatus, REPLY_INTERRUPTED_BY_RESTART, SessionMemory};
use serde_json::json;

use crate::backends::{TestDb, conformance};
use crate::common::{calls, result, texts};

fn interrupted(phase: CancelPhase) -> CallStatus {
    CallStatus::Finished(ToolCallState::Cancelled {
        phase,
        partial: false,
        reason: CancelReason::Restart,
    })
}

async fn y4_calls_left_unfinished_are_closed_as_interrupted_by_restart(db: TestDb) {
    {
        // A process that stops in the middle of a batch of calls.
        let store = db.open().await;
        let session = store.create_session("s", &json!({})).await.unwrap();
        let lease = store.acquire(&session.id).await.unwrap();
        let batch = calls(&["done", "stored", "running", "pending", "queued", "unrecorded"]);
        let mut stored_result = result("stored", "it failed");
        stored_result
            .metadata
            .insert("tool_call".into(), json!({"state": "failed"}));
        store
            .append_messages(
                &lease,
                &[
                    Msg::user("go"),
                    batch.clone(),
                    result("done", "ok"),
                    stored_result,
                ],
            )
            .await
            .unwrap();
        let record = |id: &str, status: CallStatus| {
            let mut r = CallRecord::new(id, "t", json!({"n": id}));
            r.message_id = Some(batch.id.clone());
            r.status = status;
            r
        };
        for (id, status) in [
            ("done", CallStatus::Finished(ToolCallState::Completed)),
            ("stored", CallStatus::Running),
            ("running", CallStatus::Running),
            ("pending", CallStatus::Queued),
            ("queued", CallStatus::Queued),
        ] {
            store.record_call(&lease, &record(id, status)).await.unwrap();
        }
        store
            .request_approval(&lease, &"pending".into(), &ApprovalRequest::new("Run it?"))
            .await
            .unwrap();
        // No clean shutdown: the lease just goes away with the process.
    }

    let store = db.open().await;

    let config = json!({});
    let memory = db
        .once_released(|| SessionMemory::open_or_create(store.clone(), "s", &config))
        .await
        .unwrap();
    let report = memory.recovery().clone();
    let ids = |v: &[agentry::CallId]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(
        ids(&report.interrupted),
        ["running", "pending", "queued", "unrecorded"]
    );
    assert_eq!(
        ids(&report.settled),
        [] as [&str; 0],
        "a stored result closed its call in the same transaction"
    );
    assert_eq!(ids(&report.approvals_closed), ["pending"]);

    let msgs = memory.messages().await.unwrap();
    assert_eq!(
        check_tool_pairs(&msgs),
        Ok(()),
        "one result per call, right after its message"
    );
    assert_eq!(
        texts(&msgs)[2..],
        [
            "ok",
            "it failed",
            INTERRUPTED_RESTART,
            INTERRUPTED_RESTART,
            INTERRUPTED_RESTART,
            INTERRUPTED_RESTART,
            REPLY_INTERRUPTED_BY_RESTART
        ]
    );
    assert!(
        report.reply_noted,
        "the reply that stopped is noted for the model"
    );
    for msg in &msgs[4..msgs.len() - 1] {
        let result = msg.tool_results().next().unwrap();
        assert!(result.is_error, "an interrupted call is an error result (Y2)");
        assert_eq!(msg.metadata["tool_call"]["reason"], "restart");
    }

    let store = memory.store().clone();
    let id = memory.session().id.clone();
    let status =
        |records: &[CallRecord], id: &str| records.iter().find(|r| r.call_id == id).unwrap().status.clone();
    let records = store.calls(&id).await.unwrap();
    assert_eq!(
        status(&records, "done"),
        CallStatus::Finished(ToolCallState::Completed)
    );
    assert_eq!(
        status(&records, "stored"),
        CallStatus::Finished(ToolCallState::Failed)
    );
    assert_eq!(status(&records, "running"), interrupted(CancelPhase::Running));
    assert_eq!(status(&records, "pending"), interrupted(CancelPhase::BeforeStart));
    assert_eq!(status(&records, "queued"), interrupted(CancelPhase::BeforeStart));
    assert_eq!(status(&records, "unrecorded"), interrupted(CancelPhase::Running));
    assert!(
        records.iter().all(|r| r.status.is_terminal()),
        "nothing is queued to run again: a non-idempotent call is never re-run"
    );
    assert!(store.pending_approvals(&id).await.unwrap().is_empty());
    drop(memory);

    // Recovery is done once: a second open finds a consistent session.
    let again = SessionMemory::open(store.clone(), &id).await.unwrap();
    assert!(again.recovery().is_empty(), "{:?}", again.recovery());
    assert_eq!(again.messages().await.unwrap(), msgs);
}
conformance!(y4_calls_left_unfinished_are_closed_as_interrupted_by_restart);

async fn y4_a_reader_never_recovers_a_session_someone_is_writing(db: TestDb) {
    let writer = SessionMemory::open_or_create(db.open().await, "s", &json!({}))
        .await
        .unwrap();
    writer.add(vec![Msg::user("go"), calls(&["c"])]).await.unwrap();
    let mut running = CallRecord::new("c", "t", json!({}));
    running.status = CallStatus::Running;
    writer
        .store()
        .record_call(writer.lease(), &running)
        .await
        .unwrap();

    // A `sessions show` in another process: it reads, sees the call running, changes nothing.
    let reader = db.open().await;
    let id = writer.session().id.clone();
    assert_eq!(reader.calls(&id).await.unwrap()[0].status, CallStatus::Running);
    assert_eq!(reader.messages(&id).await.unwrap().len(), 2);
    let busy = SessionMemory::open(reader.clone(), &id).await;
    assert!(
        matches!(busy, Err(agentry_store::StoreError::SessionBusy { .. })),
        "{busy:?}"
    );
    assert_eq!(reader.calls(&id).await.unwrap()[0].status, CallStatus::Running);
}
conformance!(y4_a_reader_never_recovers_a_session_someone_is_writing);
