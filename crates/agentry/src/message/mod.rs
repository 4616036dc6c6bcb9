//! Messages: what users, models and tools say to each other.
//!
//! A [`Msg`] is the unit of memory and of the printed stream. Its content is a list of
//! [`ContentBlock`]s: text, thinking, images, the model's tool calls ([`ToolUseBlock`]) and the
//! results of those calls ([`ToolResultBlock`]). As in AgentScope, tool results travel in
//! `system`-role messages; each provider maps them to its own wire format.
//!
//! ```
//! use agentry::message::{ContentBlock, Msg, Role};
//!
//! let msg = Msg::user("What is 2 + 2?");
//! assert_eq!(msg.role, Role::User);
//! assert_eq!(msg.text().as_deref(), Some("What is 2 + 2?"));
//! let json = serde_json::to_string(&msg).unwrap();
//! let back: Msg = serde_json::from_str(&json).unwrap();
//! assert_eq!(back, msg);
//! ```

mod block;

pub use block::{BlockKind, ContentBlock, MediaSource, ToolResultBlock, ToolUseBlock, join_text};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// The human (or the program acting for them).
    User,
    /// The model.
    Assistant,
    /// The system prompt, hints, and tool results.
    System,
}

/// One message: the unit of memory, of model prompts and of the printed stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Msg {
    /// Unique id; a streamed message keeps its id across all its cumulative chunks.
    pub id: String,
    /// Display name of the speaker (the agent's name, "user", "system").
    pub name: String,
    /// Who speaks.
    pub role: Role,
    /// The content, in order.
    pub content: Vec<ContentBlock>,
    /// Free-form metadata (structured output, interruption marks, ...).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// When the message was created.
    pub timestamp: DateTime<Utc>,
}

/// `text` cut to at most `chars` characters (not bytes), with an ellipsis when cut: for status
/// lines and progress messages that show the start of a long text.
///
/// ```
/// assert_eq!(agentry::message::truncate_chars("héllo", 2), "hé…");
/// assert_eq!(agentry::message::truncate_chars("héllo", 5), "héllo");
/// ```
pub fn truncate_chars(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A fresh unique id for messages and tool calls: 32 hex digits, a random per-process half and
/// a counter half (one `getrandom` per process rather than per id, which profiles showed).
pub fn new_id() -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // A bijection of the counter (add, multiply by an odd constant, xorshift), so ids stay unique
    // while consecutive ones do not look alike.
    let mut x = n.wrapping_add(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    format!("{seed:016x}{x:016x}")
}

impl Msg {
    /// A message with the given speaker, role and content blocks.
    pub fn new(name: impl Into<String>, role: Role, content: Vec<ContentBlock>) -> Self {
        Msg {
            id: new_id(),
            name: name.into(),
            role,
            content,
            metadata: Map::new(),
            timestamp: Utc::now(),
        }
    }

    /// A user message holding one text block, named "user".
    pub fn user(text: impl Into<String>) -> Self {
        Msg::new("user", Role::User, vec![ContentBlock::text(text)])
    }

    /// An assistant message holding one text block.
    pub fn assistant(name: impl Into<String>, text: impl Into<String>) -> Self {
        Msg::new(name, Role::Assistant, vec![ContentBlock::text(text)])
    }

    /// A system message holding one text block, named "system".
    pub fn system(text: impl Into<String>) -> Self {
        Msg::new("system", Role::System, vec![ContentBlock::text(text)])
    }

    /// The message that carries one tool call's result (role system, named "system").
    pub fn tool_result(result: ToolResultBlock) -> Self {
        Msg::new("system", Role::System, vec![ContentBlock::ToolResult(result)])
    }

    /// Replaces the metadata, builder style.
    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// All text blocks joined with `"\n"`, or `None` when there is no text block.
    pub fn text(&self) -> Option<String> {
        join_text(&self.content)
    }

    /// The blocks of one kind, in order.
    pub fn blocks(&self, kind: BlockKind) -> impl Iterator<Item = &ContentBlock> {
        self.content.iter().filter(move |b| b.kind() == kind)
    }

    /// Whether the message holds at least one block of this kind.
    pub fn has_blocks(&self, kind: BlockKind) -> bool {
        self.blocks(kind).next().is_some()
    }

    /// The tool calls of this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUseBlock> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(u) => Some(u),
            _ => None,
        })
    }

    /// The tool results of this message, in order.
    pub fn tool_results(&self) -> impl Iterator<Item = &ToolResultBlock> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Msg {
        Msg::new(
            "Friday",
            Role::Assistant,
            vec![
                ContentBlock::thinking("let me think"),
                ContentBlock::text("first"),
                ContentBlock::Image {
                    source: MediaSource::Url {
                        url: "https://example.com/a.png".into(),
                    },
                },
                ContentBlock::ToolUse(ToolUseBlock {
                    id: "call_1".into(),
                    name: "add".into(),
                    input: json!({"a": 1, "b": 2}),
                    raw_input: Some(r#"{"a": 1, "b": 2}"#.into()),
                }),
                ContentBlock::text("second"),
                ContentBlock::ToolResult(ToolResultBlock {
                    id: "call_1".into(),
                    name: "add".into(),
                    output: vec![ContentBlock::text("3")],
                    is_error: false,
                }),
            ],
        )
    }

    #[test]
    fn serde_round_trip_keeps_every_block() {
        let mut msg = sample();
        msg.metadata.insert("k".into(), json!([1, 2]));
        let text = serde_json::to_string(&msg).unwrap();
        let back: Msg = serde_json::from_str(&text).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn wire_shape_uses_type_tags() {
        let v = serde_json::to_value(sample()).unwrap();
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["content"][0]["type"], "thinking");
        assert_eq!(v["content"][2]["source"]["type"], "url");
        assert_eq!(v["content"][3]["type"], "tool_use");
        assert_eq!(v["content"][3]["input"]["b"], 2);
        assert_eq!(v["content"][5]["type"], "tool_result");
        assert!(v.get("metadata").is_none(), "empty metadata is omitted");
    }

    #[test]
    fn text_joins_text_blocks_only() {
        assert_eq!(sample().text().as_deref(), Some("first\nsecond"));
        let empty = Msg::new("a", Role::Assistant, vec![]);
        assert_eq!(empty.text(), None);
    }

    #[test]
    fn blocks_by_kind() {
        let msg = sample();
        assert_eq!(msg.blocks(BlockKind::Text).count(), 2);
        assert!(msg.has_blocks(BlockKind::Image));
        assert!(!msg.has_blocks(BlockKind::Audio));
        assert_eq!(
            msg.tool_uses().map(|u| u.name.as_str()).collect::<Vec<_>>(),
            ["add"]
        );
        assert_eq!(msg.tool_results().count(), 1);
    }

    #[test]
    fn ids_are_unique() {
        assert_ne!(Msg::user("a").id, Msg::user("a").id);
    }
}
