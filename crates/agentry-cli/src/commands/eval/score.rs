//! Scoring one prompt: were the expected calls made, and is the answer right.

use serde::Serialize;
use serde_json::Value;

use super::set::{AnswerCheck, ArgMatch, ExpectedCall, Step};
use agentry_tools::calc;

/// A call the model made, as the agent ran it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallMade {
    /// The tool's name.
    pub tool: String,
    /// The arguments.
    pub args: Value,
    /// Whether the model got an error back (unknown tool, invalid arguments, the tool's error).
    pub failed: bool,
    /// Whether the model wrote the call as text, and the agent recovered it (the tool shim).
    pub from_text: bool,
}

/// How the calls of one prompt compare with the expected ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CallScore {
    /// The expected calls were made (in order), and no others unless tolerated.
    pub ok: bool,
    /// Calls identical to an earlier one (same tool, same arguments): tolerated, counted.
    pub repeats: usize,
    /// Different calls beyond the expected ones.
    pub extra: usize,
}

/// Scores the calls `made` against the `expected` steps. Identical repeats are set aside
/// first; then the expected calls must appear in order (or, with `any_order`, each somewhere)
/// among the rest, and nothing else may remain unless `allow_extra`. With no expected calls,
/// any call is wrong.
pub fn score_calls(expected: &[Step], any_order: bool, allow_extra: bool, made: &[CallMade]) -> CallScore {
    let mut distinct: Vec<&CallMade> = Vec::new();
    for call in made {
        if !distinct
            .iter()
            .any(|d| d.tool == call.tool && d.args == call.args)
        {
            distinct.push(call);
        }
    }
    let repeats = made.len() - distinct.len();
    let matched = match any_order {
        true => matched_in_any_order(expected, &distinct),
        false => matched_in_order(expected, &distinct),
    };
    let extra = distinct.len() - matched;
    let ok = if expected.is_empty() {
        made.is_empty()
    } else {
        matched == expected.len() && (allow_extra || extra == 0)
    };
    CallScore { ok, repeats, extra }
}

/// How many expected steps the distinct calls make in order. Leftmost matching: the expected
/// steps are a subsequence of the calls exactly when this finds them all.
fn matched_in_order(expected: &[Step], distinct: &[&CallMade]) -> usize {
    let mut steps = expected.iter().peekable();
    let mut matched = 0;
    for call in distinct {
        if let Some(step) = steps.peek()
            && step.alternatives().iter().any(|alt| call_matches(alt, call))
        {
            matched += 1;
            steps.next();
        }
    }
    matched
}

/// How many expected steps the distinct calls make, each call used once, in any order.
fn matched_in_any_order(expected: &[Step], distinct: &[&CallMade]) -> usize {
    let mut used = vec![false; distinct.len()];
    let mut matched = 0;
    for step in expected {
        let found = distinct
            .iter()
            .enumerate()
            .position(|(i, call)| !used[i] && step.alternatives().iter().any(|alt| call_matches(alt, call)));
        if let Some(i) = found {
            used[i] = true;
            matched += 1;
        }
    }
    matched
}

fn call_matches(expected: &ExpectedCall, call: &CallMade) -> bool {
    expected.tool == call.tool
        && expected
            .args
            .iter()
            .all(|(name, want)| arg_matches(want, call.args.get(name)))
}

/// Whether an argument's value (`None` when left out) is what `want` asks for.
pub fn arg_matches(want: &ArgMatch, actual: Option<&Value>) -> bool {
    match want {
        ArgMatch::Is(value) => value_matches(value, actual.unwrap_or(&Value::Null)),
        ArgMatch::AnyOf(alternatives) => alternatives.iter().any(|alt| arg_matches(alt, actual)),
        ArgMatch::Expr(target) => actual
            .and_then(Value::as_str)
            .and_then(|expression| calc::evaluate(expression).ok())
            .is_some_and(|value| close(value, *target, 1e-9)),
    }
}

fn value_matches(want: &Value, actual: &Value) -> bool {
    match (want, actual) {
        (Value::Number(w), Value::Number(a)) => match (w.as_f64(), a.as_f64()) {
            (Some(w), Some(a)) => close(a, w, 1e-9),
            _ => false,
        },
        (Value::String(w), Value::String(a)) => w.trim().to_lowercase() == a.trim().to_lowercase(),
        (Value::Array(w), Value::Array(a)) => {
            w.len() == a.len() && w.iter().zip(a).all(|(w, a)| value_matches(w, a))
        }
        (w, a) => w == a,
    }
}

