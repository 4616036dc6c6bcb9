//! The agent loop on a durable memory: it does not care which memory it has.

use std::sync::{Arc, Mutex};

use agentry::ReActAgent;
use agentry::memory::{Memory, check_tool_pairs};
use agentry::message::{ContentBlock, Msg, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest, ChatResponse, ChatStream};
use agentry::tool::{CancelPhase, CancelReason, INTERRUPTED_RESTART, ToolCallState, Toolkit, tool};
use agentry_store::{CallRecorder, CallStatus, SessionMemory, SessionStore};
use futures::StreamExt;
use serde_json::json;

use crate::backends::{TestDb, conformance};
use crate::common::calls;
use crate::counting::Counting;

/// Calls `add` once per user message, then answers with the result; keeps every request it
/// received, each checked for one result per call (Y1), as the fake server does.
#[derive(Clone, Default)]
struct Scripted {
    requests: Arc<Mutex<Vec<Vec<Msg>>>>,
}

impl ChatModel for Scripted {
    fn model_name(&self) -> &str {
        "scripted"
    }

    fn is_streaming(&self) -> bool {
        false
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let msgs = request.messages;
        self.requests.lock().unwrap().push(msgs.clone());
        let content = match msgs.last().and_then(|m| m.tool_results().next()) {
            Some(result) => vec![ContentBlock::text(format!("The sum is {}.", result.text()))],
            None => {
                let n = msgs.iter().flat_map(Msg::tool_uses).count();
                vec![ContentBlock::ToolUse(ToolUseBlock {
                    id: format!("call_{n}").into(),
                    name: "add".into(),
                    input: json!({"a": 19, "b": 23}),
                    raw_input: None,
                })]
            }
        };
        let response = ChatResponse {
            content,
            ..ChatResponse::default()
        };
        futures::stream::once(async move { Ok(response) }).boxed()
    }
}

/// Adds two integers.
///
/// # Arguments
/// * `a` - the first
/// * `b` - the second
#[tool]
fn add(a: i64, b: i64) -> String {
    (a + b).to_string()
}

fn agent(model: Scripted, memory: Arc<SessionMemory>) -> ReActAgent {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    ReActAgent::builder()
        .name("bot")
        .model(model)
        .toolkit(toolkit)
        .memory(memory)
        .build()
        .unwrap()
}

async fn a_reply_is_stored_and_a_new_process_continues_it(db: TestDb) {
    let model = Scripted::default();
    let memory = Arc::new(
        SessionMemory::open_or_create(db.open().await, "chat", &json!({}))
            .await
            .unwrap(),
    );
    let reply = agent(model.clone(), memory.clone())
        .reply(Msg::user("19 + 23?"))
        .await
        .unwrap();
    assert_eq!(reply.text().as_deref(), Some("The sum is 42."));
    let written = memory.messages().await.unwrap();
    assert_eq!(written.len(), 4, "question, call, result, answer");
    let id = memory.session().id.clone();
    drop(memory);

    let store = db.open().await;
    assert_eq!(
        store.messages(&id).await.unwrap(),
        written,
        "what the agent acknowledged is on disk"
    );
    let memory = Arc::new(
        db.once_released(|| SessionMemory::open(store.clone(), &id))
            .await
            .unwrap(),
    );
    agent(model.clone(), memory.clone())
        .reply(Msg::user("again?"))
        .await
        .unwrap();
    let last = model.requests.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        &last[..4],
        &written[..],
        "the next request is built from what was stored"
    );
    assert_eq!(memory.size().await.unwrap(), 8);
}
conformance!(a_reply_is_stored_and_a_new_process_continues_it);

