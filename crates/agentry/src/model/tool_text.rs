//! Tool calls that a model wrote as text.
//!
//! Small models often answer a tool request with the call in their text instead of in the
//! structured field: inside Qwen's `<tool_call>` tags, as a fenced JSON block, or as a bare JSON
//! object. [`parse_text_calls`] finds such calls, for the embedded model (whose output is only
//! text) and for a server that did not parse them (the agent's tool shim, see
//! [`ReActAgentBuilder::tool_shim`](crate::agent::ReActAgentBuilder::tool_shim)).
//!
//! Only objects naming one of the offered tools count, so an answer that merely contains JSON
//! stays an answer.
//!
//! ```
//! use agentry::model::parse_text_calls;
//!
//! let text = "Let me add them.\n```json\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n```";
//! let parsed = parse_text_calls(text, &["add"]);
//! assert_eq!(parsed.calls.len(), 1);
//! assert_eq!(parsed.calls[0].name, "add");
//! assert_eq!(parsed.calls[0].arguments["b"], 3);
//! assert_eq!(parsed.text, "Let me add them.");
//! ```

use serde_json::{Map, Value};

/// A call found in text.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TextCall {
    /// The tool's name, one of the offered ones.
    pub name: String,
    /// The arguments object (an argument string holding JSON is parsed).
    pub arguments: Map<String, Value>,
    /// The arguments as the model wrote them.
    pub raw_arguments: String,
}

/// What [`parse_text_calls`] found.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ParsedText {
    /// The text without the calls (and without the tags or fences around them), trimmed.
    pub text: String,
    /// The calls, in the order they were written.
    pub calls: Vec<TextCall>,
}

/// Finds the calls of offered tools written in `text`: `<tool_call>…</tool_call>` (the closing
/// tag may be missing at the end), a fenced block (```` ```json ````, ```` ``` ````), or a bare
/// JSON object; each an object `{"name": …, "arguments": {…}}` (also `"parameters"`, arguments
/// as a JSON string, or an array of such objects). Anything else stays text.
pub fn parse_text_calls(text: &str, tools: &[&str]) -> ParsedText {
    let mut calls = Vec::new();
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        match next_call_span(rest, tools) {
            Some(mut span) => {
                // `{{"name": …}}`: a call in a second pair of braces (Qwen2.5-Coder 1.5B behind
                // llama-server writes it) loses both, not only its own.
                let before = rest[..span.start].trim_end();
                let after = rest[span.end..].trim_start();
                if before.ends_with('{') && after.starts_with('}') {
                    span.start = before.len() - 1;
                    span.end = rest.len() - after.len() + 1;
                }
                kept.push_str(&rest[..span.start]);
                calls.extend(span.calls);
                rest = &rest[span.end..];
            }
            None => {
                kept.push_str(rest);
                break;
            }
        }
    }
    ParsedText {
        text: kept.trim().to_owned(),
        calls,
    }
}

/// Whether `text` may be the beginning of a call written as text: a streaming front end holds
/// such text back until the answer is complete.
pub fn may_start_text_call(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with('{')
        || trimmed.starts_with("```")
        || trimmed.starts_with("<tool_call>")
        || "<tool_call>".starts_with(trimmed) && !trimmed.is_empty()
        || "```".starts_with(trimmed) && !trimmed.is_empty()
}

/// How much of `text`, an answer still being generated, can be shown as answer text now when
/// `tools` are offered: everything before the first place that is, or may still become, a call
/// written as text (`<tool_call>`, a fence without a language or marked `json`, a JSON object),
/// without trailing whitespace. A fence in another language, or a complete JSON object that
/// names no offered tool, is text and is shown.
///
/// What it returns is a prefix of the complete answer's text: of the whole text when no call
/// turns up, and of [`ParsedText::text`] when one does (after the answer's leading whitespace,
/// which `ParsedText::text` trims and this keeps). So a front end that shows these prefixes as
/// the answer grows never shows a call as text, nor text that it must take back.
///
/// ```
/// use agentry::model::streamable_text;
///
/// let tools = ["add"];
/// assert_eq!(streamable_text("Let me add.\n```json\n{\"name\": \"ad", &tools), "Let me add.");
/// assert_eq!(streamable_text("Use {\"x\": 1} here", &tools), "Use {\"x\": 1} here");
/// assert_eq!(streamable_text("<tool_c", &tools), "");
/// ```
pub fn streamable_text<'a>(text: &'a str, tools: &[&str]) -> &'a str {
    shown_part(text, pending_call_start(text, tools, 0).cut)
}

