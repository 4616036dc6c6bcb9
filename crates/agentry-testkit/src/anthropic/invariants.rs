//! The rules of Anthropic's Messages API that the fake server enforces on every request.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

/// The top-level fields of a Messages request; the real API rejects any other ("Extra inputs
/// are not permitted"), e.g. OpenAI's `stream_options`.
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_k",
    "top_p",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
    "output_format",
];

/// The real API accepts at most this many `cache_control` breakpoints per request.
const MAX_CACHE_BREAKPOINTS: usize = 4;

/// Checks a Messages API request (`POST /v1/messages`); returns one description per violation.
///
/// `headers` (names lower-cased, as in [`RecordedRequest::headers`](crate::RecordedRequest))
/// are checked when given: `anthropic-version` is required. The body:
///
/// 1. Only known top-level fields; `model` a non-empty string, `max_tokens` a positive
///    integer, `stream` a boolean if present, `messages` a non-empty array.
/// 2. `system`, if present, a string or an array of `{type: "text", text, cache_control?}`.
/// 3. Each message is `{role, content}`, roles only `user` / `assistant` (not `system`),
///    strictly alternating, starting with `user`. Content is a string or an array of blocks of a
///    known type (`text`, `image`, `tool_use`, `tool_result`, `thinking`,
///    `redacted_thinking`), non-empty except in a final assistant message; text blocks have
///    non-empty text.
/// 4. `tool_use` (non-empty `id`, unique in the conversation, non-empty `name`, object
///    `input`), `thinking` and `redacted_thinking` only in assistant messages; `tool_result`
///    only in user messages.
/// 5. Each `tool_use` is answered by exactly one `tool_result` (same `tool_use_id`) in the
///    immediately following user message, where the results come before any other block; a
///    result answering no `tool_use` of the previous assistant message, or a second result for
///    one, is a violation.
/// 6. A `thinking` block has a string `thinking` and the `signature` the fake gave it
///    ([`thinking_signature`](crate::thinking_signature) of its text), so it came back unchanged; a `redacted_thinking`
///    block has non-empty `data`.
/// 7. `thinking`, if present, is `{type: "enabled", budget_tokens >= 1024 and < max_tokens}`,
///    `{type: "disabled"}` or `{type: "adaptive"}`. When enabled, the last assistant message,
///    if it has a `tool_use`, starts with a `thinking` or `redacted_thinking` block, and
///    `tool_choice` does not force a tool (`any` / `tool`).
/// 8. `tools`, if present, an array of `{name: [a-zA-Z0-9_-]{1,64}, unique, description?:
///    string, input_schema: {type: "object", ...}}` (server tools, with a `type`, need only a
///    name); `tool_choice`, if present, `{type: auto|any|none|tool}`, `tool` naming a tool.
/// 9. `cache_control`, wherever present, is `{type: "ephemeral", ttl?}`, at most 4 of them.
pub fn check_anthropic_conversation(headers: Option<&BTreeMap<String, String>>, body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(headers) = headers
        && headers
            .get("anthropic-version")
            .is_none_or(|v| v.trim().is_empty())
    {
        problems.push("the `anthropic-version` header is missing".to_owned());
    }
    let Some(request) = body.as_object() else {
        problems.push("the body is not a JSON object".to_owned());
        return problems;
    };
    let mut checker = Checker {
        problems,
        cache_breakpoints: 0,
    };
    checker.top_level(request);
    checker.system(request.get("system"));
    let tool_names = checker.tools(request.get("tools"));
    let thinking = checker.thinking(request);
    checker.tool_choice(request.get("tool_choice"), &tool_names, thinking);
    match request.get("messages").and_then(Value::as_array) {
        None => checker
            .problems
            .push("`messages` is missing or not an array".to_owned()),
        Some(messages) if messages.is_empty() => checker.problems.push("`messages` is empty".to_owned()),
        Some(messages) => checker.messages(messages, thinking),
    }
    if checker.cache_breakpoints > MAX_CACHE_BREAKPOINTS {
        checker.problems.push(format!(
            "{} blocks have `cache_control`; at most {MAX_CACHE_BREAKPOINTS} are allowed",
            checker.cache_breakpoints
        ));
    }
    checker.problems
}

/// The violations found so far, with what later rules need.
pub(super) struct Checker {
    pub(super) problems: Vec<String>,
    /// `cache_control` blocks seen.
    pub(super) cache_breakpoints: usize,
}

