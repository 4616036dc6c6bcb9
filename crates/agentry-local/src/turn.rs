//! What may follow the tool calls a model writes in one turn.
//!
//! A turn may hold several calls (independent parts of a question are asked at once), each in
//! Qwen's `<tool_call>` tags or a fenced block, as the chat template separates them. Between and
//! after them only blank space, the next call's opening, or the end of the turn may come. Small
//! models go on writing after their calls (an answer they have not got yet, a call nobody
//! constrains, another copy of a call): such text is cut, and the turn ends where it began.

use serde_json::Value;

/// How a call is wrapped, read off the text before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrapper {
    /// `<tool_call>` … `</tool_call>`.
    Tag,
    /// ```` ```json ```` … ```` ``` ````.
    Fence,
    /// A bare JSON object at the start of the answer: the only call of the turn.
    Bare,
}

impl Wrapper {
    fn before(text: &str) -> Wrapper {
        let trimmed = text.trim_end();
        if trimmed.ends_with("<tool_call>") {
            Wrapper::Tag
        } else if trimmed.ends_with("```json") || trimmed.ends_with("```") {
            Wrapper::Fence
        } else {
            Wrapper::Bare
        }
    }

    /// The text that closes the call.
    fn closing(self) -> &'static str {
        match self {
            Wrapper::Tag => "</tool_call>",
            Wrapper::Fence => "```",
            Wrapper::Bare => "",
        }
    }

    /// The text that opens a call of this kind.
    fn opening(self) -> &'static str {
        match self {
            Wrapper::Tag => "<tool_call>",
            Wrapper::Fence | Wrapper::Bare => "```",
        }
    }
}

/// What the generation loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Go on.
    Go,
    /// Cut the text back to this length, and end the turn.
    CutAt(usize),
}

/// The calls of one turn, and where the text stands after the last.
#[derive(Debug)]
pub(crate) struct CallTurn {
    /// Each complete call's arguments, to tell a copy.
    calls: Vec<Value>,
    /// The most calls one turn may hold.
    most: usize,
    /// The call being written: its wrapper and where its opening began.
    current: Option<(Wrapper, usize, usize)>,
    /// The last complete call: its wrapper, where its JSON ended, and where its closing ended
    /// once written.
    last: Option<(Wrapper, usize, Option<usize>)>,
}

impl CallTurn {
    /// A turn of at most `most` calls.
    pub(crate) fn new(most: usize) -> Self {
        CallTurn {
            calls: Vec::new(),
            most,
            current: None,
            last: None,
        }
    }

    /// A call's JSON begins at byte `at` of `text` (the text before it).
    pub(crate) fn call_started(&mut self, text: &str, at: usize) {
        let before = text.get(..at).unwrap_or(text);
        let wrapper = Wrapper::before(before);
        let opening = match wrapper {
            Wrapper::Bare => at,
            wrapper => before.rfind(wrapper.opening()).unwrap_or(at),
        };
        self.current = Some((wrapper, opening, at));
        self.last = None;
    }

    /// The call being written is complete: its JSON is `text[start..]`. A copy of an earlier
    /// call of the turn, or one call too many, is cut with its opening.
    pub(crate) fn call_complete(&mut self, text: &str) -> Next {
        let Some((wrapper, opening, start)) = self.current.take() else {
            return Next::Go;
        };
        let call: Value = text
            .get(start..)
            .and_then(|json| serde_json::from_str(json.trim()).ok())
            .unwrap_or(Value::Null);
        if self.calls.contains(&call) || self.calls.len() >= self.most {
            return Next::CutAt(trim_end_at(text, opening));
        }
        self.calls.push(call);
        self.last = Some((wrapper, text.len(), None));
        Next::Go
    }

    /// After each piece of text while no call is being written: what the text after the last
    /// complete call allows.
    pub(crate) fn after(&mut self, text: &str) -> Next {
        let Some((wrapper, json_end, closed_at)) = self.last else {
            return Next::Go;
        };
        let closed_at = match closed_at {
            Some(at) => at,
            None => {
                let tail = text.get(json_end..).unwrap_or_default();
                let rest = tail.trim_start();
                let closing = wrapper.closing();
                if closing.is_empty() || rest.starts_with(closing) {
                    let at = match closing.is_empty() {
                        true => json_end,
                        false => json_end + (tail.len() - rest.len()) + closing.len(),
                    };
                    self.last = Some((wrapper, json_end, Some(at)));
                    at
                } else if closing.starts_with(rest) {
                    return Next::Go;
                } else {
                    // Something else where the closing belongs: the call stands without it.
                    return Next::CutAt(json_end);
                }
            }
        };
        // The last call the turn may hold is closed: nothing is worth generating after it.
        if self.calls.len() >= self.most {
            return Next::CutAt(closed_at);
        }
        let rest = text.get(closed_at..).unwrap_or_default().trim_start();
        if rest.is_empty() || (wrapper != Wrapper::Bare && may_open_a_call(wrapper, rest)) {
            Next::Go
        } else {
            Next::CutAt(closed_at)
        }
    }

    /// How many calls the turn holds.
    #[cfg(test)]
    fn calls(&self) -> usize {
        self.calls.len()
    }
}

