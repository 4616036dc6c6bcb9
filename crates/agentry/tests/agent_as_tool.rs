//! An agent as a tool of another (`ReActAgent::as_tool`): the child's answer is the call's
//! result, its usage adds up to the parent's reply, a cancel of the parent's call cancels the
//! child mid-tool and hands back what the child had, and the child's approval questions are
//! asked of the parent's user.

use agentry::agent::{AgentEvent, ReActAgent};
use agentry::message::Msg;
use agentry::tool::Toolkit;
use agentry_testkit::{Call, FakeLlm, Reply};

use agentry::tool::ApprovalDecision;

use crate::common::probe::{Driver, Probe, asked};
use crate::common::{agent, tool_message, within};

/// The text of the result of call `id` in `agent`'s memory; fails unless there is exactly one.
async fn result_of(agent: &ReActAgent, id: &str) -> String {
    let msgs = agent.memory().messages().await.unwrap();
    let results: Vec<String> = msgs
        .iter()
        .flat_map(|m| m.tool_results())
        .filter(|r| r.id.as_str() == id)
        .map(|r| r.text())
        .collect();
    assert_eq!(results.len(), 1, "call {id} has one result: {results:?}");
    results[0].clone()
}

fn researcher_call(prompt: &str) -> Reply {
    let args = serde_json::json!({ "prompt": prompt }).to_string();
    Reply::tool_calls([Call::new("c1", "researcher", args)]).usage(100, 10)
}

#[tokio::test]
async fn a_child_agents_answer_is_the_parents_call_result_and_its_usage_adds_up() {
    let (parent_llm, child_llm) = (FakeLlm::start().await, FakeLlm::start().await);
    child_llm.push(Reply::text("Paris is the capital of France.").usage(40, 7));
    let child = agent(&child_llm, true, Toolkit::new());
    let toolkit = Toolkit::new();
    toolkit
        .register(child.as_tool("researcher", "Answers questions"))
        .unwrap();
    let parent = agent(&parent_llm, true, toolkit);
    parent_llm.push(researcher_call("What is the capital of France?"));
    parent_llm.push(Reply::text("Paris.").usage(200, 3));

    let mut run = parent.start_reply(Msg::user("capital of France?"));
    let mut usage = None;
    while let Some(event) = within("the parent's events", run.next_event()).await {
        if let AgentEvent::ReplyFinished { usage: u, .. } = event {
            usage = Some(u);
        }
    }
    let answer = within("the parent's reply", run.finish()).await.unwrap();
    assert_eq!(answer.text().unwrap(), "Paris.");
    assert_eq!(result_of(&parent, "c1").await, "Paris is the capital of France.");
    // The child was asked the parent's prompt.
    let asked = child_llm.requests()[0].body.to_string();
    assert!(asked.contains("What is the capital of France?"), "{asked}");
    let usage = usage.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (340, 20),
        "the child's tokens count in the parent's reply"
    );
    parent_llm.assert_no_violations();
    child_llm.assert_no_violations();
}

#[tokio::test]
async fn cancelling_the_parents_call_cancels_the_child_mid_tool_and_keeps_its_partial_results() {
    let (parent_llm, child_llm) = (FakeLlm::start().await, FakeLlm::start().await);
    let probe = Probe::new();
    let child_tools = Toolkit::new();
    child_tools.register(probe.tool("read_pages")).unwrap();
    let child = agent(&child_llm, true, child_tools);
    child_llm.push(Reply::tool_calls([Call::new(
        "k1",
        "read_pages",
        r#"{"wait": true, "partial": "read 3 of 10 pages"}"#,
    )]));
    let toolkit = Toolkit::new();
    toolkit
        .register(child.as_tool("researcher", "Reads sources"))
        .unwrap();
    let parent = agent(&parent_llm, true, toolkit);
    parent_llm.push(researcher_call("read the sources"));
    parent_llm.push(Reply::text("Stopped as asked."));

    let run = parent.start_reply(Msg::user("research this"));
    // The child's tool is running: cancel the parent's call.
    probe.started(1).await;
    run.handle().cancel_call("c1");
    let answer = within("the parent's reply", run.finish()).await.unwrap();
    assert_eq!(answer.text().unwrap(), "Stopped as asked.");

    let result = result_of(&parent, "c1").await;
    assert!(result.contains("[cancelled]"), "{result}");
    assert!(
        result.contains("read_pages") && result.contains("read 3 of 10 pages"),
        "the child's tool's on_cancel text is in the parent's result: {result}"
    );
    assert_eq!(probe.on_cancel_runs(), 1, "the child's tool was cancelled once");
    assert_eq!(probe.runs(), 1);
    // The child's own conversation closed its call with exactly one result, and it made no
    // model call after the cancel.
    assert_eq!(result_of(&child, "k1").await, "read 3 of 10 pages");
    assert_eq!(child_llm.request_count(), 1);
    parent_llm.assert_no_violations();
    child_llm.assert_no_violations();
}

