//! A scripted OpenAI-compatible server for demos: answers each request with the next reply of
//! a JSON script, checking every request like the tests do.
//!
//! ```sh
//! cargo run -p agentry-testkit --example scripted_server -- script.json
//! ```
//! The script is a list of replies: `{"text": "..."}` or
//! `{"text": "optional", "tool_calls": [{"id": "c1", "name": "search_files", "arguments": "{...}"}]}`.
//! It prints `base_url=http://127.0.0.1:PORT/v1` and serves until interrupted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::Value;

#[tokio::main]
async fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: scripted_server SCRIPT.json");
    let script: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&path).expect("read the script"))
        .expect("the script is a JSON list");
    let fake = FakeLlm::start().await;
    for reply in script {
        let calls: Vec<Call> = reply["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| {
                        Call::new(
                            c["id"].as_str().unwrap_or("call"),
                            c["name"].as_str().unwrap_or(""),
                            c["arguments"].as_str().unwrap_or("{}"),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let text = reply["text"].as_str().map(str::to_owned);
        let scripted = match (calls.is_empty(), text) {
            (true, Some(text)) => Reply::text(text),
            (true, None) => Reply::text(""),
            (false, Some(text)) => Reply::tool_calls(calls).with_text(text),
            (false, None) => Reply::tool_calls(calls),
        };
        fake.push(scripted);
    }
    println!("base_url={}", fake.base_url());
    tokio::signal::ctrl_c().await.ok();
    for violation in fake.take_violations() {
        eprintln!("violation: {violation}");
    }
}
