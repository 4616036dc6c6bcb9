//! An in-process scripted model: no HTTP, so a test may pause the clock, and it receives exactly
//! the messages the agent sends (with each result's `is_error`, which the OpenAI wire drops).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use agentry::agent::{ReActAgent, ReActAgentBuilder};
use agentry::memory::check_tool_pairs;
use agentry::message::{ContentBlock, Msg, ToolResultBlock, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest, ChatResponse, ChatStream};
use agentry::tool::Toolkit;
use futures::StreamExt;
use serde_json::Value;

#[derive(Default)]
struct Inner {
    turns: Mutex<VecDeque<Vec<ContentBlock>>>,
    requests: Mutex<Vec<Vec<Msg>>>,
    violations: Mutex<Vec<String>>,
}

/// Answers each request with the next scripted turn and checks, like the fake server, that
/// every tool call of the request has exactly one result (Y1). Cheap to clone: clones share
/// the script and the record.
#[derive(Clone, Default)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
}

/// A tool call block.
pub fn tool_use(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::ToolUse(ToolUseBlock {
        id: id.into(),
        name: name.into(),
        input,
        raw_input: None,
    })
}

impl ScriptedModel {
    pub fn new() -> Self {
        ScriptedModel::default()
    }

    /// A builder of the test agent ("Friday") on this model and `toolkit`.
    pub fn builder(&self, toolkit: Toolkit) -> ReActAgentBuilder {
        ReActAgent::builder()
            .name("Friday")
            .model(self.clone())
            .toolkit(toolkit)
    }

    /// The test agent on this model and `toolkit`.
    pub fn agent(&self, toolkit: Toolkit) -> ReActAgent {
        self.builder(toolkit).build().unwrap()
    }

    /// Scripts one turn with these blocks.
    pub fn push(&self, content: Vec<ContentBlock>) {
        self.inner.turns.lock().unwrap().push_back(content);
    }

    /// Scripts one turn calling `(id, tool, input)` for each entry.
    pub fn push_calls(&self, calls: &[(&str, &str, Value)]) {
        self.push(
            calls
                .iter()
                .map(|(id, name, input)| tool_use(id, name, input.clone()))
                .collect(),
        );
    }

    /// Scripts one text answer.
    pub fn push_text(&self, text: &str) {
        self.push(vec![ContentBlock::text(text)]);
    }

    /// The messages of every request so far.
    pub fn requests(&self) -> Vec<Vec<Msg>> {
        self.inner.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.inner.requests.lock().unwrap().len()
    }

    /// The result of `call_id` as request `n` (0-based) carried it to the model.
    pub fn result(&self, n: usize, call_id: &str) -> ToolResultBlock {
        let requests = self.requests();
        requests[n]
            .iter()
            .flat_map(Msg::tool_results)
            .find(|r| r.id == call_id)
            .cloned()
            .unwrap_or_else(|| panic!("request {n} has no result for {call_id}"))
    }

    /// Every request that broke Y1, described.
    pub fn violations(&self) -> Vec<String> {
        self.inner.violations.lock().unwrap().clone()
    }

    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(violations.is_empty(), "requests broke Y1: {violations:#?}");
    }
}

impl ChatModel for ScriptedModel {
    fn model_name(&self) -> &str {
        "scripted"
    }

    fn is_streaming(&self) -> bool {
        false
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let mut requests = self.inner.requests.lock().unwrap();
        let n = requests.len();
        if let Err(e) = check_tool_pairs(&request.messages) {
            self.inner
                .violations
                .lock()
                .unwrap()
                .push(format!("request #{n}: {e}"));
        }
        requests.push(request.messages);
        let content = self.inner.turns.lock().unwrap().pop_front().unwrap_or_else(|| {
            self.inner
                .violations
                .lock()
                .unwrap()
                .push(format!("request #{n}: no scripted turn left"));
            vec![ContentBlock::text("no scripted turn left")]
        });
        futures::stream::once(async move {
            Ok(ChatResponse {
                content,
                ..ChatResponse::default()
            })
        })
        .boxed()
    }
}
