//! The evaluation set: prompts, the calls expected of the model, and a check of its answer
//! (the format is documented in `eval/README.md`).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

/// What a prompt tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Category {
    /// One call of a built-in tool.
    Single,
    /// A choice between similar tools.
    Similar,
    /// Arguments with integer, number, boolean and enum types.
    Typed,
    /// Two calls, the second using the first's result.
    Sequence,
    /// A question that needs no tool.
    NoTool,
    /// A second user turn that uses an earlier tool result.
    FollowUp,
    /// Prompts in Chinese.
    Chinese,
    /// Two or three independent parts, each needing its own tool (the README's example):
    /// every call, in any order, and an answer that covers every part.
    MultiPart,
    /// The same tool called for several things at once (three cities' weather): every call,
    /// in any order.
    Parallel,
    /// A request that sounds like a tool's job, but no offered tool fits: no call.
    Irrelevance,
}

impl Category {
    /// Every category, in the order of the report.
    pub const ALL: [Category; 10] = [
        Category::Single,
        Category::Similar,
        Category::Typed,
        Category::Sequence,
        Category::MultiPart,
        Category::Parallel,
        Category::NoTool,
        Category::Irrelevance,
        Category::FollowUp,
        Category::Chinese,
    ];

    /// Whether the expected calls may come in any order (independent parts).
    pub fn any_order(self) -> bool {
        matches!(self, Category::MultiPart | Category::Parallel)
    }

    /// The name used in the set file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Category::Single => "single",
            Category::Similar => "similar",
            Category::Typed => "typed",
            Category::Sequence => "sequence",
            Category::NoTool => "no_tool",
            Category::FollowUp => "follow_up",
            Category::Chinese => "chinese",
            Category::MultiPart => "multi_part",
            Category::Parallel => "parallel",
            Category::Irrelevance => "irrelevance",
        }
    }
}

/// The set file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSet {
    /// The system prompt of every agent; `{workdir}` is replaced by the fixture directory.
    pub system: String,
    /// Files written to a fresh temporary directory, the working directory of the file tools:
    /// relative path → content.
    pub fixture: BTreeMap<String, String>,
    /// The prompts, in the order they run.
    pub prompts: Vec<Prompt>,
}

/// One prompt (possibly several user turns) and what is expected of the model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// Unique name.
    pub id: String,
    /// What it tests.
    pub category: Category,
    /// The user's message (or use `turns`).
    #[serde(default)]
    pub prompt: Option<String>,
    /// The user's messages, one reply each, in one conversation (or use `prompt`).
    #[serde(default)]
    pub turns: Vec<String>,
    /// The calls expected over the whole conversation, in order; empty: no call at all.
    pub calls: Vec<Step>,
    /// The check of the final answer.
    #[serde(default)]
    pub answer: AnswerCheck,
    /// Whether other calls besides the expected ones are tolerated (exploration that is not a
    /// mistake). Identical repeats of a call are always tolerated (and counted).
    #[serde(default)]
    pub allow_extra: bool,
}

impl Prompt {
    /// The user's messages, in order.
    pub fn user_turns(&self) -> Vec<&str> {
        match &self.prompt {
            Some(prompt) => vec![prompt.as_str()],
            None => self.turns.iter().map(String::as_str).collect(),
        }
    }
}

/// One expected call, or alternatives that are equally right.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Value")]
pub enum Step {
    /// This call.
    Call(ExpectedCall),
    /// Any one of these calls.
    OneOf(Vec<ExpectedCall>),
}

impl Step {
    /// The alternatives of this step.
    pub fn alternatives(&self) -> &[ExpectedCall] {
        match self {
            Step::Call(call) => std::slice::from_ref(call),
            Step::OneOf(calls) => calls,
        }
    }
}

impl TryFrom<Value> for Step {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, String> {
        if let Some(alternatives) = value.get("one_of") {
            if value.as_object().is_some_and(|o| o.len() != 1) {
                return Err("a step with \"one_of\" has no other keys".into());
            }
            let calls: Vec<ExpectedCall> =
                serde_json::from_value(alternatives.clone()).map_err(|e| format!("in \"one_of\": {e}"))?;
            if calls.is_empty() {
                return Err("\"one_of\" needs at least one call".into());
            }
            Ok(Step::OneOf(calls))
        } else {
            serde_json::from_value(value)
                .map(Step::Call)
                .map_err(|e| format!("an expected call is {{\"tool\": NAME, \"args\": {{...}}}} or {{\"one_of\": [calls]}}: {e}"))
        }
    }
}

