//! What an agent tells the world while it works: [`AgentEvent`] and what it names.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    ApprovalDecision, ApprovalRequest, CancelReason, ChatUsage, DecisionSource, Plan, ToolCallState,
};
use crate::message::Msg;
use crate::{CallId, ReplyId};

/// One thing that happened during a reply.
///
/// The terminal, the web page and the tests all read the same events. Each variant says what a
/// consumer may rely on when it sees it; in short, **the runtime records first, then
/// announces**: when an event says something is final, memory already holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// A message to show. Streamed messages repeat with the same `msg.id` and cumulative
    /// content, `last == false`, and end with exactly one `last == true` (S4).
    ///
    /// When `last` is true, the message (an assistant message or a tool result) is in memory
    /// as shown, unless a print hook changed what is shown. States with `last == false` are
    /// progress only and are never stored. With the tool shim
    /// ([`ReActAgentBuilder::tool_shim`](crate::agent::ReActAgentBuilder::tool_shim)), a streamed state
    /// leaves out the end of the text that is or may become a call written as text; its text is
    /// a beginning of the final state's text.
    Message {
        /// The message as it is now.
        msg: Msg,
        /// Whether this is the message's final state.
        last: bool,
    },
    /// The model wrote tool calls as text and the tool shim turned them into calls (see
    /// [`ReActAgentBuilder::tool_shim`](crate::agent::ReActAgentBuilder::tool_shim)).
    ///
    /// Comes after the `Message` with `last == true` that holds the calls, which is in memory
    /// with them (and with the remaining text as its text), and before their `ToolStarted`.
    /// A front end may tell the user once that calls were recovered.
    TextCallsRecovered {
        /// The reply this message belongs to.
        reply_id: ReplyId,
        /// The ids of the recovered calls, in order.
        call_ids: Vec<CallId>,
    },
    /// A tool call entered the runtime: it will wait for approval and a free slot if needed,
    /// then run. Every `ToolStarted` is followed by exactly one `ToolFinished` (S4).
    ///
    /// The call is registered: [`AgentHandle::cancel_call`](crate::agent::AgentHandle::cancel_call)
    /// with this `call_id` reaches it (ids are unique within a reply, C4). The assistant message
    /// holding the call is in memory.
    ToolStarted {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The call id.
        call_id: CallId,
        /// The tool name.
        name: String,
        /// The arguments (after pre-acting hooks).
        input: Value,
    },
    /// A running tool reported progress (UI only; never sent to the model or stored, X13).
    /// Never emitted after the call was cancelled (X11).
    ToolProgress {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The call id.
        call_id: CallId,
        /// A report with the same id replaces the earlier one.
        id: Option<String>,
        /// The progress text.
        message: String,
        /// The report is about a call this call makes on its own behalf (a sub-agent's tool
        /// call, named by `id`): shown as a line of its own under the call.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        nested: bool,
    },
    /// A call needs approval; answer with [`AgentHandle::decide`](crate::agent::AgentHandle::decide).
    /// `automatic` requests are decided already (auto-approval or a session grant, A7).
    ///
    /// `name` and `input` are the call as it will run (after the pre-acting hooks, S3). When
    /// `automatic` is false, `decide` for this `call_id` is accepted from now until
    /// `ApprovalResolved` or `ApprovalWithdrawn`.
    ApprovalRequested {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The call id.
        call_id: CallId,
        /// The tool name.
        name: String,
        /// The arguments.
        input: Value,
        /// What to show the user.
        request: ApprovalRequest,
        /// Whether the decision is taken without asking.
        automatic: bool,
    },
    /// An approval was decided; a later `decide` is refused (A16). After an approval the call
    /// runs; after a decline its `ToolFinished` follows with `Declined`.
    ApprovalResolved {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The call id.
        call_id: CallId,
        /// The decision.
        decision: ApprovalDecision,
        /// Who decided: anyone but the user means nobody was asked
        /// ([`DecisionSource::is_automatic`]).
        source: DecisionSource,
    },
    /// A running call asks the user for input (an MCP server's elicitation): a form whose
    /// answer must match `schema`, a JSON schema of an object of simple fields. Answer with
    /// [`AgentHandle::answer_input`](crate::agent::AgentHandle::answer_input); it is withdrawn
    /// (`ApprovalWithdrawn`) when its call is cancelled.
    InputRequested {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The question's id: `"{call id}.{question}"`.
        call_id: CallId,
        /// Who asks: `"{server}: input"`.
        name: String,
        /// What is asked.
        message: String,
        /// The form: `{"type": "object", "properties": {...}, "required": [...]}`.
        schema: Value,
    },
    /// An input request was answered; a later answer is refused.
    InputAnswered {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The question's id.
        call_id: CallId,
        /// The answer.
        answer: super::InputAnswer,
    },
    /// A pending approval or input request no longer needs an answer (its call was
    /// cancelled, P2).
    ApprovalWithdrawn {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The call id.
        call_id: CallId,
    },
    /// A cancel was accepted (C7); the `ToolFinished` of the cancelled calls follow, never
    /// before it. The tokens are cancelled by the time `cancel_call` / `cancel_reply` returns
    /// (X1, L2).
    CancelRequested {
        /// The reply concerned.
        reply_id: ReplyId,
        /// One call, or the whole reply.
        target: CancelTarget,
        /// Who cancelled.
        reason: CancelReason,
    },
    /// A tool call reached its terminal state. Its result is in memory already (X6), at its
    /// place in call order: in a parallel batch, results of calls that finished earlier are
    /// stored as they finish, and a sibling that finishes later is stored before them if it
    /// comes first in the message. Nothing about this call changes afterwards (S1).
    ToolFinished {
        /// The reply this call belongs to.
        reply_id: ReplyId,
        /// The call id.
        call_id: CallId,
        /// The tool name.
        name: String,
        /// How it ended.
        state: ToolCallState,
        /// How long the tool ran: from the start of its body to its result. Zero for a call
        /// that never ran (declined, refused, cancelled before start); time waiting for
        /// approval never counts.
        #[serde(rename = "duration_ms", with = "crate::protocol::duration_ms")]
        duration: Duration,
    },
    /// The plan notebook changed: a plan tool created, revised, advanced, finished or recovered
    /// a plan ([`PlanNotebook`](crate::plan::PlanNotebook)). The change is saved (with the
    /// session, when the notebook is bound to one) before this is sent. Comes after the
    /// `ToolFinished` of the call that made it.
    PlanChanged {
        /// The reply during which it changed.
        reply_id: ReplyId,
        /// The current plan, `None` when there is none (it was finished).
        plan: Option<Plan>,
    },
    /// The context was compacted before a model request: the older messages were summarised
    /// and the summary, stored right before the messages kept, now starts every prompt
    /// ([`Compaction`](crate::agent::Compaction)). Nothing was deleted from memory.
    ContextCompacted {
        /// The reply during which it happened.
        reply_id: ReplyId,
        /// How many messages the summary stands for (with those of earlier summaries).
        messages: usize,
        /// The request's tokens before (counted by the model, or estimated).
        tokens_before: u64,
    },
    /// The reply is over: everything of it is in memory (including the interrupted note of a
    /// cancelled reply, R5), and a new reply may start.
    ReplyFinished {
        /// The reply id.
        reply_id: ReplyId,
        /// Why it ended.
        stop_reason: StopReason,
        /// Tokens used by all model calls of the reply, and reported by its tools.
        usage: ChatUsage,
        /// What the reply cost in US dollars, when the model's price is known
        /// ([`ReActAgentBuilder::prices`](crate::agent::ReActAgentBuilder::prices)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
    },
}

/// What a cancel applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "target", content = "call_id", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelTarget {
    /// One tool call.
    Call(CallId),
    /// The whole reply.
    Reply,
}

/// Why a reply ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", content = "error", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered without calling tools (or produced the structured output).
    Answered,
    /// `max_iters` rounds passed; the reply is the model's summary.
    MaxIters,
    /// The model repeated calls it already had the results of
    /// ([`REPEATS_BEFORE_SUMMARY`](crate::agent::REPEATS_BEFORE_SUMMARY) times); the reply is the
    /// model's summary.
    RepeatedCalls,
    /// The reply was cancelled (R4): no model request was made after the cancel.
    Cancelled,
    /// The reply reached its budget ([`ReplyBudget`](crate::usage::ReplyBudget)), which the
    /// text describes; it stopped as a cancel does.
    BudgetReached(String),
    /// The reply failed; the text says why. Memory holds everything up to the failure.
    Failed(String),
}