async fn y4_the_model_is_told_a_call_was_interrupted_by_the_restart(db: TestDb) {
    let id = {
        // A process stops while its tool runs: the call is stored, its result is not.
        let memory = SessionMemory::open_or_create(db.open().await, "chat", &json!({}))
            .await
            .unwrap();
        memory
            .add(vec![Msg::user("19 + 23?"), calls(&["c"])])
            .await
            .unwrap();
        memory.session().id.clone()
    };
    let model = Scripted::default();
    let store = db.open().await;
    let memory = Arc::new(
        db.once_released(|| SessionMemory::open(store.clone(), &id))
            .await
            .unwrap(),
    );
    let interrupted: Vec<String> = memory
        .recovery()
        .interrupted
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        interrupted,
        ["c"],
        "the store closed the call before the loop saw the memory"
    );
    agent(model.clone(), memory)
        .reply(Msg::user("and now?"))
        .await
        .unwrap();
    let requests = model.requests.lock().unwrap().clone();
    for request in &requests {
        assert_eq!(
            check_tool_pairs(request),
            Ok(()),
            "every request pairs each call with one result"
        );
    }
    let first = &requests[0];
    let told = first
        .iter()
        .flat_map(Msg::tool_results)
        .find(|r| r.id == "c")
        .unwrap();
    assert_eq!(told.text(), INTERRUPTED_RESTART);
    assert!(told.is_error);
}
conformance!(y4_the_model_is_told_a_call_was_interrupted_by_the_restart);

/// A `wait` tool that says when its body starts and then runs until `release` is notified.
fn waiting_agent(
    memory: Arc<SessionMemory>,
) -> (
    ReActAgent,
    tokio::sync::mpsc::UnboundedReceiver<()>,
    Arc<tokio::sync::Notify>,
) {
    struct WaitOnce;
    impl ChatModel for WaitOnce {
        fn model_name(&self) -> &str {
            "wait-once"
        }
        fn is_streaming(&self) -> bool {
            false
        }
        fn chat(&self, request: ChatRequest) -> ChatStream {
            let answered = request
                .messages
                .last()
                .is_some_and(|m| m.tool_results().next().is_some());
            let content = if answered {
                vec![ContentBlock::text("done")]
            } else {
                vec![ContentBlock::ToolUse(ToolUseBlock {
                    id: "w1".into(),
                    name: "wait".into(),
                    input: json!({"what": "the gate"}),
                    raw_input: None,
                })]
            };
            futures::stream::once(async move {
                Ok(ChatResponse {
                    content,
                    ..ChatResponse::default()
                })
            })
            .boxed()
        }
    }
    let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Arc::clone(&release);
    let toolkit = Toolkit::new();
    toolkit
        .register(agentry::tool::FunctionTool::new(
            "wait",
            "Waits for the gate.",
            json!({"type": "object", "properties": {"what": {"type": "string"}}}),
            move |_, _| {
                let started_tx = started_tx.clone();
                let gate = Arc::clone(&gate);
                agentry::tool::once(async move {
                    let _ = started_tx.send(());
                    gate.notified().await;
                    "opened".to_owned()
                })
            },
        ))
        .unwrap();
    let agent = ReActAgent::builder()
        .name("bot")
        .model(WaitOnce)
        .toolkit(toolkit)
        .memory(Arc::clone(&memory))
        .hook("session-calls", CallRecorder::new(memory))
        .build()
        .unwrap();
    (agent, started, release)
}

type Running = tokio::task::JoinHandle<Result<Msg, agentry::AgentError>>;

/// A session in `db` whose reply is running its `wait` tool: the memory, the reply, and the
/// tool's gate.
async fn a_reply_in_its_tool_at(db: &TestDb) -> (Arc<SessionMemory>, Running, Arc<tokio::sync::Notify>) {
    let memory = Arc::new(
        SessionMemory::open_or_create(db.open().await, "chat", &json!({}))
            .await
            .unwrap(),
    );
    let (agent, mut started, release) = waiting_agent(Arc::clone(&memory));
    let reply = tokio::spawn(async move { agent.reply(Msg::user("wait")).await });
    within("the tool's start", started.recv()).await;
    (memory, reply, release)
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within 20 s"))
}

