//! The tool shim: tool calls a model wrote as text become real calls.
//!
//! Small models behind an OpenAI-compatible server (llama.cpp's `llama-server` with a
//! Qwen2.5-Coder GGUF, measured) often write a call in their answer — a fenced JSON block, a
//! bare object, `<tool_call>` tags — and the server passes it on as text. When tools were
//! offered and a model message holds no calls, the shim reads such calls with
//! [`parse_text_calls`] (only names of offered tools count) and rewrites the message: its
//! text without the calls, then the calls, as if the server had sent them. From there they are
//! ordinary calls: stored, checked against their schema, approved, run and answered.
//!
//! While the answer streams, text that is or may become such a call is held back
//! ([`streamable_text`]), so a call never appears as answer text; the held text is shown when
//! the answer turns out not to be a call. A cancelled answer is not read for calls (none of them
//! would run); it is stored and shown as the model wrote it.

use crate::CallId;
use crate::message::{ContentBlock, ToolUseBlock, join_text, new_id};
use crate::model::{ChatRequest, ToolChoice, parse_text_calls, streamable_text_from};

/// The shim for one model call: the names of the tools offered, and how far the text streamed
/// so far is settled.
pub(super) struct TextCallShim {
    tools: Vec<String>,
    /// The beginning of the streamed text that later states need not scan again (each state is
    /// scanned from here, so a long answer costs a linear scan per state, not more).
    settled: String,
}

impl TextCallShim {
    /// The shim for `request`, or `None` when it is off, when no tools are offered, or when the
    /// request forbids calls.
    pub(super) fn for_request(on: bool, request: &ChatRequest) -> Option<TextCallShim> {
        if !on || request.tools.is_empty() || request.tool_choice == Some(ToolChoice::None) {
            return None;
        }
        Some(TextCallShim {
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            settled: String::new(),
        })
    }

    fn names(&self) -> Vec<&str> {
        self.tools.iter().map(String::as_str).collect()
    }

    /// What to show of a streamed state: its text up to what may be a call written as text (the
    /// text blocks become one block, as `Msg::text` joins them).
    pub(super) fn shown(&mut self, content: &[ContentBlock]) -> Vec<ContentBlock> {
        let Some(text) = join_text(content) else {
            return content.to_vec();
        };
        // States are cumulative; should one not begin with the last, it is scanned whole.
        let from = if text.starts_with(&self.settled) {
            self.settled.len()
        } else {
            0
        };
        let (shown, settled) = streamable_text_from(&text, &self.names(), from);
        self.settled.clear();
        self.settled.push_str(&text[..settled]);
        replace_text(content, &text[..shown])
    }

    /// Turns the calls written in the text of a complete message without calls into calls, and
    /// returns their ids (empty when there were none, and the content is unchanged).
    pub(super) fn recover(&self, content: &mut Vec<ContentBlock>) -> Vec<CallId> {
        if content.iter().any(|b| matches!(b, ContentBlock::ToolUse(_))) {
            return Vec::new();
        }
        let Some(text) = join_text(content) else {
            return Vec::new();
        };
        let parsed = parse_text_calls(&text, &self.names());
        if parsed.calls.is_empty() {
            return Vec::new();
        }
        // The answer's leading whitespace stays, so that every state shown while it streamed
        // (see `shown`) is a beginning of the text that remains.
        let lead = &text[..text.len() - text.trim_start().len()];
        let remaining = if parsed.text.is_empty() {
            String::new()
        } else {
            format!("{lead}{}", parsed.text)
        };
        let mut recovered = replace_text(content, &remaining);
        let mut ids = Vec::with_capacity(parsed.calls.len());
        for call in parsed.calls {
            // Unique ids; the agent still checks them against the reply's other calls.
            let id = CallId::new(format!("call_{}", new_id()));
            ids.push(id.clone());
            recovered.push(ContentBlock::ToolUse(ToolUseBlock {
                id,
                name: call.name,
                input: serde_json::Value::Object(call.arguments),
                raw_input: Some(call.raw_arguments),
            }));
        }
        *content = recovered;
        ids
    }
}

