//! Request encoding for the Chat Completions wire format.
//!
//! Messages are serialized straight from [`Msg`]s into the request body, without building an
//! intermediate `serde_json::Value` tree: this runs on every step of every reply.

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::message::{ContentBlock, MediaSource, Msg, Role, ToolResultBlock, ToolUseBlock, join_text};
use crate::model::{ToolChoice, ToolSchema};

/// The body of one chat-completions request.
pub(super) struct WireRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [Msg],
    /// The tools' JSON ([`encode_tools`]), when the request has tools.
    pub tools: Option<&'a RawValue>,
    pub tool_choice: Option<&'a ToolChoice>,
    pub stream: bool,
    pub include_usage: bool,
    /// The request's cap on the answer, if any.
    pub max_tokens: Option<u32>,
    pub extra: &'a Map<String, Value>,
}

const OWN_KEYS: [&str; 6] = [
    "model",
    "messages",
    "tools",
    "tool_choice",
    "stream",
    "stream_options",
];

impl Serialize for WireRequest<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("model", self.model)?;
        map.serialize_entry("messages", &WireMessages(self.messages))?;
        if let Some(tools) = self.tools {
            map.serialize_entry("tools", tools)?;
            if let Some(choice) = self.tool_choice {
                map.serialize_entry("tool_choice", &WireToolChoice(choice))?;
            }
        }
        map.serialize_entry("stream", &self.stream)?;
        if self.stream && self.include_usage {
            map.serialize_entry("stream_options", &IncludeUsage { include_usage: true })?;
        }
        // Reasoning models take only the newer name.
        let cap_key = match self.model.split('/').next_back().unwrap_or(self.model) {
            m if m.starts_with("o1")
                || m.starts_with("o3")
                || m.starts_with("o4")
                || m.starts_with("gpt-5") =>
            {
                "max_completion_tokens"
            }
            _ => "max_tokens",
        };
        if let Some(cap) = self.max_tokens {
            map.serialize_entry(cap_key, &cap)?;
        }
        for (key, value) in self.extra {
            let ours = OWN_KEYS.contains(&key.as_str()) || (self.max_tokens.is_some() && key == cap_key);
            if !ours {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

#[derive(Serialize)]
struct IncludeUsage {
    include_usage: bool,
}

/// The JSON array of `tools` as the wire has it.
pub(super) fn encode_tools(tools: &[ToolSchema]) -> serde_json::Result<String> {
    serde_json::to_string(&WireTools(tools))
}

struct WireTools<'a>(&'a [ToolSchema]);

impl Serialize for WireTools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            description: &'a str,
            parameters: &'a Value,
        }
        #[derive(Serialize)]
        struct Tool<'a> {
            r#type: &'static str,
            function: Function<'a>,
        }
        s.collect_seq(self.0.iter().map(|t| Tool {
            r#type: "function",
            function: Function {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        }))
    }
}

struct WireToolChoice<'a>(&'a ToolChoice);

impl Serialize for WireToolChoice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ToolChoice::Auto => s.serialize_str("auto"),
            ToolChoice::None => s.serialize_str("none"),
            ToolChoice::Required => s.serialize_str("required"),
            ToolChoice::Named(name) => {
                #[derive(Serialize)]
                struct Name<'a> {
                    name: &'a str,
                }
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("type", "function")?;
                map.serialize_entry("function", &Name { name })?;
                map.end()
            }
        }
    }
}

/// The message list: one `Msg` may become several wire messages (one per tool result).
struct WireMessages<'a>(&'a [Msg]);

impl Serialize for WireMessages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for msg in self.0 {
            for result in msg.tool_results() {
                seq.serialize_element(&ToolMessage(result))?;
            }
            match msg.role {
                Role::Assistant => {
                    let calls: Vec<&ToolUseBlock> = msg.tool_uses().collect();
                    let text = joined_text(&msg.content);
                    if !calls.is_empty() || !text.is_empty() {
                        seq.serialize_element(&AssistantMessage { text, calls })?;
                    }
                }
                Role::User => {
                    if has_media(&msg.content) {
                        seq.serialize_element(&PartsMessage { role: "user", msg })?;
                    } else {
                        let text = joined_text(&msg.content);
                        if !text.is_empty() {
                            seq.serialize_element(&TextMessage { role: "user", text })?;
                        }
                    }
                }
                Role::System => {
                    let text = joined_text(&msg.content);
                    if !text.is_empty() {
                        seq.serialize_element(&TextMessage { role: "system", text })?;
                    }
                }
            }
        }
        seq.end()
    }
}

