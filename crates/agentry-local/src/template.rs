//! The model's own chat template (from the GGUF), rendered as Hugging Face transformers renders
//! it: Jinja with `trim_blocks` and `lstrip_blocks`, Python string methods, `raise_exception`,
//! `strftime_now`, and a `tojson` that writes what Python's `json.dumps` writes.

use agentry::message::{ContentBlock, Msg, Role, join_text};
use agentry::model::ToolSchema;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::ValueKind;
use minijinja::value::{Kwargs, Serde};
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value as JinjaValue};
use serde_json::{Value, json};

use crate::LocalModelError;

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

const NAME: &str = "chat";

impl ChatTemplate {
    /// Compiles `source`; `bos` and `eos` are the model's special tokens as text.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self, LocalModelError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| LocalModelError::Template(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| LocalModelError::Template(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            bos: bos.to_owned(),
            eos: eos.to_owned(),
        })
    }

    /// Renders the conversation in the template's own words, ending with the assistant's turn.
    pub fn render(&self, messages: &[Msg], tools: &[ToolSchema]) -> Result<String, LocalModelError> {
        let messages = JinjaValue::from(Serde(hf_messages(messages)));
        let tools = (!tools.is_empty()).then(|| JinjaValue::from_iter(tools.iter().map(hf_tool)));
        self.render_values(messages, tools)
    }

    /// Renders messages and tools already in the Hugging Face shapes (the fixtures use this).
    pub fn render_values(
        &self,
        messages: JinjaValue,
        tools: Option<JinjaValue>,
    ) -> Result<String, LocalModelError> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| LocalModelError::Template(e.to_string()))?;
        template
            .render(minijinja::context! {
                messages => messages,
                tools => tools,
                add_generation_prompt => true,
                bos_token => &self.bos,
                eos_token => &self.eos,
            })
            .map_err(|e| LocalModelError::Template(describe(&e)))
    }
}

fn describe(error: &JinjaError) -> String {
    match error.detail() {
        Some(detail) => format!("{}: {detail}", error.kind()),
        None => error.to_string(),
    }
}