/// Whether `rest` (after a closed call) is, or may become, the opening of another call of the
/// same kind, up to where the call's JSON begins.
fn may_open_a_call(wrapper: Wrapper, rest: &str) -> bool {
    let openings: &[&str] = match wrapper {
        Wrapper::Tag => &["<tool_call>"],
        Wrapper::Fence | Wrapper::Bare => &["```json", "```"],
    };
    openings.iter().any(|opening| {
        opening.starts_with(rest)
            || rest
                .strip_prefix(opening)
                .is_some_and(|after| after.trim().is_empty())
    })
}

/// `at`, moved back over the blank space before it, so that a cut leaves no trailing blanks.
fn trim_end_at(text: &str, at: usize) -> usize {
    text.get(..at).map_or(at, |before| before.trim_end().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` through a turn as the generation loop does, starting a call where the
    /// piece is `{` and completing it where a piece is `}`; the text kept.
    fn written(pieces: &[&str]) -> String {
        let mut turn = CallTurn::new(4);
        let mut text = String::new();
        let mut depth = 0;
        for piece in pieces {
            // Where the engine's constraint starts a call.
            if *piece == "{" && depth == 0 && crate::constrain::call_position(&text).is_some() {
                turn.call_started(&text, text.len());
            }
            text.push_str(piece);
            depth += piece.matches('{').count() as i32 - piece.matches('}').count() as i32;
            let next = if piece.contains('}') && depth == 0 && turn.current.is_some() {
                turn.call_complete(&text)
            } else if depth == 0 {
                turn.after(&text)
            } else {
                Next::Go
            };
            if let Next::CutAt(at) = next {
                text.truncate(at);
                break;
            }
        }
        text
    }

    const A: &str = r#"{"name": "calculate", "arguments": {"expression": "1234*5678"}}"#;
    const B: &str = r#"{"name": "current_time", "arguments": {}}"#;

    #[test]
    fn several_tagged_calls_stand_one_after_the_other() {
        let text = written(&[
            "<tool_call>\n",
            "{",
            &A[1..],
            "\n</tool_call>",
            "\n<tool_call>\n",
            "{",
            &B[1..],
            "\n</tool",
            "_call>",
        ]);
        assert_eq!(text.matches("<tool_call>").count(), 2, "{text}");
        assert!(text.ends_with("</tool_call>"), "{text}");
    }

    #[test]
    fn a_copy_of_an_earlier_call_is_cut_with_its_opening() {
        let text = written(&[
            "<tool_call>\n",
            "{",
            &A[1..],
            "\n</tool_call>",
            "\n<tool_call>\n",
            "{",
            &A[1..],
            "\n</tool_call>",
        ]);
        assert_eq!(text, format!("<tool_call>\n{A}\n</tool_call>"));
    }

    #[test]
    fn text_after_the_calls_is_cut_and_the_turn_ends() {
        let text = written(&[
            "<tool_call>\n",
            "{",
            &A[1..],
            "\n</tool_call>",
            "\nThe answer is 7006652.",
        ]);
        assert_eq!(text, format!("<tool_call>\n{A}\n</tool_call>"));
        let text = written(&["<tool_call>\n", "{", &A[1..], "\nThe answer"]);
        assert_eq!(text, format!("<tool_call>\n{A}"), "the closing tag never came");
    }

    #[test]
    fn fenced_calls_may_follow_each_other() {
        let text = written(&[
            "```json\n",
            "{",
            &A[1..],
            "\n```",
            "\n```json\n",
            "{",
            &B[1..],
            "\n```",
        ]);
        assert_eq!(text.matches("```json").count(), 2, "{text}");
        let text = written(&["```json\n", "{", &A[1..], "\n```", "\n```python\nprint(1)"]);
        assert_eq!(
            text,
            format!("```json\n{A}\n```"),
            "a fence of another language is cut"
        );
    }

    #[test]
    fn a_bare_call_is_the_only_one_and_too_many_calls_are_cut() {
        let text = written(&["{", &A[1..], "\n", "{", &B[1..]]);
        assert_eq!(text, A, "{text}");
        let mut turn = CallTurn::new(1);
        let mut text = format!("<tool_call>\n{A}\n</tool_call>\n<tool_call>\n");
        turn.call_started("<tool_call>\n", "<tool_call>\n".len());
        assert_eq!(turn.call_complete(&format!("<tool_call>\n{A}")), Next::Go);
        let second = text.len();
        turn.call_started(&text, second);
        text.push_str(B);
        assert_eq!(
            turn.call_complete(&text),
            Next::CutAt(format!("<tool_call>\n{A}\n</tool_call>").len()),
            "the second call is one too many"
        );
        assert_eq!(turn.calls(), 1);
    }

    #[test]
    fn the_turn_ends_as_soon_as_its_last_call_is_closed() {
        let mut turn = CallTurn::new(1);
        let mut text = "<tool_call>\n".to_string();
        turn.call_started(&text, text.len());
        text.push_str(A);
        assert_eq!(turn.call_complete(&text), Next::Go);
        text.push_str("\n</tool");
        assert_eq!(turn.after(&text), Next::Go, "the closing is still being written");
        text.push_str("_call>");
        assert_eq!(turn.after(&text), Next::CutAt(text.len()), "nothing may follow");
    }
}