/// [`streamable_text`] for a text that grows: resumes the scan at `from`, a `settled` offset
/// that an earlier call returned for a beginning of `text`. Returns the length of what can be
/// shown and the new settled offset.
pub(crate) fn streamable_text_from(text: &str, tools: &[&str], from: usize) -> (usize, usize) {
    let scan = pending_call_start(text, tools, from);
    (shown_part(text, scan.cut).len(), scan.settled)
}

fn shown_part(text: &str, cut: usize) -> &str {
    let shown = text[..cut].trim_end();
    if shown.trim_start().is_empty() { "" } else { shown }
}

/// Where [`pending_call_start`] stopped.
struct Scan {
    /// Where what may be a call starts (the text's length if nowhere).
    cut: usize,
    /// Up to here, what the scan found holds however the text goes on: a later scan of a longer
    /// text may start here.
    settled: usize,
}

/// Whether the structure at an opener is answer text of a known length, or may hold a call.
enum Extent {
    /// Text for this many bytes (a structure without a call, or an opener that starts none).
    Text(usize),
    /// Text to the end of what has come so far (a fence in another language, not closed yet).
    TextSoFar,
    /// A call, or unfinished: it may still become one.
    Pending,
}

/// Where the first call, or what may still become one, starts in `text`, scanning from `from`
/// (0, or a settled offset of a beginning of `text`). Follows [`next_call_span`]'s scan, so that
/// whatever it passes over stays text.
fn pending_call_start(text: &str, tools: &[&str], from: usize) -> Scan {
    let mut from = if text.is_char_boundary(from) { from } else { 0 };
    // Called on every streamed state: each opener is searched for once per call, not once per
    // structure passed over.
    let mut tag = text[from..].find(OPEN_TAG).map(|at| from + at);
    let mut fence = text[from..].find("```").map(|at| from + at);
    while from < text.len() {
        // An opener passed over (inside a structure that is text) is searched for again.
        for (found, opener) in [(&mut tag, OPEN_TAG), (&mut fence, "```")] {
            if found.is_some_and(|at| at < from) {
                *found = text[from..].find(opener).map(|at| from + at);
            }
        }
        let brace = text[from..].find('{').map(|at| from + at);
        let Some(next) = [tag, fence, brace].into_iter().flatten().min() else {
            let cut = from + partial_opener_at_end(&text[from..]);
            return Scan { cut, settled: cut };
        };
        if Some(next) == tag {
            // A tag is never answer text worth showing early; if it holds no call, the
            // complete answer shows it.
            return Scan {
                cut: next,
                settled: next,
            };
        }
        let candidate = &text[next..];
        let extent = if candidate.starts_with("```") {
            fence_extent(candidate, tools)
        } else {
            object_extent(candidate, tools)
        };
        match extent {
            Extent::Text(len) => from = next + len.max(1),
            Extent::TextSoFar => {
                return Scan {
                    cut: text.len(),
                    settled: next,
                };
            }
            Extent::Pending => {
                return Scan {
                    cut: next,
                    settled: next,
                };
            }
        }
    }
    Scan {
        cut: text.len(),
        settled: text.len(),
    }
}

/// Where an opener cut short at the end of `text` starts (`<tool`, two backticks), or its length.
fn partial_opener_at_end(text: &str) -> usize {
    text.char_indices()
        .map(|(at, _)| at)
        .filter(|at| text.len() - at < OPEN_TAG.len())
        .find(|&at| OPEN_TAG.starts_with(&text[at..]) || "```".starts_with(&text[at..]))
        .unwrap_or(text.len())
}

/// As [`fenced`], for a fence that may not be complete yet.
fn fence_extent(text: &str, tools: &[&str]) -> Extent {
    let Some(newline) = text[3..].find('\n') else {
        // The language is not known yet.
        return Extent::Pending;
    };
    let body_start = 3 + newline + 1;
    let info = text[3..body_start].trim();
    let close = text[body_start..].find("```");
    if !info.is_empty() && !info.eq_ignore_ascii_case("json") && !info.eq_ignore_ascii_case("tool_call") {
        // Another language: text to its end, or to the end of what has come so far.
        return close.map_or(Extent::TextSoFar, |at| Extent::Text(body_start + at + 3));
    }
    match close {
        Some(at) => match serde_json::from_str::<Value>(text[body_start..body_start + at].trim())
            .ok()
            .and_then(|value| calls_in(value, tools))
        {
            Some(_) => Extent::Pending,
            None => Extent::Text(body_start + at + 3),
        },
        None => Extent::Pending,
    }
}

