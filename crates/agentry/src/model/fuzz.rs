//! Entry points for the fuzz targets (`fuzz/` at the workspace root) and their corpus tests:
//! the parsers of untrusted model-server bytes, without any I/O. Not a stable API.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::openai::decode_sse_pieces;
use super::partial_json::StreamedObject;
use super::{ChatResponse, ModelError};

/// What decoding a streamed body gave.
#[derive(Debug)]
pub struct Decoded {
    /// Every item the stream yields (an error, if any, is the last one).
    pub items: Vec<Result<ChatResponse, ModelError>>,
    /// Bytes of tool-call arguments parsed by previews and copied into the items.
    pub argument_work: usize,
}

/// Decodes `body` as a streamed (SSE) answer arriving in the given pieces.
pub fn decode_sse(pieces: Vec<Bytes>) -> Decoded {
    let (items, argument_work) = decode_sse_pieces(pieces);
    Decoded { items, argument_work }
}

/// Feeds `pieces` to the incremental argument previewer: the final preview, the number of
/// refreshes, and the bytes they parsed.
pub fn stream_arguments<'a>(pieces: impl IntoIterator<Item = &'a str>) -> (Map<String, Value>, usize, usize) {
    let mut streamed = StreamedObject::default();
    let mut refreshes = 0;
    for piece in pieces {
        refreshes += usize::from(streamed.push(piece));
    }
    (streamed.preview().clone(), refreshes, streamed.preview_bytes())
}
