//! Request encoding for the Messages wire.
//!
//! Agentry's messages map onto Anthropic's stricter shape: the leading system messages become
//! the top-level `system`; roles alternate (neighbours of one role are merged); tool results
//! are `tool_result` blocks first in the user message that follows the call; a later system
//! note is user text; thinking blocks go back with their signatures (a thinking block without
//! one, from another provider, is left out, as the API would refuse it). The body is
//! serialized from borrowed views of the messages, without a `serde_json::Value` tree.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::message::{ContentBlock, MediaSource, Msg, Role, ToolResultBlock, ToolUseBlock};
use crate::model::{ToolChoice, ToolSchema};

/// The body of one Messages request.
pub(super) struct WireRequest<'a> {
    pub model: &'a str,
    pub max_tokens: u32,
    pub messages: &'a [Msg],
    /// The tools' JSON ([`encode_tools`]), when the request has tools.
    pub tools: Option<&'a RawValue>,
    pub tool_choice: Option<&'a ToolChoice>,
    pub stream: bool,
    pub thinking_budget: Option<u32>,
    pub prompt_caching: bool,
    pub extra: &'a Map<String, Value>,
}

const OWN_KEYS: [&str; 8] = [
    "model",
    "max_tokens",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "stream",
    "thinking",
];

#[derive(Serialize)]
struct CacheControl {
    r#type: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { r#type: "ephemeral" };

impl Serialize for WireRequest<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (system, turns) = turns(self.messages);
        let forced = matches!(
            self.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Named(_))
        ) && self.tools.is_some();
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("model", self.model)?;
        map.serialize_entry("max_tokens", &self.max_tokens)?;
        if !system.is_empty() {
            map.serialize_entry(
                "system",
                &SystemBlocks {
                    texts: &system,
                    cache: self.prompt_caching,
                },
            )?;
        }
        map.serialize_entry("messages", &turns)?;
        if let Some(tools) = self.tools {
            map.serialize_entry("tools", tools)?;
            if let Some(choice) = self.tool_choice {
                map.serialize_entry("tool_choice", &WireToolChoice(choice))?;
            }
        }
        // The API refuses thinking beside a forced tool.
        if let Some(budget) = self.thinking_budget.filter(|_| !forced) {
            #[derive(Serialize)]
            struct Thinking {
                r#type: &'static str,
                budget_tokens: u32,
            }
            map.serialize_entry(
                "thinking",
                &Thinking {
                    r#type: "enabled",
                    budget_tokens: budget,
                },
            )?;
        }
        map.serialize_entry("stream", &self.stream)?;
        for (key, value) in self.extra {
            if !OWN_KEYS.contains(&key.as_str()) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

struct SystemBlocks<'a> {
    texts: &'a [&'a str],
    cache: bool,
}

impl Serialize for SystemBlocks<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Text<'a> {
            r#type: &'static str,
            text: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_control: Option<CacheControl>,
        }
        let last = self.texts.len().saturating_sub(1);
        s.collect_seq(self.texts.iter().enumerate().map(|(i, text)| Text {
            r#type: "text",
            text,
            cache_control: (self.cache && i == last).then_some(EPHEMERAL),
        }))
    }
}

/// The JSON array of `tools` as the wire has it, the last with a cache breakpoint when
/// `prompt_caching`.
pub(super) fn encode_tools(tools: &[ToolSchema], prompt_caching: bool) -> serde_json::Result<String> {
    serde_json::to_string(&Tools {
        tools,
        cache: prompt_caching,
    })
}

struct Tools<'a> {
    tools: &'a [ToolSchema],
    cache: bool,
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tool<'a> {
            name: &'a str,
            description: &'a str,
            input_schema: &'a Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_control: Option<CacheControl>,
        }
        let last = self.tools.len().saturating_sub(1);
        s.collect_seq(self.tools.iter().enumerate().map(|(i, t)| Tool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.parameters,
            // A breakpoint on the last tool caches the whole list (and the system before it).
            cache_control: (self.cache && i == last).then_some(EPHEMERAL),
        }))
    }
}

struct WireToolChoice<'a>(&'a ToolChoice);

impl Serialize for WireToolChoice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        match self.0 {
            ToolChoice::Auto => map.serialize_entry("type", "auto")?,
            ToolChoice::None => map.serialize_entry("type", "none")?,
            ToolChoice::Required => map.serialize_entry("type", "any")?,
            ToolChoice::Named(name) => {
                map.serialize_entry("type", "tool")?;
                map.serialize_entry("name", name)?;
            }
        }
        map.end()
    }
}

