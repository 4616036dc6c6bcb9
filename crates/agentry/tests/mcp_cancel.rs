//! Cancelling MCP tool calls from the agent (spec 3.8, M1-M9, T4): the agent talks to the fake
//! model server, the tools live in real MCP servers (our rmcp test server, which logs every
//! `notifications/cancelled` it gets; `server-everything`, which ignores cancels;
//! `mcp-server-fetch`, which honours them). Each test is named after the statements it proves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use agentry::agent::{AgentEvent, ReActAgent};
use agentry::mcp::{MCP_DEFAULT_TIMEOUT, MCP_MAX_TIMEOUT, McpClient, McpServerConfig, McpToolOptions};
use agentry::message::Msg;
use agentry::tool::{
    ApprovalDecision, CANCELLED_RUNNING, CancelOutcome, CancelPhase, CancelReason, DECLINED, FunctionTool,
    ToolCallState, Toolkit,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use common::probe::{Driver, finished};
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An agent whose toolkit holds the MCP server's tools, with the fake model scripted.
async fn setup(
    server: McpServerConfig,
    options: McpToolOptions,
    script: Vec<Reply>,
) -> (FakeLlm, ReActAgent, McpClient) {
    let fake = FakeLlm::start().await;
    for reply in script {
        fake.push(reply);
    }
    let client = McpClient::connect(server).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit.register_mcp_client(&client, options).await.unwrap();
    let agent = builder(&fake, true, toolkit).build().unwrap();
    (fake, agent, client)
}

fn call(id: &str, name: &str, args: Value) -> Call {
    Call::new(id, name, args.to_string())
}

/// server-everything's long operation as `c1`, then `echo` as `c2`, then "done".
fn long_operation_then_echo(duration: f64, steps: u32) -> Vec<Reply> {
    vec![
        Reply::tool_calls([call(
            "c1",
            "trigger-long-running-operation",
            json!({"duration": duration, "steps": steps}),
        )]),
        Reply::tool_calls([call("c2", "echo", json!({"message": "after"}))]),
        Reply::text("done"),
    ]
}

/// Polls `condition` for up to 10 s; whether it became true.
async fn eventually(condition: impl Fn() -> bool) -> bool {
    for _ in 0..1000 {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition()
}

fn progress_of(call_id: &str) -> impl Fn(&AgentEvent) -> bool + '_ {
    move |e| matches!(e, AgentEvent::ToolProgress { call_id: id, .. } if id == call_id)
}

fn progress_count(events: &[AgentEvent], call_id: &str) -> usize {
    events.iter().filter(|e| progress_of(call_id)(e)).count()
}

/// The test server's stderr lines that start with `prefix`.
fn lines_starting(client: &McpClient, prefix: &str) -> Vec<String> {
    client
        .stderr_tail()
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .collect()
}

/// The test server's stderr lines about the cancel notifications it received.
fn cancel_lines(client: &McpClient) -> Vec<String> {
    lines_starting(client, "notifications/cancelled")
}

/// Waits (10 s at most) until `n` stderr lines of the test server start with `prefix`.
///
/// The test server handles messages on one thread in the order they arrived: once it logged a
/// later request, every notification sent before that request is in its log. That is the
/// positive control before counting cancel lines.
async fn await_lines(client: &McpClient, prefix: &str, n: usize) {
    let reached = tokio::time::timeout(Duration::from_secs(10), async {
        while lines_starting(client, prefix).len() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "waited for {n} {prefix:?} line(s): {:?}",
        client.stderr_tail()
    );
}

/// A request the test server logs (`tools/list`), after everything the client sent so far.
async fn control_request(client: &McpClient) {
    let before = lines_starting(client, "tools/list").len();
    client.list_tools().await.unwrap();
    await_lines(client, "tools/list", before + 1).await;
}

fn cancelled_running(reason: CancelReason) -> ToolCallState {
    ToolCallState::Cancelled {
        phase: CancelPhase::Running,
        partial: false,
        reason,
    }
}

#[tokio::test]
async fn m1_m6_m9_a_user_cancel_sends_one_notification_and_the_session_stays_usable() {
    let (fake, agent, client) = setup(
        peers::test_server(&[]),
        McpToolOptions::new(),
        vec![
            Reply::tool_calls([call("c1", "slow", json!({"seconds": 30}))]),
            Reply::tool_calls([call("c2", "echo", json!({"text": "still here"}))]),
            Reply::text("done"),
        ],
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    // The server is running the call once it reports progress.
    driver.wait_for("progress of c1", progress_of("c1")).await;
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("done"));

    let memory = check_all(&agent, &events).await;
    assert_eq!(
        state_of(&events, "c1"),
        cancelled_running(CancelReason::User),
        "no on_cancel (M9)"
    );
    assert_eq!(stored(&memory, "c1").0, CANCELLED_RUNNING);
    assert_eq!(tool_message(&fake, 1, "c1"), CANCELLED_RUNNING);
    // The session goes on: the next call of the same reply and a ping work (M6).
    assert_eq!(tool_message(&fake, 2, "c2"), "still here");
    client.ping().await.unwrap();

    // Exactly one notification, with the reason, and the server's handler saw it (M1). The
    // server logged c2's call, sent after the cancel: every notification for c1 is logged.
    await_lines(&client, "call echo", 1).await;
    await_lines(&client, "handler saw the cancel", 1).await;
    let lines = cancel_lines(&client);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with("reason=user cancelled"), "{lines:?}");
    fake.assert_no_violations();
}

/// The default memory, noting how many cancel notifications the client had queued at the
/// moment a result for `watched` was stored.
struct WatchingMemory {
    inner: agentry::memory::InMemoryMemory,
    client: McpClient,
    watched: &'static str,
    at_record: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl WatchingMemory {
    /// An in-process memory watching `watched`, noting into `at_record`.
    fn of(client: &McpClient, watched: &'static str, at_record: &Arc<std::sync::Mutex<Vec<u64>>>) -> Self {
        WatchingMemory {
            inner: agentry::memory::InMemoryMemory::new(),
            client: client.clone(),
            watched,
            at_record: Arc::clone(at_record),
        }
    }
}

/// L4's two checks: one notification was queued when the watched result was stored, and the
/// server received exactly one.
async fn queued_before_stored_and_sent_once(at_record: &std::sync::Mutex<Vec<u64>>, client: &McpClient) {
    assert_eq!(
        at_record.lock().unwrap().first().copied(),
        Some(1),
        "queued before the cancelled result was stored (L4)"
    );
    control_request(client).await;
    assert_eq!(cancel_lines(client).len(), 1, "{:?}", client.stderr_tail());
}

#[async_trait::async_trait]
impl agentry::memory::Memory for WatchingMemory {
    async fn add(&self, msgs: Vec<Msg>) -> Result<(), agentry::memory::MemoryError> {
        if msgs
            .iter()
            .any(|m| m.tool_results().any(|r| r.id == self.watched))
        {
            self.at_record
                .lock()
                .unwrap()
                .push(self.client.cancel_notifications());
        }
        self.inner.add(msgs).await
    }
    async fn messages(&self) -> Result<Vec<Msg>, agentry::memory::MemoryError> {
        self.inner.messages().await
    }
    async fn delete(&self, ids: &[String]) -> Result<usize, agentry::memory::MemoryError> {
        self.inner.delete(ids).await
    }
    async fn size(&self) -> Result<usize, agentry::memory::MemoryError> {
        self.inner.size().await
    }
    async fn clear(&self) -> Result<(), agentry::memory::MemoryError> {
        self.inner.clear().await
    }
}

/// L4 end to end; `mcp::cancel_slot`'s unit test proves the order on a runtime that cannot run
/// anything else meanwhile.
#[tokio::test]
async fn l4_the_cancel_notification_is_queued_before_the_result_is_recorded() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([call("c1", "slow", json!({"seconds": 30}))]));
    fake.push(Reply::text("done"));
    let client = McpClient::connect(peers::test_server(&[])).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register_mcp_client(&client, McpToolOptions::new())
        .await
        .unwrap();
    let at_record = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = builder(&fake, true, toolkit)
        .memory(WatchingMemory::of(&client, "c1", &at_record))
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("progress of c1", progress_of("c1")).await;
    assert_eq!(client.cancel_notifications(), 0);
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    let finished_event = driver.wait_for("c1 finished", finished("c1")).await;
    // When the agent reports the end, the notification is already queued.
    assert_eq!(client.cancel_notifications(), 1, "{finished_event:?}");
    let (reply, events) = driver.finish().await;
    reply.unwrap();
    check_all(&agent, &events).await;
    queued_before_stored_and_sent_once(&at_record, &client).await;
    fake.assert_no_violations();
}

