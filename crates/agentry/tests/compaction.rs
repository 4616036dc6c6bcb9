//! Context compaction end to end against the fake server (which checks on every request that
//! each call has exactly one result, the summary request included).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry::agent::{AgentEvent, COMPACTION_KEY, Compaction, is_summary};
use agentry::message::Msg;
use agentry::tool::{FunctionTool, Toolkit, once};
use agentry_testkit::{Call, FakeLlm, Reply};
use common::*;
use serde_json::{Value, json};

/// `fetch` hands back 1,000 characters (about 250 tokens): with a window of 1,000 tokens and
/// compaction at 80 %, the third result passes the threshold.
fn fetching() -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "fetch",
            "Fetches a page.",
            json!({"type": "object", "properties": {"page": {"type": "integer"}}}),
            |args, _| {
                let page = args["page"].as_i64().unwrap_or(0);
                once(async move { format!("page {page}: {}", "lorem ".repeat(166)) })
            },
        ))
        .unwrap();
    toolkit
}

fn fetch(id: &str, page: i64) -> Reply {
    Reply::tool_calls([Call::new(id, "fetch", json!({"page": page}).to_string())])
}

fn texts(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn older_messages_become_a_summary_that_starts_the_next_prompt_and_nothing_is_deleted() {
    let fake = FakeLlm::start().await;
    fake.push(fetch("f1", 1));
    fake.push(fetch("f2", 2));
    fake.push(fetch("f3", 3));
    // The summary request's answer: only two of the five fields.
    fake.push(Reply::text(
        r#"{"task_overview": "read pages 1 to 3", "important_discoveries": "page 1 and 2 are lorem"}"#,
    ));
    fake.push(Reply::text("All three pages are lorem ipsum."));
    let agent = builder(&fake, true, fetching())
        .compaction(
            Compaction::new()
                .context_window(1000)
                .compact_at(0.8)
                .keep_recent(2),
        )
        .build()
        .unwrap();
    let mut events = agent.subscribe();
    let reply = agent.reply(Msg::user("Read pages 1 to 3.")).await.unwrap();
    assert_eq!(reply.text().as_deref(), Some("All three pages are lorem ipsum."));
    fake.assert_no_violations();
    let requests = fake.requests();
    assert_eq!(requests.len(), 5);

    // Request 3 is the summary request: the compacted messages, pairs whole, and the ask.
    let summary_request = requests[3].body["messages"].as_array().unwrap().clone();
    let asked = texts(&summary_request);
    assert!(asked.last().unwrap().contains("\"task_overview\""), "{asked:?}");
    assert!(asked.iter().any(|t| t == "Read pages 1 to 3."), "{asked:?}");
    for id in ["f1", "f2"] {
        assert!(
            summary_request.iter().any(|m| m["tool_call_id"] == id),
            "{id} is summarised"
        );
    }
    assert!(
        !summary_request.iter().any(|m| m["tool_call_id"] == "f3"),
        "the newest call is kept, not summarised"
    );
    // Anthropic refuses tool blocks without tools: the tools go along, not to be called.
    assert_eq!(requests[3].body["tool_choice"], "none");

    // Request 4 starts with the system prompt, then the summary, then what was kept.
    let next = requests[4].body["messages"].as_array().unwrap().clone();
    let shown = texts(&next);
    assert_eq!(next.len(), 4, "{shown:?}");
    assert_eq!(next[0]["role"], "system");
    assert!(shown[1].starts_with("<system-info>"), "{shown:?}");
    assert!(
        shown[1].contains("# Task overview\nread pages 1 to 3"),
        "{shown:?}"
    );
    assert!(!shown[1].contains("# Current state"), "{shown:?}");
    // The question being worked on was compacted: it is kept word for word.
    assert!(
        shown[1].contains("# The user's latest message\nRead pages 1 to 3.\n</system-info>"),
        "{shown:?}"
    );
    assert_eq!(next[2]["tool_calls"][0]["id"], "f3");
    assert_eq!(next[3]["tool_call_id"], "f3");

    // Memory keeps everything, the summary marked, right before the messages it kept.
    let memory = consistent_memory(&agent).await;
    assert_eq!(memory[0].text().as_deref(), Some("Read pages 1 to 3."));
    let at = memory.iter().position(is_summary).expect("the summary is stored");
    assert_eq!(at, 5);
    assert_eq!(memory[at].metadata[COMPACTION_KEY]["messages"], 5);
    assert_eq!(memory.len(), 5 + 1 + 2 + 1);

    let compacted: Vec<usize> = drain(&mut events)
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ContextCompacted { messages, .. } => Some(messages),
            _ => None,
        })
        .collect();
    assert_eq!(compacted, [5]);
}

#[tokio::test]
async fn a_summary_that_is_not_json_is_kept_as_text_and_a_second_compaction_folds_the_first() {
    let fake = FakeLlm::start().await;
    for (n, page) in [(1, 1), (2, 2), (3, 3)] {
        fake.push(fetch(&format!("f{n}"), page));
    }
    fake.push(Reply::text("We read pages 1 and 2; they are lorem."));
    fake.push(fetch("f4", 4));
    fake.push(fetch("f5", 5));
    fake.push(Reply::text("Pages 1 to 4 are lorem; reading page 5."));
    fake.push(Reply::text("Done."));
    let agent = builder(&fake, false, fetching())
        .compaction(Compaction::new().context_window(1000).keep_recent(2))
        .build()
        .unwrap();
    agent.reply(Msg::user("Read pages 1 to 5.")).await.unwrap();
    fake.assert_no_violations();
    let requests = fake.requests();
    assert_eq!(requests.len(), 8);
    let first = texts(requests[4].body["messages"].as_array().unwrap());
    assert!(
        first[1].contains("We read pages 1 and 2; they are lorem."),
        "{first:?}"
    );
    // The second summary request carries the first summary.
    let second_ask = texts(requests[6].body["messages"].as_array().unwrap());
    assert!(
        second_ask.iter().any(|t| t.contains("We read pages 1 and 2")),
        "{second_ask:?}"
    );
    let last = texts(requests[7].body["messages"].as_array().unwrap());
    assert!(last[1].contains("Pages 1 to 4 are lorem"), "{last:?}");
    assert_eq!(last.iter().filter(|t| t.contains("<system-info>")).count(), 1);
    let memory = consistent_memory(&agent).await;
    let summaries: Vec<u64> = memory
        .iter()
        .filter(|m| is_summary(m))
        .map(|m| m.metadata[COMPACTION_KEY]["messages"].as_u64().unwrap())
        .collect();
    assert_eq!(summaries, [5, 9]);
}

#[tokio::test]
async fn a_failed_summary_leaves_memory_as_it_was_and_the_reply_goes_on() {
    let fake = FakeLlm::start().await;
    for n in 1..=3 {
        fake.push(fetch(&format!("f{n}"), n));
    }
    // The summary request fails on every attempt.
    for _ in 0..5 {
        fake.push(Reply::status(500));
    }
    fake.push(Reply::text("Read all three."));
    let agent = builder(&fake, false, fetching())
        .compaction(Compaction::new().context_window(1000).keep_recent(2))
        .build()
        .unwrap();
    let reply = agent.reply(Msg::user("Read pages 1 to 3.")).await.unwrap();
    assert_eq!(reply.text().as_deref(), Some("Read all three."));
    let memory = consistent_memory(&agent).await;
    assert!(!memory.iter().any(is_summary));
    let requests = fake.requests();
    let last = texts(requests.last().unwrap().body["messages"].as_array().unwrap());
    assert!(last.iter().any(|t| t == "Read pages 1 to 3."));
}
