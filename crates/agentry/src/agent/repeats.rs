//! Calls a model repeats within one reply. Small models often call the same tool with the same
//! arguments round after round instead of answering; for a pure tool (a calculator) running it
//! again changes nothing and costs a model round each time. Such a repeat is answered with the
//! earlier result and a note to answer now, without running the tool; after
//! [`REPEATS_BEFORE_SUMMARY`] repeats the reply ends with a summary
//! (`StopReason::RepeatedCalls`). Not a repeat: a call repeated inside one message, a call of a
//! tool that is not pure, a call after a tool that is not pure ran (it may have changed what the
//! earlier call read), and any call when the guard is off (`answer_repeated_calls(false)`, the
//! default for models that do not loop this way).

use std::sync::Mutex;

use serde_json::Value;

use crate::CallId;
use crate::message::{ContentBlock, ToolUseBlock};

/// How many repeated calls a reply tolerates before it ends with a summary.
pub const REPEATS_BEFORE_SUMMARY: usize = 2;

/// The note appended to the earlier result when a call is repeated.
pub fn repeated_call_note(name: &str, earlier: &CallId) -> String {
    format!(
        "You already called {name} with exactly these arguments in this conversation (call {earlier}); \
         its result is repeated above and the tool was not run again. Do not call it again. If a part of \
         the user's question is not answered by a tool result yet, call the tool for that part; \
         otherwise answer the user now, covering every part of the question."
    )
}

/// The note added to the fresh result of a call repeated from an earlier round, whose tool ran
/// again because its result may have changed.
pub fn rerun_call_note(name: &str, earlier: &CallId) -> String {
    format!(
        "You already called {name} with exactly these arguments in this conversation (call {earlier}); \
         it ran again and its current result is above. Do not call it again: answer the user now with \
         the results you have."
    )
}

struct Answered {
    round: usize,
    name: String,
    input: Value,
    call_id: CallId,
    output: Vec<ContentBlock>,
}

/// The completed calls of one reply, and how many repeats were answered from them.
#[derive(Default)]
pub(super) struct RepeatedCalls {
    /// The results of pure calls, to answer their repeats with.
    answered: Mutex<Vec<Answered>>,
    /// Every completed call: tool, arguments, round and id.
    made: Mutex<Vec<(usize, String, Value, CallId)>>,
    repeats: Mutex<usize>,
}

impl RepeatedCalls {
    /// Remembers a call completed in model round `round`; the result of a `pure` one is kept
    /// to answer its repeats with.
    pub(super) fn completed(
        &self,
        round: usize,
        call: &ToolUseBlock,
        call_id: &CallId,
        output: &[ContentBlock],
        pure: bool,
    ) {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if !made.iter().any(|m| m.1 == call.name && m.2 == call.input) {
            made.push((round, call.name.clone(), call.input.clone(), call_id.clone()));
        }
        drop(made);
        if !pure {
            return;
        }
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        if !answered
            .iter()
            .any(|a| a.name == call.name && a.input == call.input)
        {
            answered.push(Answered {
                round,
                name: call.name.clone(),
                input: call.input.clone(),
                call_id: call_id.clone(),
                output: output.to_vec(),
            });
        }
    }

    /// For a call of a tool that is not pure, run again although it repeats one completed in an
    /// earlier round (its result may have changed): the note to add to its fresh result. It
    /// counts as a repeat, so a model that loops still ends with a summary.
    pub(super) fn rerun_note(&self, round: usize, call: &ToolUseBlock) -> Option<String> {
        let made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        let (_, _, _, earlier) = made
            .iter()
            .find(|m| m.0 < round && m.1 == call.name && m.2 == call.input)?;
        let note = rerun_call_note(&call.name, earlier);
        drop(made);
        *self.repeats.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Some(note)
    }

    /// Forgets every result kept: a call that may change things ran.
    pub(super) fn forget(&self) {
        self.answered.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The answer to `call`, made in model round `round`, when it repeats one completed in an
    /// earlier round: the earlier output and the note.
    pub(super) fn answer(&self, round: usize, call: &ToolUseBlock) -> Option<Vec<ContentBlock>> {
        let answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        let earlier = answered
            .iter()
            .find(|a| a.round < round && a.name == call.name && a.input == call.input)?;
        let mut output = earlier.output.clone();
        output.push(ContentBlock::text(repeated_call_note(
            &call.name,
            &earlier.call_id,
        )));
        *self.repeats.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Some(output)
    }

    /// Whether the reply has seen enough repeats to end with a summary.
    pub(super) fn should_stop(&self) -> bool {
        *self.repeats.lock().unwrap_or_else(|e| e.into_inner()) >= REPEATS_BEFORE_SUMMARY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, input: Value) -> ToolUseBlock {
        ToolUseBlock {
            id: "x".into(),
            name: name.into(),
            input,
            raw_input: None,
        }
    }

    #[test]
    fn only_the_same_tool_with_the_same_arguments_repeats() {
        let calls = RepeatedCalls::default();
        calls.completed(
            0,
            &call("add", json!({"a": 1})),
            &"c1".into(),
            &[ContentBlock::text("2")],
            true,
        );
        assert!(
            calls.answer(0, &call("add", json!({"a": 1}))).is_none(),
            "the same round"
        );
        assert!(calls.answer(1, &call("add", json!({"a": 2}))).is_none());
        assert!(calls.answer(1, &call("sub", json!({"a": 1}))).is_none());
        let answer = calls.answer(1, &call("add", json!({"a": 1}))).unwrap();
        assert_eq!(answer[0].as_text(), Some("2"));
        assert!(answer[1].as_text().unwrap().contains("call c1"));
        assert!(!calls.should_stop());
        calls.answer(2, &call("add", json!({"a": 1}))).unwrap();
        assert!(calls.should_stop());
    }

    #[test]
    fn a_call_that_is_not_pure_is_never_answered_but_its_rerun_counts_as_a_repeat() {
        let calls = RepeatedCalls::default();
        let read = call("read_file", json!({"path": "a"}));
        calls.completed(0, &read, &"r1".into(), &[ContentBlock::text("old")], false);
        assert!(calls.answer(1, &read).is_none(), "never from the cache");
        assert!(
            calls.rerun_note(0, &read).is_none(),
            "the same round is no repeat"
        );
        let note = calls.rerun_note(1, &read).unwrap();
        assert!(note.contains("call r1") && note.contains("ran again"), "{note}");
        assert!(!calls.should_stop());
        calls.rerun_note(2, &read).unwrap();
        assert!(calls.should_stop(), "a model that loops still ends");
    }
}
