//! Recording an in-memory model and replaying it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use futures::{FutureExt, StreamExt, stream};
use serde_json::json;

use super::*;
use crate::message::{ContentBlock, Msg, ToolUseBlock};
use crate::model::{ChatUsage, ToolChoice, ToolSchema};

enum Step {
    Wait(u64),
    Item(ChatResponse),
    Fail(ModelError),
}

/// A model that plays scripted streams, one per call.
struct Scripted {
    script: Mutex<VecDeque<Vec<Step>>>,
}

impl Scripted {
    fn new(script: Vec<Vec<Step>>) -> Self {
        Scripted {
            script: Mutex::new(script.into()),
        }
    }
}

impl ChatModel for Scripted {
    fn model_name(&self) -> &str {
        "scripted"
    }

    fn is_streaming(&self) -> bool {
        true
    }

    fn chat(&self, _: ChatRequest) -> ChatStream {
        let steps = self.script.lock().unwrap().pop_front().unwrap_or_default();
        stream::iter(steps)
            .filter_map(|step| async move {
                match step {
                    Step::Wait(ms) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        None
                    }
                    Step::Item(response) => Some(Ok(response)),
                    Step::Fail(error) => Some(Err(error)),
                }
            })
            .boxed()
    }
}

fn text(id: &str, text: &str) -> ChatResponse {
    ChatResponse {
        id: id.into(),
        content: vec![ContentBlock::text(text)],
        ..ChatResponse::default()
    }
}

fn request(prompt: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![Msg::system("Be brief."), Msg::user(prompt)],
        tools: Arc::from(vec![ToolSchema {
            name: "add".into(),
            description: "Adds.".into(),
            parameters: json!({"type": "object"}),
        }]),
        tool_choice: Some(ToolChoice::Auto),
        max_tokens: None,
    }
}

/// What a call's stream yielded: items, or an error's variant and text.
async fn collect(model: &dyn ChatModel, request: ChatRequest) -> Vec<Result<ChatResponse, String>> {
    model
        .chat(request)
        .map(|item| item.map_err(|e| format!("{e:?} / {e}")))
        .collect()
        .await
}

fn script() -> Vec<Vec<Step>> {
    let call = ChatResponse {
        id: "r2".into(),
        content: vec![
            ContentBlock::text("Adding."),
            ContentBlock::ToolUse(ToolUseBlock {
                id: "call_1".into(),
                name: "add".into(),
                input: json!({"a": 1.5, "b": 2}),
                raw_input: Some(r#"{"a": 1.5, "b": 2}"#.into()),
            }),
        ],
        usage: Some(ChatUsage {
            input_tokens: 12,
            output_tokens: 7,
            cache_read_tokens: 3,
            time: Duration::from_millis(250),
            ..ChatUsage::default()
        }),
        finish_reason: Some("tool_calls".into()),
    };
    vec![
        vec![
            Step::Item(text("r1", "Hel")),
            Step::Wait(40),
            Step::Item(text("r1", "Hello")),
        ],
        vec![Step::Wait(5), Step::Item(text("r2", "Adding.")), Step::Item(call)],
        vec![
            Step::Item(text("r3", "Par")),
            Step::Fail(ModelError::Status {
                url: "http://h/v1/chat/completions".into(),
                status: 503,
                body: "busy".into(),
                attempts: 2,
            }),
        ],
        vec![Step::Fail(ModelError::Timeout {
            url: "http://h".into(),
            limit: TimeoutLimit::Read,
            timeout: Duration::from_millis(1500),
            attempts: 1,
        })],
    ]
}

#[tokio::test(start_paused = true)]
async fn a_recorded_model_replays_identically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.jsonl");
    let recording = RecordingModel::create(Scripted::new(script()), &path).unwrap();
    let mut recorded = Vec::new();
    for prompt in ["hi", "add", "fail", "timeout"] {
        recorded.push(collect(&recording, request(prompt)).await);
    }
    assert_eq!(recorded[1].len(), 2);
    assert!(recorded[2][1].as_ref().unwrap_err().starts_with("Status {"));

    let cassette = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = cassette
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["version"], 1);
    assert_eq!(lines[0]["call"], 1);
    assert_eq!(lines[0]["model"], "scripted");
    assert_eq!(lines[0]["streaming"], true);
    assert_eq!(lines[0]["request"]["messages"][1]["content"][0]["text"], "hi");
    assert_eq!(lines[0]["request"]["tool_choice"], "auto");
    assert_eq!(lines[0]["items"][0]["at_ms"], 0);
    assert_eq!(lines[0]["items"][1]["at_ms"], 40);
    assert_eq!(lines[0]["items"][1]["response"]["content"][0]["text"], "Hello");
    assert_eq!(lines[0]["error"], Value::Null);
    assert_eq!(lines[0]["cut"], false);
    assert_eq!(lines[2]["error"]["kind"], "status");
    assert_eq!(lines[2]["error"]["status"], 503);

    // Ids and timestamps of the new messages differ: they do not count.
    for timing in [ReplayTiming::Instant, ReplayTiming::Recorded] {
        let replay = ReplayModel::open(&path).unwrap().timing(timing);
        assert_eq!((replay.model_name(), replay.is_streaming()), ("scripted", true));
        assert_eq!(replay.calls(), 4);
        let start = Instant::now();
        for (prompt, expected) in ["hi", "add", "fail", "timeout"].into_iter().zip(&recorded) {
            assert_eq!(&collect(&replay, request(prompt)).await, expected, "{prompt}");
        }
        let waited = start.elapsed();
        match timing {
            ReplayTiming::Instant => assert_eq!(waited, Duration::ZERO),
            _ => assert_eq!(waited, Duration::from_millis(45)),
        }
        assert_eq!(replay.remaining(), 0);
    }
}