/// The call the reply asks approval for, once it asks.
async fn approval_question(run: &mut agentry::agent::ReplyRun) -> agentry::CallId {
    within("the approval question", async {
        loop {
            if let Some(agentry::agent::AgentEvent::ApprovalRequested { call_id, .. }) =
                run.next_event().await
            {
                return call_id;
            }
        }
    })
    .await
}

async fn a_call_is_recorded_when_made_and_its_start_with_its_result(db: TestDb) {
    let (memory, reply, release) = a_reply_in_its_tool_at(&db).await;
    let id = memory.session().id.clone();

    // Read by another connection, as another process would.
    let running = db.open().await.calls(&id).await.unwrap();
    assert_eq!(running.len(), 1);
    let call = &running[0];
    assert_eq!(
        call.status,
        CallStatus::Running,
        "registered as running by the model's message, before the body ran"
    );
    assert_eq!(call.tool_name, "wait");
    assert_eq!(call.arguments, json!({"what": "the gate"}));
    let stored = memory.messages().await.unwrap();
    assert_eq!(
        call.message_id.as_deref(),
        Some(stored[1].id.as_str()),
        "registered with the assistant message that made it"
    );
    assert!(
        call.started_at.is_none() && call.reply_id.is_none(),
        "the start has no commit of its own: it is written with the result"
    );

    release.notify_one();
    within("the reply", reply).await.unwrap().unwrap();
    let finished = db.open().await.calls(&id).await.unwrap();
    assert_eq!(finished[0].status, CallStatus::Finished(ToolCallState::Completed));
    assert!(finished[0].finished_at.is_some());
    assert!(
        finished[0].started_at.is_some() && finished[0].reply_id.is_some(),
        "the start came with the result"
    );
    assert!(finished[0].started_at <= finished[0].finished_at);
}
conformance!(a_call_is_recorded_when_made_and_its_start_with_its_result);

async fn a_tool_step_commits_twice_the_model_message_and_the_result(db: TestDb) {
    let store = Counting::new(db.open().await);
    let memory = Arc::new(
        SessionMemory::open_or_create(store.clone(), "chat", &json!({}))
            .await
            .unwrap(),
    );
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    let agent = ReActAgent::builder()
        .name("bot")
        .model(Scripted::default())
        .toolkit(toolkit)
        .memory(Arc::clone(&memory))
        .hook("session-calls", CallRecorder::new(Arc::clone(&memory)))
        .build()
        .unwrap();
    let before = store.writes();
    agent.reply(Msg::user("19 + 23?")).await.unwrap();
    assert_eq!(
        store.writes() - before,
        5,
        "the question, the call, its result (with the call's start), the answer, the reply's ledger"
    );
    let calls = store.calls(&memory.session().id).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Finished(ToolCallState::Completed));
    assert!(calls[0].started_at.is_some() && calls[0].reply_id.is_some());
}
conformance!(a_tool_step_commits_twice_the_model_message_and_the_result);

async fn y4_a_call_that_was_running_when_the_process_died_may_have_partly_run(db: TestDb) {
    let (memory, reply, _release) = a_reply_in_its_tool_at(&db).await;
    let id = memory.session().id.clone();
    // The process dies: nothing after this point runs, not even a cancel.
    reply.abort();
    let _ = reply.await;
    drop(memory);

    let store = db.open().await;
    let memory = db
        .once_released(|| SessionMemory::open(store.clone(), &id))
        .await
        .unwrap();
    let calls = memory.store().calls(&id).await.unwrap();
    assert_eq!(
        calls[0].status,
        CallStatus::Finished(ToolCallState::Cancelled {
            phase: CancelPhase::Running,
            partial: false,
            reason: CancelReason::Restart,
        }),
        "a call whose body started is closed as possibly run"
    );
    let result = memory
        .messages()
        .await
        .unwrap()
        .iter()
        .flat_map(Msg::tool_results)
        .map(|r| r.text())
        .collect::<Vec<_>>();
    assert_eq!(result, [INTERRUPTED_RESTART]);
}
conformance!(y4_a_call_that_was_running_when_the_process_died_may_have_partly_run);

