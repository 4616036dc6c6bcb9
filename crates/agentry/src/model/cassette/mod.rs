//! Cassettes: model traffic recorded to a file and served back from it, offline.
//!
//! [`RecordingModel`] wraps any [`ChatModel`] and writes every call it passes through to a
//! cassette; [`ReplayModel`] is a model that answers from a cassette, checking that each request
//! is the one recorded. A run recorded against a real server can thus be repeated, tools and
//! all, without the server: in tests, in evaluations, or to debug a reply.
//!
//! # Format
//!
//! JSON Lines, one line per call, written when the call's stream ends (or is dropped):
//!
//! ```json
//! {"version": 1, "call": 1, "model": "gpt-4o", "streaming": true,
//!  "request": {"messages": [...], "tools": [...], "tool_choice": null},
//!  "items": [{"at_ms": 180, "response": {"id": "...", "content": [...], "usage": null, "finish_reason": null}}, ...],
//!  "error": null,
//!  "cut": false}
//! ```
//!
//! - `version`: the format version, 1 ([`CASSETTE_VERSION`]); a reader refuses any other.
//! - `call`: the call's number (1, 2, ...) in the order the calls started; lines are written as
//!   calls end, and a replay serves them in this order.
//! - `model`: the wrapped model's [`model_name`](ChatModel::model_name); `streaming`: its
//!   [`is_streaming`](ChatModel::is_streaming).
//! - `request`: the [`ChatRequest`] as sent, in its JSON form.
//! - `items`: every (cumulative) [`ChatResponse`] the stream yielded, with `at_ms`, the
//!   milliseconds from the call's start (its first poll) to the item.
//! - `error`: `null`, or the error that ended the call: `{"kind", "message", "at_ms", ...}`
//!   where `kind` names the [`ModelError`] variant (`config`, `connect`, `timeout`, `status`,
//!   `api`, `decode`, `stream`, `replay`), `message` is its text, and the variant's fields
//!   follow (`url`, `attempts`, `reason`, `limit`, `timeout_ms`, `status`, `body`, `excerpt`,
//!   or `text` for the variants that hold one string).
//! - `cut`: true when the consumer dropped the stream before it ended (a cancelled reply): the
//!   items are what it had received.
//!
//! # Replay
//!
//! Call N is compared with recorded call N, in a normalised form: the `id`, `timestamp` and
//! `metadata` of every message are left out, since they differ from run to run and no
//! provider sends them (tool call ids are compared: they come from the recorded responses, so
//! they are the same). A request equal to another call not served yet is served from that one
//! instead (concurrent callers may start in another order). Otherwise the call fails with
//! [`ModelError::Replay`] naming the call, the first differing JSON path and both values.

mod replay;

pub use replay::{ReplayModel, ReplayTiming};

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError, TimeoutLimit};

/// The cassette format version this crate writes and reads.
pub const CASSETTE_VERSION: u32 = 1;

/// A cassette that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// The file cannot be read.
    #[error("cannot read the cassette {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a recorded call.
    #[error("the cassette {cassette}, line {line}: {reason}")]
    Line {
        /// The file (or `(text)` for [`ReplayModel::parse`]).
        cassette: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A line was written in a format version this crate does not read.
    #[error(
        "the cassette {cassette}, line {line}: format version {version} is not supported (this agentry reads version {CASSETTE_VERSION})"
    )]
    Version {
        /// The file (or `(text)`).
        cassette: String,
        /// 1-based line number.
        line: usize,
        /// The version found.
        version: u64,
    },
}

/// One line of a cassette: one call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    version: u32,
    #[serde(default)]
    call: usize,
    #[serde(default)]
    model: String,
    #[serde(default)]
    streaming: bool,
    /// The recorded model's [`ChatModel::repeats_tool_calls`], so that a replay answers repeats
    /// as the recorded run did (and sends the same requests).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    repeats_tool_calls: bool,
    request: Value,
    #[serde(default)]
    items: Vec<Item>,
    #[serde(default)]
    error: Option<RecordedError>,
    #[serde(default)]
    cut: bool,
}

/// One streamed item and when it came.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    at_ms: u64,
    response: ChatResponse,
}

