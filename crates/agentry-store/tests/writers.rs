//! One writer per session.

use agentry::memory::Memory;
use agentry::message::Msg;
use agentry_store::{SessionMemory, StoreError};
use serde_json::json;

use crate::backends::{TestDb, conformance};

async fn a_second_writer_on_a_session_is_refused_with_a_clear_error(db: TestDb) {
    let first = SessionMemory::open_or_create(db.open().await, "chat", &json!({}))
        .await
        .unwrap();
    first.add(vec![Msg::user("mine")]).await.unwrap();

    // Another store on the same database, as another process would open it.
    let other = db.open().await;
    let id = first.session().id.clone();
    let err = SessionMemory::open(other.clone(), &id).await.unwrap_err();
    match &err {
        StoreError::SessionBusy { session, holder } => {
            assert_eq!(session, &id);
            let holder = holder.as_deref().unwrap_or_default();
            assert!(
                holder.contains(&std::process::id().to_string()),
                "names the holder: {holder}"
            );
        }
        other => panic!("expected SessionBusy, got {other:?}"),
    }
    assert!(err.to_string().contains("already open for writing"), "{err}");
    // The same store cannot hand out a second lease either, nor delete the session under it.
    assert!(matches!(
        first.store().acquire(&id).await,
        Err(StoreError::SessionBusy { .. })
    ));
    assert!(matches!(
        other.delete_session(&id).await,
        Err(StoreError::SessionBusy { .. })
    ));
    // Another session of the same database is free.
    SessionMemory::open_or_create(other.clone(), "another", &json!({}))
        .await
        .unwrap();

    // Once the first writer is gone (closed or killed), the session can be taken.
    drop(first);
    let second = db
        .once_released(|| SessionMemory::open(other.clone(), &id))
        .await
        .unwrap();
    assert_eq!(second.size().await.unwrap(), 1);
}
conformance!(a_second_writer_on_a_session_is_refused_with_a_clear_error);