/// As [`bare`], for an object that may not be complete yet. A brace right before another one
/// is held while the inner object may be a call, which [`parse_text_calls`] takes with it.
fn object_extent(text: &str, tools: &[&str]) -> Extent {
    let inner = text[1..].trim_start();
    if inner.starts_with('{') {
        return match json_extent(inner, tools) {
            Extent::Text(_) => Extent::Text(1),
            _ => Extent::Pending,
        };
    }
    json_extent(text, tools)
}

/// Whether the JSON value at the start of `text` is text (its length) or may be a call.
fn json_extent(text: &str, tools: &[&str]) -> Extent {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match values.next() {
        Some(Ok(value)) => {
            let end = values.byte_offset();
            match calls_in(value, tools) {
                Some(_) => Extent::Pending,
                None => Extent::Text(end),
            }
        }
        // Cut short: the rest may make it a call.
        Some(Err(e)) if e.is_eof() => Extent::Pending,
        // Not JSON: the brace is text, as for the parser.
        _ => Extent::Text(1),
    }
}

struct Span {
    start: usize,
    end: usize,
    calls: Vec<TextCall>,
}

const OPEN_TAG: &str = "<tool_call>";
const CLOSE_TAG: &str = "</tool_call>";

/// What a matcher found at an opener: a structure `len` bytes long, with the calls it holds
/// (`None`: a structure that is not a call, skipped whole so its insides are not searched again,
/// which keeps the scan linear in practice).
type Found = (usize, Option<Vec<TextCall>>);

/// The first call-bearing span of `text`, by position.
fn next_call_span(text: &str, tools: &[&str]) -> Option<Span> {
    let mut from = 0;
    while from < text.len() {
        let next = [
            text[from..].find(OPEN_TAG),
            text[from..].find("```"),
            text[from..].find('{'),
        ]
        .into_iter()
        .flatten()
        .min()?
            + from;
        let candidate = &text[next..];
        let found = if candidate.starts_with(OPEN_TAG) {
            tagged(candidate, tools)
        } else if candidate.starts_with("```") {
            fenced(candidate, tools)
        } else {
            bare(candidate, tools)
        };
        match found {
            Some((end, Some(calls))) => {
                return Some(Span {
                    start: next,
                    end: next + end,
                    calls,
                });
            }
            Some((end, None)) if end > 0 => from = next + end,
            // Not a structure: skip this opener; a later one may hold a call.
            _ => from = next + candidate.chars().next().map_or(1, char::len_utf8),
        }
    }
    None
}

/// `<tool_call>…</tool_call>` (the closing tag may be missing at the end).
fn tagged(text: &str, tools: &[&str]) -> Option<Found> {
    let body_start = OPEN_TAG.len();
    let (body, end) = match text[body_start..].find(CLOSE_TAG) {
        Some(at) => (
            &text[body_start..body_start + at],
            body_start + at + CLOSE_TAG.len(),
        ),
        None => (&text[body_start..], text.len()),
    };
    let calls = first_json(body.trim()).and_then(|value| calls_in(value, tools));
    Some((if calls.is_some() { end } else { OPEN_TAG.len() }, calls))
}

/// A fenced block whose whole content is a call (or an array of calls).
fn fenced(text: &str, tools: &[&str]) -> Option<Found> {
    let body_start = 3 + text[3..].find('\n')? + 1;
    let info = text[3..body_start].trim();
    let (body, end) = match text[body_start..].find("```") {
        Some(at) => (&text[body_start..body_start + at], body_start + at + 3),
        None => (&text[body_start..], text.len()),
    };
    if !info.is_empty() && !info.eq_ignore_ascii_case("json") && !info.eq_ignore_ascii_case("tool_call") {
        return Some((end, None));
    }
    let calls = serde_json::from_str::<Value>(body.trim())
        .ok()
        .and_then(|value| calls_in(value, tools));
    Some((end, calls))
}