fn raise_exception(message: String) -> Result<JinjaValue, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> String {
    chrono::Local::now().format(&format).to_string()
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`, as transformers installs it.
/// Maps keep their order (the wrapper of a tool is `{"type": …, "function": …}` as in Python).
fn tojson(value: JinjaValue, kwargs: Kwargs) -> Result<JinjaValue, JinjaError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_python_json(&value, indent, 0, &mut out)?;
    Ok(JinjaValue::from_safe_string(out))
}

/// JSON written the way Python's `json.dumps` writes it: `", "` and `": "` separators (or
/// newlines and `indent` spaces), non-ASCII kept, the same characters escaped.
fn write_python_json(
    value: &JinjaValue,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> Result<(), JinjaError> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * depth));
        }
    };
    let item_separator = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::String => out.push_str(&Value::String(value.to_string()).to_string()),
        ValueKind::Number => {
            let number: Value = serde_json::to_value(value)
                .map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
            out.push_str(&number.to_string());
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<JinjaValue> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, depth + 1);
                write_python_json(item, indent, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<JinjaValue> = value.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, depth + 1);
                out.push_str(&Value::String(key.to_string()).to_string());
                out.push_str(": ");
                write_python_json(&value.get_item(key)?, indent, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        other => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a {other} cannot be written as JSON"),
            ));
        }
    }
    Ok(())
}

/// A tool in the shape transformers passes to templates, keys in its order.
fn hf_tool(tool: &ToolSchema) -> JinjaValue {
    let function = JinjaValue::from_pairs([
        ("name", JinjaValue::from(tool.name.as_str())),
        ("description", JinjaValue::from(tool.description.as_str())),
        ("parameters", JinjaValue::from(Serde(&tool.parameters))),
    ]);
    JinjaValue::from_pairs([("type", JinjaValue::from("function")), ("function", function)])
}

/// The conversation in the shapes transformers passes to templates: tool results become `tool`
/// messages, calls `tool_calls` with their arguments as an object.
pub(crate) fn hf_messages(messages: &[Msg]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    for msg in messages {
        for result in msg.tool_results() {
            out.push(json!({"role": "tool", "name": result.name, "content": tool_text(&result.output)}));
        }
        let text = join_text(&msg.content).unwrap_or_default();
        match msg.role {
            Role::Assistant => {
                let calls: Vec<Value> = msg
                    .tool_uses()
                    .map(|call| {
                        let arguments = match &call.input {
                            Value::Object(_) => call.input.clone(),
                            _ => json!({}),
                        };
                        json!({"type": "function", "function": {"name": call.name, "arguments": arguments}})
                    })
                    .collect();
                if calls.is_empty() {
                    if !text.is_empty() {
                        out.push(json!({"role": "assistant", "content": text}));
                    }
                } else {
                    out.push(json!({"role": "assistant", "content": text, "tool_calls": calls}));
                }
            }
            Role::User if !text.is_empty() => out.push(json!({"role": "user", "content": text})),
            Role::System if !text.is_empty() => out.push(json!({"role": "system", "content": text})),
            _ => {}
        }
    }
    out
}

/// A tool result as text: a small model reads no images, so they become a note.
fn tool_text(blocks: &[ContentBlock]) -> String {
    let mut parts = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text { text } => parts.push(text.clone()),
            ContentBlock::Image { .. } => parts.push("[an image, not shown to this model]".to_owned()),
            ContentBlock::Audio { .. } => parts.push("[audio, not given to this model]".to_owned()),
            _ => {}
        }
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(value: Value, indent: Option<usize>) -> String {
        let mut out = String::new();
        write_python_json(&JinjaValue::from(Serde(&value)), indent, 0, &mut out).unwrap();
        out
    }

    #[test]
    fn python_json_separators_and_indent() {
        let value = json!({"a": [1, 2.5, "x\"y", null, true], "b": {}, "c": [], "d": "日本\n"});
        assert_eq!(
            dumps(value, None),
            r#"{"a": [1, 2.5, "x\"y", null, true], "b": {}, "c": [], "d": "日本\n"}"#
        );
        assert_eq!(dumps(json!({"a": [1]}), Some(2)), "{\n  \"a\": [\n    1\n  ]\n}");
    }

    #[test]
    fn raise_exception_is_an_error_with_its_message() {
        let template = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        let err = template
            .render_values(JinjaValue::from(Serde(json!([]))), None)
            .unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
    }

    use agentry::message::{ToolResultBlock, ToolUseBlock};

    const QWEN: &str = include_str!("../tests/fixtures/qwen2.5-coder.jinja");
    const CASES: &str = include_str!("../tests/fixtures/cases.json");

    fn qwen() -> ChatTemplate {
        ChatTemplate::new(QWEN, "<|endoftext|>", "<|im_end|>").unwrap()
    }

    fn case(name: &str) -> Value {
        let cases: Vec<Value> = serde_json::from_str(CASES).unwrap();
        cases.into_iter().find(|c| c["name"] == name).unwrap()
    }

    fn tool(name: &str, description: &str, parameters: Value) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }

    fn calculate() -> ToolSchema {
        tool(
            "calculate",
            "Exact arithmetic on an expression.",
            json!({"properties": {"expression": {"description": "e.g. 2 * (3 + 4)", "type": "string"}}, "required": ["expression"], "type": "object"}),
        )
    }

    fn weather() -> ToolSchema {
        tool(
            "get_weather",
            "Weather in a city, 'quoted' & <tagged>.",
            json!({"properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"], "type": "string"}}, "required": ["city"], "type": "object"}),
        )
    }

    fn calls(text: &str, calls: &[(&str, &str, Value)]) -> Msg {
        let mut msg = Msg::assistant("agentry", text);
        msg.content
            .retain(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty()));
        for (id, name, input) in calls {
            msg.content.push(ContentBlock::ToolUse(ToolUseBlock {
                id: (*id).into(),
                name: (*name).into(),
                input: input.clone(),
                raw_input: None,
            }));
        }
        msg
    }

    fn result(id: &str, name: &str, text: &str) -> Msg {
        Msg::tool_result(ToolResultBlock {
            id: id.into(),
            name: name.into(),
            output: vec![ContentBlock::text(text)],
            is_error: false,
        })
    }

    /// Renders `messages` and `tools` and compares with what Python's jinja2 rendered from the
    /// same conversation in transformers' shapes (`tests/fixtures/render.py`).
    fn assert_renders_like_transformers(name: &str, messages: &[Msg], tools: &[ToolSchema]) {
        let case = case(name);
        assert_eq!(
            Value::Array(hf_messages(messages)),
            case["messages"],
            "{name}: the conversation in transformers' shape"
        );
        let rendered = qwen().render(messages, tools).unwrap();
        let expected = match name {
            "tools" => include_str!("../tests/fixtures/tools.txt"),
            "plain" => include_str!("../tests/fixtures/plain.txt"),
            "tools-no-system" => include_str!("../tests/fixtures/tools-no-system.txt"),
            other => panic!("no fixture {other}"),
        };
        assert_eq!(rendered, expected, "{name}");
    }

    #[test]
    fn tools_calls_and_results_render_byte_identical_to_transformers() {
        let messages = [
            Msg::system("You are Agentry."),
            Msg::user("What is 17 * 23, and the weather in Zürich?"),
            calls(
                "",
                &[
                    ("c1", "calculate", json!({"expression": "17 * 23"})),
                    ("c2", "get_weather", json!({"city": "Zürich", "unit": "celsius"})),
                ],
            ),
            result("c1", "calculate", "391"),
            result("c2", "get_weather", "12 °C, \"cloudy\"\nwind 3 km/h"),
            Msg::assistant("agentry", "17 * 23 = 391; Zürich: 12 °C and cloudy."),
            Msg::user("北京呢？"),
            calls("Let me check.", &[("c3", "get_weather", json!({"city": "北京"}))]),
            result("c3", "get_weather", "20 °C"),
        ];
        assert_renders_like_transformers("tools", &messages, &[calculate(), weather()]);
    }

    #[test]
    fn a_conversation_without_tools_renders_byte_identical_to_transformers() {
        let messages = [
            Msg::system("Be brief."),
            Msg::user("Hello"),
            Msg::assistant("agentry", "Hi!"),
            Msg::user("Bye"),
        ];
        assert_renders_like_transformers("plain", &messages, &[]);
    }

    #[test]
    fn tools_without_a_system_prompt_get_the_default_one() {
        assert_renders_like_transformers("tools-no-system", &[Msg::user("2+2?")], &[calculate()]);
    }
}
