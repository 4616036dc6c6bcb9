//! The approval flow of a script tool: the script's own question, its execute function run
//! with the user's action only after an approval, its declined message, auto-approval.

use agentry::agent::AgentEvent;
use agentry::tool::{ApprovalDecision, DECLINED, ToolCallState};
use agentry_script::ScriptSettings;
use agentry_testkit::Call;
use serde_json::json;

use crate::common::{ToolDirs, finished, progress, run_calls, tool_message};

/// A tool in the style of the API's approval example: the question from
/// `registerApprovalRequest`, the body gated on `primaryConfirmed`.
const WRITE_NOTE: &str = r#"
type Params = { path: string }
AssistantTool.registerApprovalRequest(async (params: Params) => ({
  title: "Write a note",
  message: `Write the note ${params.path}?`,
  primaryButtonLabel: "Write",
  secondaryButtonLabel: "Skip",
}))
AssistantTool.registerExecuteToolWithApproval(async (params: Params, action) => {
  AssistantTool.report(`body ran: ${JSON.stringify(action)}`)
  if (!action.primaryConfirmed) {
    return { success: false, message: "User cancelled the write." }
  }
  return { success: true, message: `wrote ${params.path}` }
})
"#;

fn write_note(dirs: &ToolDirs, id: &str, auto_approve: bool, declined_message: bool) {
    let mut code = WRITE_NOTE.to_owned();
    if declined_message {
        code.push_str(
            "AssistantTool.registerDeclinedMessage((params: Params, reason?: string) => `The user would not let me write ${params.path}: ${reason ?? \"no reason\"}`)\n",
        );
    }
    dirs.add(
        id,
        json!({"parameters": [{"name": "path", "type": "string"}], "requireApproval": true, "autoApprove": auto_approve}),
        "assistant_tool.ts",
        &code,
    );
}

/// A5, A8: the dialog shows the script's question; after an approval the body runs once with
/// `{ primaryConfirmed: true, secondaryConfirmed: false }`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a5_an_approved_call_asks_the_scripts_question_and_runs_with_primary_confirmed() {
    let dirs = ToolDirs::new();
    write_note(&dirs, "write_note", false, false);
    let mut asked = Vec::new();
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![Call::new("w", "write_note", r#"{"path": "a.txt"}"#)],
        |b| b,
        |event, handle| {
            if let AgentEvent::ApprovalRequested {
                call_id,
                request,
                automatic: false,
                ..
            } = event
            {
                asked.push(request.clone());
                handle
                    .decide(call_id.as_str(), ApprovalDecision::Approve)
                    .unwrap();
            }
        },
    )
    .await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].title.as_deref(), Some("Write a note"));
    assert_eq!(asked[0].message, "Write the note a.txt?");
    assert_eq!(asked[0].primary_label.as_deref(), Some("Write"));
    assert_eq!(asked[0].secondary_label.as_deref(), Some("Skip"));
    assert_eq!(
        progress(&out.events, "w"),
        [r#"body ran: {"primaryConfirmed":true,"secondaryConfirmed":false}"#]
    );
    assert_eq!(tool_message(&out.fake, 1, "w"), "wrote a.txt");
}

/// S3, A10: a declined call never runs the body; the model reads the script's declined message
/// (with the user's reason), or the standard one when the script has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a10_a_declined_call_never_runs_the_body_and_the_model_reads_the_decline() {
    let dirs = ToolDirs::new();
    write_note(&dirs, "own_message", false, true);
    write_note(&dirs, "plain", false, false);
    let out = run_calls(
        &dirs,
        &ScriptSettings::default(),
        vec![
            Call::new("o", "own_message", r#"{"path": "a.txt"}"#),
            Call::new("p", "plain", r#"{"path": "b.txt"}"#),
        ],
        |b| b,
        |event, handle| {
            if let AgentEvent::ApprovalRequested {
                call_id,
                automatic: false,
                ..
            } = event
            {
                let decision = ApprovalDecision::Decline {
                    reason: Some("not now".into()),
                };
                handle.decide(call_id.as_str(), decision).unwrap();
            }
        },
    )
    .await;
    for call in ["o", "p"] {
        assert!(
            progress(&out.events, call).is_empty(),
            "the body of {call} never ran"
        );
        assert!(matches!(
            finished(&out.events, call),
            ToolCallState::Declined { .. }
        ));
    }
    assert_eq!(
        tool_message(&out.fake, 1, "o"),
        "The user would not let me write a.txt: not now"
    );
    assert_eq!(
        tool_message(&out.fake, 1, "p"),
        format!("{DECLINED}\nUser's reason: not now")
    );
}

/// A4, A7: auto-approval needs the user's setting and the manifest's `autoApprove`; then the
/// question is still asked of the script (and recorded) and the body runs confirmed. Either flag
/// alone asks the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_auto_approval_takes_both_flags() {
    for (user, tool, automatic) in [(true, true, true), (true, false, false), (false, true, false)] {
        let dirs = ToolDirs::new();
        write_note(&dirs, "write_note", tool, false);
        let mut requests = Vec::new();
        let out = run_calls(
            &dirs,
            &ScriptSettings::default(),
            vec![Call::new("w", "write_note", r#"{"path": "c.txt"}"#)],
            |b| b.auto_approve_tools(user),
            |event, handle| {
                if let AgentEvent::ApprovalRequested {
                    call_id,
                    request,
                    automatic,
                    ..
                } = event
                {
                    requests.push((request.message.clone(), *automatic));
                    if !automatic {
                        handle
                            .decide(call_id.as_str(), ApprovalDecision::Approve)
                            .unwrap();
                    }
                }
            },
        )
        .await;
        let case = format!("user {user}, tool {tool}");
        assert_eq!(
            requests,
            [("Write the note c.txt?".to_owned(), automatic)],
            "{case}"
        );
        assert_eq!(tool_message(&out.fake, 1, "w"), "wrote c.txt", "{case}");
    }
}
