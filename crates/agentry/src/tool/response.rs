//! Tool response chunks.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{ContentBlock, join_text};

/// One cumulative chunk of a tool's result.
///
/// Each chunk carries the whole result so far; consumers replace, never append. The chunk with
/// `is_last` is the result the model reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResponse {
    /// The result so far: text, images, ...
    pub content: Vec<ContentBlock>,
    /// Data for programs rather than the model (kept in the result message's metadata).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// Whether this is the final chunk.
    pub is_last: bool,
    /// Whether the call failed.
    #[serde(default)]
    pub is_error: bool,
}

impl ToolResponse {
    /// A final chunk with these blocks.
    pub fn new(content: Vec<ContentBlock>) -> Self {
        ToolResponse {
            content,
            metadata: Map::new(),
            is_last: true,
            is_error: false,
        }
    }

    /// A final chunk with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolResponse::new(vec![ContentBlock::text(text)])
    }

    /// A non-final chunk with one text block (progress of a streaming tool).
    pub fn partial(text: impl Into<String>) -> Self {
        ToolResponse::text(text).last(false)
    }

    /// A final error chunk with one text block.
    pub fn error(text: impl Into<String>) -> Self {
        let mut response = ToolResponse::text(text);
        response.is_error = true;
        response
    }

    /// Sets `is_last`.
    pub fn last(mut self, is_last: bool) -> Self {
        self.is_last = is_last;
        self
    }

    /// Adds a metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// The text blocks joined with `"\n"`.
    pub fn text_content(&self) -> String {
        join_text(&self.content).unwrap_or_default()
    }
}

/// An error result as the model reads it: `Error: {message}`.
pub(super) fn failure(message: impl std::fmt::Display) -> ToolResponse {
    ToolResponse::error(format!("Error: {message}"))
}
