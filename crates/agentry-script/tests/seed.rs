//! The code examples of the cancellation seed, verbatim (`tests/seed/*.ts`, copied from
//! `AssistantTool User-Initiated Cancellation`), each registered with
//! `AssistantTool.registerExecuteTool(executeTool)` and run by the agent. The helpers they call
//! (`items`, `process`, `doSomethingSlow`, `formatPartialResult`, `formatFinalResult`) come
//! from `tests/seed/prelude.js`.

use std::time::Duration;

use agentry::agent::AgentEvent;
use agentry::message::Msg;
use agentry::tool::{CANCELLED_RUNNING, CancelPhase, ToolCallState};
use agentry_script::{ScriptSettings, ScriptTool};
use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::json;

use crate::common::{ToolDirs, agent, drive, finished, tool_message};

const PRELUDE: &str = include_str!("seed/prelude.js");

fn seed_tool(dirs: &ToolDirs, id: &str, example: &str) {
    let code = format!("{example}\nAssistantTool.registerExecuteTool(executeTool)\n");
    dirs.add(id, json!({}), "assistant_tool.ts", &code);
}

/// Runs one call of `id`, cancelled when it reports `cancel_at` (if given); the events, the
/// fake server and the tool.
async fn run_seed(
    example: &str,
    prelude: &str,
    cancel_at: Option<&str>,
    grace: Duration,
) -> (Vec<AgentEvent>, FakeLlm, ScriptTool) {
    let fake = FakeLlm::start().await;
    let dirs = ToolDirs::new();
    seed_tool(&dirs, "collect", example);
    let (toolkit, tools) = dirs.toolkit(&ScriptSettings::default().prelude(prelude));
    fake.push(Reply::tool_calls([Call::new("c1", "collect", "{}")]));
    fake.push(Reply::text("Done."));
    let agent = agent(&fake, toolkit).cancel_grace(grace).build().unwrap();
    let handle = agent.handle();
    let events = drive(
        agent.start_reply(Msg::user("collect")),
        &handle,
        |event, handle| {
            if let AgentEvent::ToolProgress { call_id, message, .. } = event
                && Some(message.as_str()) == cancel_at
            {
                let _ = handle.cancel_call(call_id.as_str());
            }
        },
    )
    .await;
    fake.assert_no_violations();
    (events, fake, tools.tools[0].clone())
}

/// Whether no script of `tool` runs within `limit`.
async fn idle_within(tool: &ScriptTool, limit: Duration) -> bool {
    let tool = tool.clone();
    tokio::task::spawn_blocking(move || tool.wait_until_idle(limit))
        .await
        .unwrap()
}

/// X7 with the seed's example: cancelled mid-loop, the model reads exactly what `onCancel`
/// returns (the partial results so far), not what the function returns after its loop breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x7_the_seeds_on_cancel_example_hands_the_model_its_partial_results() {
    let (events, fake, _) = run_seed(
        include_str!("seed/with_on_cancel.ts"),
        PRELUDE,
        Some("processed 3"),
        Duration::from_secs(1),
    )
    .await;
    assert!(
        matches!(
            finished(&events, "c1"),
            ToolCallState::Cancelled {
                phase: CancelPhase::Running,
                partial: true,
                ..
            }
        ),
        "{:?}",
        finished(&events, "c1")
    );
    let text = tool_message(&fake, 1, "c1");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("Operation was cancelled by the user."),
        "{text}"
    );
    assert_eq!(lines.next(), Some("Partial results:"), "{text}");
    let partial: Vec<&str> = lines.collect();
    assert!(
        partial.len() >= 3,
        "at least the three reported before the cancel: {text}"
    );
    for (i, line) in partial.iter().enumerate() {
        assert_eq!(*line, format!("processed item {}", i + 1), "{text}");
    }
}

/// X9 and X11 with the seed's minimal example (no `onCancel`): the model reads the standard
/// cancel text, and the script, still awaiting, is stopped once the agent stops waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x9_the_seeds_minimal_example_is_cancelled_without_any_code_of_its_own() {
    let (events, fake, tool) = run_seed(
        include_str!("seed/minimal.ts"),
        PRELUDE,
        Some("slow work started"),
        Duration::from_millis(100),
    )
    .await;
    assert!(
        matches!(
            finished(&events, "c1"),
            ToolCallState::Cancelled {
                phase: CancelPhase::Running,
                partial: false,
                ..
            }
        ),
        "{:?}",
        finished(&events, "c1")
    );
    assert_eq!(tool_message(&fake, 1, "c1"), CANCELLED_RUNNING);
    assert!(
        idle_within(&tool, Duration::from_secs(10)).await,
        "the script waiting on its ten-minute timer was stopped"
    );
}

/// X7 with the seed's recommended structure: cancelled mid-loop, `formatPartialResult` of what
/// was done is the result; the `return` after the loop is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x7_the_seeds_recommended_structure_hands_back_its_partial_results() {
    let (events, fake, _) = run_seed(
        include_str!("seed/recommended.ts"),
        PRELUDE,
        Some("processed 2"),
        Duration::from_secs(1),
    )
    .await;
    assert!(matches!(
        finished(&events, "c1"),
        ToolCallState::Cancelled { partial: true, .. }
    ));
    let text = tool_message(&fake, 1, "c1");
    assert!(
        text.starts_with("Cancelled by the user. Partial results:\nprocessed item 1\nprocessed item 2"),
        "{text}"
    );
}

/// The recommended structure, not cancelled: its final result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_recommended_structure_completes_with_its_final_result() {
    let prelude = PRELUDE.replace("length: 2000", "length: 3");
    let (events, fake, _) = run_seed(
        include_str!("seed/recommended.ts"),
        &prelude,
        None,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        finished(&events, "c1").name(),
        "completed",
        "{}",
        tool_message(&fake, 1, "c1")
    );
    assert_eq!(tool_message(&fake, 1, "c1"), "All 3 items processed.");
}