/// L4 when every `on_cancel` slot is held by a tool's callback that never returns: the MCP
/// notification is the runtime's own and bounded, so it still goes out, before the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_the_notification_goes_out_even_when_every_on_cancel_slot_is_held() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("c0", "blocker", json!({"wait": true, "block_on_cancel": true})),
        call("c1", "slow", json!({"seconds": 30})),
    ]));
    fake.push(Reply::text("done"));
    let client = McpClient::connect(peers::test_server(&[])).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register_mcp_client(&client, McpToolOptions::new())
        .await
        .unwrap();
    let probe = common::probe::Probe::new();
    toolkit.register(probe.tool("blocker")).unwrap();
    let at_record = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = builder(&fake, true, toolkit)
        .parallel_tool_calls(true)
        .on_cancel_limit(1)
        .memory(WatchingMemory::of(&client, "c1", &at_record))
        .build()
        .unwrap();
    let (handle, mut driver) = Driver::go(&agent);
    probe.started(1).await;
    driver.wait_for("progress of c1", progress_of("c1")).await;
    // c0's callback takes the only slot and never returns.
    assert_eq!(handle.cancel_call("c0"), CancelOutcome::Cancelled);
    probe.on_cancel_entered(1).await;
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    probe.unblock_on_cancel();
    reply.unwrap();
    check_all(&agent, &events).await;
    queued_before_stored_and_sent_once(&at_record, &client).await;
    fake.assert_no_violations();
}

