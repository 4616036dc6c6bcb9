//! Spec Y3: the stored record of each call keeps its state, phase, partial result, reason,
//! decision and who took it, and its times, so that a UI shows "declined", "declined by the
//! session's grant", "cancelled with partial results", "timed out" and "completed" apart.

use std::sync::Arc;
use std::time::Duration;

use agentry::ReActAgent;
use agentry::agent::AgentEvent;
use agentry::message::{ContentBlock, Msg, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest, ChatResponse, ChatStream};
use agentry::tool::{
    ApprovalDecision, CancelPhase, CancelReason, DecisionSource, FunctionTool, ToolCallState, ToolOptions,
    Toolkit, once,
};
use agentry_store::{CallRecorder, CallStatus, SessionMemory};
use futures::StreamExt;
use serde_json::json;

use crate::backends::{TestDb, conformance};

/// First request: six calls in one message; then an answer.
struct SixCalls;

impl ChatModel for SixCalls {
    fn model_name(&self) -> &str {
        "six-calls"
    }

    fn is_streaming(&self) -> bool {
        false
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let answered = request.messages.iter().any(|m| m.tool_results().next().is_some());
        let call = |id: &str, name: &str| {
            ContentBlock::ToolUse(ToolUseBlock {
                id: id.into(),
                name: name.into(),
                input: json!({"n": 1}),
                raw_input: None,
            })
        };
        let content = if answered {
            vec![ContentBlock::text("done")]
        } else {
            vec![
                call("c_done", "plain"),
                call("c_declined", "guarded"),
                call("c_declined_for_session", "guarded"),
                call("c_declined_by_grant", "guarded"),
                call("c_cancelled", "pages"),
                call("c_timed_out", "stuck"),
            ]
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

fn tool(
    name: &str,
    body: impl Fn(agentry::tool::ToolContext) -> agentry::tool::ToolStream + Send + Sync + 'static,
) -> FunctionTool {
    FunctionTool::new(
        name,
        "A test tool.",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        move |_, ctx| body(ctx),
    )
}

fn toolkit() -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit
        .register(tool("plain", |_| once(async { "ok".to_owned() })))
        .unwrap();
    toolkit
        .register_with(
            tool("guarded", |_| once(async { "ran".to_owned() })),
            ToolOptions::new().require_approval(true),
        )
        .unwrap();
    toolkit
        .register(tool("pages", |ctx| {
            once(async move {
                ctx.set_on_cancel(|| Some("stopped after page 1".to_owned()));
                ctx.report("page 1 read", None);
                ctx.cancelled().await;
                "all pages".to_owned()
            })
        }))
        .unwrap();
    toolkit
        .register_with(
            tool("stuck", |_| {
                once(async {
                    std::future::pending::<()>().await;
                    "never".to_owned()
                })
            }),
            ToolOptions::new().timeout(Duration::from_millis(50)),
        )
        .unwrap();
    toolkit
}

async fn y3_each_calls_record_says_how_it_ended_who_decided_and_when(db: TestDb) {
    let memory = Arc::new(
        SessionMemory::open_or_create(db.open().await, "records", &json!({}))
            .await
            .unwrap(),
    );
    let agent = ReActAgent::builder()
        .name("bot")
        .model(SixCalls)
        .toolkit(toolkit())
        .memory(Arc::clone(&memory))
        .hook("session-calls", CallRecorder::new(Arc::clone(&memory)))
        .build()
        .unwrap();
    let mut run = agent.start_reply(Msg::user("go"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while let Some(event) = tokio::time::timeout_at(deadline, run.next_event()).await.unwrap() {
        match event {
            AgentEvent::ApprovalRequested {
                call_id,
                automatic: false,
                ..
            } => {
                let decision = if call_id == "c_declined" {
                    ApprovalDecision::Decline {
                        reason: Some("not now".into()),
                    }
                } else {
                    ApprovalDecision::DeclineForSession {
                        reason: Some("never in this session".into()),
                    }
                };
                run.handle().decide(&call_id, decision).unwrap();
            }
            AgentEvent::ToolProgress { call_id, .. } if call_id == "c_cancelled" => {
                run.handle().cancel_call(call_id);
            }
            _ => {}
        }
    }
    run.finish().await.unwrap();

    let records = db.open().await.calls(&memory.session().id).await.unwrap();
    let record = |id: &str| {
        records
            .iter()
            .find(|r| r.call_id == id)
            .unwrap_or_else(|| panic!("no record of {id}: {records:#?}"))
    };
    for r in &records {
        assert!(r.status.is_terminal(), "{r:#?}");
        assert!(r.finished_at.is_some_and(|f| f >= r.created_at), "{r:#?}");
    }

    let done = record("c_done");
    assert_eq!(done.status, CallStatus::Finished(ToolCallState::Completed));
    assert_eq!((done.decision.as_ref(), done.decision_source), (None, None));
    assert!(done.started_at.is_some());

    let declined = record("c_declined");
    assert_eq!(
        declined.status,
        CallStatus::Finished(ToolCallState::Declined {
            reason: Some("not now".into())
        })
    );
    assert_eq!(declined.decision_source, Some(DecisionSource::User));
    assert!(matches!(
        declined.decision,
        Some(ApprovalDecision::Decline { .. })
    ));
    assert_eq!(declined.started_at, None, "a declined call never started");

    let for_session = record("c_declined_for_session");
    assert_eq!(for_session.decision_source, Some(DecisionSource::User));
    assert!(matches!(
        for_session.decision,
        Some(ApprovalDecision::DeclineForSession { .. })
    ));

    let by_grant = record("c_declined_by_grant");
    assert!(matches!(
        by_grant.status,
        CallStatus::Finished(ToolCallState::Declined { .. })
    ));
    assert_eq!(by_grant.decision_source, Some(DecisionSource::SessionGrant));

    let cancelled = record("c_cancelled");
    assert_eq!(
        cancelled.status,
        CallStatus::Finished(ToolCallState::Cancelled {
            phase: CancelPhase::Running,
            partial: true,
            reason: CancelReason::User,
        })
    );
    assert_eq!(cancelled.status.phase(), Some(CancelPhase::Running));
    assert_eq!(cancelled.partial_result.as_deref(), Some("stopped after page 1"));
    assert!(cancelled.started_at.is_some());

    let timed_out = record("c_timed_out");
    assert!(
        matches!(
            timed_out.status,
            CallStatus::Finished(ToolCallState::TimedOut { partial: false })
        ),
        "{timed_out:#?}"
    );
    assert_eq!(timed_out.partial_result, None);
}
conformance!(y3_each_calls_record_says_how_it_ended_who_decided_and_when);
