//! Long-term memory: what an agent keeps about a user across sessions, found again by meaning
//! and by words.
//!
//! A [`LongTermMemory`] records texts and retrieves the ones closest to a query. Give one to
//! [`ReActAgentBuilder::long_term_memory`](crate::agent::ReActAgentBuilder::long_term_memory)
//! with a [`LongTermMemoryMode`]:
//! - `Agent`: the model gets the tools `record_to_memory(thinking, content)` and
//!   `retrieve_from_memory(keywords, limit = 5)` ([`MEMORY_TOOL_NAMES`]);
//! - `Static`: before the loop, what the user's message retrieves is added as a
//!   `<long_term_memory>` user message, and after the reply the exchange is recorded;
//! - `Both`: both.
//!
//! `agentry-store` keeps memories in the session database, per user, searched with full-text
//! search and embeddings together.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::MemoryError;
use crate::tool::{Tool, ToolContext, ToolError, ToolResponse, ToolStream, Toolkit, ToolkitError};

/// How the agent uses its long-term memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LongTermMemoryMode {
    /// The model records and retrieves with tools.
    Agent,
    /// The runtime retrieves before each reply and records after it.
    Static,
    /// Both.
    Both,
}

impl LongTermMemoryMode {
    /// Whether the model gets the memory tools.
    pub fn has_tools(self) -> bool {
        matches!(self, LongTermMemoryMode::Agent | LongTermMemoryMode::Both)
    }

    /// Whether the runtime retrieves before and records after each reply.
    pub fn is_static(self) -> bool {
        matches!(self, LongTermMemoryMode::Static | LongTermMemoryMode::Both)
    }
}

impl std::str::FromStr for LongTermMemoryMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "agent" => Ok(LongTermMemoryMode::Agent),
            "static" => Ok(LongTermMemoryMode::Static),
            "both" => Ok(LongTermMemoryMode::Both),
            other => Err(format!(
                "{other:?} is not a long-term memory mode: use agent, static or both"
            )),
        }
    }
}

/// Who recorded a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecordSource {
    /// The model, with `record_to_memory`.
    Agent,
    /// The runtime, after a reply (static mode).
    Reply,
    /// A person or a program, directly.
    User,
}

impl RecordSource {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordSource::Agent => "agent",
            RecordSource::Reply => "reply",
            RecordSource::User => "user",
        }
    }
}

/// One memory as retrieval returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryRecord {
    /// The memory's id (`agentry memory forget ID`).
    pub id: i64,
    /// What was recorded.
    pub content: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// Who recorded it.
    pub source: RecordSource,
    /// How well it matched the query (higher is better; comparable within one retrieval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

impl MemoryRecord {
    /// A record as stores build it.
    pub fn new(
        id: i64,
        content: String,
        created_at: String,
        source: RecordSource,
        score: Option<f32>,
    ) -> Self {
        MemoryRecord {
            id,
            content,
            created_at,
            source,
            score,
        }
    }
}

/// Where an agent's long-term memory lives: one user's memories.
#[async_trait]
pub trait LongTermMemory: Send + Sync + 'static {
    /// Keeps `contents`, one memory each; returns how many were kept (blank texts are not).
    async fn record(&self, contents: Vec<String>, source: RecordSource) -> Result<usize, MemoryError>;
    /// The memories closest to `query`, best first, at most `limit`.
    async fn retrieve(&self, query: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError>;
}

#[async_trait]
impl<T: LongTermMemory + ?Sized> LongTermMemory for Arc<T> {
    async fn record(&self, contents: Vec<String>, source: RecordSource) -> Result<usize, MemoryError> {
        (**self).record(contents, source).await
    }

