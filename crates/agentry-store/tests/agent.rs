//! The agent loop on a durable memory: it does not care which memory it has.

use std::sync::{Arc, Mutex};

use agentry::ReActAgent;
use agentry::memory::{Memory, check_tool_pairs};
use agentry::message::{ContentBlock, Msg, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest, ChatResponse, ChatStream};
use agentry::tool::{INTERRUPTED_RESTART, Toolkit, tool};
use agentry_store::SessionMemory;
use futures::StreamExt;
use serde_json::json;

use crate::common::{calls, db, open};

/// Calls `add` once per user message, then answers with the result; keeps every request it
/// received, each checked for one result per call (Y1), as the fake server does.
#[derive(Clone, Default)]
struct Scripted {
    requests: Arc<Mutex<Vec<Vec<Msg>>>>,
}

impl ChatModel for Scripted {
    fn model_name(&self) -> &str {
        "scripted"
    }

    fn is_streaming(&self) -> bool {
        false
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let msgs = request.messages;
        self.requests.lock().unwrap().push(msgs.clone());
        let content = match msgs.last().and_then(|m| m.tool_results().next()) {
            Some(result) => vec![ContentBlock::text(format!("The sum is {}.", result.text()))],
            None => {
                let n = msgs.iter().flat_map(Msg::tool_uses).count();
                vec![ContentBlock::ToolUse(ToolUseBlock {
                    id: format!("call_{n}").into(),
                    name: "add".into(),
                    input: json!({"a": 19, "b": 23}),
                    raw_input: None,
                })]
            }
        };
        let response = ChatResponse {
            content,
            ..ChatResponse::default()
        };
        futures::stream::once(async move { Ok(response) }).boxed()
    }
}

/// Adds two integers.
///
/// # Arguments
/// * `a` - the first
/// * `b` - the second
#[tool]
fn add(a: i64, b: i64) -> String {
    (a + b).to_string()
}

fn agent(model: Scripted, memory: Arc<SessionMemory>) -> ReActAgent {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    ReActAgent::builder()
        .name("bot")
        .model(model)
        .toolkit(toolkit)
        .memory(memory)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_reply_is_stored_and_a_new_process_continues_it() {
    let (_dir, path) = db();
    let model = Scripted::default();
    let memory = Arc::new(
        SessionMemory::open_or_create(open(&path), "chat", &json!({}))
            .await
            .unwrap(),
    );
    let reply = agent(model.clone(), memory.clone())
        .reply(Msg::user("19 + 23?"))
        .await
        .unwrap();
    assert_eq!(reply.text().as_deref(), Some("The sum is 42."));
    let written = memory.messages().await.unwrap();
    assert_eq!(written.len(), 4, "question, call, result, answer");
    let id = memory.session().id.clone();
    drop(memory);

    let store = open(&path);
    assert_eq!(
        store.messages(&id).await.unwrap(),
        written,
        "what the agent acknowledged is on disk"
    );
    let memory = Arc::new(SessionMemory::open(store, &id).await.unwrap());
    agent(model.clone(), memory.clone())
        .reply(Msg::user("again?"))
        .await
        .unwrap();
    let last = model.requests.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        &last[..4],
        &written[..],
        "the next request is built from what was stored"
    );
    assert_eq!(memory.size().await.unwrap(), 8);
}

#[tokio::test]
async fn y4_the_model_is_told_a_call_was_interrupted_by_the_restart() {
    let (_dir, path) = db();
    let id = {
        // A process stops while its tool runs: the call is stored, its result is not.
        let memory = SessionMemory::open_or_create(open(&path), "chat", &json!({}))
            .await
            .unwrap();
        memory
            .add(vec![Msg::user("19 + 23?"), calls(&["c"])])
            .await
            .unwrap();
        memory.session().id.clone()
    };
    let model = Scripted::default();
    let memory = Arc::new(SessionMemory::open(open(&path), &id).await.unwrap());
    let interrupted: Vec<String> = memory
        .recovery()
        .interrupted
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        interrupted,
        ["c"],
        "the store closed the call before the loop saw the memory"
    );
    agent(model.clone(), memory)
        .reply(Msg::user("and now?"))
        .await
        .unwrap();
    let requests = model.requests.lock().unwrap().clone();
    for request in &requests {
        assert_eq!(
            check_tool_pairs(request),
            Ok(()),
            "every request pairs each call with one result"
        );
    }
    let first = &requests[0];
    let told = first
        .iter()
        .flat_map(Msg::tool_results)
        .find(|r| r.id == "c")
        .unwrap();
    assert_eq!(told.text(), INTERRUPTED_RESTART);
    assert!(told.is_error);
}
