//! Shared helpers of the end-to-end tests: an agent wired to the fake OpenAI-compatible server.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod peers;
pub mod probe;
pub mod scripted;

use std::time::Duration;

use agentry::agent::{AgentEvent, ReActAgent, ReActAgentBuilder};
use agentry::memory::check_tool_pairs;
use agentry::message::Msg;
use agentry::model::{OpenAiChatModel, OpenAiConfig, RetryPolicy};
use agentry::tool::Toolkit;
use agentry_testkit::FakeLlm;
use serde_json::Value;

/// How long any single wait of a test may take before the test fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test if it takes longer than [`DEADLINE`]: a broken behaviour
/// fails the test instead of hanging it.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: not within {DEADLINE:?}"),
    }
}

/// A client of the MCP server of `config`, connected, and a toolkit of its tools (trusted: no
/// approval asked).
pub async fn connected(config: agentry::mcp::McpServerConfig) -> (agentry::mcp::McpClient, Toolkit) {
    let client = within("the server", agentry::mcp::McpClient::connect(config))
        .await
        .unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register_mcp_client(&client, agentry::mcp::McpToolOptions::new().trust(true))
        .await
        .unwrap();
    (client, toolkit)
}

/// Waits until `condition` holds, checking it after each `tick` (for state only a poll can see,
/// such as a process table), failing the test after [`DEADLINE`].
pub async fn until(what: &str, tick: Duration, condition: impl Fn() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(tick).await;
        }
    })
    .await;
}

/// Whether process `pid` no longer runs: no such process, or a zombie nobody reaped yet.
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Fast retries so retry tests take milliseconds.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 4,
        initial_backoff: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

pub fn model(fake: &FakeLlm, stream: bool) -> OpenAiChatModel {
    OpenAiChatModel::new(
        OpenAiConfig::new("fake-model")
            .base_url(fake.base_url())
            .stream(stream)
            .retry(fast_retry()),
    )
    .unwrap()
}

/// An agent builder on the fake model server at `base_url` (non-streaming).
pub fn builder_at(base_url: &str, toolkit: Toolkit) -> ReActAgentBuilder {
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("fake-model")
            .base_url(base_url)
            .stream(false)
            .retry(fast_retry()),
    )
    .unwrap();
    ReActAgent::builder()
        .name("Friday")
        .sys_prompt("You are a test agent.")
        .model(model)
        .toolkit(toolkit)
}

pub fn builder(fake: &FakeLlm, stream: bool, toolkit: Toolkit) -> ReActAgentBuilder {
    ReActAgent::builder()
        .name("Friday")
        .sys_prompt("You are a test agent.")
        .model(model(fake, stream))
        .toolkit(toolkit)
}

pub fn agent(fake: &FakeLlm, stream: bool, toolkit: Toolkit) -> ReActAgent {
    builder(fake, stream, toolkit).build().unwrap()
}

/// The memory, after checking every call has exactly one result, in call order.
pub async fn consistent_memory(agent: &ReActAgent) -> Vec<Msg> {
    let msgs = agent.memory().messages().await.unwrap();
    if let Err(e) = check_tool_pairs(&msgs) {
        panic!("memory is inconsistent: {e}\n{msgs:#?}");
    }
    msgs
}

/// The wire messages of request `n` (0-based).
pub fn wire_messages(fake: &FakeLlm, n: usize) -> Vec<Value> {
    let requests = fake.requests();
    requests[n].body["messages"].as_array().cloned().unwrap()
}

/// The content of the `role: tool` message answering `call_id` in request `n`.
pub fn tool_message(fake: &FakeLlm, n: usize, call_id: &str) -> String {
    wire_messages(fake, n)
        .into_iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("request {n} has no result for {call_id}"))
}

/// Every event waiting on the stream.
pub fn drain(events: &mut agentry::agent::EventStream) -> Vec<AgentEvent> {
    std::iter::from_fn(|| events.try_recv()).collect()
}

/// Checks the printed stream: for every message id, the `last == true` event comes exactly
/// once and is the final event of that id.
pub fn assert_one_last_per_message(events: &[AgentEvent]) {
    use std::collections::HashMap;
    let mut state: HashMap<String, (usize, bool)> = HashMap::new();
    for event in events {
        if let AgentEvent::Message { msg, last } = event {
            let entry = state.entry(msg.id.clone()).or_insert((0, false));
            assert!(!entry.1, "message {} printed after its last chunk", msg.id);
            entry.0 += 1;
            entry.1 = *last;
        }
    }
    for (id, (_, ended)) in state {
        assert!(ended, "message {id} never got its last chunk");
    }
}

/// Checks S4 on an event list: every `ToolStarted` is followed by exactly one `ToolFinished`,
/// and no `ToolFinished` lacks its `ToolStarted`.
pub fn assert_one_finish_per_call(events: &[AgentEvent]) {
    use std::collections::HashMap;
    let mut open: HashMap<agentry::CallId, usize> = HashMap::new();
    let mut finished: HashMap<agentry::CallId, usize> = HashMap::new();
    for event in events {
        match event {
            AgentEvent::ToolStarted { call_id, .. } => *open.entry(call_id.clone()).or_default() += 1,
            AgentEvent::ToolFinished { call_id, .. } => {
                assert!(
                    open.contains_key(call_id),
                    "ToolFinished for {call_id} without ToolStarted"
                );
                *finished.entry(call_id.clone()).or_default() += 1;
            }
            _ => {}
        }
    }
    for (id, n) in &open {
        assert_eq!(
            finished.get(id),
            Some(n),
            "call {id}: {n} ToolStarted but {:?} ToolFinished",
            finished.get(id)
        );
    }
}

/// The terminal state the events report for `call_id`.
pub fn state_of(events: &[AgentEvent], call_id: &str) -> agentry::agent::ToolCallState {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolFinished {
                call_id: id, state, ..
            } if id == call_id => Some(state.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ToolFinished for {call_id}"))
}

/// The stored result of `call_id`: its text, its error flag and its message metadata.
pub fn stored(msgs: &[Msg], call_id: &str) -> (String, bool, serde_json::Map<String, Value>) {
    msgs.iter()
        .find_map(|m| {
            m.tool_results()
                .find(|r| r.id == call_id)
                .map(|r| (r.text(), r.is_error, m.metadata.clone()))
        })
        .unwrap_or_else(|| panic!("no stored result for {call_id}"))
}

/// Every check that applies to any scenario: one result per call in memory (Y1), one finish
/// per call and one last chunk per message in the events (S4).
pub async fn check_all(agent: &ReActAgent, events: &[AgentEvent]) -> Vec<Msg> {
    assert_one_finish_per_call(events);
    assert_one_last_per_message(events);
    consistent_memory(agent).await
}

/// The approval events of `call_id`, one line each: `requested automatic=…`, `resolved
/// {decision} automatic=… {source}`, `withdrawn`.
pub fn approval_events(events: &[AgentEvent], call_id: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ApprovalRequested {
                call_id: id,
                automatic,
                ..
            } if id == call_id => Some(format!("requested automatic={automatic}")),
            AgentEvent::ApprovalResolved {
                call_id: id,
                decision,
                source,
                ..
            } if id == call_id => Some(format!(
                "resolved {decision:?} automatic={} {source:?}",
                source.is_automatic()
            )),
            AgentEvent::ApprovalWithdrawn { call_id: id, .. } if id == call_id => Some("withdrawn".into()),
            _ => None,
        })
        .collect()
}
