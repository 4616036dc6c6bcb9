//! The wire shape of what crosses a process boundary: events, messages, call states,
//! decisions, cancel outcomes and usage, as the store writes them and the server sends them.
//! The types live here and are re-exported where they are used (`agent`, `tool`, `model`).
//!
//! Every type here serializes to JSON with `serde`. Enums are internally tagged with a
//! snake_case `type` (events), `state` (call states) or `decision` (approval decisions) field;
//! durations are milliseconds as numbers with a fractional part (`"duration_ms": 0.42`). The
//! shape is versioned by [`PROTOCOL_VERSION`]: a change that an older reader cannot read bumps
//! it; adding an optional field or a new enum variant does not (readers must ignore unknown
//! fields, and every public enum is `#[non_exhaustive]`). `docs/protocol.md` shows each shape.
//!
//! ```
//! use agentry::agent::AgentEvent;
//! use agentry::tool::ToolCallState;
//! use std::time::Duration;
//!
//! let event = AgentEvent::ToolFinished {
//!     reply_id: "r1".into(),
//!     call_id: "c1".into(),
//!     name: "search".into(),
//!     state: ToolCallState::Completed,
//!     duration: Duration::from_micros(1500),
//! };
//! let json = serde_json::to_value(&event).unwrap();
//! assert_eq!(json["type"], "tool_finished");
//! assert_eq!(json["state"]["state"], "completed");
//! assert_eq!(json["duration_ms"], 1.5);
//! let back: AgentEvent = serde_json::from_value(json).unwrap();
//! assert_eq!(back, event);
//! ```

mod approval;
mod calls;
mod events;
mod input;
mod plan;
mod usage;

pub use approval::{ApprovalDecision, ApprovalRequest, DecisionSource};
pub use calls::{CancelCause, CancelOutcome, CancelPhase, CancelReason, ToolCallState};
pub use events::{AgentEvent, CancelTarget, StopReason};
pub use input::InputAnswer;
pub use plan::{Plan, PlanState, SubTask, SubTaskState, subtask_line};
pub use usage::ChatUsage;

/// The version of the JSON shapes of this module's types.
///
/// Version 2 dropped `automatic` from `approval_resolved`: it always equalled "the `source` is
/// not the user" ([`DecisionSource::is_automatic`]).
pub const PROTOCOL_VERSION: u32 = 2;

