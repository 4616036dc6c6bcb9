#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentry::ReActAgent;
use agentry::agent::{AgentEvent, AgentHandle, ReActAgentBuilder, ReplyRun};
use agentry::model::{OpenAiChatModel, OpenAiConfig, RetryPolicy};
use agentry::tool::{ToolCallState, Toolkit};
use agentry_script::{ScriptSettings, ScriptTools};
use agentry_testkit::FakeLlm;
use serde_json::{Value, json};

pub const DEADLINE: Duration = Duration::from_secs(20);

pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: not within {DEADLINE:?}"),
    }
}

/// Tool folders in a temporary directory.
pub struct ToolDirs {
    pub root: tempfile::TempDir,
}

impl ToolDirs {
    pub fn new() -> ToolDirs {
        ToolDirs {
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes a tool: its manifest (`id` and `description` added) and its code in `file`.
    pub fn add(&self, id: &str, manifest: Value, file: &str, code: &str) -> PathBuf {
        let dir = self.root.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let mut manifest = manifest;
        manifest["id"] = json!(id);
        if manifest.get("description").is_none() {
            manifest["description"] = json!(format!("The {id} tool."));
        }
        std::fs::write(dir.join("assistant_tool.json"), manifest.to_string()).unwrap();
        std::fs::write(dir.join(file), code).unwrap();
        dir
    }

    pub fn load(&self, settings: &ScriptSettings) -> ScriptTools {
        ScriptTools::load(&[self.root.path().to_owned()], settings)
    }

    /// The tools, registered in a new toolkit; fails on any load error.
    pub fn toolkit(&self, settings: &ScriptSettings) -> (Toolkit, ScriptTools) {
        let toolkit = Toolkit::new();
        let mut tools = self.load(settings);
        tools.register(&toolkit);
        assert!(tools.errors.is_empty(), "{:?}", tools.errors);
        (toolkit, tools)
    }
}

/// An agent on the fake model with `toolkit`.
pub fn agent(fake: &FakeLlm, toolkit: Toolkit) -> ReActAgentBuilder {
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("fake-model")
            .base_url(fake.base_url())
            .stream(true)
            .retry(RetryPolicy {
                max_retries: 0,
                initial_backoff: Duration::from_millis(1),
                max_delay: Duration::from_millis(1),
            }),
    )
    .unwrap();
    ReActAgent::builder()
        .name("agentry")
        .model(Arc::new(model) as Arc<dyn agentry::model::ChatModel>)
        .toolkit(toolkit)
}

/// Drives a reply to its end, letting `react` act on each event (cancel, decide); its events.
pub async fn drive(
    mut run: ReplyRun,
    handle: &AgentHandle,
    mut react: impl FnMut(&AgentEvent, &AgentHandle),
) -> Vec<AgentEvent> {
    let mut events = Vec::new();
    while let Some(event) = within("the reply's next event", run.next_event()).await {
        react(&event, handle);
        events.push(event);
    }
    within("the reply's end", run.finish()).await.unwrap();
    events
}

/// How call `call_id` ended.
pub fn finished(events: &[AgentEvent], call_id: &str) -> ToolCallState {
    let states: Vec<&ToolCallState> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolFinished {
                call_id: id, state, ..
            } if id.as_str() == call_id => Some(state),
            _ => None,
        })
        .collect();
    assert_eq!(states.len(), 1, "one ToolFinished for {call_id}: {states:?}");
    states[0].clone()
}

/// What the model read as the result of `call_id`, in request `n` (0-based).
pub fn tool_message(fake: &FakeLlm, n: usize, call_id: &str) -> String {
    let requests = fake.requests();
    requests[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("request {n} has no result for {call_id}"))
}

/// The progress messages of call `call_id`.
pub fn progress(events: &[AgentEvent], call_id: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress {
                call_id: id, message, ..
            } if id.as_str() == call_id => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// A reply that makes `calls` (in one model answer), then ends with "Done.".
pub struct Outcome {
    pub events: Vec<AgentEvent>,
    pub fake: FakeLlm,
    pub tools: ScriptTools,
}

pub async fn run_calls(
    dirs: &ToolDirs,
    settings: &ScriptSettings,
    calls: Vec<agentry_testkit::Call>,
    configure: impl FnOnce(ReActAgentBuilder) -> ReActAgentBuilder,
    react: impl FnMut(&AgentEvent, &AgentHandle),
) -> Outcome {
    let fake = FakeLlm::start().await;
    let (toolkit, tools) = dirs.toolkit(settings);
    fake.push(agentry_testkit::Reply::tool_calls(calls));
    fake.push(agentry_testkit::Reply::text("Done."));
    let agent = configure(agent(&fake, toolkit)).build().unwrap();
    let handle = agent.handle();
    let events = drive(
        agent.start_reply(agentry::message::Msg::user("go")),
        &handle,
        react,
    )
    .await;
    fake.assert_no_violations();
    Outcome { events, fake, tools }
}

/// Cancels a call when it reports `message`.
pub fn cancel_on(message: &'static str) -> impl FnMut(&AgentEvent, &AgentHandle) {
    move |event, handle| {
        if let AgentEvent::ToolProgress {
            call_id,
            message: said,
            ..
        } = event
            && said == message
        {
            let _ = handle.cancel_call(call_id.as_str());
        }
    }
}

/// Whether no script of the first tool runs within `limit`.
pub async fn idle_within(tools: &ScriptTools, limit: Duration) -> bool {
    let tool = tools.tools[0].clone();
    tokio::task::spawn_blocking(move || tool.wait_until_idle(limit))
        .await
        .unwrap()
}