/// `content` with its text blocks replaced by one block of `text` (none when it is empty), at
/// the place of the first.
fn replace_text(content: &[ContentBlock], text: &str) -> Vec<ContentBlock> {
    let mut out = Vec::with_capacity(content.len());
    let mut placed = false;
    for block in content {
        match block {
            ContentBlock::Text { .. } => {
                if !placed && !text.is_empty() {
                    out.push(ContentBlock::text(text));
                }
                placed = true;
            }
            other => out.push(other.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::message::Msg;
    use crate::model::ToolSchema;

    fn request(tools: &[&str], choice: Option<ToolChoice>) -> ChatRequest {
        let tools: Vec<ToolSchema> = tools
            .iter()
            .map(|name| ToolSchema {
                name: (*name).to_owned(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            })
            .collect();
        ChatRequest {
            messages: vec![Msg::user("hi")],
            tools: Arc::from(tools),
            tool_choice: choice,
            max_tokens: None,
        }
    }

    fn shim() -> TextCallShim {
        TextCallShim::for_request(true, &request(&["add"], None)).unwrap()
    }

    #[test]
    fn off_without_tools_when_calls_are_forbidden_or_when_turned_off() {
        assert!(TextCallShim::for_request(false, &request(&["add"], None)).is_none());
        assert!(TextCallShim::for_request(true, &request(&[], None)).is_none());
        assert!(TextCallShim::for_request(true, &request(&["add"], Some(ToolChoice::None))).is_none());
        assert!(TextCallShim::for_request(true, &request(&["add"], Some(ToolChoice::Required))).is_some());
    }

    #[test]
    fn a_call_in_text_becomes_a_call_after_the_remaining_text() {
        let mut content = vec![
            ContentBlock::thinking("hm"),
            ContentBlock::text("Adding.\n```json\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n```"),
        ];
        let ids = shim().recover(&mut content);
        assert_eq!(ids.len(), 1);
        assert_eq!(content.len(), 3);
        assert_eq!(content[0], ContentBlock::thinking("hm"));
        assert_eq!(content[1], ContentBlock::text("Adding."));
        let ContentBlock::ToolUse(call) = &content[2] else {
            panic!("{content:?}")
        };
        assert_eq!((call.id.clone(), call.name.as_str()), (ids[0].clone(), "add"));
        assert_eq!(call.input, json!({"a": 1}));
    }

    #[test]
    fn two_calls_get_two_ids_and_a_call_alone_leaves_no_text() {
        let mut content = vec![ContentBlock::text(
            "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>",
        )];
        let ids = shim().recover(&mut content);
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        assert!(
            content.iter().all(|b| matches!(b, ContentBlock::ToolUse(_))),
            "{content:?}"
        );
    }

    #[test]
    fn real_calls_unknown_tools_and_plain_text_are_left_alone() {
        let real = ContentBlock::ToolUse(ToolUseBlock {
            id: "c1".into(),
            name: "add".into(),
            input: json!({}),
            raw_input: None,
        });
        for content in [
            vec![ContentBlock::text("{\"name\": \"add\", \"arguments\": {}}"), real],
            vec![ContentBlock::text("{\"name\": \"sub\", \"arguments\": {}}")],
            vec![ContentBlock::text("{not json")],
            vec![ContentBlock::thinking("{\"name\": \"add\", \"arguments\": {}}")],
        ] {
            let mut after = content.clone();
            assert!(shim().recover(&mut after).is_empty());
            assert_eq!(after, content);
        }
    }

    #[test]
    fn what_streamed_is_a_beginning_of_the_text_that_remains() {
        let text = "\n Let me add.\n```json\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n```\n";
        let mut content = vec![ContentBlock::text(text)];
        assert_eq!(shim().recover(&mut content).len(), 1);
        let remaining = join_text(&content).unwrap_or_default();
        assert_eq!(remaining, "\n Let me add.");
        for (at, _) in text.char_indices() {
            let shown = join_text(&shim().shown(&[ContentBlock::text(&text[..at])])).unwrap_or_default();
            assert!(
                remaining.starts_with(&shown),
                "{shown:?} is not a beginning of {remaining:?}"
            );
        }
    }

    #[test]
    fn a_growing_answer_is_shown_as_if_each_state_were_scanned_whole() {
        let text = "Code:\n```rust\nlet v = {1};\n```\nSee {x} and {\"k\": 1}, then \
                    {{\"name\": \"add\", \"arguments\": {\"a\": 1}}} done";
        let mut growing = shim();
        for (at, _) in text.char_indices() {
            let state = [ContentBlock::text(&text[..at])];
            assert_eq!(growing.shown(&state), shim().shown(&state), "{:?}", &text[..at]);
        }
        // A state that does not continue the last one is scanned whole.
        let other = [ContentBlock::text("Other {\"name\": \"add\"")];
        assert_eq!(growing.shown(&other), vec![ContentBlock::text("Other")]);
    }

    #[test]
    fn streamed_states_hide_what_may_be_a_call() {
        let content = vec![
            ContentBlock::thinking("hm"),
            ContentBlock::text("Adding.\n{\"name\": \"ad"),
        ];
        assert_eq!(
            shim().shown(&content),
            vec![ContentBlock::thinking("hm"), ContentBlock::text("Adding.")]
        );
        let content = vec![ContentBlock::text("{\"na")];
        assert!(shim().shown(&content).is_empty());
    }
}
