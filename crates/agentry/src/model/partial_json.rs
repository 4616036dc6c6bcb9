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

/// How many times the previewed length the arguments must grow before the next preview: each
/// preview parses everything so far, so refreshing on a geometric schedule keeps the total work
/// linear (at most `GROWTH + 1` times the final size) where a preview per delta is quadratic.
const GROWTH: usize = 8;

/// The structure of a JSON text read so far: open containers and whether a string is open.
/// Fed piece by piece, so each byte is looked at once however the text arrives.
#[derive(Debug, Default, Clone)]
struct Scan {
    /// Closers of the open containers, innermost last.
    stack: Vec<u8>,
    in_string: bool,
    escaped: bool,
    /// `None` while only whitespace was seen, then whether the text starts with `{`.
    object: Option<bool>,
    /// The top-level container was closed.
    closed: bool,
}

impl Scan {
    fn feed(&mut self, bytes: &[u8]) {
        // Every byte JSON gives a meaning to is ASCII, and no byte of a multi-byte UTF-8
        // character is, so a byte scan is exact.
        for &b in bytes {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            if self.object.is_none() && !b.is_ascii_whitespace() {
                self.object = Some(b == b'{');
            }
            match b {
                b'"' => self.in_string = true,
                b'{' => self.stack.push(b'}'),
                b'[' => self.stack.push(b']'),
                b'}' | b']' => self.closed |= self.stack.pop().is_some() && self.stack.is_empty(),
                _ => {}
            }
        }
    }
}

/// The arguments of one streamed tool call: the text so far and a preview of it as an object,
/// refreshed only as often as keeps the total work linear in the size of the text.
#[derive(Debug, Default, Clone)]
pub(crate) struct StreamedObject {
    text: String,
    scan: Scan,
    preview: Map<String, Value>,
    previewed_len: usize,
    preview_bytes: usize,
}

impl StreamedObject {
    /// Appends a piece; returns whether the preview was refreshed. It is when the text has
    /// grown by `1/GROWTH` since the last preview, and when the object was just closed (so a
    /// consumer that stops reading there holds the complete arguments).
    pub(crate) fn push(&mut self, piece: &str) -> bool {
        if piece.is_empty() {
            return false;
        }
        self.text.push_str(piece);
        let was_closed = self.scan.closed;
        self.scan.feed(piece.as_bytes());
        let just_closed = self.scan.closed && !was_closed;
        let grown = self.text.len() - self.previewed_len;
        if !just_closed && grown < self.previewed_len / GROWTH {
            return false;
        }
        self.refresh();
        true
    }

    fn refresh(&mut self) {
        self.previewed_len = self.text.len();
        self.preview_bytes += self.text.len();
        let parsed = if self.scan.closed {
            serde_json::from_str::<Value>(&self.text).ok()
        } else {
            close_scanned(&self.text, &self.scan).and_then(|closed| serde_json::from_str(&closed).ok())
        };
        if let Some(Value::Object(map)) = parsed {
            self.preview = map;
        }
    }

    /// Everything received so far.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The latest preview (empty until one could be recovered).
    pub(crate) fn preview(&self) -> &Map<String, Value> {
        &self.preview
    }

    /// Bytes handed to the JSON parser by previews so far: the work that must stay linear.
    pub(crate) fn preview_bytes(&self) -> usize {
        self.preview_bytes
    }
}

/// Appends what is missing to make a truncated JSON document complete.
fn close_partial(text: &str) -> Option<String> {
    let mut scan = Scan::default();
    scan.feed(text.as_bytes());
    close_scanned(text, &scan)
}

/// [`close_partial`] for a text whose structure is already scanned.
fn close_scanned(text: &str, scan: &Scan) -> Option<String> {
    if scan.object != Some(true) {
        return None;
    }
    let mut out = text.trim_start().to_owned();
    if scan.in_string {
        if scan.escaped {
            out.pop();
        }
        out.push('"');
    }
    let stack = &scan.stack;
    // Drop a trailing separator or a key without its value.
    loop {
        let t = out.trim_end();
        if let Some(stripped) = t.strip_suffix(',') {
            out = stripped.to_owned();
        } else if let Some(stripped) = t.strip_suffix(':') {
            out = strip_last_string(stripped)?;
        } else if stack.last() == Some(&b'}') && ends_with_dangling_key(t) {
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
        out.push(char::from(*close));
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

    #[test]
    fn streamed_previews_do_linear_work() {
        let text = json!({"path": "a.txt", "content": "y".repeat(256 * 1024)}).to_string();
        let mut streamed = StreamedObject::default();
        let mut refreshes = 0;
        for piece in text.as_bytes().chunks(8) {
            refreshes += usize::from(streamed.push(std::str::from_utf8(piece).unwrap()));
        }
        assert!(
            streamed.preview_bytes() <= (GROWTH + 2) * text.len(),
            "{} bytes parsed for {} streamed",
            streamed.preview_bytes(),
            text.len()
        );
        assert!(refreshes < 200, "{refreshes} previews");
        assert_eq!(streamed.text(), text);
        assert_eq!(
            Value::Object(streamed.preview().clone()),
            serde_json::from_str::<Value>(&text).unwrap()
        );
    }

    #[test]
    fn streamed_previews_match_the_one_shot_parser() {
        let text = r#"{"a": [1, {"b": "x\"y"}], "c": true, "d": "héllo", "e": -1.5}"#;
        let mut streamed = StreamedObject::default();
        for (i, ch) in text.char_indices() {
            let end = i + ch.len_utf8();
            if streamed.push(&text[i..end]) {
                assert_eq!(
                    Some(streamed.preview().clone()),
                    parse_partial_object(&text[..end]).or_else(|| Some(streamed.preview().clone())),
                    "after {:?}",
                    &text[..end]
                );
            }
        }
        assert_eq!(parse(text), Some(Value::Object(streamed.preview().clone())));
    }
}
