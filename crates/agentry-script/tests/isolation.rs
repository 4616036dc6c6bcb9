//! What a script may do and what stops it: `isCancelled`, scripts that never yield, parallel
//! calls, errors, memory, the network.

use std::time::Duration;

use agentry::tool::{CANCELLED_RUNNING, CancelPhase, ToolCallState};
use agentry_script::ScriptSettings;
use agentry_testkit::Call;
use serde_json::json;

use crate::common::{ToolDirs, cancel_on, finished, idle_within, progress, run_calls, tool_message};

/// X1: `isCancelled` is false while the call runs and true as soon as the cancel is accepted,
/// which `onCancel` (run after the cancel is accepted) sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x1_is_cancelled_turns_true_when_the_cancel_is_accepted() {
    let dirs = ToolDirs::new();
    dirs.add(
        "watch",
        json!({}),
        "assistant_tool.js",
        r#"AssistantTool.registerExecuteTool(async () => {
             AssistantTool.onCancel = () => `isCancelled in onCancel: ${AssistantTool.isCancelled}`
             AssistantTool.report(`started, isCancelled: ${AssistantTool.isCancelled}`)
             await new Promise((resolve) => setTimeout(resolve, 600000))
           })"#,
    );
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![Call::new("w", "watch", "{}")],
        |b| b,
        cancel_on("started, isCancelled: false"),
    )
    .await;
    assert_eq!(progress(&out.events, "w"), ["started, isCancelled: false"]);
    assert_eq!(tool_message(&out.fake, 1, "w"), "isCancelled in onCancel: true");
}

/// X10 for a script that never yields (`while (true) {}`): its `onCancel` still answers at
/// once (the engine interrupts the loop for it), and the script is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x10_a_script_stuck_in_a_busy_loop_is_cancelled_with_its_on_cancel_and_stopped() {
    let dirs = ToolDirs::new();
    dirs.add(
        "spin",
        json!({}),
        "assistant_tool.js",
        r#"AssistantTool.registerExecuteTool(async () => {
             let turns = 0
             AssistantTool.onCancel = () => `stopped after spinning`
             AssistantTool.report("spinning")
             while (true) { turns++ }
           })"#,
    );
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![Call::new("s", "spin", "{}")],
        |b| b.cancel_grace(Duration::from_secs(30)),
        cancel_on("spinning"),
    )
    .await;
    assert!(matches!(
        finished(&out.events, "s"),
        ToolCallState::Cancelled {
            phase: CancelPhase::Running,
            partial: true,
            ..
        }
    ));
    assert_eq!(tool_message(&out.fake, 1, "s"), "stopped after spinning");
    assert!(
        idle_within(&out.tools, Duration::from_secs(10)).await,
        "the loop was stopped"
    );
}

/// X11 for a busy loop without `onCancel`: the standard cancel result, and the script is
/// stopped once the agent no longer waits for it (the grace), never hanging the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x11_a_busy_loop_without_on_cancel_is_stopped_after_the_grace() {
    let dirs = ToolDirs::new();
    dirs.add(
        "spin",
        json!({}),
        "assistant_tool.js",
        r#"AssistantTool.registerExecuteTool(async () => {
             AssistantTool.report("spinning")
             while (true) {}
           })"#,
    );
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![Call::new("s", "spin", "{}")],
        |b| b.cancel_grace(Duration::from_millis(50)),
        cancel_on("spinning"),
    )
    .await;
    assert_eq!(tool_message(&out.fake, 1, "s"), CANCELLED_RUNNING);
    assert!(
        idle_within(&out.tools, Duration::from_secs(10)).await,
        "the loop was stopped"
    );
}

/// X4: two parallel calls of one tool run in separate engines; cancelling one gives its own
/// `onCancel` text, and the other completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x4_two_parallel_calls_of_one_tool_keep_their_own_on_cancel() {
    let dirs = ToolDirs::new();
    dirs.add(
        "count",
        json!({"parameters": [{"name": "name", "type": "string"}, {"name": "steps", "type": "integer"}]}),
        "assistant_tool.ts",
        r#"AssistantTool.registerExecuteTool(async (params: { name: string; steps: number }) => {
             let done = 0
             AssistantTool.onCancel = () => `partial ${params.name}: ${done} steps`
             AssistantTool.report(`running ${params.name}`)
             while (!AssistantTool.isCancelled && done < params.steps) {
               await new Promise((resolve) => setTimeout(resolve, 1))
               done++
             }
             return { success: true, message: `finished ${params.name}: ${done} steps` }
           })"#,
    );
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![
            Call::new("a", "count", r#"{"name": "a", "steps": 100000}"#),
            Call::new("b", "count", r#"{"name": "b", "steps": 50}"#),
        ],
        |b| b.parallel_tool_calls(true),
        cancel_on("running a"),
    )
    .await;
    let a = tool_message(&out.fake, 1, "a");
    assert!(a.starts_with("partial a: "), "{a}");
    assert_eq!(tool_message(&out.fake, 1, "b"), "finished b: 50 steps");
    assert_eq!(finished(&out.events, "b").name(), "completed");
}

