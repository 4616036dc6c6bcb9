//! Input the user is asked for while a call runs (an MCP server's elicitation): the question,
//! and the answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The user's answer to an [`AgentEvent::InputRequested`](crate::agent::AgentEvent::InputRequested),
/// as MCP elicitation has it.
///
/// ```
/// use agentry::agent::InputAnswer;
/// let answer: InputAnswer = serde_json::from_str(r#"{"action": "accept", "content": {"name": "Ada"}}"#).unwrap();
/// assert_eq!(answer, InputAnswer::Accept(serde_json::json!({"name": "Ada"})));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", content = "content", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputAnswer {
    /// The user filled the form: an object matching the requested schema.
    Accept(Value),
    /// The user refused to answer.
    Decline,
    /// The user dismissed the question without choosing (or nobody could answer).
    Cancel,
}