#[tokio::test]
async fn m1_a_reply_cancel_says_reply_cancelled() {
    let (fake, agent, client) = setup(
        peers::test_server(&[]),
        McpToolOptions::new(),
        vec![Reply::tool_calls([call("c1", "slow", json!({"seconds": 30}))])],
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("progress of c1", progress_of("c1")).await;
    assert_eq!(handle.cancel_reply(), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    let memory = check_all(&agent, &events).await;
    assert_eq!(state_of(&events, "c1"), cancelled_running(CancelReason::Reply));
    assert_eq!(stored(&memory, "c1").0, CANCELLED_RUNNING);
    control_request(&client).await;
    let lines = cancel_lines(&client);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with("reason=reply cancelled"), "{lines:?}");
    assert_eq!(fake.request_count(), 1, "no model request after a reply cancel");
    fake.assert_no_violations();
}

#[tokio::test]
async fn t1_t4_mcp_calls_default_to_a_60_s_renewable_timeout_capped_at_10_minutes() {
    assert_eq!(MCP_DEFAULT_TIMEOUT, Duration::from_secs(60));
    assert_eq!(MCP_MAX_TIMEOUT, Duration::from_secs(600));
    let client = McpClient::connect(peers::test_server(&[])).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register_mcp_client(&client, McpToolOptions::new())
        .await
        .unwrap();
    let policy = toolkit.policy("slow");
    assert_eq!(policy.timeout, Some(Duration::from_secs(60)));
    assert_eq!(
        policy.progress_extends_timeout,
        Some(Duration::from_secs(600)),
        "the hard cap applies by default"
    );
    client.close().await;
}

#[tokio::test]
async fn m1_t4_progress_renews_the_timeout_up_to_the_hard_limit() {
    // Progress every 100 ms keeps renewing the 2 s timeout; the 3 s cap stops the call. The
    // server is a real process on the real clock: the margin (a 2 s idle timeout against a
    // 100 ms progress period) lets a loaded machine stall the server for 1.9 s.
    let (fake, agent, client) = setup(
        peers::test_server(&[]),
        McpToolOptions::new()
            .timeout(Duration::from_secs(2))
            .max_timeout(Duration::from_secs(3)),
        vec![
            Reply::tool_calls([call("c1", "slow", json!({"seconds": 30}))]),
            Reply::text("too slow"),
        ],
    )
    .await;
    let (reply, events) = Driver::new(agent.start_reply(Msg::user("go"))).finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("too slow"));
    check_all(&agent, &events).await;
    assert_eq!(
        state_of(&events, "c1"),
        ToolCallState::TimedOut { partial: false }
    );
    // The reported time says what stopped the call: the timeout never fires past the cap, so
    // a stop at 3 s or later is the cap's; without renewal it would say 2 s.
    let text = tool_message(&fake, 1, "c1");
    let after: f64 = text
        .strip_prefix("This tool call timed out after ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|secs| secs.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(after >= 3.0, "stopped by the cap, not the idle timeout: {text}");
    control_request(&client).await;
    let lines = cancel_lines(&client);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with("reason=timed out"), "{lines:?}");
    fake.assert_no_violations();
}