/// `add` needing approval, in a toolkit of its own.
fn guarded_add() -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit
        .register_with(AddTool, agentry::tool::ToolOptions::new().require_approval(true))
        .unwrap();
    toolkit
}

/// What every front end does to continue a session: `attach` gives the agent the session's
/// grants (here, the only way the guarded call can run without anyone to ask), records the
/// decision with its source and explanation, and keeps the reply's token use before
/// `ReplyFinished` announces it.
async fn attach_restores_grants_records_decisions_and_keeps_the_ledger_before_the_reply_ends(db: TestDb) {
    let store = db.open().await;
    let memory = Arc::new(
        SessionMemory::open_or_create(store.clone(), "chat", &json!({}))
            .await
            .unwrap(),
    );
    store
        .put_grant(
            memory.lease(),
            &agentry_store::Grant {
                key: format!("add\u{0}{}", json!({"a": 19, "b": 23})),
                tool_name: "add".into(),
                kind: agentry_store::GrantKind::Allow,
                created_at: chrono::Utc::now(),
            },
        )
        .await
        .unwrap();
    let builder = ReActAgent::builder()
        .name("bot")
        .model(Scripted::default())
        .toolkit(guarded_add());
    let agent = memory.attach(builder).await.unwrap().build().unwrap();
    assert_eq!(
        agent.session_grants().len(),
        1,
        "the session's grant is the agent's"
    );
    let mut run = agent.start_reply(Msg::user("19 + 23?"));
    let mut ledger_at_end = None;
    while let Some(event) = run.next_event().await {
        if let agentry::agent::AgentEvent::ReplyFinished { .. } = event {
            ledger_at_end = Some(store.usage(&memory.session().id).await.unwrap().calls);
        }
    }
    let reply = run.finish().await.unwrap();
    assert_eq!(reply.text().as_deref(), Some("The sum is 42."));
    assert_eq!(
        ledger_at_end,
        Some(1),
        "recorded before ReplyFinished was emitted"
    );
    let calls = store.calls(&memory.session().id).await.unwrap();
    assert_eq!(calls[0].status, CallStatus::Finished(ToolCallState::Completed));
    assert_eq!(
        calls[0].decision_source,
        Some(agentry::tool::DecisionSource::SessionGrant)
    );
    assert!(
        calls[0].explanation.as_deref().is_some_and(|e| e.contains("add")),
        "the request's message is the explanation (A5): {:?}",
        calls[0].explanation
    );
}
conformance!(attach_restores_grants_records_decisions_and_keeps_the_ledger_before_the_reply_ends);

/// A call cancelled while its approval question waits never started: its result is stored
/// without a start (whose approval was never given), and the reply goes on to its answer.
async fn a_call_cancelled_while_its_approval_waits_is_stored_as_never_started(db: TestDb) {
    let store = db.open().await;
    let memory = Arc::new(
        SessionMemory::open_or_create(store.clone(), "chat", &json!({}))
            .await
            .unwrap(),
    );
    let builder = ReActAgent::builder()
        .name("bot")
        .model(Scripted::default())
        .toolkit(guarded_add());
    let agent = memory.attach(builder).await.unwrap().build().unwrap();
    let mut run = agent.start_reply(Msg::user("19 + 23?"));
    let call_id = approval_question(&mut run).await;
    agent.handle().cancel_call(call_id.as_str());
    let mut failed = None;
    within("the reply's end", async {
        while let Some(event) = run.next_event().await {
            if let agentry::agent::AgentEvent::ReplyFinished { stop_reason, .. } = event {
                failed = Some(format!("{stop_reason:?}"));
            }
        }
    })
    .await;
    let reply = run.finish().await;
    assert!(reply.is_ok(), "{reply:?} ({failed:?})");
    let calls = store.calls(&memory.session().id).await.unwrap();
    assert!(
        matches!(
            calls[0].status,
            CallStatus::Finished(ToolCallState::Cancelled {
                phase: CancelPhase::BeforeStart,
                ..
            })
        ),
        "{:?}",
        calls[0].status
    );
    assert_eq!(calls[0].started_at, None);
    let approvals = store.approvals(&memory.session().id).await.unwrap();
    assert_eq!(approvals[0].state, agentry_store::ApprovalState::Expired);
}
conformance!(a_call_cancelled_while_its_approval_waits_is_stored_as_never_started);

