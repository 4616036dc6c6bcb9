//! Long-term memory in the session database: found by meaning and by words, per user, kept
//! across processes, forgotten on request; a failing embedder loses nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use agentry::embedding::{EmbedError, EmbedPurpose, Embedder};
use agentry::memory::long_term::{LongTermMemory, RecordSource};
use agentry_store::{SqliteStore, StoredLongTermMemory};
use async_trait::async_trait;

use crate::common::db;

/// A toy model of meaning: each text's vector counts the concepts its words name, so "pet"
/// and "dog" land together although they share no letters.
#[derive(Default)]
pub struct Concepts {
    pub broken: AtomicBool,
    /// Texts embedded so far.
    pub embedded: AtomicUsize,
}

const CONCEPTS: [&[&str]; 4] = [
    &["pet", "dog", "cat", "rex", "狗"],
    &["weather", "sunny", "rain", "天气"],
    &["food", "pizza", "lunch"],
    &["work", "job", "office"],
];

#[async_trait]
impl Embedder for Concepts {
    fn model_id(&self) -> &str {
        "concepts-1"
    }

    fn dimensions(&self) -> usize {
        CONCEPTS.len()
    }

    async fn embed(&self, texts: Vec<String>, _purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(EmbedError::Model("the model is gone".into()));
        }
        self.embedded.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts
            .iter()
            .map(|text| {
                let text = text.to_lowercase();
                let mut v: Vec<f32> = CONCEPTS
                    .iter()
                    .map(|words| words.iter().filter(|w| text.contains(*w)).count() as f32)
                    .collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect())
    }
}

fn memory(store: &SqliteStore, user: &str, embedder: &Arc<Concepts>) -> StoredLongTermMemory {
    StoredLongTermMemory::new(
        store.clone(),
        user,
        Some(Arc::clone(embedder) as Arc<dyn Embedder>),
    )
}

#[tokio::test]
async fn a_question_sharing_no_word_finds_the_memory_by_meaning_and_only_its_users() {
    let (_dir, path) = db();
    let store = SqliteStore::open(&path).unwrap();
    let embedder = Arc::new(Concepts::default());
    let ada = memory(&store, "ada", &embedder);
    let mut fillers: Vec<String> = (0..300)
        .map(|n| format!("note {n}: the office moved to floor {n}"))
        .collect();
    fillers.push("The user's dog is Rex.".into());
    fillers.push("Lunch on Fridays is pizza.".into());
    assert_eq!(ada.record(fillers, RecordSource::Agent).await.unwrap(), 302);
    let bob = memory(&store, "bob", &embedder);
    bob.record(vec!["Bob's cat is Tom.".into()], RecordSource::User)
        .await
        .unwrap();

    let found = ada.retrieve("what is my pet called?", 3).await.unwrap();
    assert_eq!(found[0].content, "The user's dog is Rex.", "{found:?}");
    assert!(
        found.iter().all(|r| !r.content.contains("Tom")),
        "another user's memory: {found:?}"
    );
    assert!(found[0].score.unwrap() > 0.0);
    // Chinese, by meaning.
    let found = ada.retrieve("我的狗", 1).await.unwrap();
    assert_eq!(found[0].content, "The user's dog is Rex.");
    // By words alone, with no vector for them.
    let found = ada.retrieve("floor 17", 1).await.unwrap();
    assert_eq!(found[0].content, "note 17: the office moved to floor 17");
    let bobs = bob.retrieve("pet", 5).await.unwrap();
    assert_eq!(bobs.len(), 1);
    assert_eq!(bobs[0].content, "Bob's cat is Tom.");
}

#[tokio::test]
async fn memories_outlive_the_process_and_another_writer_is_seen() {
    let (_dir, path) = db();
    let embedder = Arc::new(Concepts::default());
    {
        let store = SqliteStore::open(&path).unwrap();
        let first = memory(&store, "ada", &embedder);
        first
            .record(vec!["It rains in Lyon today.".into()], RecordSource::Reply)
            .await
            .unwrap();
        // Its vectors are read now; a second writer's record must still be found later.
        assert_eq!(first.retrieve("weather", 5).await.unwrap().len(), 1);
        let second = memory(&SqliteStore::open(&path).unwrap(), "ada", &embedder);
        second
            .record(vec!["Ada's dog is Rex.".into()], RecordSource::Agent)
            .await
            .unwrap();
        let found = first.retrieve("my pet", 1).await.unwrap();
        assert_eq!(found[0].content, "Ada's dog is Rex.");
    }
    let store = SqliteStore::open(&path).unwrap();
    let again = memory(&store, "ada", &embedder);
    let listed = again.list(10).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].content, "Ada's dog is Rex.", "newest first");
    assert_eq!(listed[0].source, RecordSource::Agent);
    // Forgetting is per user: bob cannot forget ada's memory.
    let bob = memory(&store, "bob", &embedder);
    assert!(!bob.forget(listed[0].id).await.unwrap());
    assert!(again.forget(listed[0].id).await.unwrap());
    let left = again.retrieve("my pet dog", 5).await.unwrap();
    assert!(left.iter().all(|r| !r.content.contains("Rex")), "{left:?}");
    assert_eq!(again.list(10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_failing_embedder_loses_nothing_and_words_still_find_it() {
    let (_dir, path) = db();
    let store = SqliteStore::open(&path).unwrap();
    let embedder = Arc::new(Concepts::default());
    embedder.broken.store(true, Ordering::SeqCst);
    let ada = memory(&store, "ada", &embedder);
    assert_eq!(
        ada.record(
            vec!["The spare key is under the blue pot.".into(), "  ".into()],
            RecordSource::Agent
        )
        .await
        .unwrap(),
        1
    );
    let found = ada.retrieve("where is the key?", 5).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].content, "The spare key is under the blue pot.");
}

