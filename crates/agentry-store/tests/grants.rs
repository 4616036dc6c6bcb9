//! Session approval grants (spec A12-A14) in the store.

use agentry_store::{Grant, GrantKind, SessionMemory};
use chrono::Utc;
use serde_json::json;

use crate::common::{db, open};

fn grant(key: &str, kind: GrantKind) -> Grant {
    Grant {
        key: key.into(),
        tool_name: key.split('\0').next().unwrap_or(key).into(),
        kind,
        created_at: Utc::now(),
    }
}

#[tokio::test]
async fn a14_grants_persist_with_their_session_only_and_go_with_it() {
    let (_dir, path) = db();
    let (first, second) = {
        let store = open(&path);
        let one = SessionMemory::open_or_create(store.clone(), "one", &json!({}))
            .await
            .unwrap();
        let two = SessionMemory::open_or_create(store.clone(), "two", &json!({}))
            .await
            .unwrap();
        store
            .put_grant(
                one.lease(),
                &grant("write_file\0{\"path\":\"a\"}", GrantKind::Allow),
            )
            .await
            .unwrap();
        store
            .put_grant(
                one.lease(),
                &grant(
                    "shell",
                    GrantKind::Deny {
                        reason: Some("never".into()),
                    },
                ),
            )
            .await
            .unwrap();
        store
            .put_grant(two.lease(), &grant("search", GrantKind::Allow))
            .await
            .unwrap();
        (one.session().id.clone(), two.session().id.clone())
    };

    // Another process resumes the session: its grants are there, and only its own.
    let store = open(&path);
    let keys = |grants: Vec<Grant>| grants.into_iter().map(|g| (g.key, g.kind)).collect::<Vec<_>>();
    assert_eq!(
        keys(store.grants(&first).await.unwrap()),
        [
            ("write_file\0{\"path\":\"a\"}".to_owned(), GrantKind::Allow),
            (
                "shell".to_owned(),
                GrantKind::Deny {
                    reason: Some("never".into())
                }
            ),
        ]
    );
    assert_eq!(
        keys(store.grants(&second).await.unwrap()),
        [("search".to_owned(), GrantKind::Allow)]
    );

    // Listed and revocable.
    let one = SessionMemory::open(store.clone(), &first).await.unwrap();
    assert!(store.revoke_grant(one.lease(), "shell").await.unwrap());
    assert!(!store.revoke_grant(one.lease(), "shell").await.unwrap());
    assert_eq!(store.grants(&first).await.unwrap().len(), 1);
    drop(one);

    // Dropped with the session, and nowhere else.
    assert!(store.delete_session(&first).await.unwrap());
    let raw = rusqlite::Connection::open(&path).unwrap();
    let left: i64 = raw
        .query_row(
            "SELECT count(*) FROM session_grants WHERE session_id = ?1",
            [first.as_str()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(store.grants(&second).await.unwrap().len(), 1);
}
