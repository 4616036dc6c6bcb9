//! A remote agent that speaks A2A v1.0 (the Agent2Agent protocol) as a tool
//! ([`A2aAgent`]): its agent card read once, then each call a task of the remote agent over
//! JSON-RPC with server-sent events.
//!
//! The call's progress is the task's status messages; its result is the task's answer (its
//! artifacts, else its last status message). A question the remote agent asks
//! (`TASK_STATE_INPUT_REQUIRED`) is asked of this agent's user as an approval
//! ([`ToolContext::ask_approval`](crate::tool::ToolContext::ask_approval)), and the answer,
//! "yes" or "no" with the reason, goes back in the same task. Cancelling the call cancels the
//! task (`CancelTask`); what the remote agent says then is the call's partial result.

mod card;
mod rpc;
mod tool;

pub use tool::{A2aAgent, A2aError};