#[tokio::test]
async fn a_dropped_stream_is_recorded_as_cut_and_replays_its_items_then_waits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.jsonl");
    let script = vec![
        vec![Step::Item(text("unsent", "never"))],
        vec![Step::Item(text("r", "Hel")), Step::Item(text("r", "Hello"))],
    ];
    let recording = RecordingModel::create(Scripted::new(script), &path).unwrap();
    // Never polled: never sent, not recorded.
    drop(recording.chat(request("unsent")));
    let mut stream = recording.chat(request("hi"));
    assert!(stream.next().await.unwrap().is_ok());
    drop(stream);
    let line: Value = serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
    assert_eq!(line["cut"], true);
    assert_eq!(line["call"], 1);
    assert_eq!(line["items"].as_array().unwrap().len(), 1);

    let replay = ReplayModel::open(&path).unwrap();
    let mut stream = replay.chat(request("hi"));
    assert_eq!(stream.next().await.unwrap().unwrap(), text("r", "Hel"));
    assert!(stream.next().now_or_never().is_none(), "pending after a cut");
}

#[tokio::test]
async fn a_different_request_and_one_call_too_many_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.jsonl");
    let recording = RecordingModel::create(Scripted::new(script()), &path).unwrap();
    collect(&recording, request("foo")).await;
    drop(recording);

    let replay = ReplayModel::open(&path).unwrap();
    let err = replay.chat(request("bar")).next().await.unwrap().unwrap_err();
    assert!(matches!(err, ModelError::Replay(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        r#"replay: call 1: request differs at messages[1].content[0].text: recorded "foo", got "bar""#
    );
    let mut other_tools = request("foo");
    other_tools.tools = Arc::from(Vec::new());
    let err = replay.chat(other_tools).next().await.unwrap().unwrap_err();
    assert!(
        err.to_string()
            .contains("call 2: request differs at tools[0]: recorded {"),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("got (absent) (compared with recorded call 1)"),
        "{err}"
    );

    assert_eq!(collect(&replay, request("foo")).await.len(), 2);
    let err = replay.chat(request("foo")).next().await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "replay: call 4: the cassette has only 1 call");
}

#[test]
fn bad_cassettes_say_where() {
    let good = r#"{"version": 1, "call": 1, "model": "m", "streaming": false, "request": {}, "items": [], "error": null}"#;
    let err = ReplayModel::parse(&format!("{good}\n\n{{not json\n"))
        .err()
        .unwrap();
    assert!(matches!(err, CassetteError::Line { line: 3, .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("the cassette (text), line 3: not a JSON object"),
        "{err}"
    );

    let err = ReplayModel::parse(&format!("{good}\n{{\"version\": 1, \"items\": 3}}"))
        .err()
        .unwrap();
    assert!(matches!(err, CassetteError::Line { line: 2, .. }), "{err}");

    let err = ReplayModel::parse(&good.replace("\"version\": 1", "\"version\": 2"))
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            CassetteError::Version {
                line: 1,
                version: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("format version 2 is not supported"),
        "{err}"
    );

    let err = ReplayModel::open("/nonexistent/cassette.jsonl").err().unwrap();
    assert!(
        err.to_string()
            .starts_with("cannot read the cassette /nonexistent/cassette.jsonl: "),
        "{err}"
    );
    assert_eq!(ReplayModel::parse(good).unwrap().calls(), 1);
}

#[test]
fn recorded_errors_come_back_as_the_same_variant() {
    let errors = [
        ModelError::Config("no model".into()),
        ModelError::Connect {
            url: "http://h".into(),
            attempts: 3,
            reason: "refused".into(),
        },
        ModelError::Api("overloaded".into()),
        ModelError::Decode {
            reason: "no choices".into(),
            excerpt: "{}".into(),
        },
        ModelError::Stream("broke".into()),
        ModelError::Replay("differs".into()),
    ];
    for error in errors {
        let json = serde_json::to_value(RecordedError::new(&error, 7)).unwrap();
        let back: RecordedError = serde_json::from_value(json).unwrap();
        let rebuilt = back.to_error();
        assert_eq!(format!("{rebuilt:?}"), format!("{error:?}"));
    }
    let unknown = RecordedError {
        kind: "from_the_future".into(),
        message: "it broke".into(),
        at_ms: 0,
        fields: Map::new(),
    };
    assert_eq!(unknown.to_error().to_string(), "replay: recorded error: it broke");
}