pub(super) fn is_non_empty_str(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

impl Checker {
    pub(super) fn push(&mut self, problem: String) {
        self.problems.push(problem);
    }

    fn top_level(&mut self, request: &Map<String, Value>) {
        for key in request.keys() {
            if !FIELDS.contains(&key.as_str()) {
                self.push(format!("unknown top-level field {key:?}"));
            }
        }
        if !is_non_empty_str(request.get("model")) {
            self.push("`model` is missing or not a non-empty string".to_owned());
        }
        if request
            .get("max_tokens")
            .and_then(Value::as_u64)
            .is_none_or(|n| n == 0)
        {
            self.push("`max_tokens` is missing or not a positive integer".to_owned());
        }
        if request.get("stream").is_some_and(|s| !s.is_boolean()) {
            self.push("`stream` is not a boolean".to_owned());
        }
    }

    pub(super) fn cache_control(&mut self, at: &str, block: &Value) {
        let Some(cache) = block.get("cache_control") else {
            return;
        };
        self.cache_breakpoints += 1;
        if cache.get("type").and_then(Value::as_str) != Some("ephemeral") {
            self.push(format!(
                "{at}: `cache_control` is not {{\"type\": \"ephemeral\"}}"
            ));
        }
        if let Some(ttl) = cache.get("ttl")
            && !matches!(ttl.as_str(), Some("5m" | "1h"))
        {
            self.push(format!("{at}: `cache_control.ttl` is not \"5m\" or \"1h\""));
        }
    }

    fn system(&mut self, system: Option<&Value>) {
        match system {
            None | Some(Value::String(_)) => {}
            Some(Value::Array(blocks)) => {
                for (n, block) in blocks.iter().enumerate() {
                    let at = format!("system block {n}");
                    if block.get("type").and_then(Value::as_str) != Some("text")
                        || !is_non_empty_str(block.get("text"))
                    {
                        self.push(format!(
                            "{at} is not a non-empty {{\"type\": \"text\", \"text\"}} block"
                        ));
                    }
                    self.cache_control(&at, block);
                }
            }
            Some(_) => self.push("`system` is neither a string nor an array of text blocks".to_owned()),
        }
    }

    /// Checks `tools`; returns the names defined.
    fn tools(&mut self, tools: Option<&Value>) -> HashSet<String> {
        let mut names = HashSet::new();
        let Some(tools) = tools else {
            return names;
        };
        let Some(tools) = tools.as_array() else {
            self.push("`tools` is not an array".to_owned());
            return names;
        };
        for (n, tool) in tools.iter().enumerate() {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
            let valid_name = (1..=64).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name {
                self.push(format!(
                    "tool {n}: name {name:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
                ));
            } else if !names.insert(name.to_owned()) {
                self.push(format!("tool {n}: the name {name:?} is not unique"));
            }
            let server_tool = tool
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t != "custom");
            if server_tool {
                continue;
            }
            if tool.get("description").is_some_and(|d| !d.is_string()) {
                self.push(format!("tool {n} ({name}): `description` is not a string"));
            }
            let schema = tool.get("input_schema");
            if !schema.is_some_and(Value::is_object) {
                self.push(format!(
                    "tool {n} ({name}): `input_schema` is missing or not an object"
                ));
            } else if schema.and_then(|s| s.get("type")).and_then(Value::as_str) != Some("object") {
                self.push(format!(
                    "tool {n} ({name}): `input_schema.type` is not \"object\""
                ));
            }
            self.cache_control(&format!("tool {n}"), tool);
        }
        names
    }

    /// Checks `thinking`; returns whether it is enabled.
    fn thinking(&mut self, request: &Map<String, Value>) -> bool {
        let Some(thinking) = request.get("thinking") else {
            return false;
        };
        match thinking.get("type").and_then(Value::as_str) {
            Some("enabled") => {
                let budget = thinking.get("budget_tokens").and_then(Value::as_u64);
                let max_tokens = request.get("max_tokens").and_then(Value::as_u64);
                match budget {
                    Some(budget) if budget >= 1024 => {
                        if max_tokens.is_some_and(|max| budget >= max) {
                            self.push(
                                "`max_tokens` must be greater than `thinking.budget_tokens`".to_owned(),
                            );
                        }
                    }
                    _ => self.push("`thinking.budget_tokens` is missing or less than 1024".to_owned()),
                }
                true
            }
            Some("disabled") => false,
            Some("adaptive") => true,
            _ => {
                self.push("`thinking.type` is not \"enabled\", \"disabled\" or \"adaptive\"".to_owned());
                false
            }
        }
    }

    fn tool_choice(&mut self, choice: Option<&Value>, tool_names: &HashSet<String>, thinking: bool) {
        let Some(choice) = choice else {
            return;
        };
        match choice.get("type").and_then(Value::as_str) {
            Some("auto" | "none") => {}
            Some(kind @ ("any" | "tool")) => {
                if kind == "tool" {
                    let name = choice.get("name").and_then(Value::as_str);
                    if !name.is_some_and(|name| tool_names.contains(name)) {
                        self.push(format!(
                            "`tool_choice` names {:?}, which is not in `tools`",
                            name.unwrap_or("")
                        ));
                    }
                }
                if thinking {
                    self.push("thinking may not be enabled when `tool_choice` forces tool use".to_owned());
                }
            }
            _ => self.push("`tool_choice` is not {\"type\": auto|any|none|tool}".to_owned()),
        }
    }
}
