//! What a running reply has shown so far ([`ReplySoFar`]): the partial result a front end hands
//! on when the reply is cancelled before it answers.

use super::AgentEvent;
use crate::message::{Role, truncate_chars};

/// What a reply has shown so far, followed from its events: the latest text of its answer and
/// the result of each of its tool calls that finished.
///
/// Whoever runs a reply for someone else (a parent agent, an MCP host, an A2A client) keeps one
/// to hand back, when that someone cancels, what the reply had by then: the seed's rule that a
/// cancelled call returns its partial result, one level down.
///
/// ```
/// use agentry::agent::ReplySoFar;
///
/// let so_far = ReplySoFar::default();
/// assert_eq!(
///     so_far.cancelled_text("researcher"),
///     "[cancelled] The agent `researcher` was stopped before it finished."
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplySoFar {
    answer: String,
    results: Vec<(String, String)>,
}

impl ReplySoFar {
    /// Follows one event of the reply. Returns whether the answer's text changed.
    pub fn observe(&mut self, event: &AgentEvent) -> bool {
        match event {
            AgentEvent::Message { msg, .. } if msg.role == Role::Assistant => {
                let text = msg.text().unwrap_or_default();
                if text.is_empty() || text == self.answer {
                    return false;
                }
                self.answer = text;
                true
            }
            AgentEvent::Message { msg, last: true } => {
                self.results
                    .extend(msg.tool_results().map(|r| (r.name.clone(), r.text())));
                false
            }
            _ => false,
        }
    }

    /// Sets the answer, e.g. to the reply's final message once it ended.
    pub fn set_answer(&mut self, answer: impl Into<String>) {
        self.answer = answer.into();
    }

    /// The text of the reply's latest answer (cumulative while it streams); empty when none.
    pub fn answer(&self) -> &str {
        &self.answer
    }

    /// Each finished tool call of the reply, in the order they finished: its tool's name and its
    /// result's text (an `on_cancel` text included).
    pub fn tool_results(&self) -> &[(String, String)] {
        &self.results
    }

    /// The partial result of the agent `agent` after a cancel: that it was stopped, its tool
    /// calls' results, and its answer so far.
    pub fn cancelled_text(&self, agent: &str) -> String {
        let mut text = format!("[cancelled] The agent `{agent}` was stopped before it finished.");
        if !self.results.is_empty() {
            text.push_str("\nIts tool calls:");
            for (tool, result) in &self.results {
                text.push_str(&format!("\n- {tool}: {result}"));
            }
        }
        if !self.answer.trim().is_empty() {
            text.push_str("\nIts answer so far:\n");
            text.push_str(&self.answer);
        }
        text
    }
}

/// The status lines a front end that relays a reply shows for `event`: `"calling NAME"` when a
/// call starts, `"NAME: RESULT"` (the result cut to `result_chars`) when calls end. The MCP
/// server's progress and A2A's task status say the same things in the same words.
pub fn status_lines(event: &AgentEvent, result_chars: usize) -> Vec<String> {
    match event {
        AgentEvent::ToolStarted { name, .. } => vec![format!("calling {name}")],
        AgentEvent::Message { msg, last: true } if msg.role != Role::Assistant => msg
            .tool_results()
            .map(|r| format!("{}: {}", r.name, truncate_chars(&r.text(), result_chars)))
            .collect(),
        _ => Vec::new(),
    }
}