/// A script that throws, and one that returns `success: false`: error results the model reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_throws_or_fails_gives_an_error_result() {
    let dirs = ToolDirs::new();
    dirs.add(
        "throws",
        json!({}),
        "assistant_tool.js",
        r#"function deep() { throw new RangeError("the index 7 is out of range") }
           AssistantTool.registerExecuteTool(async () => deep())"#,
    );
    dirs.add(
        "fails",
        json!({}),
        "assistant_tool.js",
        r#"AssistantTool.registerExecuteTool(async () => ({ success: false, message: "Invalid parameters: searchText cannot be empty." }))"#,
    );
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![Call::new("t", "throws", "{}"), Call::new("f", "fails", "{}")],
        |b| b,
        |_, _| {},
    )
    .await;
    let thrown = tool_message(&out.fake, 1, "t");
    assert!(
        thrown.contains("the script threw: RangeError: the index 7 is out of range")
            && thrown.contains("deep"),
        "{thrown}"
    );
    let failed = tool_message(&out.fake, 1, "f");
    assert!(
        failed.contains("Invalid parameters: searchText cannot be empty."),
        "{failed}"
    );
    assert_eq!(finished(&out.events, "t").name(), "failed");
    assert_eq!(finished(&out.events, "f").name(), "failed");
}

/// A script that allocates without end stops at its memory limit, with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_stops_at_its_memory_limit() {
    let dirs = ToolDirs::new();
    dirs.add(
        "hog",
        json!({}),
        "assistant_tool.js",
        r#"AssistantTool.registerExecuteTool(async () => {
             const kept = []
             while (true) kept.push(new Array(100000).fill(kept.length))
           })"#,
    );
    let out = run_calls(
        &dirs,
        &ScriptSettings::default().memory_limit(16 << 20),
        vec![Call::new("h", "hog", "{}")],
        |b| b,
        |_, _| {},
    )
    .await;
    let text = tool_message(&out.fake, 1, "h");
    assert!(text.contains("ran out of memory (its limit is 16 MiB)"), "{text}");
}

/// `fetch` works only when the manifest asks for the network and the user allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_needs_the_manifest_and_the_user() {
    let server = agentry_testkit::FakeLlm::start().await;
    let url = format!("{}/models", server.base_url());
    let code = format!(
        r#"AssistantTool.registerExecuteTool(async () => {{
             const response = await fetch({url:?})
             return {{ success: true, message: `status ${{response.status}}, ${{(await response.text()).length > 0}}` }}
           }})"#
    );
    for (asks, allowed, works) in [(true, true, true), (true, false, false), (false, true, false)] {
        let dirs = ToolDirs::new();
        dirs.add("web", json!({"network": asks}), "assistant_tool.js", &code);
        let out = run_calls(
            &dirs,
            &ScriptSettings::default().allow_network(allowed),
            vec![Call::new("w", "web", "{}")],
            |b| b,
            |_, _| {},
        )
        .await;
        let text = tool_message(&out.fake, 1, "w");
        if works {
            assert!(text.starts_with("status "), "{text}");
        } else {
            assert!(
                text.contains("fetch is not allowed for this tool"),
                "asks {asks}, allowed {allowed}: {text}"
            );
        }
    }
}

/// T1 for a script: the manifest's `timeoutSeconds` stops a call that runs too long, with its
/// `onCancel` text, even when it never yields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t1_the_manifests_timeout_stops_a_script_that_runs_too_long() {
    let dirs = ToolDirs::new();
    dirs.add(
        "slow",
        json!({"timeoutSeconds": 0.2}),
        "assistant_tool.js",
        r#"AssistantTool.registerExecuteTool(async () => {
             AssistantTool.onCancel = () => "gave up after the time limit"
             while (true) {}
           })"#,
    );
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![Call::new("s", "slow", "{}")],
        |b| b,
        |_, _| {},
    )
    .await;
    assert!(
        matches!(
            finished(&out.events, "s"),
            ToolCallState::TimedOut { partial: true }
        ),
        "{:?}",
        finished(&out.events, "s")
    );
    let text = tool_message(&out.fake, 1, "s");
    assert!(
        text.starts_with("This tool call timed out after 0.2 s")
            && text.ends_with("\ngave up after the time limit"),
        "{text}"
    );
    assert!(idle_within(&out.tools, Duration::from_secs(10)).await);
}