#[tokio::test]
async fn a_fresh_agent_tool_gives_each_call_its_own_conversation_even_two_at_once() {
    let (parent_llm, child_llm) = (FakeLlm::start().await, FakeLlm::start().await);
    let child_url = child_llm.base_url();
    let toolkit = Toolkit::new();
    let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&made);
    toolkit
        .register(agentry::agent::AgentTool::fresh(
            "researcher",
            "Answers questions",
            move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                crate::common::builder_at(&child_url, Toolkit::new()).build()
            },
        ))
        .unwrap();
    let parent = crate::common::builder(&parent_llm, true, toolkit)
        .parallel_tool_calls(true)
        .build()
        .unwrap();
    parent_llm.push(Reply::tool_calls([
        Call::new("c1", "researcher", r#"{"prompt": "first question"}"#),
        Call::new("c2", "researcher", r#"{"prompt": "second question"}"#),
    ]));
    parent_llm.push(Reply::text("Both answered."));
    child_llm.push(Reply::text("An answer."));
    child_llm.push(Reply::text("An answer."));

    let answer = within("the parent's reply", parent.reply(Msg::user("two questions")))
        .await
        .unwrap();
    assert_eq!(answer.text().unwrap(), "Both answered.");
    assert_eq!(
        made.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one agent per call"
    );
    for request in child_llm.requests() {
        let messages = request.body["messages"].to_string();
        let questions = ["first question", "second question"]
            .iter()
            .filter(|q| messages.contains(*q))
            .count();
        assert_eq!(questions, 1, "a call sees only its own prompt: {messages}");
    }
    assert_eq!(result_of(&parent, "c1").await, "An answer.");
    assert_eq!(result_of(&parent, "c2").await, "An answer.");
    parent_llm.assert_no_violations();
    child_llm.assert_no_violations();
}

/// A parent whose tool `researcher` is a child agent with the probe tool `read_pages`, which
/// needs approval; the child's model calls it once as `k1`.
async fn parent_of_a_guarded_child(parent_llm: &FakeLlm, child_llm: &FakeLlm, probe: &Probe) -> ReActAgent {
    let child_tools = Toolkit::new();
    child_tools
        .register_with(
            probe.tool("read_pages"),
            agentry::tool::ToolOptions::new().require_approval(true),
        )
        .unwrap();
    let child = agent(child_llm, true, child_tools);
    child_llm.push(Reply::tool_calls([Call::new(
        "k1",
        "read_pages",
        r#"{"result": "3 pages"}"#,
    )]));
    child_llm.push(Reply::text("The sources say yes."));
    let toolkit = Toolkit::new();
    toolkit
        .register(child.as_tool("researcher", "Reads sources"))
        .unwrap();
    parent_llm.push(researcher_call("read the sources"));
    parent_llm.push(Reply::text("Done."));
    agent(parent_llm, true, toolkit)
}

#[tokio::test]
async fn a_childs_approval_is_asked_of_the_parents_user_naming_the_child_and_decides_its_call() {
    for approve in [true, false] {
        let (parent_llm, child_llm) = (FakeLlm::start().await, FakeLlm::start().await);
        let probe = Probe::new();
        let parent = parent_of_a_guarded_child(&parent_llm, &child_llm, &probe).await;
        let (handle, mut driver) = Driver::go(&parent);

        let asked = driver.wait_for("the child's question", asked("c1.k1")).await;
        let AgentEvent::ApprovalRequested { name, request, .. } = asked else {
            unreachable!()
        };
        assert_eq!(name, "researcher: read_pages");
        assert!(
            request.message.starts_with("The agent `researcher` asks: "),
            "{}",
            request.message
        );
        let decision = match approve {
            true => ApprovalDecision::Approve,
            false => ApprovalDecision::Decline {
                reason: Some("not now".into()),
            },
        };
        handle.decide("c1.k1", decision).unwrap();
        assert!(
            handle.decide("c1.k1", ApprovalDecision::Approve).is_err(),
            "the first decision wins"
        );
        let (answer, events) = driver.finish().await;
        assert_eq!(answer.unwrap().text().unwrap(), "Done.");
        assert!(events.iter().any(|e| matches!(e,
            AgentEvent::ApprovalResolved { call_id, .. } if call_id.as_str() == "c1.k1")));
        assert_eq!(probe.runs(), usize::from(approve), "approve: {approve}");
        let child_result = tool_message(&child_llm, 1, "k1");
        assert_eq!(child_result.contains("3 pages"), approve, "{child_result}");
        parent_llm.assert_no_violations();
        child_llm.assert_no_violations();
    }
}

#[tokio::test]
async fn cancelling_the_parents_call_withdraws_the_childs_question_and_its_call_never_runs() {
    let (parent_llm, child_llm) = (FakeLlm::start().await, FakeLlm::start().await);
    let probe = Probe::new();
    let parent = parent_of_a_guarded_child(&parent_llm, &child_llm, &probe).await;
    let (handle, mut driver) = Driver::go(&parent);
    driver.wait_for("the child's question", asked("c1.k1")).await;
    handle.cancel_call("c1");
    driver
        .wait_for(
            "the question withdrawn",
            |e| matches!(e, AgentEvent::ApprovalWithdrawn { call_id, .. } if call_id.as_str() == "c1.k1"),
        )
        .await;
    assert!(handle.decide("c1.k1", ApprovalDecision::Approve).is_err());
    let (answer, _) = driver.finish().await;
    assert_eq!(answer.unwrap().text().unwrap(), "Done.");
    assert_eq!(probe.runs(), 0);
    parent_llm.assert_no_violations();
    child_llm.assert_no_violations();
}

/// A child's tool calls are reported under the parent's call, each a nested line of its own
/// (`ToolProgress` with `nested: true`, the child's call id as its id): the call, then its
/// result. A `from_builder` tool without a store keeps the child's conversation in memory.
#[tokio::test]
async fn a_childs_tool_calls_are_reported_nested_under_the_parents_call() {
    let (parent_llm, child_llm) = (FakeLlm::start().await, FakeLlm::start().await);
    let child_url = child_llm.base_url();
    let child_tools = Toolkit::new();
    child_tools
        .register(agentry::tool::FunctionTool::new(
            "lookup",
            "Looks up.",
            serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            |_, _| agentry::tool::once(async { "found in volume 2".to_owned() }),
        ))
        .unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register(agentry::agent::AgentTool::from_builder(
            "researcher",
            "Looks things up",
            move || crate::common::builder_at(&child_url, child_tools.clone()),
        ))
        .unwrap();
    let parent = agent(&parent_llm, true, toolkit);
    parent_llm.push(researcher_call("where is it?"));
    parent_llm.push(Reply::text("In volume 2."));
    child_llm.push(Reply::tool_calls([Call::new("k1", "lookup", r#"{"q": "it"}"#)]));
    child_llm.push(Reply::text("Volume 2."));

    let (_, driver) = Driver::go(&parent);
    let (reply, events) = driver.finish().await;
    reply.unwrap();
    let nested: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress {
                call_id,
                id: Some(id),
                message,
                nested: true,
                ..
            } if call_id == "c1" => Some((id.clone(), message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        nested,
        [
            ("k1".to_owned(), r#"researcher: lookup({"q":"it"})"#.to_owned()),
            (
                "k1".to_owned(),
                "researcher: lookup → found in volume 2".to_owned()
            ),
        ]
    );
    assert_eq!(result_of(&parent, "c1").await, "Volume 2.");
    parent_llm.assert_no_violations();
    child_llm.assert_no_violations();
}
