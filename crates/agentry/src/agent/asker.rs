//! How a running call asks the reply's user what it needs (a nested approval, a form), and
//! hands its resume points to the agent's hooks: the `Asker` every tool context gets.

use std::sync::Arc;

use serde_json::Value;

use super::events::EventHub;
use super::handle::ActiveReply;
use crate::CallId;
use crate::protocol::InputAnswer;
use crate::tool::{ApprovalDecision, Asker, InputQuestion, NestedApproval};

/// Asks the user of a reply what one of its calls needs, and hands its resume points to the
/// hooks.
pub(super) struct ReplyAsker {
    pub(super) active: std::sync::Weak<ActiveReply>,
    pub(super) events: Arc<EventHub>,
    pub(super) call_id: CallId,
    // Weak, as for the reply: a context kept by a tool must not keep the hooks (and the
    // session store they hold) alive.
    pub(super) hooks: std::sync::Weak<[(String, Arc<dyn super::AgentHook>)]>,
    pub(super) hook_cx: super::HookContext,
}

impl Asker for ReplyAsker {
    fn approval(&self, question: NestedApproval) -> tokio::sync::oneshot::Receiver<ApprovalDecision> {
        match self.active.upgrade() {
            Some(active) => active.ask_question(&self.events, &self.call_id, question),
            // The reply is over: the sender drops here, and the question reads "no decision".
            None => tokio::sync::oneshot::channel().1,
        }
    }

    fn input(&self, question: InputQuestion) -> tokio::sync::oneshot::Receiver<InputAnswer> {
        match self.active.upgrade() {
            Some(active) => active.ask_input(&self.events, &self.call_id, question),
            None => tokio::sync::oneshot::channel().1,
        }
    }

    fn withdraw(&self, question: &str) {
        if let Some(active) = self.active.upgrade() {
            active.withdraw_question(&self.events, &self.call_id, question);
        }
    }

    fn resume_point(&self, token: Value) -> futures::future::BoxFuture<'static, ()> {
        let (hooks, hook_cx, call_id) = (self.hooks.upgrade(), self.hook_cx.clone(), self.call_id.clone());
        Box::pin(async move {
            // The reply is over: nothing to keep the point for.
            let Some(hooks) = hooks else { return };
            for (_, hook) in hooks.iter() {
                hook.call_resumable(&hook_cx, &call_id, &token).await;
            }
        })
    }
}