/// Whether `a` is `b` within a relative `epsilon` (absolute below 1).
fn close(a: f64, b: f64, epsilon: f64) -> bool {
    (a - b).abs() <= epsilon * b.abs().max(1.0)
}

/// Today's values of the placeholders of an answer check, in local time and in UTC.
#[derive(Debug, Clone)]
pub struct Today {
    placeholders: Vec<(&'static str, Vec<String>)>,
}

impl Today {
    /// The values now.
    pub fn now() -> Today {
        let local = chrono::Local::now();
        let utc = chrono::Utc::now();
        let mut today = Today::from_parts(
            [local.format("%A").to_string(), utc.format("%A").to_string()],
            [local.format("%Y").to_string(), utc.format("%Y").to_string()],
        );
        // A time as an answer says it: `22:05`, `10:05`, `9:05` (the hour may have just turned).
        let mut hours = Vec::new();
        for time in [local.naive_local(), utc.naive_utc()] {
            for time in [time, time - chrono::Duration::hours(1)] {
                hours.push(time.format("%H:").to_string());
                hours.push(time.format("%-H:").to_string());
                hours.push(time.format("%-I:").to_string());
            }
        }
        hours.sort();
        hours.dedup();
        today.placeholders.push(("{hour}", hours));
        today
    }

    fn from_parts(weekdays: [String; 2], years: [String; 2]) -> Today {
        let dedup = |values: [String; 2]| {
            let mut values = values.to_vec();
            values.dedup();
            values
        };
        Today {
            placeholders: vec![("{weekday}", dedup(weekdays)), ("{year}", dedup(years))],
        }
    }

