//! Helpers shared by the tests.

use std::path::PathBuf;
use std::sync::Arc;

use agentry::message::{ContentBlock, Msg, Role, ToolResultBlock, ToolUseBlock};
use agentry_store::{SessionStore, SqliteStore};
use serde_json::json;

/// A fresh database file in a temporary directory (kept alive by the returned guard).
pub fn db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    (dir, path)
}

pub fn open(path: &PathBuf) -> Arc<dyn SessionStore> {
    Arc::new(SqliteStore::open(path).unwrap())
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
