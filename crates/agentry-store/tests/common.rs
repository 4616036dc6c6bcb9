//! Helpers shared by the tests.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentry::message::{ContentBlock, Msg, Role, ToolResultBlock, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest, ChatResponse, ChatStream};
use futures::StreamExt;
use serde_json::{Value, json};

/// A fresh SQLite file in a temporary directory (kept alive by the returned guard), for the
/// tests of what only the SQLite store has; the others take a [`TestDb`](crate::backends::TestDb).
pub fn db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    (dir, path)
}

/// An assistant message calling `ids` (tool `t`, arguments naming the call).
pub fn calls(ids: &[&str]) -> Msg {
    Msg::new(
        "bot",
        Role::Assistant,
        ids.iter()
            .map(|id| {
                ContentBlock::ToolUse(ToolUseBlock {
                    id: (*id).into(),
                    name: "t".into(),
                    input: json!({"n": id}),
                    raw_input: None,
                })
            })
            .collect(),
    )
}

/// The result message of call `id`.
pub fn result(id: &str, text: &str) -> Msg {
    Msg::tool_result(ToolResultBlock {
        id: id.into(),
        name: "t".into(),
        output: vec![ContentBlock::text(text)],
        is_error: false,
    })
}

/// Each message's text, or its results' texts.
pub fn texts(msgs: &[Msg]) -> Vec<String> {
    msgs.iter()
        .map(|m| {
            m.text()
                .unwrap_or_else(|| m.tool_results().map(|r| r.text()).collect::<Vec<_>>().join(","))
        })
        .collect()
}

/// Answers each request with the next scripted content.
#[derive(Clone, Default)]
pub struct Replies {
    pub queue: Arc<Mutex<VecDeque<Vec<ContentBlock>>>>,
    pub requests: Arc<Mutex<Vec<Vec<Msg>>>>,
}

impl Replies {
    pub fn call(self, id: &str, name: &str, input: Value) -> Self {
        self.queue
            .lock()
            .unwrap()
            .push_back(vec![ContentBlock::ToolUse(ToolUseBlock {
                id: id.into(),
                name: name.into(),
                input,
                raw_input: None,
            })]);
        self
    }

    pub fn text(self, text: &str) -> Self {
        self.queue
            .lock()
            .unwrap()
            .push_back(vec![ContentBlock::text(text)]);
        self
    }
}

impl ChatModel for Replies {
    fn model_name(&self) -> &str {
        "replies"
    }

    fn is_streaming(&self) -> bool {
        false
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        self.requests.lock().unwrap().push(request.messages);
        let content = self.queue.lock().unwrap().pop_front().unwrap_or_default();
        let response = ChatResponse {
            content,
            ..ChatResponse::default()
        };
        futures::stream::once(async move { Ok(response) }).boxed()
    }
}