/// One block of a wire message, borrowed from the conversation.
enum Block<'a> {
    Text(&'a str),
    Thinking { thinking: &'a str, signature: &'a str },
    Redacted(&'a str),
    Media(&'a MediaSource),
    ToolUse(&'a ToolUseBlock),
    ToolResult(&'a ToolResultBlock),
}

impl Serialize for Block<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        match self {
            Block::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Block::Thinking { thinking, signature } => {
                map.serialize_entry("type", "thinking")?;
                map.serialize_entry("thinking", thinking)?;
                map.serialize_entry("signature", signature)?;
            }
            Block::Redacted(data) => {
                map.serialize_entry("type", "redacted_thinking")?;
                map.serialize_entry("data", data)?;
            }
            Block::Media(source) => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry("source", &Source(source))?;
            }
            Block::ToolUse(call) => {
                map.serialize_entry("type", "tool_use")?;
                map.serialize_entry("id", &call.id)?;
                map.serialize_entry("name", &call.name)?;
                map.serialize_entry("input", &CallInput(call))?;
            }
            Block::ToolResult(result) => {
                map.serialize_entry("type", "tool_result")?;
                map.serialize_entry("tool_use_id", &result.id)?;
                if result.output.iter().any(|b| result_block(b).is_some()) {
                    map.serialize_entry("content", &ResultContent(&result.output))?;
                }
                if result.is_error {
                    map.serialize_entry("is_error", &true)?;
                }
            }
        }
        map.end()
    }
}

struct Source<'a>(&'a MediaSource);

impl Serialize for Source<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        match self.0 {
            MediaSource::Base64 { media_type, data } => {
                map.serialize_entry("type", "base64")?;
                map.serialize_entry("media_type", media_type)?;
                map.serialize_entry("data", data)?;
            }
            MediaSource::Url { url } => {
                map.serialize_entry("type", "url")?;
                map.serialize_entry("url", url)?;
            }
        }
        map.end()
    }
}

/// A call's input as the API requires it, an object: the parsed arguments, or an empty object
/// when the model's text was not one (the tool's error result names that text).
struct CallInput<'a>(&'a ToolUseBlock);

impl Serialize for CallInput<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0.input {
            input @ Value::Object(_) => input.serialize(s),
            _ => s.serialize_map(Some(0))?.end(),
        }
    }
}

/// A tool's output: text and images; audio and nested blocks become short notes.
struct ResultContent<'a>(&'a [ContentBlock]);

impl Serialize for ResultContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().filter_map(result_block))
    }
}

fn result_block(block: &ContentBlock) -> Option<Block<'_>> {
    match block {
        ContentBlock::Text { text } if !text.is_empty() => Some(Block::Text(text)),
        ContentBlock::Image { source } => Some(Block::Media(source)),
        ContentBlock::Audio { .. } => Some(Block::Text("[audio omitted]")),
        ContentBlock::ToolUse(_) | ContentBlock::ToolResult(_) => {
            Some(Block::Text("[nested tool block omitted]"))
        }
        _ => None,
    }
}

/// One wire message.
#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

/// The leading system texts, and the alternating turns.
fn turns(messages: &[Msg]) -> (Vec<&str>, Vec<Turn<'_>>) {
    let mut system = Vec::new();
    let mut turns: Vec<Turn<'_>> = Vec::new();
    let mut leading = true;
    for msg in messages {
        let (role, blocks) = match msg.role {
            Role::System if leading && msg.tool_results().next().is_none() => {
                system.extend(
                    msg.content
                        .iter()
                        .filter_map(ContentBlock::as_text)
                        .filter(|t| !t.is_empty()),
                );
                continue;
            }
            Role::Assistant => ("assistant", assistant_blocks(msg)),
            Role::User | Role::System => ("user", user_blocks(msg)),
        };
        leading = false;
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(Turn {
                role,
                content: blocks,
            }),
        }
    }
    for turn in &mut turns {
        if turn.role == "user" {
            // Results answer the calls before them, and must come first in their message.
            turn.content.sort_by_key(|b| !matches!(b, Block::ToolResult(_)));
        }
    }
    if turns.first().is_some_and(|t| t.role == "assistant") {
        turns.insert(
            0,
            Turn {
                role: "user",
                content: vec![Block::Text("(The conversation continues.)")],
            },
        );
    }
    (system, turns)
}

