//! Constrained decoding of tool calls: once the model starts writing a call (after Qwen's
//! `<tool_call>` tag, or a JSON object at the start of its answer or of a fenced block), every
//! token it picks must keep the call valid for the offered tools and their schemas. When the
//! model's most likely token would break the call, the most likely one that keeps it valid is
//! taken instead: no cost while the model writes valid calls, no invalid call ever.

mod json;

pub(crate) use json::{Acceptor, NO_TOOL, Shape};

/// Where the model is in its answer, for the constraint.
#[derive(Debug, Clone)]
pub(crate) enum CallState {
    /// Writing free text.
    Free,
    /// Writing a call: the acceptor of what remains valid.
    InCall(Acceptor),
}

impl CallState {
    /// The state once the acceptor has taken a token: free again when the call is complete.
    pub(crate) fn after(acceptor: Acceptor) -> CallState {
        if acceptor.is_complete() {
            CallState::Free
        } else {
            CallState::InCall(acceptor)
        }
    }
}

/// Whether the text so far ends where a call may begin, and whether a call must begin there
/// (after the `<tool_call>` tag) or only may (the answer's start, a fenced block).
pub(crate) fn call_position(text: &str) -> Option<bool> {
    let trimmed = text.trim_end();
    if trimmed.ends_with("<tool_call>") {
        return Some(true);
    }
    if trimmed.is_empty() || trimmed.ends_with("```json") || trimmed.ends_with("```") && text.ends_with('\n')
    {
        return Some(false);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_positions() {
        assert_eq!(call_position(""), Some(false));
        assert_eq!(call_position("<tool_call>\n"), Some(true));
        assert_eq!(call_position("Sure.\n```json\n"), Some(false));
        assert_eq!(call_position("```\n"), Some(false));
        assert_eq!(call_position("The answer is"), None);
        assert_eq!(call_position("```"), None, "the fence may still get a language");
    }
}
