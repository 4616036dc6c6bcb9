//! The tools a question needs, for small models that answer half a question: asked once per
//! question as a constrained choice at the very place the model would answer (so the
//! conversation's cached prefix serves it, and the tool descriptions are in view), then each
//! chosen tool is called, the model picking which comes next and writing its arguments, then
//! the model answers, with no call (small models otherwise call again what they have). A
//! question none of whose parts needs a tool is answered without one.

use std::sync::Arc;

use agentry::message::{Msg, Role};
use agentry::model::ToolSchema;
use serde::Deserialize;

use crate::constrain::{NO_TOOL, Shape};

/// The model's own words before its choice: the choice is then made as part of its answer.
pub(crate) const PLAN_PREFILL: &str = "Before I answer: each part of the question, quoted, with the tool that part needs (\"none\" when no tool is needed):\n```json\n";

/// The longest choice, in tokens: a few parts.
pub(crate) const PLAN_MAX_TOKENS: usize = 160;

/// What a turn of the reply must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The model chooses: text or calls.
    Free,
    /// A call of one of these tools (planned, not called yet).
    Call(Vec<String>),
    /// Every planned tool has been called: the answer to this question comes now, with no call.
    Answer(String),
    /// No part of the question needs a tool: the answer comes now, with no call.
    Direct,
}

/// Where the current reply stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplyProgress {
    /// The index of the user's message the reply answers.
    pub(crate) question_at: usize,
    pub(crate) question: String,
    /// The tools called since, in order.
    pub(crate) called: Vec<String>,
}

impl ReplyProgress {
    /// The last user message that is not tool results, and the calls made after it.
    pub(crate) fn of(messages: &[Msg]) -> Option<ReplyProgress> {
        let question_at = messages
            .iter()
            .rposition(|m| m.role == Role::User && m.tool_results().next().is_none())?;
        let question = messages[question_at].text()?;
        let called = messages[question_at + 1..]
            .iter()
            .flat_map(Msg::tool_uses)
            .map(|call| call.name.clone())
            .collect();
        Some(ReplyProgress {
            question_at,
            question,
            called,
        })
    }

    /// The step after this progress, given the plan: a tool planned for more parts than it
    /// has been called for is still missing.
    pub(crate) fn step(&self, plan: &[String]) -> Step {
        let mut unmatched = self.called.clone();
        let mut missing = Vec::new();
        for tool in plan {
            match unmatched.iter().position(|called| called == tool) {
                Some(at) => {
                    unmatched.swap_remove(at);
                }
                None if !missing.contains(tool) => missing.push(tool.clone()),
                None => {}
            }
        }
        if !missing.is_empty() {
            Step::Call(missing)
        } else if self.called.is_empty() {
            Step::Direct
        } else {
            Step::Answer(self.question.clone())
        }
    }
}

/// One part of a plan.
#[derive(Debug, Deserialize, PartialEq)]
struct PlannedPart {
    part: String,
    tool: String,
}

/// The most parts a plan may hold: more is a model listing tools, not reading a question.
const MOST_PARTS: usize = 4;

/// The shape of the choice: the question's parts, each quoted from it (a tool cannot be
/// chosen for nothing the question says), with one of the offered tools or none.
pub(crate) fn plan_shape(question: &str, tools: &[ToolSchema]) -> Shape {
    Shape::plan(question, tools.iter().map(|t| t.name.as_str()), MOST_PARTS)
}

/// The tool of each part of a complete choice that needs one, in the model's order: a tool as
/// often as distinct parts of `question` need it. A part inside another (or around it) is the
/// same part quoted again, and so is one next to another part for the same tool with only
/// blank space between them ("1234" and "* 5678"). `None` when the choice was cut short.
pub(crate) fn parse_plan(text: &str, question: &str) -> Option<Vec<String>> {
    // The last token may carry text past the list's end.
    let parts: Vec<PlannedPart> = serde_json::Deserializer::from_str(text.trim())
        .into_iter()
        .next()?
        .ok()?;
    // Each kept part: its tool and where it stands in the question.
    let mut kept: Vec<(&str, std::ops::Range<usize>)> = Vec::with_capacity(parts.len());
    for part in parts.iter().filter(|p| p.tool != NO_TOOL) {
        let Some(start) = question.find(&part.part) else {
            continue;
        };
        let span = start..start + part.part.len();
        let same = kept.iter_mut().find(|(tool, k)| {
            let overlaps = span.start < k.end && k.start < span.end;
            let (left, right) = if k.end <= span.start {
                (k.end, span.start)
            } else {
                (span.end, k.start)
            };
            let adjacent = question.get(left..right).is_some_and(|gap| gap.trim().is_empty());
            overlaps || (*tool == part.tool && adjacent)
        });
        match same {
            Some((_, k)) => *k = k.start.min(span.start)..k.end.max(span.end),
            None => kept.push((&part.tool, span)),
        }
    }
    Some(kept.into_iter().map(|(tool, _)| tool.to_owned()).collect())
}

