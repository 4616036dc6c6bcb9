//! Knowledge bases in the session database: documents stored whole or not at all, replaced when
//! they change, found by meaning and by words, each chunk naming its file; and the agent's
//! retrieval before its loop.

use std::sync::Arc;

use agentry::ReActAgent;
use agentry::embedding::Embedder;
use agentry::knowledge::KnowledgeBase;
use agentry::message::Msg;
use agentry_store::{NewChunk, SqliteStore, StoredKnowledgeBase};

use crate::common::{Replies, db};
use crate::long_term::Concepts;

async fn add(store: &SqliteStore, embedder: &Concepts, base: i64, path: &str, texts: &[&str]) {
    use agentry::embedding::EmbedPurpose;
    let vectors = embedder
        .embed(
            texts.iter().map(|t| t.to_string()).collect(),
            EmbedPurpose::Document,
        )
        .await
        .unwrap();
    let chunks = texts
        .iter()
        .zip(vectors)
        .map(|(t, v)| NewChunk {
            content: t.to_string(),
            embedding: Some(("concepts-1".into(), v)),
        })
        .collect();
    store
        .replace_document(base, path, &format!("hash of {texts:?}"), None, chunks)
        .await
        .unwrap();
}

#[tokio::test]
async fn chunks_are_found_by_meaning_and_words_name_their_file_and_a_changed_file_replaces_its_own() {
    let (_dir, path) = db();
    let store = SqliteStore::open(&path).unwrap();
    let embedder = Arc::new(Concepts::default());
    let info = store.open_knowledge_base("notes").await.unwrap();
    add(
        &store,
        &embedder,
        info.id,
        "pets.md",
        &["Rex is the family dog.", "He eats twice a day."],
    )
    .await;
    add(
        &store,
        &embedder,
        info.id,
        "work.md",
        &["The office opens at nine.", "Invoices go to floor 3."],
    )
    .await;
    let base = StoredKnowledgeBase::open(
        store.clone(),
        "notes",
        Some(Arc::clone(&embedder) as Arc<dyn Embedder>),
    )
    .await
    .unwrap()
    .unwrap();
    let found = base.retrieve("what pet do we have?", 2, None).await.unwrap();
    assert_eq!(found[0].content, "Rex is the family dog.");
    assert_eq!(found[0].source, "pets.md");
    assert_eq!(found[0].base, "notes");
    assert!(found[0].score > 0.9, "{found:?}");
    let found = base.retrieve("invoices", 1, None).await.unwrap();
    assert_eq!(found[0].source, "work.md");
    // A threshold leaves out what scores below it.
    assert!(
        base.retrieve("what pet do we have?", 5, Some(0.99))
            .await
            .unwrap()
            .len()
            <= 1
    );

    // The changed file replaces its chunks; the other file keeps its own.
    add(
        &store,
        &embedder,
        info.id,
        "pets.md",
        &["Rex was rehomed; we now have a cat."],
    )
    .await;
    assert_eq!(
        store.document_hash(info.id, "pets.md").await.unwrap().as_deref(),
        Some("hash of [\"Rex was rehomed; we now have a cat.\"]")
    );
    let found = base.retrieve("family dog twice a day", 5, None).await.unwrap();
    assert!(
        found.iter().all(|c| c.content != "Rex is the family dog."),
        "{found:?}"
    );
    let listed = store.knowledge_bases().await.unwrap();
    assert_eq!((listed[0].documents, listed[0].chunks), (2, 3));
    assert!(store.delete_knowledge_base("notes").await.unwrap());
    assert!(
        StoredKnowledgeBase::open(store.clone(), "notes", None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.knowledge_bases().await.unwrap().is_empty());
}

#[tokio::test]
async fn the_first_request_of_the_loop_carries_the_retrieved_chunks_with_their_sources() {
    let (_dir, path) = db();
    let store = SqliteStore::open(&path).unwrap();
    let embedder = Arc::new(Concepts::default());
    let info = store.open_knowledge_base("notes").await.unwrap();
    add(&store, &embedder, info.id, "pets.md", &["Rex is the family dog."]).await;
    let base = StoredKnowledgeBase::open(
        store.clone(),
        "notes",
        Some(Arc::clone(&embedder) as Arc<dyn Embedder>),
    )
    .await
    .unwrap()
    .unwrap();
    // First the rewrite of the question, then the answer.
    let model = Replies::default().text("family pet").text("Your pet is Rex.");
    let agent = ReActAgent::builder()
        .name("bot")
        .model(model.clone())
        .knowledge(base)
        .build()
        .unwrap();
    agent.reply(Msg::user("Remind me, who is ours?")).await.unwrap();
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].last().unwrap().text().as_deref(),
        Some("Remind me, who is ours?")
    );
    let block = requests[1].last().unwrap().text().unwrap();
    assert!(block.starts_with("<retrieved_knowledge>"), "{block}");
    assert!(block.contains("[source: pets.md (notes)"), "{block}");
    assert!(block.contains("Rex is the family dog."), "{block}");
    // A rewrite that fails falls back to the message itself.
    let model = Replies::default().text("").text("Rex.");
    let agent = ReActAgent::builder()
        .name("bot")
        .model(model.clone())
        .knowledge(
            StoredKnowledgeBase::open(
                store.clone(),
                "notes",
                Some(Arc::clone(&embedder) as Arc<dyn Embedder>),
            )
            .await
            .unwrap()
            .unwrap(),
        )
        .build()
        .unwrap();
    agent.reply(Msg::user("our dog?")).await.unwrap();
    let block = model.requests.lock().unwrap()[1].last().unwrap().text().unwrap();
    assert!(block.contains("Rex is the family dog."), "{block}");
}
