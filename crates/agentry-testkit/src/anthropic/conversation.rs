//! The rules on `messages` of [`check_anthropic_conversation`](super::check_anthropic_conversation):
//! roles, content blocks, tool_use / tool_result pairing, thinking blocks.

use std::collections::HashSet;

use serde_json::Value;

use super::invariants::{Checker, is_non_empty_str};
use super::thinking_signature;

/// The text of a tool_use / tool_result id for messages (`?` when it is not a string).
fn id_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("?")
}

impl Checker {
    pub(super) fn messages(&mut self, messages: &[Value], thinking: bool) {
        let mut ids = HashSet::new();
        // The tool_use ids of the previous message, if it was an assistant message.
        let mut pending: Vec<String> = Vec::new();
        let mut previous_role = "";
        for (i, msg) in messages.iter().enumerate() {
            if let Some(object) = msg.as_object() {
                for key in object.keys().filter(|k| *k != "role" && *k != "content") {
                    self.push(format!("message {i}: unknown field {key:?}"));
                }
            }
            let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
            match role {
                "user" | "assistant" => {}
                "system" => self.push(format!(
                    "message {i}: role \"system\" inside `messages`; the system prompt goes in the \
                     top-level `system` field"
                )),
                other => self.push(format!("message {i}: unknown role {other:?}")),
            }
            if i == 0 && role != "user" {
                self.push(format!(
                    "message 0: the first message has role {role:?}, not \"user\""
                ));
            } else if i > 0 && role == previous_role {
                self.push(format!(
                    "message {i}: two {role:?} messages in a row; roles must alternate"
                ));
            }
            let final_assistant = i + 1 == messages.len() && role == "assistant";
            let blocks = self.content(i, msg, final_assistant);
            if role == "user" {
                self.results(i, &blocks, &pending);
            } else {
                for id in &pending {
                    self.push(format!(
                        "message {}: tool_use {id:?} has no tool_result in the next (user) message",
                        i - 1
                    ));
                }
            }
            pending = Vec::new();
            for (n, block) in blocks.iter().enumerate() {
                self.block(i, n, role, block, &mut ids, &mut pending);
            }
            previous_role = role;
        }
        for id in &pending {
            self.push(format!(
                "message {}: tool_use {id:?} has no tool_result: no user message follows",
                messages.len() - 1
            ));
        }
        if thinking {
            self.thinking_before_tool_use(messages);
        }
    }