/// Static mode: the first request of a reply carries what memory holds about the question, as
/// a `<long_term_memory>` user message after it; the answered exchange is recorded. Agent
/// mode: the model records and retrieves with its tools, and another session finds it.
#[tokio::test]
async fn the_agent_recalls_before_its_loop_records_after_it_and_uses_its_tools() {
    use agentry::ReActAgent;
    use agentry::memory::long_term::LongTermMemoryMode;
    use agentry::message::Msg;
    use serde_json::json;

    use crate::common::Replies;

    let (_dir, path) = db();
    let store = SqliteStore::open(&path).unwrap();
    let embedder = Arc::new(Concepts::default());
    memory(&store, "ada", &embedder)
        .record(vec!["Ada's dog is called Rex.".into()], RecordSource::User)
        .await
        .unwrap();

    let model = Replies::default().text("Your pet is Rex.");
    let agent = ReActAgent::builder()
        .name("bot")
        .model(model.clone())
        .long_term_memory(memory(&store, "ada", &embedder), LongTermMemoryMode::Static)
        .build()
        .unwrap();
    agent.reply(Msg::user("What is my pet called?")).await.unwrap();
    let first = model.requests.lock().unwrap()[0].clone();
    let texts: Vec<String> = first.iter().map(|m| m.text().unwrap_or_default()).collect();
    assert_eq!(texts[texts.len() - 2], "What is my pet called?");
    let block = texts.last().unwrap();
    assert!(block.starts_with("<long_term_memory>"), "{texts:?}");
    assert!(block.contains("Ada's dog is called Rex.") && block.ends_with("</long_term_memory>"));
    // No tools in static mode; the exchange is recorded.
    let listed = memory(&store, "ada", &embedder).list(10).await.unwrap();
    assert_eq!(
        listed[0].content,
        "User: What is my pet called?\nAssistant: Your pet is Rex."
    );
    assert_eq!(listed[0].source, RecordSource::Reply);

    // Agent mode: the tools, and nothing injected.
    let model = Replies::default()
        .call(
            "r1",
            "record_to_memory",
            json!({"thinking": "a preference", "content": ["Ada prefers pizza for lunch."]}),
        )
        .text("Noted.")
        .call("q1", "retrieve_from_memory", json!({"keywords": ["food"]}))
        .text("You like pizza.");
    let agent = ReActAgent::builder()
        .name("bot")
        .model(model.clone())
        .long_term_memory(memory(&store, "ada", &embedder), LongTermMemoryMode::Agent)
        .build()
        .unwrap();
    agent.reply(Msg::user("I like pizza for lunch.")).await.unwrap();
    agent.reply(Msg::user("What food do I like?")).await.unwrap();
    let requests = model.requests.lock().unwrap().clone();
    assert!(
        requests
            .iter()
            .flatten()
            .all(|m| !m.text().unwrap_or_default().contains("<long_term_memory>")),
        "agent mode injects nothing"
    );
    let retrieved = requests[3]
        .iter()
        .flat_map(|m| m.tool_results())
        .find(|r| r.id.as_str() == "q1")
        .map(|r| r.text())
        .unwrap();
    assert!(retrieved.contains("Ada prefers pizza for lunch."), "{retrieved}");
    assert_eq!(memory(&store, "ada", &embedder).list(10).await.unwrap().len(), 3);
}

/// A step that retrieves from an empty memory or knowledge base costs a query, not an
/// embedding (the embedded model takes tens of milliseconds for one).
#[tokio::test(start_paused = true)]
async fn nothing_is_embedded_to_search_an_empty_memory_or_base() {
    let (_dir, path) = db();
    let store = SqliteStore::open(&path).unwrap();
    let embedder = Arc::new(Concepts::default());
    let ada = memory(&store, "ada", &embedder);
    assert!(ada.retrieve("my dog", 5).await.unwrap().is_empty());
    let info = store.open_knowledge_base("empty").await.unwrap();
    let base = agentry_store::StoredKnowledgeBase::open(
        store.clone(),
        "empty",
        Some(Arc::clone(&embedder) as Arc<dyn Embedder>),
    )
    .await
    .unwrap()
    .unwrap();
    use agentry::knowledge::KnowledgeBase;
    assert!(base.retrieve("my dog", 5, None).await.unwrap().is_empty());
    assert_eq!(embedder.embedded.load(Ordering::SeqCst), 0);

    // A document another writer adds to a base found empty is seen a second later.
    let chunk = agentry_store::NewChunk {
        content: "The dog is Rex.".into(),
        embedding: None,
    };
    store
        .replace_document(info.id, "dog.md", "h", None, vec![chunk])
        .await
        .unwrap();
    assert!(base.retrieve("dog", 5, None).await.unwrap().is_empty());
    tokio::time::advance(std::time::Duration::from_millis(1_100)).await;
    assert_eq!(base.retrieve("dog", 5, None).await.unwrap().len(), 1);
    embedder.embedded.store(0, Ordering::SeqCst);

    // Once there is something, the query is embedded and found by meaning.
    ada.record(vec!["Rex barks".into()], RecordSource::User)
        .await
        .unwrap();
    let found = ada.retrieve("which pet", 5).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(embedder.embedded.load(Ordering::SeqCst), 2);
}