#[tokio::test]
async fn m4_no_notification_for_a_call_that_already_answered() {
    let (fake, agent, client) = setup(
        peers::test_server(&[]),
        McpToolOptions::new(),
        vec![
            Reply::tool_calls([call("c1", "echo", json!({"text": "quick"}))]),
            Reply::tool_calls([call("c2", "slow", json!({"seconds": 30}))]),
            Reply::tool_calls([call("c3", "echo", json!({"text": "control"}))]),
            Reply::text("done"),
        ],
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("c1 finished", finished("c1")).await;
    driver.wait_for("progress of c2", progress_of("c2")).await;
    assert!(
        matches!(
            handle.cancel_call("c1"),
            CancelOutcome::AlreadyFinished(Some(ToolCallState::Completed))
        ),
        "a cancel that loses the race (C3)"
    );
    assert_eq!(handle.cancel_call("c2"), CancelOutcome::Cancelled);
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(tool_message(&fake, 1, "c1"), "quick");
    // c3 went out after everything about c1 and c2: once the server logged it, the count is
    // final. One notification in all: for c2, none for the answered c1 nor for `initialize`.
    await_lines(&client, "call echo", 2).await;
    await_lines(&client, "handler saw the cancel", 1).await;
    let lines = cancel_lines(&client);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("reason=user cancelled"), "{lines:?}");
    fake.assert_no_violations();
}

#[tokio::test]
async fn m7_server_progress_becomes_tool_progress_events_not_the_result() {
    let (fake, agent, _client) = setup(
        peers::everything(),
        McpToolOptions::new(),
        vec![
            Reply::tool_calls([call(
                "c1",
                "trigger-long-running-operation",
                json!({"duration": 0.3, "steps": 3}),
            )]),
            Reply::text("done"),
        ],
    )
    .await;
    let (reply, events) = Driver::new(agent.start_reply(Msg::user("go"))).finish().await;
    reply.unwrap();
    check_all(&agent, &events).await;
    let reports: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress { call_id, message, .. } if call_id == "c1" => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reports, ["progress 1/3", "progress 2/3", "progress 3/3"]);
    assert_eq!(
        tool_message(&fake, 1, "c1"),
        "Long running operation completed. Duration: 0.3 seconds, Steps: 3."
    );
    fake.assert_no_violations();
}