    async fn retrieve(&self, query: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError> {
        (**self).retrieve(query, limit).await
    }
}

/// The agent's long-term memory as its tools find it in their context.
#[derive(Clone)]
pub struct AgentLongTermMemory(pub Arc<dyn LongTermMemory>);

/// The memory tools' names.
pub const MEMORY_TOOL_NAMES: [&str; 2] = ["record_to_memory", "retrieve_from_memory"];

/// The block added before the loop in static mode: the memories, one a line, dated.
pub fn long_term_memory_block(records: &[MemoryRecord]) -> String {
    format!(
        "<long_term_memory>The content below was retrieved from long-term memory and may be useful:\n{}\n</long_term_memory>",
        memory_lines(records)
    )
}

/// The memories one a line, dated: `- [2026-11-27] content`.
fn memory_lines(records: &[MemoryRecord]) -> String {
    records
        .iter()
        .map(|r| {
            format!(
                "- [{}] {}",
                r.created_at.get(..10).unwrap_or(&r.created_at),
                r.content.trim()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Registers `record_to_memory` and `retrieve_from_memory` in `toolkit` (once). They hold no
/// state: each call uses the calling agent's [`AgentLongTermMemory`].
pub fn register_memory_tools(toolkit: &Toolkit) -> Result<(), ToolkitError> {
    if toolkit.tool_names().iter().any(|n| n == MEMORY_TOOL_NAMES[0]) {
        return Ok(());
    }
    toolkit.register(MemoryTool { record: true })?;
    toolkit.register(MemoryTool { record: false })?;
    Ok(())
}

struct MemoryTool {
    record: bool,
}

impl Tool for MemoryTool {
    fn name(&self) -> &str {
        MEMORY_TOOL_NAMES[usize::from(!self.record)]
    }

    fn description(&self) -> &str {
        if self.record {
            "Records important information to remember in later conversations: facts about the user \
             (preferences, names, plans), decisions, results worth keeping. Each item should be specific \
             and self-contained: who, what, when, where, why."
        } else {
            "Searches long-term memory (what was recorded in earlier conversations) for each keyword, and \
             returns the memories found. Use it when the user refers to something from before, or when a \
             fact about them would help."
        }
    }

    fn parameters(&self) -> Value {
        if self.record {
            json!({
                "type": "object",
                "properties": {
                    "thinking": {"type": "string", "description": "Why this is worth remembering."},
                    "content": {"type": "array", "items": {"type": "string"},
                        "description": "The things to remember, one item each."}
                },
                "required": ["thinking", "content"]
            })
        } else {
            json!({
                "type": "object",
                "properties": {
                    "keywords": {"type": "array", "items": {"type": "string"},
                        "description": "What to look for: names, places, dates, topics."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5,
                        "description": "The most memories per keyword."}
                },
                "required": ["keywords"]
            })
        }
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        let record = self.record;
        futures::stream::once(async move {
            let Some(AgentLongTermMemory(memory)) = ctx.extension::<AgentLongTermMemory>().cloned() else {
                return Err(ToolError::msg("This agent has no long-term memory."));
            };
            let strings = |name: &str| -> Vec<String> {
                args.get(name)
                    .and_then(Value::as_array)
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            if record {
                let contents = strings("content");
                let kept = memory
                    .record(contents, RecordSource::Agent)
                    .await
                    .map_err(|e| ToolError::msg(format!("Nothing was recorded: {e}")))?;
                return Ok(ToolResponse::text(match kept {
                    0 => "Nothing was recorded: every item was empty.".to_owned(),
                    1 => "Recorded 1 memory.".to_owned(),
                    n => format!("Recorded {n} memories."),
                }));
            }
            let limit = args
                .get("limit")
                .and_then(Value::as_u64)
                .unwrap_or(5)
                .clamp(1, 50) as usize;
            let mut found: Vec<MemoryRecord> = Vec::new();
            for keyword in strings("keywords") {
                let hits = memory
                    .retrieve(&keyword, limit)
                    .await
                    .map_err(|e| ToolError::msg(format!("The memory could not be searched: {e}")))?;
                for hit in hits {
                    if !found.iter().any(|f| f.id == hit.id) {
                        found.push(hit);
                    }
                }
            }
            if found.is_empty() {
                return Ok(ToolResponse::text("No memory matches these keywords."));
            }
            Ok(ToolResponse::text(memory_lines(&found)))
        })
        .boxed()
    }
}