/// A call expected of the model: the tool, and the arguments that matter (others are ignored).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCall {
    /// The tool's name.
    pub tool: String,
    /// Argument name → what its value must be.
    #[serde(default)]
    pub args: BTreeMap<String, ArgMatch>,
}

/// What an argument's value must be.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Value")]
pub enum ArgMatch {
    /// This value: numbers compared numerically, strings ignoring case and surrounding
    /// spaces, `null` for an argument left out (or null).
    Is(Value),
    /// Any of these.
    AnyOf(Vec<ArgMatch>),
    /// An arithmetic expression (as `calculate` takes it) whose value is this number.
    Expr(f64),
}

impl TryFrom<Value> for ArgMatch {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Ok(ArgMatch::Is(value));
        };
        let shape = "an expected argument is a value, {\"any_of\": [values]} or {\"expr\": NUMBER}";
        match (map.len(), map.iter().next()) {
            (1, Some((key, Value::Array(items)))) if key == "any_of" && !items.is_empty() => items
                .iter()
                .cloned()
                .map(ArgMatch::try_from)
                .collect::<Result<_, _>>()
                .map(ArgMatch::AnyOf),
            (1, Some((key, Value::Number(n)))) if key == "expr" => {
                n.as_f64().map(ArgMatch::Expr).ok_or_else(|| shape.to_owned())
            }
            _ => Err(format!("{shape}, not {}", Value::Object(map))),
        }
    }
}

/// The check of the final answer: every given criterion must hold; with none, the answer must
/// not be empty. Texts are compared ignoring case; `{weekday}`, `{year}` and `{hour}` (an hour as a time writes it, `22:`) stand for today's
/// (local time or UTC).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerCheck {
    /// The answer contains at least one of these.
    #[serde(default)]
    pub any_of: Vec<String>,
    /// The answer contains all of these.
    #[serde(default)]
    pub all_of: Vec<String>,
    /// The answer contains none of these.
    #[serde(default)]
    pub none_of: Vec<String>,
    /// A number in the answer equals this, within `tolerance`.
    #[serde(default)]
    pub number: Option<f64>,
    /// Allowed difference for `number` (default 0.01).
    #[serde(default)]
    pub tolerance: Option<f64>,
}

