//! The approval phase of a tool call (spec `cancellation.md` 3.2).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::Grant;
use super::deadline::sleep_until;
use super::events::AgentEvent;
use super::handle::NO_DECISION;
use super::react::ReplyCx;
use crate::message::ToolUseBlock;
use crate::tool::{
    ApprovalDecision, ApprovalRequest, CallPolicy, CallRecord, DecisionSource, RuleEffect, RuleMatch,
    ToolCallState, UserAction, grant_key,
};

/// How the approval phase ended.
pub(super) enum Approval {
    /// Run the body with this user action.
    Approved(UserAction, DecisionSource),
    /// The call is closed: declined (by this source), or cancelled while pending (no source).
    Closed(Option<DecisionSource>),
}

/// The approval phase of one call, as the loop needs it.
pub(super) struct ApprovalPhase {
    /// What the body is told (`None`: it needed no approval, or it will not run).
    pub(super) user_action: Option<UserAction>,
    /// Who decided, when someone or something did.
    pub(super) source: Option<DecisionSource>,
    /// What the user was, or would have been, asked: its message is the decision's
    /// explanation, recorded with the call (A5).
    pub(super) request: Option<ApprovalRequest>,
}

impl ApprovalPhase {
    /// No approval phase: the call is not a tool's (a finish call, a refusal, a repeat).
    pub(super) fn none() -> Self {
        ApprovalPhase {
            user_action: None,
            source: None,
            request: None,
        }
    }
}

/// A decision taken without the user, and why.
enum Automatic {
    Approve(DecisionSource),
    Decline {
        reason: Option<String>,
        decision: ApprovalDecision,
        source: DecisionSource,
    },
}

