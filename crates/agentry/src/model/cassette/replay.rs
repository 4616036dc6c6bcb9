//! [`ReplayModel`]: a model that answers from a cassette.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::stream;
use serde_json::Value;
use tokio::time::Instant;

use super::{CASSETTE_VERSION, CassetteError, Line};
use crate::model::{ChatModel, ChatRequest, ChatStream, ModelError};

/// Whether a replay reproduces the recorded timing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayTiming {
    /// Every item at once (the default).
    #[default]
    Instant,
    /// Each item (and a recorded error) when it came in the recording, counted from the call's
    /// first poll (with `tokio::time::sleep`, so a test with paused time does not wait).
    Recorded,
}

/// A model that serves the calls of a cassette written by
/// [`RecordingModel`](super::RecordingModel), in order, checking each request against the
/// recorded one (see the [module docs](super) for what is compared).
///
/// A call whose request differs, or one more call than the cassette holds, fails with
/// [`ModelError::Replay`] saying which. A recorded error comes back as the same [`ModelError`]
/// variant with the same fields (so the same text), or as [`ModelError::Replay`] with the
/// recorded text when it cannot be rebuilt. A call the recording's consumer dropped before its
/// end (`"cut": true`) yields its recorded items and then stays pending, as the model was when
/// the consumer let go.
pub struct ReplayModel {
    shared: Arc<Shared>,
    model: String,
    streaming: bool,
    repeats_tool_calls: bool,
    timing: ReplayTiming,
}

/// The calls, and which were served.
struct Shared {
    calls: Vec<Arc<Recorded>>,
    state: Mutex<State>,
}

/// One recorded call, with its request normalised for comparison.
struct Recorded {
    line: Line,
    normalized: Value,
}

struct State {
    /// Which recorded calls were served.
    used: Vec<bool>,
    /// Calls started so far.
    started: usize,
}

impl ReplayModel {
    /// Loads the cassette at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CassetteError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| CassetteError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::load(&text, &path.display().to_string())
    }

    /// Reads a cassette from its text (blank lines are skipped).
    pub fn parse(text: &str) -> Result<Self, CassetteError> {
        Self::load(text, "(text)")
    }

    fn load(text: &str, cassette: &str) -> Result<Self, CassetteError> {
        let mut calls = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let bad = |reason: String| CassetteError::Line {
                cassette: cassette.to_owned(),
                line: index + 1,
                reason,
            };
            let value: Value =
                serde_json::from_str(raw).map_err(|e| bad(format!("not a JSON object ({e})")))?;
            match value.get("version").map(Value::as_u64) {
                Some(Some(version)) if version == u64::from(CASSETTE_VERSION) => {}
                Some(Some(version)) => {
                    return Err(CassetteError::Version {
                        cassette: cassette.to_owned(),
                        line: index + 1,
                        version,
                    });
                }
                _ => return Err(bad("no \"version\" number: not a cassette line".into())),
            }
            let line: Line =
                serde_json::from_value(value).map_err(|e| bad(format!("not a recorded call ({e})")))?;
            let normalized = normalize(&line.request);
            calls.push(Arc::new(Recorded { line, normalized }));
        }
        // Lines are written as calls end; they are served in the order the calls started.
        calls.sort_by_key(|c| c.line.call);
        let (model, streaming, repeats_tool_calls) =
            calls.first().map_or(("replay".to_owned(), false, false), |c| {
                (c.line.model.clone(), c.line.streaming, c.line.repeats_tool_calls)
            });
        Ok(ReplayModel {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    used: vec![false; calls.len()],
                    started: 0,
                }),
                calls,
            }),
            model,
            streaming,
            repeats_tool_calls,
            timing: ReplayTiming::Instant,
        })
    }

    /// Sets the timing, builder style.
    pub fn timing(mut self, timing: ReplayTiming) -> Self {
        self.timing = timing;
        self
    }

    /// How many calls the cassette holds.
    pub fn calls(&self) -> usize {
        self.shared.calls.len()
    }

    /// How many recorded calls were not served yet.
    pub fn remaining(&self) -> usize {
        let state = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.used.iter().filter(|used| !**used).count()
    }
}

