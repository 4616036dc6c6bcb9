//! The approval phase of a tool call (spec `cancellation.md` 3.2).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::Grant;
use super::deadline::sleep_until;
use super::events::AgentEvent;
use super::react::ReplyCx;
use crate::message::ToolUseBlock;
use crate::tool::{
    ApprovalDecision, ApprovalRequest, CallPolicy, CallRecord, DecisionSource, ToolCallState, UserAction,
    grant_key,
};

/// How the approval phase ended.
pub(super) enum Approval {
    /// Run the body with this user action.
    Approved(UserAction, DecisionSource),
    /// The call is closed: declined (by this source), or cancelled while pending (no source).
    Closed(Option<DecisionSource>),
}

/// The reason of a call declined because nobody could decide (A15).
pub(super) const NO_DECISION: &str = "no decision";

impl ReplyCx<'_> {
    /// Asks for approval (A3 order: session deny grant, session allow grant, auto-approval, the
    /// user). Fails closed: no listener, a closed channel or the approval timeout decline (A15).
    pub(super) async fn approve(
        &self,
        record: &Arc<CallRecord>,
        call: &ToolUseBlock,
        policy: &CallPolicy,
    ) -> Approval {
        let empty = Map::new();
        let args = call.input.as_object().unwrap_or(&empty);
        let request = request_for(&call.name, args, policy);
        let key = grant_key(&call.name, args, policy.session_scope);
        let grant = self
            .inner
            .session
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        let automatic = match grant {
            Some(Grant::Deny { reason }) => {
                self.requested(call, request, true);
                let decision = ApprovalDecision::DeclineForSession {
                    reason: reason.clone(),
                };
                return self.decline(record, decision, reason, true, DecisionSource::SessionGrant);
            }
            Some(Grant::Allow) => Some(DecisionSource::SessionGrant),
            None if self.inner.config.settings.auto_approve_tools && policy.auto_approve => {
                Some(DecisionSource::Auto)
            }
            None => None,
        };
        if let Some(source) = automatic {
            self.requested(call, request, true);
            return self.approved(record, ApprovalDecision::Approve, true, source);
        }

        if !self.active.has_listeners(&self.inner.events) {
            // Nobody can see the request: fail closed (A15).
            let decision = ApprovalDecision::Decline {
                reason: Some(NO_DECISION.into()),
            };
            return self.decline(
                record,
                decision,
                Some(NO_DECISION.into()),
                true,
                DecisionSource::NoDecision,
            );
        }
        let Some(answer) = self.active.expect_decision(record) else {
            return Approval::Closed(None);
        };
        // Before anyone is asked, so that a store keeps the question (write-ahead).
        for (_, hook) in self.hooks.iter() {
            hook.approval_requested(&self.hook_cx, call, &request).await;
        }
        self.requested(call, request, false);
        let deadline = self
            .inner
            .config
            .settings
            .approval_timeout
            .map(|t| tokio::time::Instant::now() + t);
        let no_decision = || {
            Some((
                ApprovalDecision::Decline {
                    reason: Some(NO_DECISION.into()),
                },
                DecisionSource::NoDecision,
            ))
        };
        let decided = tokio::select! {
            answer = answer => match answer {
                Ok(decision) => Some((decision, DecisionSource::User)),
                // The sender went away: the call was cancelled while pending.
                Err(_) => None,
            },
            () = record.token.cancelled() => None,
            () = sleep_until(deadline) => no_decision(),
            () = sink_closed(self.active.sink.as_ref()) => no_decision(),
        };
        self.active.forget_decision(&record.call_id);
        if let Some((decision, source)) = &decided {
            for (_, hook) in self.hooks.iter() {
                hook.approval_decided(&self.hook_cx, call, decision, *source)
                    .await;
            }
        }
        let Some((decision, source)) = decided else {
            if let Some(ToolCallState::Declined { .. }) = record.terminal() {
                // Declined for want of a decider (A15); already announced.
                return Approval::Closed(Some(DecisionSource::NoDecision));
            }
            self.withdrawn(record);
            return Approval::Closed(None);
        };
        match decision {
            ApprovalDecision::Approve => self.approved(record, decision, false, source),
            ApprovalDecision::ApproveForSession => {
                self.store_grant(key, Grant::Allow).await;
                self.approved(record, decision, false, source)
            }
            ApprovalDecision::Decline { ref reason } => {
                let reason = reason.clone();
                self.decline(
                    record,
                    decision,
                    reason,
                    source == DecisionSource::NoDecision,
                    source,
                )
            }
            ApprovalDecision::DeclineForSession { ref reason } => {
                let reason = reason.clone();
                self.store_grant(
                    key,
                    Grant::Deny {
                        reason: reason.clone(),
                    },
                )
                .await;
                self.decline(record, decision, reason, false, source)
            }
            ApprovalDecision::DeclineAndStop { ref reason } => {
                let reason = reason.clone();
                let closed = self.decline(record, decision, reason, false, source);
                // This call stays declined; everything else of the reply is cancelled (A11).
                self.active.cancel(&self.inner.events);
                closed
            }
        }
    }

    async fn store_grant(&self, key: String, grant: Grant) {
        for (_, hook) in self.hooks.iter() {
            hook.session_grant_stored(&self.hook_cx, &key, &grant).await;
        }
        self.inner
            .session
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, grant);
    }

    fn requested(&self, call: &ToolUseBlock, request: ApprovalRequest, automatic: bool) {
        self.emit_with(|| AgentEvent::ApprovalRequested {
            reply_id: self.active.reply_id.clone(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
            request,
            automatic,
        });
    }

    fn resolved(
        &self,
        record: &CallRecord,
        decision: ApprovalDecision,
        automatic: bool,
        source: DecisionSource,
    ) {
        self.emit_with(|| AgentEvent::ApprovalResolved {
            reply_id: self.active.reply_id.clone(),
            call_id: record.call_id.clone(),
            decision,
            automatic,
            source,
        });
    }

    fn withdrawn(&self, record: &CallRecord) {
        self.emit_with(|| AgentEvent::ApprovalWithdrawn {
            reply_id: self.active.reply_id.clone(),
            call_id: record.call_id.clone(),
        });
    }

    fn approved(
        &self,
        record: &CallRecord,
        decision: ApprovalDecision,
        automatic: bool,
        source: DecisionSource,
    ) -> Approval {
        if !record.approve() {
            // Cancelled between the decision and now: the cancel won (S2).
            self.withdrawn(record);
            return Approval::Closed(None);
        }
        self.resolved(record, decision, automatic, source);
        Approval::Approved(
            UserAction {
                primary_confirmed: true,
                secondary_confirmed: false,
                automatic,
            },
            source,
        )
    }

    fn decline(
        &self,
        record: &CallRecord,
        decision: ApprovalDecision,
        reason: Option<String>,
        automatic: bool,
        source: DecisionSource,
    ) -> Approval {
        if record.finish(ToolCallState::Declined { reason }) {
            self.resolved(record, decision, automatic, source);
            Approval::Closed(Some(source))
        } else if let Some(ToolCallState::Declined { .. }) = record.terminal() {
            // Declined already because the reply's listener went away (A15), and announced.
            Approval::Closed(Some(DecisionSource::NoDecision))
        } else {
            self.withdrawn(record);
            Approval::Closed(None)
        }
    }
}

/// The tool's request, or the generic one when it has none or it fails or panics (A6).
fn request_for(tool: &str, args: &Map<String, Value>, policy: &CallPolicy) -> ApprovalRequest {
    let Some(build) = &policy.request else {
        return ApprovalRequest::generic(tool, args);
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| build(args))) {
        Ok(Ok(request)) => request,
        Ok(Err(e)) => {
            tracing::warn!(tool, error = %e, "the approval request function failed; asking generically");
            ApprovalRequest::generic(tool, args)
        }
        Err(_) => {
            tracing::warn!(tool, "the approval request function panicked; asking generically");
            ApprovalRequest::generic(tool, args)
        }
    }
}

async fn sink_closed(sink: Option<&tokio::sync::mpsc::UnboundedSender<AgentEvent>>) {
    match sink {
        Some(sink) => sink.closed().await,
        None => std::future::pending().await,
    }
}
