//! The fake server's Anthropic Messages route from a plain HTTP client.

use agentry_testkit::{Call, FakeLlm, Reply, thinking_signature};
use futures::StreamExt;
use serde_json::{Value, json};

fn request(stream: bool, messages: Value) -> Value {
    json!({
        "model": "claude-fake",
        "max_tokens": 4096,
        "stream": stream,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [
            {"name": "search", "description": "searches", "input_schema": {"type": "object"}},
            {"name": "read", "input_schema": {"type": "object"}},
        ],
        "messages": messages,
    })
}

fn first_turn() -> Value {
    json!([{"role": "user", "content": "find it"}])
}

async fn post_to(url: String, body: &Value, version: bool) -> reqwest::Response {
    // reqwest is built without a crypto provider in this workspace; plain HTTP still needs one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("x-api-key", "test");
    if version {
        request = request.header("anthropic-version", "2023-06-01");
    }
    request.body(body.to_string()).send().await.unwrap()
}

async fn post(fake: &FakeLlm, body: &Value) -> reqwest::Response {
    post_to(format!("{}/v1/messages", fake.anthropic_base_url()), body, true).await
}

/// The HTTP chunks of a response body.
async fn http_chunks(response: reqwest::Response) -> Vec<Vec<u8>> {
    response
        .bytes_stream()
        .map(|b| b.unwrap().to_vec())
        .collect()
        .await
}

/// `(event name, data)` of each SSE event; checks that `data.type` is the event name.
fn parse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|event| {
            let (name, data) = event
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an Anthropic SSE event: {event:?}"));
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name, "{event}");
            (name.to_owned(), data)
        })
        .collect()
}

fn reply_with_everything() -> Reply {
    Reply::tool_calls([
        Call::new("toolu_1", "search", r#"{"query": "needle in a haystack"}"#),
        Call::new("toolu_2", "read", r#"{"path": "src/lib.rs"}"#),
    ])
    .with_reasoning("I should search first.")
    .with_text("Let me look.")
    .usage(42, 17)
    .cache_usage(30, 12)
    .chunks(3)
}

#[tokio::test]
async fn streamed_message_has_the_anthropic_event_sequence_and_its_content_is_accepted_back() {
    let fake = FakeLlm::start().await;
    fake.push(reply_with_everything());
    fake.push(Reply::text("Found it."));
    let response = post(&fake, &request(true, first_turn())).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let frames = http_chunks(response).await;
    let events = parse(&String::from_utf8(frames.concat()).unwrap());
    assert_eq!(frames.len(), events.len(), "one event per HTTP chunk");

    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let block = |deltas: usize| {
        let mut b = vec!["content_block_start"];
        b.extend(std::iter::repeat_n("content_block_delta", deltas));
        b.push("content_block_stop");
        b
    };
    let mut expected = vec!["message_start", "ping"];
    expected.extend(block(3 + 1)); // thinking: 3 thinking_delta + 1 signature_delta
    expected.extend(block(3)); // text
    expected.extend(block(3)); // tool_use toolu_1
    expected.extend(block(3)); // tool_use toolu_2
    expected.extend(["message_delta", "message_stop"]);
    assert_eq!(names, expected);

    let start = &events[0].1["message"];
    assert!(start["id"].as_str().unwrap().starts_with("msg_fake"));
    assert_eq!(start["type"], "message");
    assert_eq!(start["role"], "assistant");
    assert_eq!(start["model"], "claude-fake");
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(
        start["usage"],
        json!({"input_tokens": 42, "output_tokens": 1, "cache_creation_input_tokens": 12, "cache_read_input_tokens": 30})
    );
    let end = &events[events.len() - 2].1;
    assert_eq!(
        end["delta"],
        json!({"stop_reason": "tool_use", "stop_sequence": null})
    );
    assert_eq!(end["usage"], json!({"output_tokens": 17}));

    // Rebuild the content blocks as a client would.
    let mut content: Vec<Value> = Vec::new();
    let mut json_parts: Vec<Vec<String>> = Vec::new();
    for (name, data) in &events {
        let index = data["index"].as_u64().map(|i| i as usize);
        match name.as_str() {
            "content_block_start" => {
                assert_eq!(index, Some(content.len()), "indexes increase from 0");
                content.push(data["content_block"].clone());
                json_parts.push(Vec::new());
            }
            "content_block_delta" => {
                let (i, delta) = (index.unwrap(), &data["delta"]);
                let piece = |key: &str| delta[key].as_str().unwrap().to_owned();
                match delta["type"].as_str().unwrap() {
                    "thinking_delta" => {
                        let text = content[i]["thinking"].as_str().unwrap().to_owned() + &piece("thinking");
                        content[i]["thinking"] = json!(text);
                    }
                    "signature_delta" => content[i]["signature"] = json!(piece("signature")),
                    "text_delta" => {
                        let text = content[i]["text"].as_str().unwrap().to_owned() + &piece("text");
                        content[i]["text"] = json!(text);
                    }
                    "input_json_delta" => json_parts[i].push(piece("partial_json")),
                    other => panic!("unexpected delta {other}"),
                }
            }
            _ => {}
        }
    }
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(content[0]["thinking"], "I should search first.");
    assert_eq!(
        content[0]["signature"],
        thinking_signature("I should search first.")
    );
    assert_eq!(content[1], json!({"type": "text", "text": "Let me look."}));
    assert_eq!(
        content[2],
        json!({"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}})
    );
    // The split lands inside the string value, so a client must join before parsing.
    assert_eq!(json_parts[2].len(), 3);
    assert!(serde_json::from_str::<Value>(&json_parts[2][0]).is_err());
    assert_eq!(json_parts[2].concat(), r#"{"query": "needle in a haystack"}"#);
    for (i, parts) in json_parts.iter().enumerate().skip(2) {
        content[i]["input"] = serde_json::from_str(&parts.concat()).unwrap();
    }

    // Sending the assembled turn back (with the results) is a valid request.
    let messages = json!([
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "fn main() {}", "is_error": false},
        ]},
    ]);
    let response = post(&fake, &request(false, messages)).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["content"], json!([{"type": "text", "text": "Found it."}]));
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["stop_sequence"], Value::Null);
    fake.assert_no_violations();
    assert_eq!(fake.requests()[0].path, "/v1/messages");
}

