//! Unit tests of the SQLite store's operations.

use agentry::message::Msg;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource, ToolCallState};
use serde_json::json;

use super::*;
use crate::CallStatus;

async fn leased(store: &SqliteStore, name: &str) -> (SessionInfo, Lease) {
    let session = store.create_session(name, &json!({"model": "m"})).await.unwrap();
    let lease = store.acquire(&session.id).await.unwrap();
    (session, lease)
}

fn texts(msgs: &[Msg]) -> Vec<String> {
    msgs.iter().map(|m| m.text().unwrap_or_default()).collect()
}

#[tokio::test]
async fn insert_before_keeps_order_and_skips_known_ids() {
    let store = SqliteStore::in_memory().unwrap();
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

#[tokio::test]
async fn a_terminal_call_record_never_changes() {
    let store = SqliteStore::in_memory().unwrap();
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

#[tokio::test]
async fn the_first_decision_wins_and_is_kept_with_its_source() {
    let store = SqliteStore::in_memory().unwrap();
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

#[tokio::test]
async fn usage_adds_up() {
    let store = SqliteStore::in_memory().unwrap();
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

#[tokio::test]
async fn a_full_disk_rolls_back_the_write_and_keeps_what_was_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).unwrap();
    let (session, lease) = leased(&store, "s").await;
    store.append_messages(&lease, &[Msg::user("kept")]).await.unwrap();
    // The database may not grow: what a full disk looks like to SQLite.
    store.with_conn(|conn| {
        let pages: i64 = conn.pragma_query_value(None, "page_count", |r| r.get(0)).unwrap();
        conn.pragma_update(None, "max_page_count", pages).unwrap();
    });
    let big = Msg::user("x".repeat(256 * 1024));
    let full = store.append_messages(&lease, &[big]).await;
    assert!(matches!(full, Err(StoreError::DiskFull { .. })), "{full:?}");
    assert!(full.unwrap_err().to_string().contains("disk is full"));
    drop((lease, store));
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(texts(&store.messages(&session.id).await.unwrap()), ["kept"]);
}

#[tokio::test]
async fn a_lease_of_another_store_is_refused() {
    let one = SqliteStore::in_memory().unwrap();
    let two = SqliteStore::in_memory().unwrap();
    let (_, lease) = leased(&one, "s").await;
    let wrong = two.append_messages(&lease, &[Msg::user("x")]).await;
    assert!(matches!(wrong, Err(StoreError::ForeignLease)), "{wrong:?}");
}

#[test]
fn works_without_a_runtime() {
    let store = SqliteStore::in_memory().unwrap();
    let created = futures::executor::block_on(store.create_session("s", &json!({})));
    assert_eq!(created.unwrap().name, "s");
}

#[tokio::test]
async fn an_approved_call_is_running_from_the_decision_in_one_commit() {
    let store = SqliteStore::in_memory().unwrap();
    let (session, lease) = leased(&store, "s").await;
    for id in ["yes", "no"] {
        store
            .record_call(&lease, &CallRecord::new(id, "rm", json!({"path": id})))
            .await
            .unwrap();
        store
            .request_approval(&lease, &id.into(), &ApprovalRequest::new("?"))
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
    let recovered = store
        .recover(&lease, crate::PendingApprovals::Keep)
        .await
        .unwrap();
    assert_eq!(recovered.report.interrupted, ["yes"]);
    let closed = &store.calls(&session.id).await.unwrap()[0];
    assert_eq!(closed.status.phase(), Some(agentry::tool::CancelPhase::Running));
}

#[tokio::test]
async fn starts_are_written_with_the_messages_in_one_transaction() {
    let store = SqliteStore::in_memory().unwrap();
    let (session, lease) = leased(&store, "s").await;
    let call = Msg::new(
        "bot",
        agentry::message::Role::Assistant,
        vec![agentry::message::ContentBlock::ToolUse(
            agentry::message::ToolUseBlock {
                id: "c1".into(),
                name: "t".into(),
                input: json!({"n": 1}),
                raw_input: None,
            },
        )],
    );
    store.append_messages(&lease, &[call]).await.unwrap();
    let mut start = CallRecord::new("c1", "t", json!({"n": 2}));
    start.reply_id = Some("r1".into());
    start.started_at = Some(chrono::Utc::now());
    let result = Msg::tool_result(agentry::message::ToolResultBlock {
        id: "c1".into(),
        name: "t".into(),
        output: vec![agentry::message::ContentBlock::text("ok")],
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

fn event(id: u64) -> crate::StoredEvent {
    crate::StoredEvent {
        id,
        body: format!(r#"{{"type":"approval_withdrawn","reply_id":"r","call_id":"c{id}"}}"#),
    }
}

#[tokio::test]
async fn the_event_log_keeps_events_in_order_and_the_reserved_ids_only_grow() {
    let store = SqliteStore::in_memory().unwrap();
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
    store.with_conn(|c| {
        c.execute("DELETE FROM sessions WHERE id = ?1", [other.id.as_str()])
            .unwrap()
    });
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
    assert_eq!(store.events_after(&session.id, 2, 1).await.unwrap(), [event(3)]);
    store.reserve_event_ids(&lease, 10).await.unwrap();
    assert_eq!(
        store.event_ids(&session.id).await.unwrap(),
        (5, 1024),
        "never lowered"
    );

    // The log goes with its session.
    drop(lease);
    assert!(store.delete_session(&session.id).await.unwrap());
    let count: i64 = store.with_conn(|c| {
        c.query_row("SELECT count(*) FROM session_events", [], |r| r.get(0))
            .unwrap()
    });
    assert_eq!(count, 0);
}

#[tokio::test]
async fn a_version_1_database_is_migrated_with_its_sessions_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(schema::V1).unwrap();
        conn.pragma_update(None, "application_id", schema::APPLICATION_ID)
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO sessions (id, name, created_at, updated_at, config) VALUES ('s1', 'old', \
             '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', '{}')",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO usage (session_id, reply_id, input_tokens, output_tokens, time_ms, recorded_at) \
             VALUES ('s1', NULL, 7, 3, 1.5, '2026-01-01T00:00:00.000000Z')",
            [],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let old = store.session_named("old").await.unwrap().unwrap();
    assert_eq!(store.event_ids(&old.id).await.unwrap(), (0, 0));
    let totals = store.usage(&old.id).await.unwrap();
    assert_eq!(
        (
            totals.input_tokens,
            totals.output_tokens,
            totals.cache_read_tokens
        ),
        (7, 3, 0)
    );
    assert_eq!(totals.cost_usd, None, "an old ledger has no cost");
    let version: i64 = store.with_conn(|c| c.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap());
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 10);
    // v9: a session from before has no owner (the store's own user's).
    assert_eq!(old.owner, None);
    // v4: an old call has no explanation, a new one keeps it.
    let calls = store.calls(&old.id).await.unwrap();
    assert!(calls.iter().all(|c| c.explanation.is_none()));
}

#[tokio::test]
async fn a_version_6_database_has_its_chinese_terms_indexed_again_in_pairs_and_its_rows_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.db");
    {
        // As version 6 indexed them: each character alone, and no counters (version 8).
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        schema::create_at(&mut conn, 6).unwrap();
        conn.execute_batch(
            "INSERT INTO memories (id, user_name, content, source, created_at)
             VALUES (1, 'ada', '用户的狗叫Rex。', 'user', '2026-01-01T00:00:00.000000Z'),
                    (2, 'ada', '狗', 'user', '2026-01-01T00:00:00.000000Z');
             INSERT INTO memories_fts (rowid, terms) VALUES (1, ' 用 户 的 狗 叫 rex'), (2, ' 狗');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let version: i64 = store.with_conn(|c| c.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap());
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(store.lexical_memories("ada", "狗叫什么", 5).await.unwrap(), [1]);
    // Version 8 counted the kept memories, and counts what comes.
    let state = store.memory_state("ada").await.unwrap();
    assert_eq!((state.count, state.changes), (2, 2));
    assert!(store.forget_memory("ada", 2).await.unwrap());
    let state = store.memory_state("ada").await.unwrap();
    assert_eq!((state.count, state.changes), (1, 3));
    assert_eq!(store.memory_state("bob").await.unwrap().count, 0);
}

/// A memory the user stated, without a vector.
fn memory(content: String) -> super::NewMemory {
    super::NewMemory {
        content,
        source: agentry::memory::long_term::RecordSource::User,
        session_id: None,
        embedding: None,
    }
}

/// A word in thousands of texts is left out of a search that has a rarer word: bm25 would
/// rank every one of those texts, for little.
#[tokio::test]
async fn a_common_word_beside_a_rare_one_is_not_ranked() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
    let mut memories: Vec<super::NewMemory> = (0..2_100).map(|n| memory(format!("meeting {n}"))).collect();
    memories.push(memory("the meeting about the zeppelin".into()));
    store.record_memories("ada", memories).await.unwrap();
    assert_eq!(
        store
            .lexical_memories("ada", "zeppelin meeting", 50)
            .await
            .unwrap(),
        [2_101]
    );
    // Alone, the common word is searched.
    assert_eq!(
        store.lexical_memories("ada", "meeting", 50).await.unwrap().len(),
        50
    );
    // A word the index does not hold does not stand in for the rarest word it does hold.
    assert_eq!(
        store
            .lexical_memories("ada", "quux meeting", 50)
            .await
            .unwrap()
            .len(),
        50
    );
    // Among few texts, every word counts.
    let few = SqliteStore::open(dir.path().join("few.db")).unwrap();
    few.record_memories(
        "bob",
        vec![memory("meeting notes".into()), memory("zeppelin".into())],
    )
    .await
    .unwrap();
    assert_eq!(
        few.lexical_memories("bob", "zeppelin meeting", 5)
            .await
            .unwrap()
            .len(),
        2
    );
}

/// When even the rarest query word is in more texts than a search ranks, the newest of them
/// are ranked: the oldest text, the best match by bm25, is not among them.
#[tokio::test]
async fn a_word_in_too_many_texts_ranks_only_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
    let mut memories = vec![memory("meeting".into())];
    memories.extend((0..1_100).map(|n| memory(format!("meeting about topic number {n}"))));
    store.record_memories("ada", memories).await.unwrap();
    let found = store.lexical_memories("ada", "meeting", 2_000).await.unwrap();
    assert_eq!(found.len(), 1_000);
    assert!(!found.contains(&1), "the oldest memory was ranked");
    assert!(found.contains(&1_101), "the newest memory was not ranked");
}

/// A session made for a user says so when found by id, by name and in the list; one made
/// for the store's own user has no owner.
#[tokio::test]
async fn a_session_keeps_the_user_it_was_made_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).unwrap();
    let owned = store
        .create_owned_session("hers", &serde_json::json!({}), Some("ada"))
        .await
        .unwrap();
    let own = store
        .create_session("mine", &serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(owned.owner.as_deref(), Some("ada"));
    assert_eq!(own.owner, None);
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    let found = store.session(&owned.id).await.unwrap().unwrap();
    assert_eq!(found.owner.as_deref(), Some("ada"));
    let named = store.session_named("mine").await.unwrap().unwrap();
    assert_eq!(named.owner, None);
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

/// A session name is unique among one owner's sessions only: a name one user took tells
/// another nothing. `session_named` finds the store's own user's.
#[tokio::test]
async fn a_session_name_is_unique_per_owner() {
    let store = SqliteStore::in_memory().unwrap();
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

/// Version 10 makes the sessions table again (names unique per owner): every row that
/// belongs to a session is still there, and foreign keys are enforced afterwards.
#[tokio::test]
async fn a_version_9_database_keeps_every_row_when_names_become_unique_per_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        schema::create_at(&mut conn, 9).unwrap();
        conn.execute_batch(
            "INSERT INTO sessions (id, name, created_at, updated_at, config, event_ids_reserved, owner)
             VALUES ('s1', 'old', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', '{}', 64, NULL);
             INSERT INTO usage (session_id, reply_id, input_tokens, output_tokens, time_ms, recorded_at)
             VALUES ('s1', NULL, 7, 3, 1.5, '2026-01-01T00:00:00.000000Z');
             INSERT INTO session_events (session_id, event_id, body) VALUES ('s1', 1, '{}');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let old = store.session_named("old").await.unwrap().unwrap();
    assert_eq!(store.usage(&old.id).await.unwrap().input_tokens, 7);
    let counts: (i64, i64, i64) = store.with_conn(|c| {
        c.query_row(
            "SELECT (SELECT count(*) FROM session_events), (SELECT event_ids_reserved FROM sessions),
                    (SELECT foreign_keys FROM pragma_foreign_keys)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    });
    assert_eq!(counts, (1, 64, 1));
    store
        .create_owned_session("old", &json!({}), Some("ada"))
        .await
        .unwrap();
    assert!(store.delete_session(&old.id).await.unwrap());
    let left: i64 = store.with_conn(|c| {
        c.query_row("SELECT count(*) FROM usage", [], |r| r.get(0))
            .unwrap()
    });
    assert_eq!(left, 0, "the session's rows go with it");
}