/// The error that ended a call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RecordedError {
    kind: String,
    message: String,
    #[serde(default)]
    at_ms: u64,
    /// The variant's fields.
    #[serde(flatten)]
    fields: Map<String, Value>,
}

impl RecordedError {
    fn new(error: &ModelError, at_ms: u64) -> Self {
        let (kind, fields) = match error {
            ModelError::Config(text) => ("config", json!({ "text": text })),
            ModelError::Connect {
                url,
                attempts,
                reason,
            } => (
                "connect",
                json!({ "url": url, "attempts": attempts, "reason": reason }),
            ),
            ModelError::Timeout {
                url,
                limit,
                timeout,
                attempts,
            } => (
                "timeout",
                json!({
                    "url": url,
                    "limit": limit_name(*limit),
                    "timeout_ms": timeout.as_secs_f64() * 1000.0,
                    "attempts": attempts,
                }),
            ),
            ModelError::Status {
                url,
                status,
                body,
                attempts,
            } => (
                "status",
                json!({ "url": url, "status": status, "body": body, "attempts": attempts }),
            ),
            ModelError::Api(text) => ("api", json!({ "text": text })),
            ModelError::Decode { reason, excerpt } => {
                ("decode", json!({ "reason": reason, "excerpt": excerpt }))
            }
            ModelError::Stream(text) => ("stream", json!({ "text": text })),
            ModelError::Replay(text) => ("replay", json!({ "text": text })),
        };
        RecordedError {
            kind: kind.to_owned(),
            message: error.to_string(),
            at_ms,
            fields: match fields {
                Value::Object(map) => map,
                _ => Map::new(),
            },
        }
    }

    /// The recorded error as the same variant with the same fields (so the same text), or,
    /// when it cannot be rebuilt (a kind from a newer version, a field missing),
    /// [`ModelError::Replay`] with the recorded text.
    fn to_error(&self) -> ModelError {
        self.rebuild()
            .unwrap_or_else(|| ModelError::Replay(format!("recorded error: {}", self.message)))
    }

    fn rebuild(&self) -> Option<ModelError> {
        let text = |key: &str| self.fields.get(key).and_then(Value::as_str).map(str::to_owned);
        let attempts = || {
            self.fields
                .get("attempts")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        Some(match self.kind.as_str() {
            "config" => ModelError::Config(text("text")?),
            "connect" => ModelError::Connect {
                url: text("url")?,
                attempts: attempts()?,
                reason: text("reason")?,
            },
            "timeout" => ModelError::Timeout {
                url: text("url")?,
                limit: match text("limit")?.as_str() {
                    "connect" => TimeoutLimit::Connect,
                    "read" => TimeoutLimit::Read,
                    "request" => TimeoutLimit::Request,
                    _ => return None,
                },
                timeout: Duration::try_from_secs_f64(self.fields.get("timeout_ms")?.as_f64()? / 1000.0)
                    .ok()?,
                attempts: attempts()?,
            },
            "status" => ModelError::Status {
                url: text("url")?,
                status: u16::try_from(self.fields.get("status")?.as_u64()?).ok()?,
                body: text("body")?,
                attempts: attempts()?,
            },
            "api" => ModelError::Api(text("text")?),
            "decode" => ModelError::Decode {
                reason: text("reason")?,
                excerpt: text("excerpt")?,
            },
            "stream" => ModelError::Stream(text("text")?),
            "replay" => ModelError::Replay(text("text")?),
            _ => return None,
        })
    }
}

fn limit_name(limit: TimeoutLimit) -> &'static str {
    match limit {
        TimeoutLimit::Connect => "connect",
        TimeoutLimit::Read => "read",
        TimeoutLimit::Request => "request",
    }
}