#[tokio::test]
async fn torn_events_arrive_in_halves_and_reassemble_on_both_routes() {
    let fake = FakeLlm::start().await;
    fake.push(reply_with_everything().torn_events());
    let response = post(&fake, &request(true, first_turn())).await;
    let frames = http_chunks(response).await;
    let events = parse(&String::from_utf8(frames.concat()).unwrap());
    assert_eq!(frames.len(), 2 * events.len(), "each event in two HTTP chunks");
    for pair in frames.chunks(2) {
        assert_eq!(
            pair[0].len(),
            (pair[0].len() + pair[1].len()) / 2,
            "cut at the middle byte"
        );
        assert!(!pair[0].ends_with(b"\n\n") && pair[1].ends_with(b"\n\n"));
    }
    assert_eq!(events.len(), 2 + 6 + 5 * 3 + 2);
    assert_eq!(events.last().unwrap().0, "message_stop");

    // A text delta one 3-byte character longer moves the middle by 1 or 2 bytes: one of the two
    // cuts falls inside a `✓`, whatever the JSON around it.
    let mut inside_a_char = false;
    for n in [40, 41] {
        fake.push(Reply::text("✓".repeat(n)).chunks(1).torn_events());
        let frames = http_chunks(post(&fake, &request(true, first_turn())).await).await;
        inside_a_char |= frames.iter().any(|f| std::str::from_utf8(f).is_err());
        let events = parse(&String::from_utf8(frames.concat()).unwrap());
        assert_eq!(events[3].1["delta"]["text"], "✓".repeat(n));
    }
    assert!(inside_a_char, "some cut falls inside a UTF-8 character");

    fake.push(Reply::text("héllo wörld").torn_events());
    let openai = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let response = post_to(format!("{}/chat/completions", fake.base_url()), &openai, false).await;
    let frames = http_chunks(response).await;
    let text = String::from_utf8(frames.concat()).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(frames.len(), 2 * events.len());
    assert_eq!(*events.last().unwrap(), "data: [DONE]");
    fake.assert_no_violations();
}

#[tokio::test]
async fn error_event_after_ends_the_stream_on_both_routes() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("abcdef").error_event_after(3, "overloaded_error", "Overloaded"));
    let response = post(&fake, &request(true, first_turn())).await;
    let events = parse(&String::from_utf8(http_chunks(response).await.concat()).unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "ping", "content_block_start", "error"]);
    assert_eq!(
        events[3].1,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    fake.push(Reply::text("abcdef").error_event_after(2, "server_error", "boom"));
    let openai = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let response = post_to(format!("{}/chat/completions", fake.base_url()), &openai, false).await;
    let text = String::from_utf8(http_chunks(response).await.concat()).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 3);
    assert_eq!(
        events[2],
        r#"data: {"error":{"message":"boom","type":"server_error"}}"#
    );
    assert_eq!(fake.disconnects(), 0);
    fake.assert_no_violations();
}

#[tokio::test]
async fn status_replies_have_anthropic_error_bodies_and_headers() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(529));
    fake.push(Reply::status(429).header("retry-after", "7"));
    fake.push(Reply::status(500).body("plain"));
    let response = post(&fake, &request(false, first_turn())).await;
    assert_eq!(response.status(), 529);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    let response = post(&fake, &request(false, first_turn())).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let response = post(&fake, &request(false, first_turn())).await;
    assert_eq!(response.status(), 500);
    assert_eq!(response.text().await.unwrap(), "plain");
    fake.assert_no_violations();
}

#[tokio::test]
async fn invalid_requests_get_an_anthropic_400_and_are_recorded() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("unused"));
    let url = format!("{}/v1/messages", fake.anthropic_base_url());
    let response = post_to(url.clone(), &request(false, first_turn()), false).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("anthropic-version")
    );
    let system_role = json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]);
    let response = post_to(url, &request(false, system_role), true).await;
    assert_eq!(response.status(), 400);
    assert_eq!(fake.remaining(), 1, "a rejected request consumes no reply");
    let violations = fake.take_violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(violations[0].starts_with("request #1: "), "{violations:?}");
    assert!(violations[1].contains("top-level `system`"), "{violations:?}");
}