impl EvalSet {
    /// Reads and parses a set file (not yet checked against the tools: see [`EvalSet::check`]).
    pub fn load(path: &Path) -> anyhow::Result<EvalSet> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the evaluation set {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("invalid evaluation set {}", path.display()))
    }

    /// Checks what parsing cannot: unique ids, one way of giving the prompt, calls that fit the
    /// category, and tools that exist (`tools`).
    pub fn check(&self, tools: &[String]) -> Result<(), String> {
        let mut ids = HashSet::new();
        for prompt in &self.prompts {
            let id = &prompt.id;
            if id.trim().is_empty() || !ids.insert(id.as_str()) {
                return Err(format!("prompt id {id:?} is empty or not unique"));
            }
            let turns = prompt.user_turns();
            if prompt.prompt.is_some() != prompt.turns.is_empty() {
                return Err(format!("{id}: give either \"prompt\" or \"turns\""));
            }
            if turns.iter().any(|t| t.trim().is_empty()) {
                return Err(format!("{id}: a user turn is empty"));
            }
            let calls = prompt.calls.len();
            let fits = match prompt.category {
                Category::NoTool | Category::Irrelevance => calls == 0,
                Category::Sequence | Category::MultiPart | Category::Parallel => calls >= 2,
                Category::FollowUp => turns.len() >= 2 && calls >= 1,
                _ => calls >= 1,
            };
            if !fits {
                return Err(format!(
                    "{id}: a {} prompt with {} turns and {calls} expected calls (no_tool, irrelevance: none; sequence, multi_part, parallel: \
                     2 or more; follow_up: 2 or more turns; others: 1 or more)",
                    prompt.category.name(),
                    turns.len()
                ));
            }
            for call in prompt.calls.iter().flat_map(Step::alternatives) {
                if !tools.contains(&call.tool) {
                    return Err(format!("{id}: no tool named {:?}", call.tool));
                }
            }
            let check = &prompt.answer;
            if check.tolerance.is_some_and(|t| t.is_nan() || t < 0.0)
                || (check.tolerance.is_some() && check.number.is_none())
            {
                return Err(format!(
                    "{id}: \"tolerance\" needs \"number\" and must be 0 or more"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<EvalSet, serde_json::Error> {
        serde_json::from_value(value)
    }

    fn tools() -> Vec<String> {
        vec!["calculate".into(), "get_weather".into()]
    }

    #[test]
    fn steps_and_matchers_parse() {
        let set = parse(json!({"system": "s", "fixture": {}, "prompts": [{
            "id": "a", "category": "sequence", "prompt": "p",
            "calls": [
                {"tool": "get_weather", "args": {"city": {"any_of": ["Paris", "巴黎"]}, "unit": null}},
                {"one_of": [{"tool": "calculate", "args": {"expression": {"expr": 42}}}, {"tool": "get_weather"}]}
            ],
            "answer": {"number": 42, "tolerance": 0.5}
        }]}))
        .unwrap();
        set.check(&tools()).unwrap();
        let prompt = &set.prompts[0];
        assert!(
            matches!(&prompt.calls[0], Step::Call(c) if matches!(c.args["city"], ArgMatch::AnyOf(ref v) if v.len() == 2))
        );
        assert!(
            matches!(&prompt.calls[0], Step::Call(c) if matches!(c.args["unit"], ArgMatch::Is(Value::Null)))
        );
        assert_eq!(prompt.calls[1].alternatives().len(), 2);
        assert!(matches!(
            prompt.calls[1].alternatives()[0].args["expression"],
            ArgMatch::Expr(v) if v == 42.0
        ));
        assert_eq!(prompt.user_turns(), ["p"]);
    }

    #[test]
    fn mistakes_in_a_set_are_refused() {
        let with = |prompt: Value| parse(json!({"system": "s", "fixture": {}, "prompts": [prompt]}));
        for bad in [
            json!({"id": "a", "category": "single", "prompt": "p", "calls": [{"tool": "x", "arg": {}}]}),
            json!({"id": "a", "category": "single", "prompt": "p", "calls": [{"tool": "x", "args": {"a": {"regex": "."}}}]}),
            json!({"id": "a", "category": "single", "prompt": "p", "calls": [{"one_of": []}]}),
            json!({"id": "a", "category": "pairs", "prompt": "p", "calls": []}),
            json!({"id": "a", "category": "single", "prompt": "p", "calls": [], "answer": {"contains": "x"}}),
        ] {
            assert!(with(bad.clone()).is_err(), "{bad}");
        }
        for (bad, why) in [
            (
                json!({"id": "a", "category": "single", "prompt": "p", "calls": [{"tool": "nope"}]}),
                "no tool named",
            ),
            (
                json!({"id": "a", "category": "no_tool", "prompt": "p", "calls": [{"tool": "calculate"}]}),
                "no_tool",
            ),
            (
                json!({"id": "a", "category": "sequence", "prompt": "p", "calls": [{"tool": "calculate"}]}),
                "sequence",
            ),
            (
                json!({"id": "a", "category": "follow_up", "prompt": "p", "calls": [{"tool": "calculate"}]}),
                "follow_up",
            ),
            (
                json!({"id": "a", "category": "single", "calls": [{"tool": "calculate"}]}),
                "either",
            ),
            (
                json!({"id": "a", "category": "single", "prompt": "p", "turns": ["q"], "calls": [{"tool": "calculate"}]}),
                "either",
            ),
            (
                json!({"id": "a", "category": "single", "prompt": "p", "calls": [{"tool": "calculate"}], "answer": {"tolerance": 1}}),
                "tolerance",
            ),
        ] {
            let set = with(bad.clone()).unwrap();
            let err = set.check(&tools()).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let twice = parse(json!({"system": "s", "fixture": {}, "prompts": [
            {"id": "a", "category": "no_tool", "prompt": "p", "calls": []},
            {"id": "a", "category": "no_tool", "prompt": "q", "calls": []}
        ]}))
        .unwrap();
        assert!(twice.check(&tools()).unwrap_err().contains("not unique"));
    }
}
