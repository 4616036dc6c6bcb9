//! Cassettes end to end: an agent recorded against the fake server, then replayed without it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use agentry::agent::{AgentError, AgentEvent, ReActAgent};
use agentry::message::Msg;
use agentry::model::{ChatModel, ModelError, RecordingModel, ReplayModel};
use agentry::tool::{Toolkit, tool};
use agentry_testkit::{Call, FakeLlm, Reply};
use common::{check_all, drain, model};
use serde_json::Value;

/// Add two integers.
#[tool]
async fn add(a: i64, b: i64) -> i64 {
    a + b
}

fn agent(model: impl ChatModel) -> ReActAgent {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    ReActAgent::builder()
        .name("Friday")
        .sys_prompt("You are a test agent.")
        .model(model)
        .toolkit(toolkit)
        .build()
        .unwrap()
}

/// The events of one reply to `prompt`, after the checks every scenario passes.
async fn events_of(agent: &ReActAgent, prompt: &str) -> Vec<AgentEvent> {
    let mut events = agent.subscribe();
    agent.reply(Msg::user(prompt)).await.unwrap();
    let events = drain(&mut events);
    check_all(agent, &events).await;
    events
}

/// The events as JSON, without what differs from run to run by design:
/// - message ids (`msg.id` of `Message` events) and reply ids (`reply_id`) are replaced by
///   their rank of first appearance (`msg-1`, `reply-1`, ...), so that which events share an
///   id is still compared;
/// - times and durations are replaced by `null` wherever they are: a message's `timestamp`,
///   a tool call record's `started_at` and `finished_at` (in a result message's metadata),
///   `duration_ms` (`ToolFinished`) and `time_ms` (the usage of `ReplyFinished`).
///
/// Everything else must be identical: texts, call ids, tool names, inputs and results, the
/// number and order of streamed chunks, states, stop reasons and token counts.
fn normalised(events: &[AgentEvent]) -> Vec<Value> {
    let mut ranks: HashMap<String, String> = HashMap::new();
    let mut rank = |kind: &str, id: &Value| -> Value {
        let id = id.as_str().unwrap_or_default().to_owned();
        let next = ranks.len() + 1;
        Value::String(
            ranks
                .entry(format!("{kind}:{id}"))
                .or_insert_with(|| format!("{kind}-{next}"))
                .clone(),
        )
    };
    fn walk(value: &mut Value, rank: &mut dyn FnMut(&str, &Value) -> Value) {
        match value {
            Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    match key.as_str() {
                        "timestamp" | "started_at" | "finished_at" | "duration_ms" | "time_ms" => {
                            *field = Value::Null;
                        }
                        "reply_id" => *field = rank("reply", field),
                        _ => walk(field, rank),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| walk(item, rank)),
            _ => {}
        }
    }
    events
        .iter()
        .map(|event| {
            let mut json = serde_json::to_value(event).unwrap();
            if let Some(id) = json.pointer_mut("/msg/id") {
                *id = rank("msg", id);
            }
            walk(&mut json, &mut rank);
            json
        })
        .collect()
}

/// "Cassette round trip: record against the fake, replay without it, identical events."
#[tokio::test]
async fn cassette_round_trip_replays_identical_events_without_the_server() {
    for stream in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reply.jsonl");
        let fake = FakeLlm::start().await;
        fake.push(
            Reply::tool_calls([
                Call::new("c1", "add", r#"{"a": 2, "b": 3}"#),
                Call::new("c2", "add", r#"{"a": 4, "b": 5}"#),
            ])
            .with_text("Adding."),
        );
        fake.push(Reply::text("5 and 9."));
        let recording = agent(RecordingModel::create(model(&fake, stream), &path).unwrap());
        let recorded = events_of(&recording, "2+3 and 4+5?").await;
        assert_eq!(fake.request_count(), 2);
        fake.assert_no_violations();
        drop(fake);
        let finished = recorded
            .iter()
            .filter(|e| matches!(e, AgentEvent::ToolFinished { .. }))
            .count();
        assert_eq!(finished, 2, "{recorded:#?}");

        let replay = Arc::new(ReplayModel::open(&path).unwrap());
        assert_eq!((replay.calls(), replay.is_streaming()), (2, stream));
        let replaying = agent(Arc::clone(&replay));
        let replayed = events_of(&replaying, "2+3 and 4+5?").await;
        assert_eq!(replay.remaining(), 0);
        assert_eq!(normalised(&replayed), normalised(&recorded), "stream: {stream}");

        // Another prompt is not what was recorded.
        let other = agent(ReplayModel::open(&path).unwrap());
        match other.reply(Msg::user("2+4?")).await {
            Err(AgentError::Model(ModelError::Replay(message))) => assert!(
                message.starts_with("call 1: request differs at messages[1].content[0].text"),
                "{message}"
            ),
            other => panic!("expected a replay error, got {other:?}"),
        }
    }
}