fn joined_text(blocks: &[ContentBlock]) -> String {
    join_text(blocks).unwrap_or_default()
}

fn has_media(blocks: &[ContentBlock]) -> bool {
    blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::Image { .. } | ContentBlock::Audio { .. }))
}

struct TextMessage {
    role: &'static str,
    text: String,
}

impl Serialize for TextMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("role", self.role)?;
        map.serialize_entry("content", &self.text)?;
        map.end()
    }
}

struct AssistantMessage<'a> {
    text: String,
    calls: Vec<&'a ToolUseBlock>,
}

impl Serialize for AssistantMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("role", "assistant")?;
        // Some servers (llama-cpp-python) reject `null` content beside tool calls.
        map.serialize_entry("content", &self.text)?;
        if !self.calls.is_empty() {
            map.serialize_entry("tool_calls", &ToolCalls(&self.calls))?;
        }
        map.end()
    }
}

struct ToolCalls<'a>(&'a [&'a ToolUseBlock]);

impl Serialize for ToolCalls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            arguments: String,
        }
        #[derive(Serialize)]
        struct Call<'a> {
            id: &'a str,
            r#type: &'static str,
            function: Function<'a>,
        }
        s.collect_seq(self.0.iter().map(|u| Call {
            id: &u.id,
            r#type: "function",
            function: Function {
                name: &u.name,
                arguments: call_arguments(u),
            },
        }))
    }
}

/// The arguments as the model should see its own call again: the parsed object when there is
/// one (hooks may have edited it), else the raw text the model produced.
fn call_arguments(call: &ToolUseBlock) -> String {
    match (&call.input, &call.raw_input) {
        (Value::Object(_), _) => call.input.to_string(),
        (_, Some(raw)) => raw.clone(),
        (Value::Null, None) => "{}".to_owned(),
        (other, None) => other.to_string(),
    }
}

struct ToolMessage<'a>(&'a ToolResultBlock);

impl Serialize for ToolMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("role", "tool")?;
        map.serialize_entry("tool_call_id", &self.0.id)?;
        map.serialize_entry("content", &tool_output_text(&self.0.output))?;
        map.end()
    }
}

/// Tool messages carry text only on this wire: media become short notes.
fn tool_output_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for block in blocks {
        let piece = match block {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::Image { source } => media_note("image", source),
            ContentBlock::Audio { source } => media_note("audio", source),
            ContentBlock::Thinking { .. }
            | ContentBlock::RedactedThinking { .. }
            | ContentBlock::ToolUse(_)
            | ContentBlock::ToolResult(_) => {
                continue;
            }
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&piece);
    }
    out
}

fn media_note(kind: &str, source: &MediaSource) -> String {
    match source {
        MediaSource::Url { url } => format!("[{kind} at {url}]"),
        MediaSource::Base64 { media_type, data } => {
            format!("[{kind} omitted: {media_type}, {} bytes of base64]", data.len())
        }
    }
}

/// A user message with images or audio: content parts.
struct PartsMessage<'a> {
    role: &'static str,
    msg: &'a Msg,
}

impl Serialize for PartsMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("role", self.role)?;
        let parts: Vec<Value> = self.msg.content.iter().filter_map(content_part).collect();
        map.serialize_entry("content", &parts)?;
        map.end()
    }
}