/// `Duration` as fractional milliseconds.
pub(crate) mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(crate) fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(duration.as_secs_f64() * 1000.0)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(deserializer)?;
        Duration::try_from_secs_f64(ms / 1000.0).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use crate::agent::{AgentEvent, CancelTarget, InputAnswer, StopReason};
    use crate::message::{ContentBlock, Msg, ToolResultBlock, ToolUseBlock};
    use crate::model::ChatUsage;
    use crate::tool::{
        ApprovalDecision, ApprovalRequest, CancelCause, CancelOutcome, CancelPhase, CancelReason,
        DecisionSource, ToolCallState,
    };

    fn round_trip<T>(value: &T) -> Value
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let json = serde_json::to_value(value).unwrap();
        let back: T = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(&back, value, "{json}");
        json
    }

    fn every_event() -> Vec<AgentEvent> {
        let call = ToolUseBlock {
            id: "c1".into(),
            name: "search".into(),
            input: json!({"q": "x"}),
            raw_input: None,
        };
        let assistant = Msg::new(
            "bot",
            crate::message::Role::Assistant,
            vec![ContentBlock::ToolUse(call)],
        );
        let result = Msg::tool_result(ToolResultBlock {
            id: "c1".into(),
            name: "search".into(),
            output: vec![ContentBlock::text("found")],
            is_error: false,
        });
        vec![
            AgentEvent::Message {
                msg: assistant,
                last: true,
            },
            AgentEvent::Message {
                msg: result,
                last: false,
            },
            AgentEvent::ToolStarted {
                reply_id: "r".into(),
                call_id: "c1".into(),
                name: "search".into(),
                input: json!({"q": "x"}),
            },
            AgentEvent::ToolProgress {
                reply_id: "r".into(),
                call_id: "c1".into(),
                id: Some("p".into()),
                message: "half".into(),
                nested: false,
            },
            AgentEvent::ApprovalRequested {
                reply_id: "r".into(),
                call_id: "c1".into(),
                name: "search".into(),
                input: json!({}),
                request: ApprovalRequest::new("Search?"),
                automatic: false,
            },
            AgentEvent::ApprovalResolved {
                reply_id: "r".into(),
                call_id: "c1".into(),
                decision: ApprovalDecision::DeclineForSession {
                    reason: Some("no".into()),
                },
                source: DecisionSource::SessionGrant,
            },
            AgentEvent::ApprovalWithdrawn {
                reply_id: "r".into(),
                call_id: "c1".into(),
            },
            AgentEvent::CancelRequested {
                reply_id: "r".into(),
                target: CancelTarget::Call("c1".into()),
                reason: CancelReason::User,
            },
            AgentEvent::CancelRequested {
                reply_id: "r".into(),
                target: CancelTarget::Reply,
                reason: CancelReason::Reply,
            },
            AgentEvent::ToolFinished {
                reply_id: "r".into(),
                call_id: "c1".into(),
                name: "search".into(),
                state: ToolCallState::Cancelled {
                    phase: CancelPhase::Running,
                    partial: true,
                    reason: CancelReason::User,
                },
                duration: Duration::from_micros(250),
            },
            AgentEvent::ReplyFinished {
                reply_id: "r".into(),
                stop_reason: StopReason::Failed("HTTP 500".into()),
                usage: ChatUsage {
                    input_tokens: 10,
                    output_tokens: 2,
                    time: Duration::from_millis(30),
                    ..ChatUsage::default()
                },
                cost: Some(0.0012),
            },
            AgentEvent::TextCallsRecovered {
                reply_id: "r".into(),
                call_ids: vec!["c1".into(), "c2".into()],
            },
            AgentEvent::PlanChanged {
                reply_id: "r".into(),
                plan: Some(super::Plan {
                    id: "p1".into(),
                    name: "release".into(),
                    description: "ship v2".into(),
                    expected_outcome: "v2 is out".into(),
                    subtasks: vec![super::SubTask::new("changelog", "write it", "a changelog")],
                    state: super::PlanState::InProgress,
                    created_at: "2026-11-27T08:00:00Z".into(),
                    finished_at: None,
                    outcome: None,
                }),
            },
            AgentEvent::InputRequested {
                reply_id: "r".into(),
                call_id: "c1.form".into(),
                name: "everything: input".into(),
                message: "Your name?".into(),
                schema: serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}}),
            },
            AgentEvent::InputAnswered {
                reply_id: "r".into(),
                call_id: "c1.form".into(),
                answer: InputAnswer::Accept(serde_json::json!({"name": "Ada"})),
            },
            AgentEvent::ToolProgress {
                reply_id: "r".into(),
                call_id: "c1".into(),
                id: Some("k1".into()),
                message: "researcher: search_files".into(),
                nested: true,
            },
        ]
    }

    #[test]
    fn a_nested_report_says_so_and_a_plain_one_does_not() {
        let events = every_event();
        let nested = events.iter().rev().find_map(|e| match e {
            AgentEvent::ToolProgress { nested: true, .. } => Some(round_trip(e)),
            _ => None,
        });
        assert_eq!(
            nested,
            Some(
                json!({"type": "tool_progress", "reply_id": "r", "call_id": "c1", "id": "k1",
                        "message": "researcher: search_files", "nested": true})
            )
        );
        let plain = events.iter().find_map(|e| match e {
            AgentEvent::ToolProgress { nested: false, .. } => Some(round_trip(e)),
            _ => None,
        });
        assert!(plain.is_some_and(|p| p.get("nested").is_none()));
    }

    #[test]
    fn every_event_round_trips_through_json_with_a_type_tag() {
        for event in every_event() {
            let json = round_trip(&event);
            assert!(json["type"].is_string(), "{json}");
        }
    }

    #[test]
    fn input_answers_have_the_documented_shapes() {
        let accept = round_trip(&InputAnswer::Accept(serde_json::json!({"name": "Ada"})));
        assert_eq!(
            accept,
            serde_json::json!({"action": "accept", "content": {"name": "Ada"}})
        );
        assert_eq!(
            round_trip(&InputAnswer::Decline),
            serde_json::json!({"action": "decline"})
        );
        assert_eq!(
            round_trip(&InputAnswer::Cancel),
            serde_json::json!({"action": "cancel"})
        );
    }

    #[test]
    fn shapes_are_the_documented_ones() {
        let events = every_event();
        assert_eq!(
            serde_json::to_value(&events[9]).unwrap(),
            json!({
                "type": "tool_finished",
                "reply_id": "r",
                "call_id": "c1",
                "name": "search",
                "state": {"state": "cancelled", "phase": "running", "partial": true, "reason": "user"},
                "duration_ms": 0.25
            })
        );
        assert_eq!(
            serde_json::to_value(&events[7]).unwrap(),
            json!({"type": "cancel_requested", "reply_id": "r", "target": {"target": "call", "call_id": "c1"}, "reason": "user"})
        );
        assert_eq!(
            serde_json::to_value(&events[10]).unwrap()["stop_reason"],
            json!({"reason": "failed", "error": "HTTP 500"})
        );
        assert_eq!(
            serde_json::to_value(&events[10]).unwrap()["usage"],
            json!({"input_tokens": 10, "output_tokens": 2, "time_ms": 30.0})
        );
        assert_eq!(
            serde_json::to_value(&events[11]).unwrap(),
            json!({"type": "text_calls_recovered", "reply_id": "r", "call_ids": ["c1", "c2"]})
        );
        assert_eq!(
            serde_json::to_value(&events[12]).unwrap(),
            json!({"type": "plan_changed", "reply_id": "r", "plan": {
                "id": "p1", "name": "release", "description": "ship v2", "expected_outcome": "v2 is out",
                "state": "in_progress", "created_at": "2026-11-27T08:00:00Z",
                "subtasks": [{"name": "changelog", "description": "write it", "expected_outcome": "a changelog", "state": "todo"}]
            }})
        );
    }

    /// Version 2: `approval_resolved` has no `automatic`; a version-1 event that has it (kept
    /// in an older session's event log) still reads.
    #[test]
    fn approval_resolved_has_its_source_and_no_automatic_flag() {
        let resolved = AgentEvent::ApprovalResolved {
            reply_id: "r".into(),
            call_id: "c1".into(),
            decision: ApprovalDecision::Approve,
            source: DecisionSource::Rule,
        };
        assert_eq!(
            serde_json::to_value(&resolved).unwrap(),
            json!({"type": "approval_resolved", "reply_id": "r", "call_id": "c1",
                   "decision": {"decision": "approve"}, "source": "rule"})
        );
        let version_1 = json!({"type": "approval_resolved", "reply_id": "r", "call_id": "c1",
            "decision": {"decision": "approve"}, "automatic": true, "source": "rule"});
        assert_eq!(serde_json::from_value::<AgentEvent>(version_1).unwrap(), resolved);
        assert!(DecisionSource::Rule.is_automatic() && !DecisionSource::User.is_automatic());
        assert_eq!(super::PROTOCOL_VERSION, 2);
    }

    #[test]
    fn outcomes_states_and_causes_round_trip() {
        for outcome in [
            CancelOutcome::Cancelled,
            CancelOutcome::AlreadyCancelled,
            CancelOutcome::AlreadyFinished(None),
            CancelOutcome::AlreadyFinished(Some(ToolCallState::TimedOut { partial: true })),
            CancelOutcome::NotFound,
            CancelOutcome::AlreadyTimingOut,
        ] {
            round_trip(&outcome);
        }
        for state in [
            ToolCallState::Completed,
            ToolCallState::Failed,
            ToolCallState::Declined { reason: None },
            ToolCallState::Cancelled {
                phase: CancelPhase::BeforeStart,
                partial: false,
                reason: CancelReason::Restart,
            },
        ] {
            round_trip(&state);
        }
        let json = round_trip(&CancelCause::TimedOut {
            after: Duration::from_secs(60),
        });
        assert_eq!(json, json!({"cause": "timed_out", "after_ms": 60000.0}));
        round_trip(&ApprovalDecision::Approve);
    }

    #[test]
    fn a_negative_or_huge_duration_is_an_error_not_a_panic() {
        let bad = json!({"input_tokens": 1, "output_tokens": 1, "time_ms": -1.0});
        assert!(serde_json::from_value::<ChatUsage>(bad).is_err());
        let bad = json!({"input_tokens": 1, "output_tokens": 1, "time_ms": 1e300});
        assert!(serde_json::from_value::<ChatUsage>(bad).is_err());
    }
}