/// C3 across processes: a call of the session's earlier run, cancelled from the agent that
/// continues it, has finished already.
async fn c3_a_call_of_an_earlier_process_is_already_finished(db: TestDb) {
    let id = {
        let memory = Arc::new(
            SessionMemory::open_or_create(db.open().await, "chat", &json!({}))
                .await
                .unwrap(),
        );
        agent(Scripted::default(), memory.clone())
            .reply(Msg::user("19 + 23?"))
            .await
            .unwrap();
        memory.session().id.clone()
    };
    let store = db.open().await;
    let memory = Arc::new(
        db.once_released(|| SessionMemory::open(store.clone(), &id))
            .await
            .unwrap(),
    );
    let builder = ReActAgent::builder().name("bot").model(Scripted::default());
    let agent = memory.attach(builder).await.unwrap().build().unwrap();
    assert_eq!(
        agent.handle().cancel_call("call_0"),
        agentry::tool::CancelOutcome::AlreadyFinished(Some(ToolCallState::Completed))
    );
    assert_eq!(
        agent.handle().cancel_call("call_9"),
        agentry::tool::CancelOutcome::NotFound
    );
}
conformance!(c3_a_call_of_an_earlier_process_is_already_finished);

/// Runs of [`counted_add`], the tool of the test below.
static COUNTED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Adds two integers, counting its runs.
///
/// # Arguments
/// * `a` - the first
/// * `b` - the second
#[tool(name = "add")]
fn counted_add(a: i64, b: i64) -> String {
    COUNTED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    (a + b).to_string()
}

/// A node whose lease was taken over while a call waited for approval: the approval reaching
/// it cannot be recorded as used there, so the call is declined and its body never runs on
/// that node (the session, with the question, went to the node that took it).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_reaching_a_node_that_lost_the_session_runs_nothing() {
    use std::time::Duration;
    let Some(db) = TestDb::postgres(module_path!()) else {
        return;
    };
    let stalled: Arc<dyn SessionStore> = Arc::new(
        db.open_postgres(|o| o.lease_ttl(Duration::from_millis(300)).renew_leases(false))
            .await
            .unwrap(),
    );
    let memory = Arc::new(
        SessionMemory::open_or_create(stalled, "chat", &json!({}))
            .await
            .unwrap(),
    );
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            CountedAddTool,
            agentry::tool::ToolOptions::new().require_approval(true),
        )
        .unwrap();
    let builder = ReActAgent::builder()
        .name("bot")
        .model(Scripted::default())
        .toolkit(toolkit);
    let agent = memory.attach(builder).await.unwrap().build().unwrap();
    let mut run = agent.start_reply(Msg::user("19 + 23?"));
    let call_id = approval_question(&mut run).await;
    // Another node takes the session over once the stalled node's lease expired.
    let other = db.open().await;
    let id = memory.session().id.clone();
    let taken = within("the takeover", async {
        loop {
            match other.acquire(&id).await {
                Ok(lease) => return lease,
                Err(agentry_store::StoreError::SessionBusy { .. }) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    agent
        .handle()
        .decide(call_id.as_str(), agentry::tool::ApprovalDecision::Approve)
        .unwrap();
    within("the reply's end", async {
        while run.next_event().await.is_some() {}
    })
    .await;
    let _ = run.finish().await;
    assert_eq!(
        COUNTED_RUNS.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the approved call ran on the node that lost the session"
    );
    // Where the session went, the question is still open: it is asked there, and runs once.
    let records = other.approvals(&id).await.unwrap();
    assert_eq!(
        records[0].state,
        agentry_store::ApprovalState::Pending,
        "{records:?}"
    );
    drop(taken);
    db.finish().await;
}