fn assistant_blocks(msg: &Msg) -> Vec<Block<'_>> {
    let mut blocks = Vec::with_capacity(msg.content.len());
    for block in &msg.content {
        match block {
            ContentBlock::Thinking {
                thinking,
                signature: Some(signature),
            } => blocks.push(Block::Thinking { thinking, signature }),
            ContentBlock::RedactedThinking { data } => blocks.push(Block::Redacted(data)),
            ContentBlock::Text { text } if !text.is_empty() => blocks.push(Block::Text(text)),
            ContentBlock::ToolUse(call) => blocks.push(Block::ToolUse(call)),
            _ => {}
        }
    }
    blocks
}

fn user_blocks(msg: &Msg) -> Vec<Block<'_>> {
    let mut blocks = Vec::with_capacity(msg.content.len());
    for block in &msg.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => blocks.push(Block::Text(text)),
            ContentBlock::Image { source } => blocks.push(Block::Media(source)),
            ContentBlock::ToolResult(result) => blocks.push(Block::ToolResult(result)),
            _ => {}
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CallId;
    use crate::message::{ToolResultBlock, ToolUseBlock};
    use serde_json::json;

    fn body(messages: &[Msg], tools: &[ToolSchema], choice: Option<&ToolChoice>) -> Value {
        let extra = Map::new();
        let tools =
            (!tools.is_empty()).then(|| RawValue::from_string(encode_tools(tools, true).unwrap()).unwrap());
        serde_json::to_value(WireRequest {
            model: "m",
            max_tokens: 100,
            messages,
            tools: tools.as_deref(),
            tool_choice: choice,
            stream: true,
            thinking_budget: Some(1024),
            prompt_caching: true,
            extra: &extra,
        })
        .unwrap()
    }

    fn call(id: &str) -> ToolUseBlock {
        ToolUseBlock {
            id: CallId::new(id),
            name: "add".into(),
            input: json!({"a": 1}),
            raw_input: None,
        }
    }

    fn result(id: &str, text: &str) -> Msg {
        Msg::tool_result(ToolResultBlock {
            id: CallId::new(id),
            name: "add".into(),
            output: vec![ContentBlock::text(text)],
            is_error: false,
        })
    }

    #[test]
    fn system_goes_on_top_and_results_merge_into_one_user_turn_before_a_note() {
        let assistant = Msg::new(
            "a",
            Role::Assistant,
            vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::thinking("unsigned, from another provider"),
                ContentBlock::ToolUse(call("c1")),
                ContentBlock::ToolUse(call("c2")),
            ],
        );
        let messages = vec![
            Msg::system("Be brief."),
            Msg::user("add"),
            assistant,
            Msg::system("A note from the runtime."),
            result("c1", "2"),
            result("c2", "3"),
            Msg::assistant("a", "Done."),
        ];
        let tools = [ToolSchema {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = body(&messages, &tools, None);
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(body["tools"][0]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 1024})
        );
        let turns = body["messages"].as_array().unwrap();
        let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
        assert_eq!(
            turns[1]["content"],
            json!([
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1}},
                {"type": "tool_use", "id": "c2", "name": "add", "input": {"a": 1}},
            ])
        );
        let kinds: Vec<&str> = turns[2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["tool_result", "tool_result", "text"]);
        assert_eq!(
            turns[2]["content"][0],
            json!({"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "2"}]})
        );
    }

    #[test]
    fn a_forced_tool_goes_without_thinking_and_choices_map() {
        let tools = [ToolSchema {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type": "object"}),
        }];
        let messages = [Msg::user("x")];
        let forced = body(&messages, &tools, Some(&ToolChoice::Named("add".into())));
        assert_eq!(forced["tool_choice"], json!({"type": "tool", "name": "add"}));
        assert!(forced.get("thinking").is_none());
        let any = body(&messages, &tools, Some(&ToolChoice::Required));
        assert_eq!(any["tool_choice"], json!({"type": "any"}));
        let auto = body(&messages, &tools, Some(&ToolChoice::Auto));
        assert_eq!(auto["tool_choice"], json!({"type": "auto"}));
        assert!(auto.get("thinking").is_some());
    }

    #[test]
    fn a_conversation_opening_with_the_model_gets_a_user_turn_first() {
        let body = body(&[Msg::assistant("a", "Hello!"), Msg::user("hi")], &[], None);
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns[0]["role"], "user");
        assert_eq!(turns[1]["role"], "assistant");
        assert!(body.get("system").is_none());
    }
}