    /// Every text `pattern` may stand for.
    fn expand(&self, pattern: &str) -> Vec<String> {
        let mut texts = vec![pattern.to_owned()];
        for (name, values) in &self.placeholders {
            texts = texts
                .into_iter()
                .flat_map(|text| {
                    if text.contains(name) {
                        values.iter().map(|v| text.replace(name, v)).collect()
                    } else {
                        vec![text]
                    }
                })
                .collect();
        }
        texts
    }
}

/// Whether `answer` passes `check`.
pub fn answer_ok(check: &AnswerCheck, answer: &str, today: &Today) -> bool {
    let answer = answer.to_lowercase();
    let contains = |pattern: &String| {
        today
            .expand(pattern.trim())
            .iter()
            .any(|text| answer.contains(&text.to_lowercase()))
    };
    let no_criterion = check.any_of.is_empty()
        && check.all_of.is_empty()
        && check.none_of.is_empty()
        && check.number.is_none();
    if no_criterion {
        return !answer.trim().is_empty();
    }
    (check.any_of.is_empty() || check.any_of.iter().any(contains))
        && check.all_of.iter().all(contains)
        && !check.none_of.iter().any(contains)
        && check.number.is_none_or(|target| {
            let tolerance = check.tolerance.unwrap_or(0.01);
            numbers_in(&answer)
                .iter()
                .any(|n| (n - target).abs() <= tolerance)
        })
}

/// Small numbers as English words ("a spider has eight legs"); "one" is left out, being also a
/// pronoun.
const NUMBER_WORDS: [&str; 19] = [
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// The numbers written in `text`: `-12`, `3.5`, `7,006,652` (commas between groups of three
/// digits), `1 234` is two numbers. A `-` counts as a sign only where a word does not end
/// (`ZX-88231` holds 88231). Then the small numbers written as words (`eight`).
pub fn numbers_in(text: &str) -> Vec<f64> {
    let mut numbers = digit_numbers_in(text);
    for word in text.split(|c: char| !c.is_alphabetic()) {
        let word = word.to_lowercase();
        if let Some(at) = NUMBER_WORDS.iter().position(|w| *w == word) {
            numbers.push((at + 2) as f64);
        }
    }
    numbers
}

fn digit_numbers_in(text: &str) -> Vec<f64> {
    let chars: Vec<char> = text.chars().collect();
    let mut numbers = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() || (i > 0 && chars[i - 1].is_ascii_digit()) {
            i += 1;
            continue;
        }
        let negative = i > 0
            && chars[i - 1] == '-'
            && (i < 2 || !(chars[i - 2].is_alphanumeric() || chars[i - 2] == '.'));
        let mut digits = String::new();
        while i < chars.len() {
            let c = chars[i];
            if c.is_ascii_digit() {
                digits.push(c);
                i += 1;
            } else if c == ','
                && chars
                    .get(i + 1..i + 4)
                    .is_some_and(|g| g.iter().all(char::is_ascii_digit))
                && !chars.get(i + 4).is_some_and(char::is_ascii_digit)
            {
                i += 1;
            } else if c == '.' && !digits.contains('.') && chars.get(i + 1).is_some_and(char::is_ascii_digit)
            {
                digits.push(c);
                i += 1;
            } else {
                break;
            }
        }
        if let Ok(value) = digits.parse::<f64>() {
            numbers.push(if negative { -value } else { value });
        }
    }
    numbers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(value: Value) -> Step {
        serde_json::from_value(value).unwrap()
    }

    fn made(tool: &str, args: Value) -> CallMade {
        CallMade {
            tool: tool.into(),
            args,
            failed: false,
            from_text: false,
        }
    }

    #[test]
    fn arguments_compare_numbers_numerically_and_strings_loosely() {
        let want = |v: Value| serde_json::from_value::<ArgMatch>(v).unwrap();
        assert!(arg_matches(&want(json!(1042)), Some(&json!(1042.0))));
        assert!(!arg_matches(&want(json!(1042)), Some(&json!("1042"))));
        assert!(!arg_matches(&want(json!(1042)), Some(&json!(1043))));
        assert!(arg_matches(&want(json!("Paris")), Some(&json!("  paris "))));
        assert!(!arg_matches(&want(json!("Paris")), Some(&json!("Paris, France"))));
        assert!(arg_matches(&want(json!(true)), Some(&json!(true))));
        assert!(!arg_matches(&want(json!(true)), Some(&json!("true"))));
        assert!(arg_matches(&want(json!(null)), None));
        assert!(!arg_matches(&want(json!(null)), Some(&json!("."))));
        let dot = want(json!({"any_of": [".", null]}));
        assert!(arg_matches(&dot, None) && arg_matches(&dot, Some(&json!("."))));
        assert!(!arg_matches(&dot, Some(&json!("src"))));
        let expr = want(json!({"expr": 391}));
        assert!(arg_matches(&expr, Some(&json!("17 * 23"))));
        assert!(arg_matches(&expr, Some(&json!("23*17"))));
        assert!(!arg_matches(&expr, Some(&json!("17 + 23"))));
        assert!(!arg_matches(&expr, Some(&json!(391))));
        assert!(!arg_matches(&expr, Some(&json!("17 *"))));
    }

    #[test]
    fn calls_must_come_in_order_without_others() {
        let expected = [
            step(json!({"tool": "get_order_status", "args": {"order_id": 1042}})),
            step(json!({"tool": "track_shipment", "args": {"tracking_number": "ZX-88231"}})),
        ];
        let order = made("get_order_status", json!({"order_id": 1042}));
        let track = made("track_shipment", json!({"tracking_number": "zx-88231"}));
        let other = made("get_weather", json!({"city": "Oslo"}));
        let score = |calls: &[CallMade], extra_ok| score_calls(&expected, false, extra_ok, calls);
        assert_eq!(
            score(&[order.clone(), track.clone()], false),
            CallScore {
                ok: true,
                repeats: 0,
                extra: 0
            }
        );
        assert!(!score(&[track.clone(), order.clone()], false).ok, "out of order");
        assert!(!score(std::slice::from_ref(&order), false).ok, "one missing");
        let repeated = score(
            &[order.clone(), order.clone(), track.clone(), track.clone()],
            false,
        );
        assert_eq!(
            repeated,
            CallScore {
                ok: true,
                repeats: 2,
                extra: 0
            }
        );
        let with_other = [order.clone(), other, track];
        assert_eq!(
            score(&with_other, false),
            CallScore {
                ok: false,
                repeats: 0,
                extra: 1
            }
        );
        assert!(score(&with_other, true).ok, "tolerated when allowed");
        let wrong_arg = made("get_order_status", json!({"order_id": 1043}));
        let track = made("track_shipment", json!({"tracking_number": "ZX-88231"}));
        assert!(!score(&[wrong_arg, track], true).ok, "a wrong argument");
    }

    #[test]
    fn no_call_expected_means_none_at_all() {
        assert!(score_calls(&[], false, false, &[]).ok);
        let call = made("calculate", json!({"expression": "1+1"}));
        assert_eq!(
            score_calls(&[], false, true, &[call]),
            CallScore {
                ok: false,
                repeats: 0,
                extra: 1
            }
        );
    }

    #[test]
    fn alternatives_and_ignored_arguments() {
        let expected = [step(json!({"one_of": [
            {"tool": "search_files", "args": {"pattern": "falcon"}},
            {"tool": "list_files", "args": {"recursive": true}}
        ]}))];
        for call in [
            made("search_files", json!({"pattern": "Falcon", "path": "."})),
            made("list_files", json!({"recursive": true})),
        ] {
            assert!(
                score_calls(&expected, false, false, std::slice::from_ref(&call)).ok,
                "{call:?}"
            );
        }
        assert!(!score_calls(&expected, false, false, &[made("list_files", json!({}))]).ok);
    }

    #[test]
    fn answers_are_checked_ignoring_case() {
        let check = |v: Value| serde_json::from_value::<AnswerCheck>(v).unwrap();
        let today = Today::from_parts(
            ["Monday".into(), "Tuesday".into()],
            ["2026".into(), "2026".into()],
        );
        assert!(answer_ok(&check(json!({})), "anything", &today));
        assert!(!answer_ok(&check(json!({})), "  ", &today));
        assert!(answer_ok(
            &check(json!({"any_of": ["paris", "巴黎"]})),
            "It is 巴黎.",
            &today
        ));
        assert!(!answer_ok(&check(json!({"any_of": ["paris"]})), "Lyon", &today));
        let all = check(json!({"all_of": ["shipped", "dhl"], "none_of": ["cancelled"]}));
        assert!(answer_ok(&all, "Shipped with DHL", &today));
        assert!(!answer_ok(&all, "Shipped", &today));
        assert!(!answer_ok(&all, "Shipped with DHL, then cancelled", &today));
        let number = check(json!({"number": 7006652}));
        assert!(answer_ok(&number, "The product is 7,006,652.", &today));
        assert!(answer_ok(&number, "7006652.00", &today));
        assert!(!answer_ok(&number, "7006653", &today));
        let near = check(json!({"number": 215.1, "tolerance": 0.05}));
        assert!(answer_ok(&near, "about 215.10 GBP", &today));
        assert!(!answer_ok(&near, "about 215.2 GBP", &today));
        let weekday = check(json!({"any_of": ["{weekday}"]}));
        assert!(answer_ok(&weekday, "Today is tuesday.", &today));
        assert!(answer_ok(&weekday, "Monday", &today));
        assert!(!answer_ok(&weekday, "Friday", &today));
    }

    #[test]
    fn numbers_are_found_in_text() {
        assert_eq!(
            numbers_in("x = -12 and 3.5, then 7,006,652."),
            [-12.0, 3.5, 7006652.0]
        );
        assert_eq!(numbers_in("ZX-88231 on 2026-12-03"), [88231.0, 2026.0, 12.0, 3.0]);
        assert_eq!(
            numbers_in("1,23 and 1,2345 and 12."),
            [1.0, 23.0, 1.0, 2345.0, 12.0]
        );
        assert_eq!(numbers_in("价格是64250美元"), [64250.0]);
        assert!(numbers_in("no digits").is_empty());
        assert_eq!(numbers_in("A spider has Eight legs, one says."), [8.0]);
        assert_eq!(numbers_in("12 twelve"), [12.0, 12.0]);
    }

    #[test]
    fn independent_calls_may_come_in_any_order_and_each_counts_once() {
        let expected: Vec<Step> = serde_json::from_value(json!([
            {"tool": "get_weather", "args": {"city": "Paris"}},
            {"tool": "get_weather", "args": {"city": "Cairo"}}
        ]))
        .unwrap();
        let paris = made("get_weather", json!({"city": "Paris"}));
        let cairo = made("get_weather", json!({"city": "Cairo"}));
        let reversed = [cairo.clone(), paris.clone()];
        assert!(score_calls(&expected, true, false, &reversed).ok);
        assert!(
            !score_calls(&expected, false, false, &reversed).ok,
            "in order, reversed is wrong"
        );
        assert!(
            !score_calls(&expected, true, false, std::slice::from_ref(&paris)).ok,
            "a part missing"
        );
        assert!(
            !score_calls(&expected, true, false, &[paris.clone(), paris]).ok,
            "one call cannot stand for both"
        );
    }
}