impl Shared {
    /// The recorded call that answers `request` (normalised), marked as served.
    fn take(&self, request: &Value) -> Result<Arc<Recorded>, ModelError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.started += 1;
        let n = state.started;
        let Some(next) = state.used.iter().position(|used| !used) else {
            let count = self.calls.len();
            return Err(ModelError::Replay(format!(
                "call {n}: the cassette has only {count} call{}",
                if count == 1 { "" } else { "s" }
            )));
        };
        let found =
            (next..self.calls.len()).find(|&i| !state.used[i] && self.calls[i].normalized == *request);
        match found {
            Some(i) => {
                state.used[i] = true;
                Ok(Arc::clone(&self.calls[i]))
            }
            None => {
                let recorded = &self.calls[next];
                let difference = first_difference(&recorded.normalized, request, String::new())
                    .unwrap_or_else(|| Difference {
                        path: "(request)".into(),
                        recorded: "(equal)".into(),
                        got: "(equal)".into(),
                    });
                let compared = if recorded.line.call == n || recorded.line.call == 0 {
                    String::new()
                } else {
                    format!(" (compared with recorded call {})", recorded.line.call)
                };
                Err(ModelError::Replay(format!(
                    "call {n}: request differs at {}: recorded {}, got {}{compared}",
                    difference.path, difference.recorded, difference.got
                )))
            }
        }
    }
}

impl ChatModel for ReplayModel {
    fn model_name(&self) -> &str {
        &self.model
    }

    fn is_streaming(&self) -> bool {
        self.streaming
    }

    fn repeats_tool_calls(&self) -> bool {
        self.repeats_tool_calls
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let request = serde_json::to_value(&request).map(|r| normalize(&r));
        let shared = Arc::clone(&self.shared);
        let timing = self.timing;
        // Looked up at the first poll, when the call starts (as a provider sends its request).
        stream::once(async move {
            let request =
                request.map_err(|e| ModelError::Replay(format!("cannot serialize the request: {e}")))?;
            shared.take(&request)
        })
        .flat_map(move |taken| match taken {
            Ok(recorded) => play(recorded, timing),
            Err(error) => stream::iter([Err(error)]).boxed(),
        })
        .boxed()
    }
}

/// The items of a recorded call, then its error; a cut call then stays pending.
fn play(recorded: Arc<Recorded>, timing: ReplayTiming) -> ChatStream {
    let start = Instant::now();
    stream::unfold(0usize, move |i| {
        let recorded = Arc::clone(&recorded);
        async move {
            let line = &recorded.line;
            let wait = |at_ms: u64| async move {
                if timing == ReplayTiming::Recorded {
                    tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
                }
            };
            if let Some(item) = line.items.get(i) {
                wait(item.at_ms).await;
                return Some((Ok(item.response.clone()), i + 1));
            }
            if i == line.items.len()
                && let Some(error) = &line.error
            {
                wait(error.at_ms).await;
                return Some((Err(error.to_error()), i + 1));
            }
            if line.cut && line.error.is_none() {
                tracing::debug!(
                    call = line.call,
                    "replay: the recording was cut short here; waiting as the recorded model did"
                );
                std::future::pending::<()>().await;
            }
            None
        }
    })
    .boxed()
}

/// The request without what differs from run to run: the `id`, `timestamp` and `metadata` of
/// each message.
fn normalize(request: &Value) -> Value {
    let mut request = request.clone();
    if let Some(messages) = request.get_mut("messages").and_then(Value::as_array_mut) {
        for message in messages.iter_mut().filter_map(Value::as_object_mut) {
            for key in ["id", "timestamp", "metadata"] {
                message.remove(key);
            }
        }
    }
    request
}

/// Where two JSON values first differ, and excerpts of both there.
#[derive(Debug)]
struct Difference {
    path: String,
    recorded: String,
    got: String,
}

const ABSENT: &str = "(absent)";

