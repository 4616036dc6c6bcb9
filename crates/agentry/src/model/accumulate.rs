//! Deltas in, cumulative responses out: what every streaming provider needs, in one place.
//!
//! A provider feeds what each server event adds (text, reasoning, a piece of a tool call) and
//! takes [`ChatResponse`] snapshots, each holding the whole response so far. Tool-call
//! arguments are previewed incrementally, so the work stays linear in their size however small
//! the pieces (a preview is refreshed only when the arguments grew by an eighth or closed).
//!
//! ```
//! use agentry::model::{CallDelta, DeltaAccumulator};
//!
//! let mut acc = DeltaAccumulator::new();
//! acc.push_text("The sum is ");
//! acc.push_call(CallDelta { index: Some(0), id: Some("c1".into()), name: Some("add".into()), ..Default::default() });
//! acc.push_call(CallDelta { index: Some(0), arguments: Some("{\"a\": 1, ".into()), ..Default::default() });
//! acc.push_call(CallDelta { index: Some(0), arguments: Some("\"b\": 2}".into()), ..Default::default() });
//! let done = acc.finish();
//! let call = done.tool_uses().next().unwrap();
//! assert_eq!(call.input, serde_json::json!({"a": 1, "b": 2}));
//! ```

use serde_json::{Map, Value};

use super::partial_json::StreamedObject;
use super::{ChatResponse, ChatUsage};
use crate::CallId;
use crate::message::{ContentBlock, ToolUseBlock, new_id};

/// What one server event adds to a tool call. Servers differ: some send the id and name once,
/// some repeat them in every piece; some index calls, some only name them by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallDelta {
    /// The call's position among the response's calls, when the server says.
    pub index: Option<u32>,
    /// The call id (an empty one counts as absent).
    pub id: Option<String>,
    /// The tool name, or a piece of it.
    pub name: Option<String>,
    /// The next piece of the JSON arguments.
    pub arguments: Option<String>,
}

struct CallState {
    index: Option<u32>,
    id: String,
    id_generated: bool,
    name: String,
    arguments: StreamedObject,
}

/// One reasoning block.
enum Reasoning {
    Text { text: String, signature: Option<String> },
    Redacted(String),
}

/// Accumulates deltas into cumulative responses (see the module docs).
#[derive(Default)]
pub struct DeltaAccumulator {
    id: String,
    thinking: Vec<Reasoning>,
    text: String,
    calls: Vec<CallState>,
    usage: Option<ChatUsage>,
    finish_reason: Option<String>,
    /// Bytes of arguments copied into snapshots (previews count their own work).
    arguments_copied: usize,
}

impl std::fmt::Debug for DeltaAccumulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaAccumulator")
            .field("id", &self.id)
            .field("text_len", &self.text.len())
            .field("calls", &self.calls.len())
            .finish()
    }
}

impl DeltaAccumulator {
    /// An empty response.
    pub fn new() -> Self {
        DeltaAccumulator::default()
    }

    /// Sets the response id (the first one given wins).
    pub fn set_id(&mut self, id: impl Into<String>) {
        if self.id.is_empty() {
            self.id = id.into();
        }
    }

    /// Appends visible text; returns whether anything changed.
    pub fn push_text(&mut self, text: &str) -> bool {
        self.text.push_str(text);
        !text.is_empty()
    }

    /// Appends reasoning to the current reasoning block; returns whether anything changed.
    pub fn push_thinking(&mut self, thinking: &str) -> bool {
        match self.thinking.last_mut() {
            Some(Reasoning::Text { text, .. }) => text.push_str(thinking),
            _ if thinking.is_empty() => return false,
            _ => self.thinking.push(Reasoning::Text {
                text: thinking.to_owned(),
                signature: None,
            }),
        }
        !thinking.is_empty()
    }

    /// Starts a new reasoning block (a provider that sends several, each with its signature).
    pub fn start_thinking(&mut self) {
        self.thinking.push(Reasoning::Text {
            text: String::new(),
            signature: None,
        });
    }

    /// Appends to the signature of the current reasoning block.
    pub fn push_thinking_signature(&mut self, piece: &str) {
        if !matches!(self.thinking.last(), Some(Reasoning::Text { .. })) {
            self.start_thinking();
        }
        if let Some(Reasoning::Text { signature, .. }) = self.thinking.last_mut() {
            signature.get_or_insert_with(String::new).push_str(piece);
        }
    }

    /// Adds a block of encrypted reasoning, kept to be sent back as it came.
    pub fn push_redacted_thinking(&mut self, data: impl Into<String>) {
        self.thinking.push(Reasoning::Redacted(data.into()));
    }