/// A bare JSON object (or array) starting at the beginning of `text`.
fn bare(text: &str, tools: &[&str]) -> Option<Found> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = values.next()?.ok()?;
    let end = values.byte_offset();
    Some((end, calls_in(value, tools)))
}

/// The first JSON value at the start of `text`.
fn first_json(text: &str) -> Option<Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()?
        .ok()
}

/// The calls a value stands for: one call object or an array of them (all must be calls).
fn calls_in(value: Value, tools: &[&str]) -> Option<Vec<TextCall>> {
    match value {
        Value::Array(items) if !items.is_empty() => {
            items.into_iter().map(|item| call_in(item, tools)).collect()
        }
        value => Some(vec![call_in(value, tools)?]),
    }
}

fn call_in(value: Value, tools: &[&str]) -> Option<TextCall> {
    let Value::Object(mut object) = value else {
        return None;
    };
    // Some models wrap the call as OpenAI does: {"type": "function", "function": {...}}.
    if let Some(Value::Object(function)) = object.remove("function") {
        object = function;
    }
    let name = object.get("name")?.as_str()?.to_owned();
    if !tools.contains(&name.as_str()) {
        return None;
    }
    let arguments = object
        .remove("arguments")
        .or_else(|| object.remove("parameters"))
        .unwrap_or_else(|| Value::Object(Map::new()));
    let (arguments, raw_arguments) = match arguments {
        Value::Object(map) => {
            let raw = Value::Object(map.clone()).to_string();
            (map, raw)
        }
        Value::String(raw) => match serde_json::from_str::<Value>(&raw) {
            Ok(Value::Object(map)) => (map, raw),
            _ => return None,
        },
        _ => return None,
    };
    Some(TextCall {
        name,
        arguments,
        raw_arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOOLS: &[&str] = &["add", "get_weather"];

    fn one(text: &str) -> TextCall {
        let parsed = parse_text_calls(text, TOOLS);
        assert_eq!(parsed.calls.len(), 1, "{text:?} gave {parsed:?}");
        parsed.calls.into_iter().next().unwrap()
    }

    #[test]
    fn qwen_tags_with_and_without_the_closing_tag() {
        let call = one("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>");
        assert_eq!(call.name, "add");
        assert_eq!(Value::Object(call.arguments), json!({"a": 1, "b": 2}));
        let call = one("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}");
        assert_eq!(call.arguments["city"], "Paris");
    }

    #[test]
    fn fenced_and_bare_objects() {
        let parsed = parse_text_calls(
            "Sure.\n```json\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n```\nDone.",
            TOOLS,
        );
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.text, "Sure.\n\nDone.");
        let call = one("{\"name\": \"add\", \"parameters\": {\"a\": 5, \"b\": 6}}");
        assert_eq!(call.arguments["a"], 5);
        let call = one("```\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 1}\"}\n```");
        assert_eq!(call.raw_arguments, "{\"a\": 1, \"b\": 1}");
        let call =
            one("{\"type\": \"function\", \"function\": {\"name\": \"add\", \"arguments\": {\"a\": 0}}}");
        assert_eq!(call.arguments["a"], 0);
    }

    #[test]
    fn a_call_in_double_braces_loses_both() {
        let parsed = parse_text_calls("{{\"name\": \"add\", \"arguments\": {\"a\": 1}}}", TOOLS);
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.text, "");
        let parsed = parse_text_calls("Use { {\"name\": \"add\", \"arguments\": {}} } now", TOOLS);
        assert_eq!((parsed.calls.len(), parsed.text.as_str()), (1, "Use  now"));
        // Only braces right around the call go.
        let parsed = parse_text_calls("{x {\"name\": \"add\", \"arguments\": {}}.}", TOOLS);
        assert_eq!(parsed.text, "{x .}");
    }

    #[test]
    fn two_calls_in_order() {
        let parsed = parse_text_calls(
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>\n\
             <tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>",
            TOOLS,
        );
        let names: Vec<&str> = parsed.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "add"]);
        assert_eq!(parsed.text, "");
        let parsed = parse_text_calls(
            "[{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"add\", \"arguments\": {\"a\": 1}}]",
            TOOLS,
        );
        assert_eq!(parsed.calls.len(), 2);
    }

    #[test]
    fn garbage_unknown_tools_and_plain_json_stay_text() {
        for text in [
            "The answer is 42.",
            "{\"name\": \"rm_rf\", \"arguments\": {}}",
            "```json\n{\"temperature\": 21}\n```",
            "<tool_call>{not json</tool_call>",
            "{\"name\": \"add\", \"arguments\": 7}",
            "{\"name\": \"add\", \"arguments\": \"not json\"}",
            "```python\n{\"name\": \"add\", \"arguments\": {}}\n```",
            "{{{{",
            "```",
            "<tool_call>",
        ] {
            let parsed = parse_text_calls(text, TOOLS);
            assert!(parsed.calls.is_empty(), "{text:?} gave {parsed:?}");
            assert_eq!(parsed.text, text.trim(), "{text:?}");
        }
    }

    #[test]
    fn a_call_after_unrelated_braces_is_found() {
        let parsed = parse_text_calls(
            "Set {x} first, then {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}} it is.",
            TOOLS,
        );
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.text, "Set {x} first, then  it is.");
    }

    #[test]
    fn streamed_text_stops_before_what_may_be_a_call() {
        let cases = [
            ("Hello there", "Hello there"),
            ("Hello there\n", "Hello there"),
            ("{", ""),
            ("  {\"name\": \"add\"", ""),
            ("Sure.\n```", "Sure."),
            ("Sure.\n``", "Sure."),
            (
                "Sure.\n```json\n{\"name\": \"add\", \"arguments\": {}}\n```\nDone.",
                "Sure.",
            ),
            ("Sure.\n<tool_call>", "Sure."),
            ("Sure. <tool", "Sure."),
            ("Sure.\n```rust\nfn main() {}\n", "Sure.\n```rust\nfn main() {}"),
            (
                "```text\n<tool_call>\n```\nok <tool_call>",
                "```text\n<tool_call>\n```\nok",
            ),
            ("Set {x} first", "Set {x} first"),
            ("Got {\"temperature\": 21} and {", "Got {\"temperature\": 21} and"),
            ("```json\n{\"a\": 1}\n```\nok", "```json\n{\"a\": 1}\n```\nok"),
            (
                "Call {\"name\": \"rm_rf\", \"arguments\": {}} never",
                "Call {\"name\": \"rm_rf\", \"arguments\": {}} never",
            ),
            ("A {\"name\": \"add\", \"arguments\": {}} B", "A"),
        ];
        for (text, shown) in cases {
            assert_eq!(streamable_text(text, TOOLS), shown, "{text:?}");
        }
    }

    #[test]
    fn every_streamed_prefix_starts_the_final_text() {
        for text in [
            "Let me add them.\n```json\n{\"name\": \"add\", \"arguments\": {\"a\": 2}}\n```\nThen I answer.",
            "I will {check} it: <tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call>",
            "Plain answer with `code`, {\"json\": true} and\n```python\nprint({})\n```\nbye",
            "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}",
            "Numbers: {1, 2} and ``` inline ``` text",
            "{{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}}",
            "So {{\"name\": \"rm\", \"arguments\": {}}} and {{\"name\": \"add\", \"arguments\": {}}",
        ] {
            let parsed = parse_text_calls(text, TOOLS);
            let last = if parsed.calls.is_empty() {
                text
            } else {
                parsed.text.as_str()
            };
            let mut shown_before = "";
            let mut settled = 0;
            for (at, _) in text.char_indices().chain([(text.len(), ' ')]) {
                let shown = streamable_text(&text[..at], TOOLS);
                assert!(
                    last.starts_with(shown),
                    "{:?} shows {shown:?}, not a prefix of {last:?}",
                    &text[..at]
                );
                assert!(
                    shown.starts_with(shown_before.trim_end()),
                    "{:?} took back text",
                    &text[..at]
                );
                let (len, now_settled) = streamable_text_from(&text[..at], TOOLS, settled);
                assert_eq!(len, shown.len(), "{:?}: resumed at {settled}", &text[..at]);
                settled = now_settled;
                shown_before = shown;
            }
        }
    }

    #[test]
    fn openers_that_may_start_a_call() {
        for text in ["{", " ```", "<tool", "<tool_call>\n{", "``"] {
            assert!(may_start_text_call(text), "{text:?}");
        }
        for text in ["Hello", "The {x}", "<b>", ""] {
            assert!(!may_start_text_call(text), "{text:?}");
        }
    }
}