/// The plan made for a question, kept for the reply's later turns.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanMemo {
    last: Option<(String, Arc<Vec<String>>)>,
}

impl PlanMemo {
    /// What identifies a plan: the question and the tools offered.
    pub(crate) fn key(question: &str, tools: &[ToolSchema]) -> String {
        let mut key = question.to_owned();
        for tool in tools {
            key.push('\u{0}');
            key.push_str(&tool.name);
        }
        key
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<Vec<String>>> {
        self.last
            .as_ref()
            .filter(|(k, _)| k == key)
            .map(|(_, plan)| plan.clone())
    }

    pub(crate) fn put(&mut self, key: String, plan: Arc<Vec<String>>) {
        self.last = Some((key, plan));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::message::{ContentBlock, ToolResultBlock, ToolUseBlock};
    use serde_json::json;

    fn call(name: &str) -> Msg {
        Msg::new(
            "assistant",
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUseBlock {
                id: format!("call_{name}").into(),
                name: name.into(),
                input: json!({}),
                raw_input: None,
            })],
        )
    }

    fn result(name: &str) -> Msg {
        Msg::tool_result(ToolResultBlock {
            id: format!("call_{name}").into(),
            name: name.into(),
            output: vec![ContentBlock::text("42")],
            is_error: false,
        })
    }

    #[test]
    fn the_reply_starts_at_the_last_question_and_counts_its_calls() {
        let messages = vec![
            Msg::system("You help."),
            Msg::user("Earlier question"),
            call("read_file"),
            result("read_file"),
            Msg::assistant("assistant", "Earlier answer"),
            Msg::user("What is 2*3, and what time is it?"),
            call("calculate"),
            result("calculate"),
        ];
        let progress = ReplyProgress::of(&messages).unwrap();
        assert_eq!(progress.question_at, 5);
        assert_eq!(progress.called, vec!["calculate".to_string()]);
        let plan = vec!["calculate".to_string(), "current_time".to_string()];
        assert_eq!(progress.step(&plan), Step::Call(vec!["current_time".into()]));
        assert_eq!(progress.step(&plan[..1]), Step::Answer(progress.question.clone()));
        let fresh = ReplyProgress::of(&messages[..6]).unwrap();
        assert_eq!(fresh.step(&plan), Step::Call(plan.clone()));
        assert_eq!(fresh.step(&[]), Step::Direct);
        let twice = vec!["calculate".to_string(), "calculate".to_string()];
        assert_eq!(
            progress.step(&twice),
            Step::Call(vec!["calculate".into()]),
            "a tool planned for two parts is called twice"
        );
    }

    #[test]
    fn a_plan_holds_a_tool_per_part_and_a_cut_choice_is_none() {
        let question = "hello: what is 1234 * 5678, and 2*3, and what time is it?";
        let plan = r#"[{"part": "1234 * 5678", "tool": "calculate"},
            {"part": "what time", "tool": "current_time"}, {"part": "1234 * 5678", "tool": "calculate"},
            {"part": "5678", "tool": "calculate"}, {"part": "and 2*3", "tool": "calculate"},
            {"part": "hello", "tool": "none"}]{""#;
        let (calculate, time) = ("calculate".to_string(), "current_time".to_string());
        assert_eq!(
            parse_plan(plan, question),
            Some(vec![calculate.clone(), time, calculate.clone()])
        );
        let split = r#"[{"part": "1234", "tool": "calculate"}, {"part": "* 5678", "tool": "calculate"}]"#;
        assert_eq!(
            parse_plan(split, question),
            Some(vec![calculate]),
            "one expression quoted in two pieces is one part"
        );
        let cities = r#"[{"part": "Paris", "tool": "weather"}, {"part": "Cairo", "tool": "weather"}]"#;
        assert_eq!(
            parse_plan(cities, "Weather in Paris, Cairo?"),
            Some(vec!["weather".to_string(), "weather".to_string()]),
            "a list's items are parts of their own"
        );
        let none = r#"[{"part": "hello", "tool": "none"}]"#;
        assert_eq!(parse_plan(none, question), Some(vec![]));
        assert_eq!(parse_plan(r#"[{"part": "1234", "tool": "calc"#, question), None);
    }
}