    /// Adds a piece of a tool call; returns whether a snapshot would show something new (a
    /// new call, a longer name, or a refreshed argument preview).
    pub fn push_call(&mut self, delta: CallDelta) -> bool {
        let id = delta.id.filter(|id| !id.is_empty());
        let slot = match delta.index {
            Some(index) => self.calls.iter().position(|c| c.index == Some(index)),
            None => match &id {
                Some(id) => self.calls.iter().position(|c| &c.id == id),
                None => self.calls.len().checked_sub(1),
            },
        };
        let slot = match slot {
            Some(slot) => slot,
            None => {
                self.calls.push(CallState {
                    index: delta.index,
                    id: String::new(),
                    id_generated: false,
                    name: String::new(),
                    arguments: StreamedObject::default(),
                });
                self.calls.len() - 1
            }
        };
        let Some(call) = self.calls.get_mut(slot) else {
            return false;
        };
        let mut changed = false;
        if let Some(id) = id {
            if call.id.is_empty() || call.id_generated {
                call.id = id;
                call.id_generated = false;
            }
        } else if call.id.is_empty() {
            call.id = format!("call_{}", new_id());
            call.id_generated = true;
        }
        if let Some(name) = delta.name.filter(|n| !n.is_empty()) {
            // Some servers repeat the whole name in every piece; OpenAI sends it once.
            if call.name.is_empty() || name.starts_with(call.name.as_str()) {
                changed |= call.name != name;
                call.name = name;
            } else if !call.name.ends_with(name.as_str()) {
                call.name.push_str(&name);
                changed = true;
            }
        }
        if let Some(arguments) = delta.arguments {
            // Only a refreshed preview is news: a snapshot per piece would copy the whole
            // arguments each time, quadratic in their size.
            changed |= call.arguments.push(&arguments);
        }
        changed
    }

    /// Records the token counts (the latest report wins; its `time` is set by `finish_at`).
    pub fn set_usage(&mut self, usage: ChatUsage) {
        self.usage = Some(usage);
    }

    /// Records why the server ended the response.
    pub fn set_finish_reason(&mut self, reason: impl Into<String>) {
        self.finish_reason = Some(reason.into());
    }

    /// Whether the server said the response is complete.
    pub fn is_finished(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// The response so far, with argument previews (`input` holds what parsed so far, and
    /// `raw_input` the text).
    pub fn snapshot(&mut self) -> ChatResponse {
        self.build(false, std::time::Duration::ZERO)
    }

    /// The complete response: arguments parsed strictly (`input` is null, and `raw_input`
    /// kept, when they are not a JSON object), usage attached.
    pub fn finish(&mut self) -> ChatResponse {
        self.build(true, std::time::Duration::ZERO)
    }

    /// [`DeltaAccumulator::finish`], with the call's wall time in the usage.
    pub fn finish_at(&mut self, time: std::time::Duration) -> ChatResponse {
        self.build(true, time)
    }

    /// Bytes of tool-call arguments parsed by previews and copied into snapshots so far: the
    /// work that must stay linear in the size of the arguments.
    pub fn argument_work(&self) -> usize {
        self.arguments_copied
            + self
                .calls
                .iter()
                .map(|c| c.arguments.preview_bytes())
                .sum::<usize>()
    }

    fn build(&mut self, final_: bool, time: std::time::Duration) -> ChatResponse {
        let mut content = Vec::with_capacity(self.thinking.len() + 1 + self.calls.len());
        for part in &self.thinking {
            match part {
                Reasoning::Text { text, signature } => {
                    if !text.is_empty() || signature.is_some() {
                        content.push(ContentBlock::Thinking {
                            thinking: text.clone(),
                            signature: signature.clone(),
                        });
                    }
                }
                Reasoning::Redacted(data) => {
                    content.push(ContentBlock::RedactedThinking { data: data.clone() })
                }
            }
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text {
                text: self.text.clone(),
            });
        }
        for call in &self.calls {
            self.arguments_copied += call.arguments.text().len();
            let block = if final_ {
                finished_call(
                    call.id.clone(),
                    call.name.clone(),
                    call.arguments.text().to_owned(),
                )
            } else {
                ToolUseBlock {
                    id: CallId::new(call.id.clone()),
                    name: call.name.clone(),
                    input: Value::Object(call.arguments.preview().clone()),
                    raw_input: Some(call.arguments.text().to_owned()),
                }
            };
            content.push(ContentBlock::ToolUse(block));
        }
        ChatResponse {
            id: self.id.clone(),
            content,
            usage: if final_ {
                self.usage.take().map(|mut usage| {
                    usage.time = time;
                    usage
                })
            } else {
                None
            },
            finish_reason: self.finish_reason.clone(),
        }
    }
}

/// A complete tool call: arguments parsed, `input` null when they are not a JSON object (the
/// model then reads an error naming the raw text instead of running with `{}`).
pub(crate) fn finished_call(id: String, name: String, raw: String) -> ToolUseBlock {
    let input = if raw.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        match serde_json::from_str::<Value>(&raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::Null,
        }
    };
    ToolUseBlock {
        id: CallId::new(id),
        name,
        input,
        raw_input: Some(raw),
    }
}
