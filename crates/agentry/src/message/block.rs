//! Content blocks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::CallId;

/// Where the bytes of an image or audio block are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum MediaSource {
    /// Inline data.
    Base64 {
        /// MIME type, e.g. `image/png`.
        media_type: String,
        /// Base64-encoded bytes.
        data: String,
    },
    /// A URL the provider or the user can fetch.
    Url {
        /// The address.
        url: String,
    },
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUseBlock {
    /// Call id, unique within the conversation; the result carries the same id.
    pub id: CallId,
    /// Name of the tool to call.
    pub name: String,
    /// Parsed arguments. While streaming this is the best parse of the arguments so far; in a
    /// complete message it is the parsed object, or `null` when `raw_input` is not valid JSON.
    pub input: Value,
    /// The arguments exactly as the model produced them, when they came as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<String>,
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultBlock {
    /// Id of the call this result answers.
    pub id: CallId,
    /// Name of the tool that was called.
    pub name: String,
    /// What the model will read: text, and possibly images.
    pub output: Vec<ContentBlock>,
    /// Whether the call failed (unknown tool, invalid arguments, the tool's error, ...).
    #[serde(default)]
    pub is_error: bool,
}

impl ToolResultBlock {
    /// The text blocks of the output joined with `"\n"` (empty when there is none).
    pub fn text(&self) -> String {
        join_text(&self.output).unwrap_or_default()
    }
}

/// The text blocks among `blocks` joined with `"\n"`, or `None` when there is no text block.
pub fn join_text(blocks: &[ContentBlock]) -> Option<String> {
    let mut texts = blocks.iter().filter_map(ContentBlock::as_text);
    let mut out = texts.next()?.to_owned();
    for text in texts {
        out.push('\n');
        out.push_str(text);
    }
    Some(out)
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The model's visible reasoning.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The provider's signature over the reasoning (Anthropic), which must come back
        /// unchanged with it in the next request of a tool-using turn.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider keeps encrypted (Anthropic's `redacted_thinking`): nothing to
    /// show, sent back as it came.
    RedactedThinking {
        /// The encrypted reasoning.
        data: String,
    },
    /// An image.
    Image {
        /// Where the image is.
        source: MediaSource,
    },
    /// An audio clip.
    Audio {
        /// Where the clip is.
        source: MediaSource,
    },
    /// A tool call.
    ToolUse(ToolUseBlock),
    /// A tool result.
    ToolResult(ToolResultBlock),
}

/// The kind of a [`ContentBlock`], for filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BlockKind {
    /// [`ContentBlock::Text`]
    Text,
    /// [`ContentBlock::Thinking`]
    Thinking,
    /// [`ContentBlock::Image`]
    Image,
    /// [`ContentBlock::Audio`]
    Audio,
    /// [`ContentBlock::ToolUse`]
    ToolUse,
    /// [`ContentBlock::ToolResult`]
    ToolResult,
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A thinking block.
    pub fn thinking(thinking: impl Into<String>) -> Self {
        ContentBlock::Thinking {
            thinking: thinking.into(),
            signature: None,
        }
    }

    /// The kind of this block.
    pub fn kind(&self) -> BlockKind {
        match self {
            ContentBlock::Text { .. } => BlockKind::Text,
            ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => BlockKind::Thinking,
            ContentBlock::Image { .. } => BlockKind::Image,
            ContentBlock::Audio { .. } => BlockKind::Audio,
            ContentBlock::ToolUse(_) => BlockKind::ToolUse,
            ContentBlock::ToolResult(_) => BlockKind::ToolResult,
        }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } => Some(text),
            _ => None,
        }
    }
}