    /// The blocks of a message's content (none for string content); checks its shape.
    fn content<'m>(&mut self, i: usize, msg: &'m Value, final_assistant: bool) -> Vec<&'m Value> {
        match msg.get("content") {
            Some(Value::String(text)) => {
                if text.is_empty() && !final_assistant {
                    self.push(format!(
                        "message {i}: empty content (only a final assistant message may be empty)"
                    ));
                }
                Vec::new()
            }
            Some(Value::Array(blocks)) => {
                if blocks.is_empty() && !final_assistant {
                    self.push(format!(
                        "message {i}: empty content (only a final assistant message may be empty)"
                    ));
                }
                blocks.iter().collect()
            }
            _ => {
                self.push(format!(
                    "message {i}: `content` is neither a string nor an array of blocks"
                ));
                Vec::new()
            }
        }
    }

    /// The tool_result blocks of user message `i` against the tool_use ids of message `i - 1`.
    fn results(&mut self, i: usize, blocks: &[&Value], pending: &[String]) {
        let mut answered: HashSet<&str> = HashSet::new();
        let mut other_seen = false;
        for (n, block) in blocks.iter().enumerate() {
            if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                other_seen = true;
                continue;
            }
            let id = id_of(block.get("tool_use_id"));
            if other_seen {
                self.push(format!(
                    "message {i}: tool_result {id:?} (block {n}) comes after other content; tool_result \
                     blocks must come first"
                ));
            }
            if !pending.iter().any(|p| p == id) {
                self.push(format!(
                    "message {i}: tool_result {id:?} answers no tool_use of the previous assistant message"
                ));
            } else if !answered.insert(id) {
                self.push(format!("message {i}: a second tool_result for {id:?}"));
            }
        }
        for id in pending.iter().filter(|id| !answered.contains(id.as_str())) {
            self.push(format!(
                "message {}: tool_use {id:?} has no tool_result in the next message",
                i.saturating_sub(1)
            ));
        }
    }

    /// One content block of message `i` with role `role`; collects its tool_use id.
    fn block(
        &mut self,
        i: usize,
        n: usize,
        role: &str,
        block: &Value,
        ids: &mut HashSet<String>,
        tool_uses: &mut Vec<String>,
    ) {
        let at = format!("message {i} block {n}");
        self.cache_control(&at, block);
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let wrong_role = match kind {
            "tool_use" | "thinking" | "redacted_thinking" => role != "assistant",
            "tool_result" => role != "user",
            _ => false,
        };
        if wrong_role {
            self.push(format!("{at}: a {kind} block in a {role:?} message"));
        }
        match kind {
            "text" => {
                if !is_non_empty_str(block.get("text")) {
                    self.push(format!("{at}: text blocks must have non-empty `text`"));
                }
            }
            "image" => {
                if !block.get("source").is_some_and(Value::is_object) {
                    self.push(format!("{at}: image block without a `source` object"));
                }
            }
            "tool_use" => {
                let id = id_of(block.get("id"));
                if !is_non_empty_str(block.get("id")) {
                    self.push(format!("{at}: tool_use without a non-empty `id`"));
                } else if !ids.insert(id.to_owned()) {
                    self.push(format!(
                        "{at}: tool_use id {id:?} is not unique in the conversation"
                    ));
                }
                if !is_non_empty_str(block.get("name")) {
                    self.push(format!("{at}: tool_use {id:?} without a non-empty `name`"));
                }
                if !block.get("input").is_some_and(Value::is_object) {
                    self.push(format!("{at}: tool_use {id:?} `input` is not an object"));
                }
                if role == "assistant" {
                    tool_uses.push(id.to_owned());
                }
            }
            "tool_result" => {
                if !is_non_empty_str(block.get("tool_use_id")) {
                    self.push(format!("{at}: tool_result without a non-empty `tool_use_id`"));
                }
                if block
                    .get("content")
                    .is_some_and(|c| !c.is_string() && !c.is_array())
                {
                    self.push(format!(
                        "{at}: tool_result `content` is neither a string nor an array"
                    ));
                }
                if block.get("is_error").is_some_and(|e| !e.is_boolean()) {
                    self.push(format!("{at}: tool_result `is_error` is not a boolean"));
                }
            }
            "thinking" => self.thinking_block(&at, block),
            "redacted_thinking" => {
                if !is_non_empty_str(block.get("data")) {
                    self.push(format!("{at}: redacted_thinking without non-empty `data`"));
                }
            }
            other => self.push(format!("{at}: unknown block type {other:?}")),
        }
    }

    fn thinking_block(&mut self, at: &str, block: &Value) {
        let Some(text) = block.get("thinking").and_then(Value::as_str) else {
            self.push(format!("{at}: thinking block without a string `thinking`"));
            return;
        };
        match block.get("signature").and_then(Value::as_str) {
            Some(signature) if !signature.is_empty() => {
                if signature != thinking_signature(text) {
                    self.push(format!(
                        "{at}: invalid signature in thinking block: the text or the signature was altered \
                         (expected {:?} for this text)",
                        thinking_signature(text)
                    ));
                }
            }
            _ => self.push(format!("{at}: thinking block without a non-empty `signature`")),
        }
    }

    fn thinking_before_tool_use(&mut self, messages: &[Value]) {
        let Some((i, last)) = messages
            .iter()
            .enumerate()
            .rev()
            .find(|(_, m)| m.get("role").and_then(Value::as_str) == Some("assistant"))
        else {
            return;
        };
        let Some(blocks) = last.get("content").and_then(Value::as_array) else {
            return;
        };
        let type_of = |b: &Value| b.get("type").and_then(Value::as_str).unwrap_or("").to_owned();
        if !blocks.iter().any(|b| type_of(b) == "tool_use") {
            return;
        }
        let first = blocks.first().map(type_of).unwrap_or_default();
        if first != "thinking" && first != "redacted_thinking" {
            self.push(format!(
                "message {i}: thinking is enabled: expected `thinking` or `redacted_thinking`, but found \
                 `{first}`; an assistant message with tool_use must start with its thinking block"
            ));
        }
    }
}
