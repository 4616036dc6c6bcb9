//! Hooks: code that runs around replying, reasoning, acting and printing.
//!
//! Hooks belong to one agent instance (there are no global or class-wide hooks) and run in
//! registration order. Each receives its arguments or output by `&mut` and may change them:
//! a pre-reasoning hook can force a tool choice, a post-reasoning hook can drop tool calls
//! (the edited message is what memory keeps), a pre-acting hook can rewrite arguments, a
//! post-acting hook can rewrite a result, a pre-print hook can change what is shown.
//!
//! ```
//! use agentry::agent::{AgentHook, HookContext};
//! use agentry::message::Msg;
//! use async_trait::async_trait;
//!
//! /// Keeps at most two tool calls per reasoning step (seed 7.4, Q1).
//! struct AtMostTwoCalls;
//!
//! #[async_trait]
//! impl AgentHook for AtMostTwoCalls {
//!     async fn post_reasoning(&self, _ctx: &HookContext, msg: &mut Msg) {
//!         let mut seen = 0;
//!         msg.content.retain(|b| match b {
//!             agentry::message::ContentBlock::ToolUse(_) => { seen += 1; seen <= 2 }
//!             _ => true,
//!         });
//!     }
//! }
//! ```

use std::sync::Arc;

use async_trait::async_trait;

use crate::agent::{SessionGrant, StopReason};
use crate::message::{Msg, ToolResultBlock, ToolUseBlock};
use crate::model::{ChatUsage, ToolChoice};
use crate::tool::{ApprovalDecision, ApprovalRequest, DecisionSource, ToolCallState};
use crate::{CallId, ReplyId};
use serde_json::Value;

/// Where a hook is running.
#[derive(Debug, Clone)]
pub struct HookContext {
    /// The agent's name.
    pub agent_name: String,
    /// The current reply.
    pub reply_id: ReplyId,
    /// The reasoning/acting round, from 0.
    pub iteration: usize,
}

/// How a reply ended, as [`AgentHook::reply_finished`] sees it (the same figures as
/// [`AgentEvent::ReplyFinished`](super::AgentEvent::ReplyFinished)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReplyEnd {
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Tokens used by all model calls of the reply, and reported by its tools.
    pub usage: ChatUsage,
    /// What it cost in US dollars, when the model's price is known.
    pub cost: Option<f64>,
}

/// Code run around the agent's steps. Every method has an empty default; implement the ones
/// you need.
#[async_trait]
pub trait AgentHook: Send + Sync + 'static {
    /// Before a reply; may replace or remove the incoming message.
    async fn pre_reply(&self, _ctx: &HookContext, _msg: &mut Option<Msg>) {}
    /// After a reply; may change the returned message.
    async fn post_reply(&self, _ctx: &HookContext, _reply: &mut Msg) {}
    /// Before a model call; may change the tool choice.
    async fn pre_reasoning(&self, _ctx: &HookContext, _tool_choice: &mut Option<ToolChoice>) {}
    /// After a model call, before the message is stored; may change it.
    async fn post_reasoning(&self, _ctx: &HookContext, _msg: &mut Msg) {}
    /// Before a tool call; may change its arguments (the result keeps the call's id).
    async fn pre_acting(&self, _ctx: &HookContext, _call: &mut ToolUseBlock) {}
    /// After every tool call, whatever its end (completed, failed, declined, cancelled, timed
    /// out: `state`, R7), before the result is stored; may change the result.
    async fn post_acting(
        &self,
        _ctx: &HookContext,
        _call: &ToolUseBlock,
        _state: &ToolCallState,
        _result: &mut ToolResultBlock,
    ) {
    }
    /// A call waits for the user's decision: called before the question is shown (before
    /// `ApprovalRequested`), for a store that keeps pending approvals across a restart.
    /// Automatic decisions (grants, auto-approval) do not come here.
    async fn approval_requested(&self, _ctx: &HookContext, _call: &ToolUseBlock, _request: &ApprovalRequest) {
    }
    /// The user (or the lack of one, A15) decided about a call that waited: called before the
    /// decision takes effect (before the body runs or the decline is stored).
    async fn approval_decided(
        &self,
        _ctx: &HookContext,
        _call: &ToolUseBlock,
        _decision: &ApprovalDecision,
        _source: DecisionSource,
    ) {
    }
    /// After [`approval_decided`](Self::approval_decided) approved a call that waited, before
    /// its body runs: `Err(reason)` refuses the approval, and the call is declined with `reason`
    /// instead (the model reads it). A session store refuses a call whose approval it could not
    /// record as used (its session was taken over by another process, or the approval was given
    /// for other arguments), so that an approved call never runs twice, nor unrecorded.
    async fn admit_approved(&self, _ctx: &HookContext, _call: &ToolUseBlock) -> Result<(), String> {
        Ok(())
    }
    /// The user's decision made a session grant (spec A14: approve or decline for the session),
    /// held under `key` by the agent from now on: called before the call it came from runs or
    /// is declined, so that a store keeps the grant even if the process dies during the call.
    /// The same grants are listed by [`ReActAgent::session_grants`](super::ReActAgent::session_grants).
    async fn session_grant_stored(&self, _ctx: &HookContext, _key: &str, _grant: &SessionGrant) {}
    /// A running call said how it can be found again if the process stops
    /// ([`ToolContext::set_resume_point`](crate::tool::ToolContext::set_resume_point)): a store
    /// keeps `token` with the call before the tool goes on, and recovery keeps such a call
    /// open for `start_resumed_reply` instead of closing it as interrupted.
    async fn call_resumable(&self, _ctx: &HookContext, _call_id: &CallId, _token: &Value) {}
    /// The reply ended, whatever its end (answered, cancelled, stopped by a budget, failed):
    /// everything it did is in memory, and `ReplyFinished` is emitted once every hook has
    /// returned. A store records the reply's token use here, so whoever sees `ReplyFinished`
    /// can read it.
    async fn reply_finished(&self, _ctx: &HookContext, _end: &ReplyEnd) {}
    /// Before a message event is emitted; may change what is shown.
    async fn pre_print(&self, _ctx: &HookContext, _msg: &mut Msg, _last: bool) {}
    /// After a message event was emitted.
    async fn post_print(&self, _ctx: &HookContext, _msg: &Msg, _last: bool) {}
}

/// Puts `hook` under `name`: in place of a hook of that name, else after the others.
pub(super) fn upsert(list: &mut Vec<(String, Arc<dyn AgentHook>)>, name: String, hook: Arc<dyn AgentHook>) {
    match list.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = hook,
        None => list.push((name, hook)),
    }
}
