//! Best-effort parsing of a JSON object that is still streaming in.

use serde_json::{Map, Value};

/// Parses the arguments of a tool call that may still be incomplete.
///
/// Complete JSON parses as is. Otherwise the text is closed (an open string is ended, a dangling
/// key or `,`/`:` dropped, open arrays and objects closed) and parsed again, so a UI can show
/// `{"city": "Par` as `{"city": "Par"}` while the model is still writing. Returns `None` when
/// no object can be recovered; callers keep their previous preview then.
///
/// ```
/// use agentry::model::parse_partial_object;
/// let v = parse_partial_object(r#"{"q": "weather to"#).unwrap();
/// assert_eq!(v["q"], "weather to");
/// ```
pub fn parse_partial_object(text: &str) -> Option<Map<String, Value>> {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) {
        return Some(map);
    }
    let closed = close_partial(text)?;
    match serde_json::from_str::<Value>(&closed) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// Appends what is missing to make a truncated JSON document complete.
fn close_partial(text: &str) -> Option<String> {
    let trimmed = text.trim_start();
    if !trimmed.starts_with('{') {
        return None;
    }
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    // Byte offset where the last complete value (or container start) ended, outside strings:
    // everything after it that cannot stand alone is cut.
    for ch in trimmed.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_string = false;
            }
            continue;
        }
        match ch {
            '"' => in_string = true,
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            '}' | ']' => {
                stack.pop();
            }
            _ => {}
        }
    }
    let mut out = trimmed.to_owned();
    if in_string {
        if escaped {
            out.pop();
        }
        out.push('"');
    }
    // Drop a trailing separator or a key without its value.
    loop {
        let t = out.trim_end();
        if let Some(stripped) = t.strip_suffix(',') {
            out = stripped.to_owned();
        } else if let Some(stripped) = t.strip_suffix(':') {
            out = strip_last_string(stripped)?;
        } else if stack.last() == Some(&'}') && ends_with_dangling_key(t) {
            out = strip_last_string(t)?;
        } else {
            out.truncate(t.len());
            break;
        }
    }
    // A literal cut short (`tr`, `nul`, `12.`) cannot be completed reliably.
    let t = out.trim_end();
    if t.ends_with(|c: char| c.is_ascii_alphabetic() || c == '.' || c == '-') {
        let keep = t.trim_end_matches(|c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        let keep = keep.trim_end();
        let keep = keep
            .strip_suffix(':')
            .map(strip_last_string)
            .unwrap_or(Some(keep.to_owned()))?;
        out = keep.trim_end().trim_end_matches(',').to_owned();
    }
    for close in stack.iter().rev() {
        out.push(*close);
    }
    Some(out)
}

/// Whether `t` ends with a string that is an object key with no `:` yet, e.g. `{"a": 1, "b"`.
fn ends_with_dangling_key(t: &str) -> bool {
    let Some(body) = t.strip_suffix('"') else {
        return false;
    };
    let Some(start) = find_string_start(body) else {
        return false;
    };
    let before = body[..start].trim_end();
    before.ends_with('{') || before.ends_with(',')
}

/// Removes the last complete string literal (and the whitespace before it).
fn strip_last_string(t: &str) -> Option<String> {
    let t = t.trim_end();
    let body = t.strip_suffix('"')?;
    let start = find_string_start(body)?;
    Some(body[..start].trim_end().to_owned())
}

/// Byte index of the opening quote of the string that ends at the end of `body`
/// (`body` is the text without the closing quote).
fn find_string_start(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut i = bytes.len();
    while i > 0 {
        i -= 1;
        if bytes[i] == b'"' {
            let mut backslashes = 0;
            let mut j = i;
            while j > 0 && bytes[j - 1] == b'\\' {
                backslashes += 1;
                j -= 1;
            }
            if backslashes % 2 == 0 {
                return Some(i);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(s: &str) -> Option<Value> {
        parse_partial_object(s).map(Value::Object)
    }

    #[test]
    fn complete_object_parses() {
        assert_eq!(parse(r#"{"a": 1}"#), Some(json!({"a": 1})));
    }

    #[test]
    fn open_string_is_closed() {
        assert_eq!(parse(r#"{"q": "wea"#), Some(json!({"q": "wea"})));
        assert_eq!(parse(r#"{"q": "a\"#), Some(json!({"q": "a"})));
    }

    #[test]
    fn dangling_keys_and_separators_are_dropped() {
        assert_eq!(parse(r#"{"a": 1,"#), Some(json!({"a": 1})));
        assert_eq!(parse(r#"{"a": 1, "b""#), Some(json!({"a": 1})));
        assert_eq!(parse(r#"{"a": 1, "b":"#), Some(json!({"a": 1})));
        assert_eq!(parse(r#"{"a": 1, "b": "#), Some(json!({"a": 1})));
        assert_eq!(parse(r#"{""#), Some(json!({})));
        assert_eq!(parse("{"), Some(json!({})));
    }

    #[test]
    fn nested_containers_are_closed() {
        assert_eq!(parse(r#"{"a": [1, 2"#), Some(json!({"a": [1, 2]})));
        assert_eq!(
            parse(r#"{"a": {"b": [{"c": "x"#),
            Some(json!({"a": {"b": [{"c": "x"}]}}))
        );
    }

    #[test]
    fn cut_literals_are_dropped() {
        assert_eq!(parse(r#"{"a": 1, "b": tr"#), Some(json!({"a": 1})));
        assert_eq!(parse(r#"{"a": nul"#), Some(json!({})));
        assert_eq!(parse(r#"{"a": 12"#), Some(json!({"a": 12})));
    }

    #[test]
    fn non_objects_are_rejected() {
        assert_eq!(parse("[1, 2"), None);
        assert_eq!(parse("hello"), None);
        assert_eq!(parse(""), None);
    }
}
