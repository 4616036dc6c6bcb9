//! Checks run by the fuzz targets (`fuzz/` at the workspace root) and by the corpus test
//! (`tests/fuzz_corpus.rs`) over the parsers of untrusted model-server bytes, without any I/O.
//! Each check panics when an invariant breaks: that is what a fuzzer reports. Not a stable API.
#![allow(clippy::panic)]

use bytes::Bytes;
use serde_json::{Map, Value};

use super::openai::decode_sse_pieces;
use super::partial_json::StreamedObject;
use super::{ChatResponse, ModelError, parse_partial_object};

/// What decoding a streamed body gave.
#[derive(Debug)]
pub struct Decoded {
    /// Every item the stream yields (an error, if any, is the last one).
    pub items: Vec<Result<ChatResponse, ModelError>>,
    /// Bytes of tool-call arguments parsed by previews and copied into the items.
    pub argument_work: usize,
}

/// Decodes a streamed (SSE) answer arriving in the given pieces.
pub fn decode_sse(pieces: Vec<Bytes>) -> Decoded {
    let (items, argument_work) = decode_sse_pieces(pieces);
    Decoded { items, argument_work }
}

/// The first byte picks a piece size (1 to 64), the rest is cut into pieces of that size
/// (even inside a UTF-8 character, as a network may).
fn pieces(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (usize::from(*first % 64) + 1, rest),
        None => (1, data),
    }
}

/// SSE decoding and delta accumulation: no panic, an error only as the last item, and a final
/// response whose tool calls keep their raw arguments, parsed exactly when they are an object.
pub fn check_sse(data: &[u8]) {
    let (size, body) = pieces(data);
    let chunks = body.chunks(size).map(Bytes::copy_from_slice).collect();
    let decoded = decode_sse(chunks);
    let Some((last, before)) = decoded.items.split_last() else {
        panic!("a decoded stream yields at least one item");
    };
    assert!(
        before.iter().all(Result::is_ok),
        "only the last item may be an error"
    );
    let Ok(last) = last else { return };
    for call in last.tool_uses() {
        let Some(raw) = call.raw_input.as_deref() else {
            panic!("a streamed call keeps its raw arguments");
        };
        let parsed = match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ if raw.trim().is_empty() => Value::Object(Map::new()),
            _ => Value::Null,
        };
        assert_eq!(call.input, parsed, "final input of {raw:?}");
    }
}

/// The one-shot partial-JSON parser: no panic on any prefix, and a complete object parses as
/// itself, alone and streamed in pieces.
pub fn check_partial_json(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let complete = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    };
    if let Some(map) = &complete {
        assert_eq!(parse_partial_object(&text).as_ref(), Some(map));
    }
    for (i, _) in text.char_indices().take(512) {
        if let Some(preview) = parse_partial_object(&text[..i]) {
            // A preview is an object that serializes back to valid JSON.
            assert!(serde_json::from_str::<Value>(&Value::Object(preview).to_string()).is_ok());
        }
    }
    let (preview, _, _) = stream_text(&text, 1);
    if let Some(map) = complete {
        assert_eq!(preview, map, "streamed one character at a time");
    }
}

/// Defect 13's property: streaming arguments in pieces parses at most about ten times their
/// size in all, however they are cut; and a complete object's last preview is the object.
pub fn check_arguments_linear(data: &[u8]) {
    let (size, body) = pieces(data);
    let text = String::from_utf8_lossy(body);
    let (preview, _, work) = stream_text(&text, size);
    assert!(
        work <= 10 * text.len() + 256,
        "{work} bytes parsed for {} bytes of arguments in pieces of {size}",
        text.len()
    );
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&text) {
        assert_eq!(preview, map);
    }
}

/// Streams `text` in pieces of about `size` characters: the final preview, the number of
/// refreshes, and the bytes they parsed.
pub fn stream_text(text: &str, size: usize) -> (Map<String, Value>, usize, usize) {
    let mut streamed = StreamedObject::default();
    let mut refreshes = 0;
    let mut start = 0;
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    for end in bounds.iter().skip(1).step_by(size.max(1)).chain(bounds.last()) {
        if *end > start {
            refreshes += usize::from(streamed.push(&text[start..*end]));
            start = *end;
        }
    }
    (streamed.preview().clone(), refreshes, streamed.preview_bytes())
}