/// M3, Y5: a server that ignores the cancel keeps reporting progress and then answers. The
/// reply is held (a gated model answer) until the server said it answered and a later request
/// made the round trip, so the late progress and the late response reached the client while the
/// reply ran: none of it shows, memory keeps the cancelled result, and the session goes on.
#[tokio::test]
async fn m3_m6_the_late_progress_and_response_of_a_cancelled_call_are_dropped() {
    let gate = agentry_testkit::Gate::new();
    let (fake, agent, client) = setup(
        peers::test_server(&[]),
        McpToolOptions::new(),
        vec![
            Reply::tool_calls([call("c1", "stubborn", json!({"seconds": 0.5}))]),
            Reply::text("done").pause_after(0, gate.clone()),
        ],
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("progress of c1", progress_of("c1")).await;
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    driver.wait_for("c1 finished", finished("c1")).await;
    // The server answered the cancelled request, and a request sent after made the round trip:
    // the answer is behind us on the connection.
    await_lines(&client, "stubborn answers", 1).await;
    assert!(
        lines_starting(&client, "stubborn answers")[0].contains("cancelled: true"),
        "{:?}",
        client.stderr_tail()
    );
    control_request(&client).await;
    gate.open();
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("done"));
    let memory = check_all(&agent, &events).await;
    let end = events.iter().position(finished("c1")).unwrap();
    assert_eq!(progress_count(&events[end..], "c1"), 0, "{events:#?}");
    assert_eq!(stored(&memory, "c1").0, CANCELLED_RUNNING);
    assert!(
        !format!("{events:?}{memory:?}").contains("the stubborn result"),
        "the late response reached nothing"
    );
    client.ping().await.unwrap();
    fake.assert_no_violations();
}

/// M6 against a third-party server that ignores cancels (server-everything): the next call
/// and a ping succeed while it is still busy with the cancelled one.
#[tokio::test]
async fn m6_a_server_that_ignores_the_cancel_stays_usable() {
    let (fake, agent, client) = setup(
        peers::everything(),
        McpToolOptions::new(),
        long_operation_then_echo(1.5, 15),
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("progress of c1", progress_of("c1")).await;
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("done"));
    let memory = check_all(&agent, &events).await;
    let end = events.iter().position(finished("c1")).unwrap();
    assert_eq!(progress_count(&events[end..], "c1"), 0, "{events:#?}");
    assert_eq!(stored(&memory, "c1").0, CANCELLED_RUNNING);
    assert_eq!(tool_message(&fake, 2, "c2"), "Echo: after");
    client.ping().await.unwrap();
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_reply_mixes_local_and_mcp_tools_in_parallel() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        call("c1", "everything__get-sum", json!({"a": 2, "b": 40})),
        call("c2", "shout", json!({"text": "hi"})),
        call("c3", "everything__echo", json!({"message": "mcp"})),
    ]));
    fake.push(Reply::text("all three"));
    let client = McpClient::connect(peers::everything()).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register_mcp_client(
            &client,
            McpToolOptions::new()
                .prefix("everything__")
                .enable(["get-sum", "echo"]),
        )
        .await
        .unwrap();
    toolkit
        .register(FunctionTool::new(
            "shout",
            "Upper-cases the text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            |args, _ctx| {
                let text = args
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_uppercase();
                futures::stream::once(async move { Ok(agentry::tool::ToolResponse::text(text)) }).boxed()
            },
        ))
        .unwrap();
    let agent = builder(&fake, true, toolkit)
        .parallel_tool_calls(true)
        .build()
        .unwrap();
    let (reply, events) = Driver::new(agent.start_reply(Msg::user("go"))).finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("all three"));
    let memory = check_all(&agent, &events).await;
    assert_eq!(tool_message(&fake, 1, "c1"), "The sum of 2 and 40 is 42.");
    assert_eq!(tool_message(&fake, 1, "c2"), "HI");
    assert_eq!(tool_message(&fake, 1, "c3"), "Echo: mcp");
    // The model sees the MCP tools with their schemas, under their prefixed names.
    let tools = &fake.requests()[0].body["tools"];
    let sum = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "everything__get-sum")
        .unwrap();
    assert!(
        sum["function"]["parameters"]["properties"]["a"].is_object(),
        "{sum}"
    );
    // Results are stored in call order.
    let ids: Vec<agentry::CallId> = memory
        .iter()
        .flat_map(|m| m.tool_results().map(|r| r.id.clone()))
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    fake.assert_no_violations();
}

