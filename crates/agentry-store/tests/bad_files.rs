//! Files the store must refuse, or wait for, with a clear error and nothing changed or lost.

use std::path::Path;
use std::time::{Duration, Instant};

use agentry::message::Msg;
use agentry_store::{SCHEMA_VERSION, SessionStore, SqliteOptions, SqliteStore, StoreError};
use serde_json::json;

use crate::common::db;

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn wal_is_empty(path: &Path) -> bool {
    let wal = path.with_file_name(format!("{}-wal", path.file_name().unwrap().to_string_lossy()));
    std::fs::metadata(wal).map(|m| m.len() == 0).unwrap_or(true)
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_the_file_left_unchanged() {
    let (_dir, path) = db();
    {
        let store = SqliteStore::open(&path).unwrap();
        store.create_session("s", &json!({})).await.unwrap();
    }
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let before = bytes(&path);
    let err = SqliteStore::open(&path).unwrap_err();
    match &err {
        StoreError::NewerSchema { found, supported, .. } => {
            assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("newer") && text.contains("left unchanged"),
        "{text}"
    );
    assert_eq!(bytes(&path), before, "not a byte changed");
    assert!(wal_is_empty(&path));
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_unchanged() {
    let (_dir, path) = db();
    let garbage: Vec<u8> = (0..8192_u32).map(|i| (i * 7 + 13) as u8).collect();
    std::fs::write(&path, &garbage).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string().contains("not a readable session database"),
        "{err}"
    );
    assert_eq!(bytes(&path), garbage);
}

#[tokio::test]
async fn damaged_pages_are_reported_as_corruption() {
    let (_dir, path) = db();
    let id = {
        let store = SqliteStore::open(&path).unwrap();
        let session = store.create_session("s", &json!({})).await.unwrap();
        let lease = store.acquire(&session.id).await.unwrap();
        let msgs: Vec<Msg> = (0..200).map(|i| Msg::user(format!("message {i}"))).collect();
        store.append_messages(&lease, &msgs).await.unwrap();
        session.id
    };
    // Every page but the first (the header and the schema) overwritten.
    let mut data = bytes(&path);
    let page = 4096;
    assert!(data.len() > 2 * page, "the messages span several pages");
    for b in &mut data[page..] {
        *b = 0xA5;
    }
    std::fs::write(&path, &data).unwrap();
    let outcome = match SqliteStore::open(&path) {
        Err(e) => Err(e),
        Ok(store) => store.messages(&id).await.map(|_| ()),
    };
    assert!(matches!(outcome, Err(StoreError::Corrupt { .. })), "{outcome:?}");
}

#[test]
fn another_programs_database_is_refused() {
    let (_dir, path) = db();
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
    }
    let before = bytes(&path);
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert_eq!(bytes(&path), before);
}

#[tokio::test]
async fn a_locked_database_waits_the_busy_timeout_then_says_so() {
    let (_dir, path) = db();
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(300));
    let store = SqliteStore::open_with(&path, options).unwrap();
    let kept = store.create_session("kept", &json!({})).await.unwrap();

    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let err = store.create_session("other", &json!({})).await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("locked by another process"), "{err}");
    assert!(
        waited >= Duration::from_millis(250),
        "it waited for the lock ({waited:?})"
    );

    raw.execute_batch("COMMIT").unwrap();
    store.create_session("other", &json!({})).await.unwrap();
    assert!(
        store.session(&kept.id).await.unwrap().is_some(),
        "nothing was lost"
    );
}

#[test]
fn a_database_locked_while_opening_is_a_clear_error() {
    let (_dir, path) = db();
    let raw = rusqlite::Connection::open(&path).unwrap();
    // An exclusive lock in rollback-journal mode keeps even readers out.
    raw.execute_batch("BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS x (y);")
        .unwrap();
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(100));
    let err = SqliteStore::open_with(&path, options).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
}
