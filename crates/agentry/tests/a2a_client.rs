//! A remote A2A agent as a tool (`agentry::a2a::A2aAgent`), against an agent built with the
//! official A2A Python SDK (`tests/peers/a2a_server.py`): its answer, its progress, a cancel
//! mid-task with what the remote agent said, its question asked of the user, its failure.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use agentry::a2a::A2aAgent;
use agentry::agent::AgentEvent;
use agentry::tool::{ApprovalDecision, Toolkit};
use agentry_testkit::peers::peers_dir;
use agentry_testkit::{Call, FakeLlm, Reply};

use crate::common::probe::Driver;
use crate::common::{agent, tool_message, within};

/// The SDK's agent, killed when dropped.
struct Remote {
    child: Child,
    url: String,
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn remote() -> Remote {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a_server.py");
    let mut child = Command::new(peers_dir().join("venv/bin/python"))
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("PORT=")
        .unwrap_or_else(|| panic!("no port: {line:?}"));
    Remote {
        url: format!("http://127.0.0.1:{port}"),
        child,
    }
}

async fn archive(remote: &Remote) -> A2aAgent {
    within(
        "the agent card",
        A2aAgent::connect("archive", &remote.url, &Default::default()),
    )
    .await
    .unwrap()
}

fn ask(prompt: &str) -> Reply {
    let args = serde_json::json!({ "prompt": prompt }).to_string();
    Reply::tool_calls([Call::new("c1", "archive", args)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_agents_answer_is_the_calls_result_and_its_card_describes_the_tool() {
    let remote = tokio::task::spawn_blocking(remote).await.unwrap();
    let archive = archive(&remote).await;
    assert_eq!(archive.agent_name(), "Archive Agent");
    assert_eq!(archive.endpoint(), format!("{}/", remote.url));
    assert!(agentry::tool::Tool::description(&archive).contains("Reads the archive and answers from it"));
    let toolkit = Toolkit::new();
    toolkit.register(archive).unwrap();
    let fake = FakeLlm::start().await;
    fake.push(ask("hello"));
    fake.push(Reply::text("It said hi."));
    let parent = agent(&fake, true, toolkit);
    let answer = within(
        "the reply",
        parent.reply(agentry::message::Msg::user("greet the archive")),
    )
    .await
    .unwrap();
    assert_eq!(answer.text().unwrap(), "It said hi.");
    assert_eq!(tool_message(&fake, 1, "c1"), "hi from the SDK agent");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_call_cancels_the_remote_task_and_keeps_what_the_remote_agent_said() {
    let remote = tokio::task::spawn_blocking(remote).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit.register(archive(&remote).await).unwrap();
    let fake = FakeLlm::start().await;
    fake.push(ask("slow"));
    fake.push(Reply::text("Stopped."));
    let parent = agent(&fake, true, toolkit);
    let (handle, mut driver) = Driver::go(&parent);
    driver
        .wait_for(
            "the remote task's progress",
            |e| matches!(e, AgentEvent::ToolProgress { message, .. } if message == "reading page 1 of 5"),
        )
        .await;
    handle.cancel_call("c1");
    let (answer, _) = driver.finish().await;
    assert_eq!(answer.unwrap().text().unwrap(), "Stopped.");
    let result = tool_message(&fake, 1, "c1");
    assert!(
        result.contains("[cancelled] The remote agent `Archive Agent` was stopped."),
        "{result}"
    );
    assert!(
        result.contains("It said: stopped after 2 of 5 pages"),
        "the remote task was cancelled: {result}"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_agents_question_is_asked_of_the_user_and_the_answer_goes_back_in_the_task() {
    let remote = tokio::task::spawn_blocking(remote).await.unwrap();
    for (decision, said) in [
        (ApprovalDecision::Approve, "deleted"),
        (ApprovalDecision::Decline { reason: None }, "kept them"),
    ] {
        let toolkit = Toolkit::new();
        toolkit.register(archive(&remote).await).unwrap();
        let fake = FakeLlm::start().await;
        fake.push(ask("delete the old files"));
        fake.push(Reply::text("Done."));
        let parent = agent(&fake, true, toolkit);
        let (handle, mut driver) = Driver::go(&parent);
        let asked = driver
            .wait_for(
                "the remote question",
                |e| matches!(e, AgentEvent::ApprovalRequested { name, .. } if name == "archive: question"),
            )
            .await;
        let AgentEvent::ApprovalRequested { call_id, request, .. } = asked else {
            unreachable!()
        };
        assert!(call_id.as_str().starts_with("c1."), "{call_id:?}");
        assert!(
            request.message.contains("May I delete the old files?"),
            "{}",
            request.message
        );
        handle.decide(call_id, decision).unwrap();
        let (answer, _) = driver.finish().await;
        assert_eq!(answer.unwrap().text().unwrap(), "Done.");
        assert_eq!(tool_message(&fake, 1, "c1"), said);
        fake.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_remote_task_is_an_error_result_and_a_dead_agent_a_clear_error() {
    let remote = tokio::task::spawn_blocking(remote).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit.register(archive(&remote).await).unwrap();
    let fake = FakeLlm::start().await;
    fake.push(ask("fail"));
    fake.push(Reply::text("The archive is down."));
    let parent = agent(&fake, true, toolkit);
    within("the reply", parent.reply(agentry::message::Msg::user("read")))
        .await
        .unwrap();
    let result = tool_message(&fake, 1, "c1");
    assert!(result.contains("failed: the archive is offline"), "{result}");

    let dead = A2aAgent::connect("gone", "http://127.0.0.1:9", &Default::default()).await;
    let error = dead.unwrap_err().to_string();
    assert!(
        error.contains("agent card") && error.contains("127.0.0.1:9"),
        "{error}"
    );
    fake.assert_no_violations();
}