fn content_part(block: &ContentBlock) -> Option<Value> {
    use serde_json::json;
    match block {
        ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
        ContentBlock::Image { source } => {
            let url = match source {
                MediaSource::Url { url } => url.clone(),
                MediaSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
            };
            Some(json!({"type": "image_url", "image_url": {"url": url}}))
        }
        ContentBlock::Audio { source } => match source {
            MediaSource::Base64 { media_type, data } => {
                let format = media_type.rsplit('/').next().unwrap_or("wav");
                let format = if format == "mpeg" { "mp3" } else { format };
                Some(json!({"type": "input_audio", "input_audio": {"data": data, "format": format}}))
            }
            MediaSource::Url { url } => Some(json!({"type": "text", "text": format!("[audio at {url}]")})),
        },
        ContentBlock::Thinking { .. }
        | ContentBlock::RedactedThinking { .. }
        | ContentBlock::ToolUse(_)
        | ContentBlock::ToolResult(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn encode(messages: &[Msg], tools: &[ToolSchema], choice: Option<&ToolChoice>, stream: bool) -> Value {
        let extra = Map::from_iter([
            ("temperature".to_owned(), json!(0)),
            ("model".to_owned(), json!("ignored")),
        ]);
        let tools = (!tools.is_empty()).then(|| RawValue::from_string(encode_tools(tools).unwrap()).unwrap());
        let req = WireRequest {
            model: "m",
            messages,
            tools: tools.as_deref(),
            tool_choice: choice,
            stream,
            include_usage: true,
            max_tokens: None,
            extra: &extra,
        };
        serde_json::to_value(&req).unwrap()
    }

    fn call(id: &str, input: Value, raw: Option<&str>) -> ContentBlock {
        ContentBlock::ToolUse(ToolUseBlock {
            id: id.into(),
            name: "add".into(),
            input,
            raw_input: raw.map(Into::into),
        })
    }

    #[test]
    fn conversation_maps_to_wire_roles() {
        let messages = vec![
            Msg::system("be brief"),
            Msg::user("add"),
            Msg::new(
                "bot",
                Role::Assistant,
                vec![
                    ContentBlock::thinking("hmm"),
                    call("c1", json!({"a": 1}), Some("{\"a\": 1}")),
                    call("c2", Value::Null, Some("{bad")),
                ],
            ),
            Msg::tool_result(ToolResultBlock {
                id: "c1".into(),
                name: "add".into(),
                output: vec![ContentBlock::text("2"), ContentBlock::text("ok")],
                is_error: false,
            }),
            Msg::tool_result(ToolResultBlock {
                id: "c2".into(),
                name: "add".into(),
                output: vec![ContentBlock::text("invalid")],
                is_error: true,
            }),
            Msg::assistant("bot", "done"),
        ];
        let v = encode(&messages, &[], None, false);
        let m = v["messages"].as_array().unwrap();
        assert_eq!(m.len(), 6);
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1], json!({"role": "user", "content": "add"}));
        assert_eq!(m[2]["content"], "", "empty string, never null, beside tool calls");
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(
            m[2]["tool_calls"][1]["function"]["arguments"], "{bad",
            "invalid JSON echoed raw"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "2\nok"})
        );
        assert_eq!(m[4]["tool_call_id"], "c2");
        assert_eq!(m[5], json!({"role": "assistant", "content": "done"}));
        assert_eq!(v["model"], "m", "extra fields never override our own");
        assert_eq!(v["temperature"], 0);
        assert!(v.get("tools").is_none());
        assert_eq!(v["stream"], false);
        assert!(v.get("stream_options").is_none());
    }

    #[test]
    fn tools_choice_and_stream_options() {
        let tools = [ToolSchema {
            name: "add".into(),
            description: "Add.".into(),
            parameters: json!({"type": "object"}),
        }];
        let msgs = [Msg::user("x")];
        let v = encode(&msgs, &tools, Some(&ToolChoice::Named("add".into())), true);
        assert_eq!(v["tools"][0]["type"], "function");
        assert_eq!(v["tools"][0]["function"]["name"], "add");
        assert_eq!(
            v["tool_choice"],
            json!({"type": "function", "function": {"name": "add"}})
        );
        assert_eq!(v["stream_options"], json!({"include_usage": true}));
        for (choice, wire) in [
            (ToolChoice::Auto, "auto"),
            (ToolChoice::None, "none"),
            (ToolChoice::Required, "required"),
        ] {
            assert_eq!(encode(&msgs, &tools, Some(&choice), true)["tool_choice"], wire);
        }
    }

    #[test]
    fn user_images_become_parts_and_tool_images_notes() {
        let user = Msg::new(
            "user",
            Role::User,
            vec![
                ContentBlock::text("look"),
                ContentBlock::Image {
                    source: MediaSource::Base64 {
                        media_type: "image/png".into(),
                        data: "AAAA".into(),
                    },
                },
            ],
        );
        let result = Msg::tool_result(ToolResultBlock {
            id: "c".into(),
            name: "shot".into(),
            output: vec![ContentBlock::Image {
                source: MediaSource::Url {
                    url: "http://x/y.png".into(),
                },
            }],
            is_error: false,
        });
        let v = encode(&[user, result], &[], None, false);
        assert_eq!(
            v["messages"][0]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        assert_eq!(v["messages"][1]["content"], "[image at http://x/y.png]");
    }
}