/// Milliseconds since `start`, saturating.
fn ms_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A model that passes every call to another and records it to a cassette (see the
/// [module docs](self) for the format).
///
/// Each call's line is written and flushed when its stream ends or is dropped, under a lock
/// held only for that write. A write that fails is logged once (`tracing` warning) and the
/// calls go on unrecorded: recording never fails a call.
pub struct RecordingModel<M> {
    model: M,
    sink: Arc<Sink>,
}

struct Sink {
    out: Mutex<Box<dyn Write + Send>>,
    path: String,
    /// Calls started so far (numbers the calls).
    calls: AtomicUsize,
    warned: AtomicBool,
}

impl Sink {
    fn write(&self, line: &Line) {
        let result = serde_json::to_vec(line)
            .map_err(std::io::Error::from)
            .and_then(|mut bytes| {
                bytes.push(b'\n');
                let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
                out.write_all(&bytes)?;
                out.flush()
            });
        if let Err(error) = result
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "cannot write to the cassette {}: {error} (calls go on unrecorded; later errors are not reported)",
                self.path
            );
        }
    }
}

impl<M: ChatModel> RecordingModel<M> {
    /// Records `model`'s calls to the file at `path`, created or truncated now.
    pub fn create(model: M, path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref();
        let file = File::create(path)?;
        Ok(RecordingModel {
            model,
            sink: Arc::new(Sink {
                out: Mutex::new(Box::new(BufWriter::new(file))),
                path: path.display().to_string(),
                calls: AtomicUsize::new(0),
                warned: AtomicBool::new(false),
            }),
        })
    }

    /// The wrapped model.
    pub fn inner(&self) -> &M {
        &self.model
    }
}

impl<M: ChatModel> ChatModel for RecordingModel<M> {
    fn model_name(&self) -> &str {
        self.model.model_name()
    }

    fn provider_name(&self) -> &str {
        self.model.provider_name()
    }

    fn is_streaming(&self) -> bool {
        self.model.is_streaming()
    }

    fn repeats_tool_calls(&self) -> bool {
        self.model.repeats_tool_calls()
    }

    fn context_window(&self) -> Option<u64> {
        self.model.context_window()
    }

    fn count_tokens(&self, request: &ChatRequest) -> Option<u64> {
        self.model.count_tokens(request)
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let recorded = serde_json::to_value(&request).unwrap_or_else(|e| {
            tracing::warn!("cannot record a model request: {e}");
            Value::Null
        });
        Box::pin(RecordingStream {
            inner: self.model.chat(request),
            sink: Arc::clone(&self.sink),
            line: Line {
                version: CASSETTE_VERSION,
                call: 0,
                model: self.model.model_name().to_owned(),
                streaming: self.model.is_streaming(),
                repeats_tool_calls: self.model.repeats_tool_calls(),
                request: recorded,
                items: Vec::new(),
                error: None,
                cut: false,
            },
            started: None,
            written: false,
        })
    }
}

/// A call's stream, recording what passes through.
struct RecordingStream {
    inner: ChatStream,
    sink: Arc<Sink>,
    line: Line,
    /// Set at the first poll, when the call starts.
    started: Option<Instant>,
    written: bool,
}

impl RecordingStream {
    fn write(&mut self, cut: bool) {
        if self.written {
            return;
        }
        self.written = true;
        self.line.cut = cut;
        self.sink.write(&self.line);
    }
}

impl Stream for RecordingStream {
    type Item = Result<ChatResponse, ModelError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let start = match this.started {
            Some(start) => start,
            None => {
                this.line.call = this.sink.calls.fetch_add(1, Ordering::Relaxed) + 1;
                *this.started.insert(Instant::now())
            }
        };
        let polled = this.inner.poll_next_unpin(cx);
        if !this.written {
            match &polled {
                Poll::Ready(Some(Ok(response))) => this.line.items.push(Item {
                    at_ms: ms_since(start),
                    response: response.clone(),
                }),
                Poll::Ready(Some(Err(error))) => {
                    this.line.error = Some(RecordedError::new(error, ms_since(start)));
                }
                Poll::Ready(None) => this.write(false),
                Poll::Pending => {}
            }
        }
        polled
    }
}

impl Drop for RecordingStream {
    fn drop(&mut self) {
        // A stream never polled never reached the model: nothing to record. One dropped after
        // its error ended normally; one dropped before its end was cut short.
        if self.started.is_some() {
            let cut = self.line.error.is_none();
            self.write(cut);
        }
    }
}

#[cfg(test)]
mod tests;
