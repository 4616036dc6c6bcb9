//! Session approval grants (spec A12-A14) in the store.

use agentry_store::{Grant, GrantKind, SessionMemory};
use chrono::Utc;
use serde_json::json;

use crate::backends::{TestDb, conformance};

fn grant(key: &str, kind: GrantKind) -> Grant {
    Grant {
        key: key.into(),
        tool_name: key.split('\0').next().unwrap_or(key).into(),
        kind,
        created_at: Utc::now(),
    }
}

async fn a14_grants_persist_with_their_session_only_and_go_with_it(db: TestDb) {
    let (first, second) = {
        let store = db.open().await;
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
    let store = db.open().await;
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
    let one = db
        .once_released(|| SessionMemory::open(store.clone(), &first))
        .await
        .unwrap();
    assert!(store.revoke_grant(one.lease(), "shell").await.unwrap());
    assert!(!store.revoke_grant(one.lease(), "shell").await.unwrap());
    assert_eq!(store.grants(&first).await.unwrap().len(), 1);
    drop(one);

    // Dropped with the session, and nowhere else.
    assert!(store.delete_session(&first).await.unwrap());
    assert_eq!(db.rows_of("session_grants", &first).await, 0);
    assert_eq!(store.grants(&second).await.unwrap().len(), 1);
}
conformance!(a14_grants_persist_with_their_session_only_and_go_with_it);
