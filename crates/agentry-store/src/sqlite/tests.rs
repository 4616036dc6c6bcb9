//! Unit tests of what is the SQLite store's own: a full disk, use without a runtime, migrations
//! from older files, full-text search. What any `SessionStore` does is checked on every backend
//! by the conformance suite in `tests/` (`tests/operations.rs` and the other modules).

use agentry::message::Msg;
use serde_json::json;

use super::*;

async fn leased(store: &SqliteStore, name: &str) -> (SessionInfo, Lease) {
    let session = store.create_session(name, &json!({"model": "m"})).await.unwrap();
    let lease = store.acquire(&session.id).await.unwrap();
    (session, lease)
}

fn texts(msgs: &[Msg]) -> Vec<String> {
    msgs.iter().map(|m| m.text().unwrap_or_default()).collect()
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

#[test]
fn works_without_a_runtime() {
    let store = SqliteStore::in_memory().unwrap();
    let created = futures::executor::block_on(store.create_session("s", &json!({})));
    assert_eq!(created.unwrap().name, "s");
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
    assert_eq!(SCHEMA_VERSION, 13);
    // v9: a session from before has no owner (the store's own user's).
    assert_eq!(old.owner, None);
    // v4: an old call has no explanation, a new one keeps it.
    let calls = store.calls(&old.id).await.unwrap();
    assert!(calls.iter().all(|c| c.explanation.is_none()));
    // v13: nor a resume point.
    assert!(calls.iter().all(|c| c.resume.is_none()));
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
