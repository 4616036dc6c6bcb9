//! The fake server from a plain HTTP client.

use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use futures::StreamExt;
use serde_json::{Value, json};

fn body(stream: bool, messages: Value) -> Value {
    json!({"model": "m", "stream": stream, "stream_options": {"include_usage": true}, "messages": messages})
}

async fn post(fake: &FakeLlm, body: &Value) -> reqwest::Response {
    // reqwest is built without a crypto provider in this workspace; plain HTTP still needs one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
        .post(format!("{}/chat/completions", fake.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn streamed_reply_arrives_in_separate_chunks_and_ends_with_done() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "add", r#"{"a": 1}"#)]).with_text("hi"));
    let response = post(&fake, &body(true, json!([{"role": "user", "content": "x"}]))).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let chunks: Vec<String> = response
        .bytes_stream()
        .map(|b| String::from_utf8(b.unwrap().to_vec()).unwrap())
        .collect()
        .await;
    let text = chunks.concat();
    assert!(chunks.len() > 3, "several HTTP chunks: {chunks:?}");
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(*events.last().unwrap(), "data: [DONE]");
    let usage = events.iter().rev().nth(1).unwrap();
    assert!(usage.contains("\"usage\""), "{usage}");
    assert!(events[0].contains("\"role\":\"assistant\""));
}

#[tokio::test]
async fn non_stream_reply_is_a_chat_completion() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("c", "add", "{}")]));
    let response = post(&fake, &body(false, json!([{"role": "user", "content": "x"}]))).await;
    let v: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["id"], "c");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn gate_pauses_the_stream_until_opened() {
    let fake = FakeLlm::start().await;
    let gate = Gate::new();
    fake.push(Reply::text("abcdef").chunks(3).pause_after(2, gate.clone()));
    let response = post(&fake, &body(true, json!([{"role": "user", "content": "x"}]))).await;
    let mut stream = response.bytes_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"role\""));
    gate.reached().await;
    gate.open();
    let rest: Vec<_> = stream.collect().await;
    assert!(rest.len() >= 4);
    assert_eq!(fake.disconnects(), 0);
}

#[tokio::test]
async fn dropping_a_paused_stream_is_seen_as_a_disconnect() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("abcdef").hang_after(2));
    let response = post(&fake, &body(true, json!([{"role": "user", "content": "x"}]))).await;
    let mut stream = response.bytes_stream();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    for _ in 0..200 {
        if fake.disconnects() == 1 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the disconnect was not seen");
}

#[tokio::test]
async fn invalid_conversations_get_400_and_are_recorded() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("unused"));
    let orphan =
        json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "z", "content": "1"}]);
    let response = post(&fake, &body(false, orphan)).await;
    assert_eq!(response.status(), 400);
    assert_eq!(fake.remaining(), 1, "a rejected request consumes no reply");
    let violations = fake.take_violations();
    assert_eq!(violations.len(), 1);
    assert!(violations[0].contains("request #1"), "{violations:?}");
}

#[tokio::test]
async fn status_replies_carry_headers_and_empty_queue_is_a_violation() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(429).header("retry-after", "7"));
    let response = post(&fake, &body(false, json!([{"role": "user", "content": "x"}]))).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    let response = post(&fake, &body(false, json!([{"role": "user", "content": "x"}]))).await;
    assert_eq!(response.status(), 500);
    fake.wait_for_requests(2).await;
    assert!(fake.take_violations()[0].contains("no scripted reply left"));
}