fn first_difference(recorded: &Value, got: &Value, path: String) -> Option<Difference> {
    let child = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (recorded, got) {
        (Value::Object(a), Value::Object(b)) => {
            let keys = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
            for key in keys {
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(x, y, child(key)) {
                            return Some(d);
                        }
                    }
                    (x, y) => return Some(absent_or(child(key), x, y)),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let at = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(x, y, at) {
                            return Some(d);
                        }
                    }
                    (x, y) => return Some(absent_or(at, x, y)),
                }
            }
            None
        }
        _ if recorded == got => None,
        (Value::String(a), Value::String(b)) => {
            // From a little before the first differing character, so both excerpts show it.
            let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
            let skip = common.saturating_sub(CONTEXT_CHARS);
            Some(Difference {
                path: display_path(path),
                recorded: string_excerpt(a, skip),
                got: string_excerpt(b, skip),
            })
        }
        _ => Some(Difference {
            path: display_path(path),
            recorded: value_excerpt(recorded),
            got: value_excerpt(got),
        }),
    }
}

fn absent_or(path: String, recorded: Option<&Value>, got: Option<&Value>) -> Difference {
    let show = |v: Option<&Value>| v.map_or_else(|| ABSENT.to_owned(), value_excerpt);
    Difference {
        path: display_path(path),
        recorded: show(recorded),
        got: show(got),
    }
}

fn display_path(path: String) -> String {
    if path.is_empty() { "(request)".into() } else { path }
}

/// Characters shown of a differing value.
const EXCERPT_CHARS: usize = 60;
/// Characters of common text shown before the first difference of two strings.
const CONTEXT_CHARS: usize = 20;

fn string_excerpt(s: &str, skip: usize) -> String {
    let mut rest = s.chars().skip(skip);
    let mut shown: String = rest.by_ref().take(EXCERPT_CHARS).collect();
    if skip > 0 {
        shown.insert(0, '…');
    }
    if rest.next().is_some() {
        shown.push('…');
    }
    serde_json::to_string(&shown).unwrap_or(shown)
}

fn value_excerpt(value: &Value) -> String {
    let text = value.to_string();
    let mut chars = text.chars();
    let mut shown: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_name_the_first_path_and_both_values() {
        let a = json!({"messages": [{"content": [{"type": "text", "text": "foo"}]}], "tools": []});
        let b = json!({"messages": [{"content": [{"type": "text", "text": "bar"}]}], "tools": []});
        let d = first_difference(&a, &b, String::new()).unwrap();
        assert_eq!(d.path, "messages[0].content[0].text");
        assert_eq!((d.recorded.as_str(), d.got.as_str()), ("\"foo\"", "\"bar\""));

        let long_a = format!("{}X{}", "a".repeat(100), "z".repeat(100));
        let long_b = format!("{}Y{}", "a".repeat(100), "z".repeat(100));
        let d = first_difference(&json!(long_a), &json!(long_b), String::new()).unwrap();
        assert_eq!(d.path, "(request)");
        assert!(
            d.recorded.starts_with("\"…aaaa") && d.recorded.contains('X'),
            "{d:?}"
        );
        assert!(d.got.contains('Y') && d.got.ends_with("…\""), "{d:?}");

        let d = first_difference(&json!({"m": [1, 2]}), &json!({"m": [1, 2, 3]}), String::new()).unwrap();
        assert_eq!(
            (d.path.as_str(), d.recorded.as_str(), d.got.as_str()),
            ("m[2]", ABSENT, "3")
        );
        assert!(
            first_difference(
                &json!({"a": 1, "b": [true]}),
                &json!({"b": [true], "a": 1}),
                String::new()
            )
            .is_none()
        );
    }

    #[test]
    fn normalising_drops_what_differs_between_runs() {
        let request =
            json!({"messages": [{"id": "1", "timestamp": "t", "metadata": {"k": 1}, "role": "user"}]});
        assert_eq!(normalize(&request), json!({"messages": [{"role": "user"}]}));
    }
}