impl ReplyCx<'_> {
    /// The approval phase of `call` (spec 3.2): a deny rule declines it whether it needs
    /// approval or not (A20); a call that needs approval then goes through [`Self::approve`].
    pub(super) async fn approval_phase(
        &self,
        record: &Arc<CallRecord>,
        call: &ToolUseBlock,
        policy: &CallPolicy,
    ) -> ApprovalPhase {
        let mut phase = ApprovalPhase::none();
        let rules = &self.inner.config.settings.permissions;
        let empty = Map::new();
        let args = call.input.as_object().unwrap_or(&empty);
        let verdict = (!rules.is_empty())
            .then(|| rules.verdict(&call.name, policy.rule_subject.as_deref(), args))
            .flatten();
        let denied = verdict.as_ref().filter(|v| v.effect == RuleEffect::Deny);
        if !(policy.require_approval || denied.is_some()) || !record.request_approval() {
            return phase;
        }
        // Exactly once per call that needs approval, whoever decides (A5); the generic request
        // for a call that only a deny rule stops.
        let request = match policy.require_approval {
            true => policy.approval_request(&call.name, args),
            false => ApprovalRequest::generic(&call.name, args),
        };
        phase.request = Some(request.clone());
        let approval = match self.automatic(call, args, policy, verdict.as_ref()) {
            Some(automatic) => self.decide_automatically(record, call, request, automatic),
            None => self.approve(record, call, policy, request).await,
        };
        match approval {
            Approval::Approved(action, source) => {
                phase.user_action = Some(action);
                phase.source = Some(source);
            }
            Approval::Closed(source) => phase.source = source,
        }
        phase
    }

    /// A decision that needs nobody, in this order (A3, A20): deny rule, session deny grant,
    /// allow rule, session allow grant, auto-approval.
    fn automatic(
        &self,
        call: &ToolUseBlock,
        args: &Map<String, Value>,
        policy: &CallPolicy,
        verdict: Option<&RuleMatch>,
    ) -> Option<Automatic> {
        if let Some(rule) = verdict.filter(|v| v.effect == RuleEffect::Deny) {
            let reason = Some(format!("a permission rule forbids it ({})", rule.rule));
            return Some(Automatic::Decline {
                decision: ApprovalDecision::Decline {
                    reason: reason.clone(),
                },
                reason,
                source: DecisionSource::Rule,
            });
        }
        let key = grant_key(&call.name, args, policy.session_scope);
        let grant = self
            .inner
            .session
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        match grant {
            Some(Grant::Deny { reason }) => Some(Automatic::Decline {
                decision: ApprovalDecision::DeclineForSession {
                    reason: reason.clone(),
                },
                reason,
                source: DecisionSource::SessionGrant,
            }),
            _ if verdict.is_some_and(|v| v.effect == RuleEffect::Allow) => {
                Some(Automatic::Approve(DecisionSource::Rule))
            }
            Some(Grant::Allow) => Some(Automatic::Approve(DecisionSource::SessionGrant)),
            None if self.inner.config.settings.auto_approve_tools && policy.auto_approve => {
                Some(Automatic::Approve(DecisionSource::Auto))
            }
            None => None,
        }
    }

    /// Announces and applies a decision nobody had to take (A7).
    fn decide_automatically(
        &self,
        record: &CallRecord,
        call: &ToolUseBlock,
        request: ApprovalRequest,
        automatic: Automatic,
    ) -> Approval {
        self.requested(call, request, true);
        match automatic {
            Automatic::Approve(source) => self.approved(record, ApprovalDecision::Approve, source),
            Automatic::Decline {
                reason,
                decision,
                source,
            } => self.decline(record, decision, reason, source),
        }
    }

    /// Asks the user. Fails closed: no listener, a closed channel or the approval timeout
    /// decline (A15).
    async fn approve(
        &self,
        record: &Arc<CallRecord>,
        call: &ToolUseBlock,
        policy: &CallPolicy,
        request: ApprovalRequest,
    ) -> Approval {
        if !self.active.has_listeners(&self.inner.events) {
            // Nobody can see the request: fail closed (A15).
            let decision = ApprovalDecision::Decline {
                reason: Some(NO_DECISION.into()),
            };
            return self.decline(
                record,
                decision,
                Some(NO_DECISION.into()),
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
        let decided = self.wait_for_decision(record, answer).await;
        self.active.forget_decision(&record.call_id);
        if let Some((decision, source)) = &decided {
            for (_, hook) in self.hooks.iter() {
                hook.approval_decided(&self.hook_cx, call, decision, *source)
                    .await;
            }
        }
        let decided = match decided {
            Some((decision @ (ApprovalDecision::Approve | ApprovalDecision::ApproveForSession), source)) => {
                Some((self.admitted(call, decision).await, source))
            }
            other => other,
        };
        let Some((decision, source)) = decided else {
            if let Some(ToolCallState::Declined { .. }) = record.terminal() {
                // Declined for want of a decider (A15); already announced.
                return Approval::Closed(Some(DecisionSource::NoDecision));
            }
            self.withdrawn(record);
            return Approval::Closed(None);
        };
        let empty = Map::new();
        let key = grant_key(
            &call.name,
            call.input.as_object().unwrap_or(&empty),
            policy.session_scope,
        );
        self.apply_decision(record, key, decision, source).await
    }

    /// An approval as the hooks admit it: declined with the reason of the first that refuses
    /// it (a store that could not record it as used).
    async fn admitted(&self, call: &ToolUseBlock, decision: ApprovalDecision) -> ApprovalDecision {
        for (_, hook) in self.hooks.iter() {
            if let Err(reason) = hook.admit_approved(&self.hook_cx, call).await {
                return ApprovalDecision::Decline { reason: Some(reason) };
            }
        }
        decision
    }

    /// The user's answer, a cancel of the call (`None`), or no decision (the approval timeout,
    /// or the reply's listener gone: A15).
    async fn wait_for_decision(
        &self,
        record: &CallRecord,
        answer: tokio::sync::oneshot::Receiver<ApprovalDecision>,
    ) -> Option<(ApprovalDecision, DecisionSource)> {
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
        tokio::select! {
            answer = answer => match answer {
                Ok(decision) => Some((decision, DecisionSource::User)),
                // The sender went away: the call was cancelled while pending.
                Err(_) => None,
            },
            () = record.token.cancelled() => None,
            () = sleep_until(deadline) => no_decision(),
            () = sink_closed(self.active.sink.as_ref()) => no_decision(),
        }
    }

    /// Applies the user's decision: grants stored (A12, A13), a stop cancels the reply (A11).
    async fn apply_decision(
        &self,
        record: &CallRecord,
        key: String,
        decision: ApprovalDecision,
        source: DecisionSource,
    ) -> Approval {
        match decision {
            ApprovalDecision::Approve => self.approved(record, decision, source),
            ApprovalDecision::ApproveForSession => {
                self.store_grant(key, Grant::Allow).await;
                self.approved(record, decision, source)
            }
            ApprovalDecision::Decline { ref reason } => {
                let reason = reason.clone();
                self.decline(record, decision, reason, source)
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
                self.decline(record, decision, reason, source)
            }
            ApprovalDecision::DeclineAndStop { ref reason } => {
                let reason = reason.clone();
                let closed = self.decline(record, decision, reason, source);
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

    fn resolved(&self, record: &CallRecord, decision: ApprovalDecision, source: DecisionSource) {
        self.emit_with(|| AgentEvent::ApprovalResolved {
            reply_id: self.active.reply_id.clone(),
            call_id: record.call_id.clone(),
            decision,
            source,
        });
    }

    fn withdrawn(&self, record: &CallRecord) {
        self.emit_with(|| AgentEvent::ApprovalWithdrawn {
            reply_id: self.active.reply_id.clone(),
            call_id: record.call_id.clone(),
        });
    }

    fn approved(&self, record: &CallRecord, decision: ApprovalDecision, source: DecisionSource) -> Approval {
        if !record.approve() {
            // Cancelled between the decision and now: the cancel won (S2).
            self.withdrawn(record);
            return Approval::Closed(None);
        }
        self.resolved(record, decision, source);
        Approval::Approved(
            UserAction {
                primary_confirmed: true,
                secondary_confirmed: false,
                automatic: source.is_automatic(),
            },
            source,
        )
    }

    fn decline(
        &self,
        record: &CallRecord,
        decision: ApprovalDecision,
        reason: Option<String>,
        source: DecisionSource,
    ) -> Approval {
        if record.finish(ToolCallState::Declined { reason }) {
            self.resolved(record, decision, source);
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

async fn sink_closed(sink: Option<&tokio::sync::mpsc::UnboundedSender<AgentEvent>>) {
    match sink {
        Some(sink) => sink.closed().await,
        None => std::future::pending().await,
    }
}