/// A TCP proxy in front of an HTTP server that remembers, per connection, whether it carried a
/// `tools/call` and when the client closed it.
struct SniffingProxy {
    port: u16,
    tool_call_closed: Arc<AtomicBool>,
    tool_call_seen: Arc<AtomicBool>,
}

impl SniffingProxy {
    async fn start(upstream: u16) -> SniffingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tool_call_closed = Arc::new(AtomicBool::new(false));
        let tool_call_seen = Arc::new(AtomicBool::new(false));
        let (closed, seen) = (Arc::clone(&tool_call_closed), Arc::clone(&tool_call_seen));
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let (closed, seen) = (Arc::clone(&closed), Arc::clone(&seen));
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let (mut in_read, mut in_write) = inbound.split();
                    let (mut out_read, mut out_write) = outbound.split();
                    let carried_call = AtomicBool::new(false);
                    let upload = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            match in_read.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if buf[..n].windows(10).any(|w| w == b"tools/call") {
                                        carried_call.store(true, Ordering::SeqCst);
                                        seen.store(true, Ordering::SeqCst);
                                    }
                                    if out_write.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        // The client closed its side of the connection.
                        if carried_call.load(Ordering::SeqCst) {
                            closed.store(true, Ordering::SeqCst);
                        }
                    };
                    let download = tokio::io::copy(&mut out_read, &mut in_write);
                    tokio::select! {
                        () = upload => {}
                        _ = download => {}
                    }
                });
            }
        });
        SniffingProxy {
            port,
            tool_call_closed,
            tool_call_seen,
        }
    }
}

#[tokio::test]
async fn m2_on_http_the_cancel_closes_the_request_stream() {
    let server = peers::EverythingHttp::start(peers::free_port()).await;
    let proxy = SniffingProxy::start(server.port).await;
    let url = format!("http://127.0.0.1:{}/mcp", proxy.port);
    let (fake, agent, client) = setup(
        McpServerConfig::http("web", url),
        McpToolOptions::new(),
        long_operation_then_echo(60.0, 600),
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    driver.wait_for("progress of c1", progress_of("c1")).await;
    assert!(proxy.tool_call_seen.load(Ordering::SeqCst));
    assert!(
        !proxy.tool_call_closed.load(Ordering::SeqCst),
        "the call's stream is open while it runs"
    );
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    // The server would hold the stream for a minute; the client closes it now.
    assert!(
        eventually(|| proxy.tool_call_closed.load(Ordering::SeqCst)).await,
        "the request's SSE stream was not closed"
    );
    let (_, events) = driver.finish().await;
    check_all(&agent, &events).await;
    assert_eq!(tool_message(&fake, 2, "c2"), "Echo: after");
    client.ping().await.unwrap();
    fake.assert_no_violations();
}

/// An HTTP server with a fast page and a slow one (a byte every 50 ms) that notes when the
/// client of the slow page goes away.
struct SlowSite {
    port: u16,
    slow_started: Arc<AtomicUsize>,
    slow_abandoned: Arc<AtomicBool>,
}

impl SlowSite {
    async fn start() -> SlowSite {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let slow_started = Arc::new(AtomicUsize::new(0));
        let slow_abandoned = Arc::new(AtomicBool::new(false));
        let (started, abandoned) = (Arc::clone(&slow_started), Arc::clone(&slow_abandoned));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (started, abandoned) = (Arc::clone(&started), Arc::clone(&abandoned));
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let request = String::from_utf8_lossy(&head);
                    if request.starts_with("GET /fast") {
                        let body = "fast page";
                        let response = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = socket.write_all(response.as_bytes()).await;
                        return;
                    }
                    started.fetch_add(1, Ordering::SeqCst);
                    let header =
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100000\r\n\r\n";
                    if socket.write_all(header.as_bytes()).await.is_err() {
                        abandoned.store(true, Ordering::SeqCst);
                        return;
                    }
                    for _ in 0..100_000 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if socket.write_all(b"x").await.is_err() || socket.flush().await.is_err() {
                            abandoned.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                });
            }
        });
        SlowSite {
            port,
            slow_started,
            slow_abandoned,
        }
    }
}

#[tokio::test]
async fn m6_a_cancel_really_stops_mcp_server_fetch() {
    let site = SlowSite::start().await;
    let slow = format!("http://127.0.0.1:{}/slow", site.port);
    let fast = format!("http://127.0.0.1:{}/fast", site.port);
    let (fake, agent, client) = setup(
        peers::fetch(),
        McpToolOptions::new(),
        vec![
            Reply::tool_calls([call("c1", "fetch", json!({"url": slow, "raw": true}))]),
            Reply::tool_calls([call("c2", "fetch", json!({"url": fast, "raw": true}))]),
            Reply::text("done"),
        ],
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    driver
        .wait_for(
            "c1 started",
            |e| matches!(e, AgentEvent::ToolStarted { call_id, .. } if call_id == "c1"),
        )
        .await;
    assert!(
        eventually(|| site.slow_started.load(Ordering::SeqCst) > 0).await,
        "the server never fetched the slow page"
    );
    assert_eq!(site.slow_started.load(Ordering::SeqCst), 1);
    assert_eq!(handle.cancel_call("c1"), CancelOutcome::Cancelled);
    // The fetch server honours the cancel: it drops the download, which the site notices.
    assert!(
        eventually(|| site.slow_abandoned.load(Ordering::SeqCst)).await,
        "the slow download went on after the cancel"
    );
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("done"));
    let memory = check_all(&agent, &events).await;
    assert_eq!(stored(&memory, "c1").0, CANCELLED_RUNNING);
    let page = tool_message(&fake, 2, "c2");
    assert!(page.contains("fast page"), "{page}");
    client.ping().await.unwrap();
    fake.assert_no_violations();
}

#[tokio::test]
async fn an_mcp_tool_that_requires_approval_waits_for_the_decision() {
    let (fake, agent, client) = setup(
        peers::test_server(&[]),
        McpToolOptions::new().require_approval("echo", true),
        vec![
            Reply::tool_calls([call("c1", "echo", json!({"text": "first"}))]),
            Reply::tool_calls([call("c2", "echo", json!({"text": "second"}))]),
            Reply::text("done"),
        ],
    )
    .await;
    let (handle, mut driver) = Driver::go(&agent);
    driver
        .wait_for("approval of c1", common::probe::asked("c1"))
        .await;
    handle
        .decide("c1", ApprovalDecision::Decline { reason: None })
        .unwrap();
    driver
        .wait_for("approval of c2", common::probe::asked("c2"))
        .await;
    handle.decide("c2", ApprovalDecision::Approve).unwrap();
    let (reply, events) = driver.finish().await;
    assert_eq!(reply.unwrap().text().as_deref(), Some("done"));
    check_all(&agent, &events).await;
    assert_eq!(tool_message(&fake, 1, "c1"), DECLINED);
    assert_eq!(tool_message(&fake, 2, "c2"), "second");
    // c2 ran after the decline of c1: anything sent about c1 is in the server's log by now.
    await_lines(&client, "call echo", 1).await;
    assert_eq!(
        lines_starting(&client, "call echo").len(),
        1,
        "the declined c1 never reached the server"
    );
    assert_eq!(
        cancel_lines(&client),
        Vec::<String>::new(),
        "a decline is not a cancel"
    );
    fake.assert_no_violations();
}
