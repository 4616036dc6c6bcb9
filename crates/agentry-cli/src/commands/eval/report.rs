//! The results: one record per prompt (the `--out` lines), the summary per category, and the
//! table.

use serde::Serialize;

use super::score::{CallMade, CallScore};
use super::set::Category;

/// The result of one prompt: one line of `--out`.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// The prompt's id.
    pub id: String,
    /// Its category.
    pub category: &'static str,
    /// The user's messages.
    pub turns: Vec<String>,
    /// The calls the model made, over all turns.
    pub calls: Vec<CallMade>,
    /// The answer to the last turn.
    pub answer: String,
    /// The answers to the earlier turns.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub earlier_answers: Vec<String>,
    /// The expected calls were made (and no others).
    pub call_ok: bool,
    /// The answer passed its check.
    pub answer_ok: bool,
    /// Both.
    pub ok: bool,
    /// Calls identical to an earlier one.
    pub repeated_calls: usize,
    /// Different calls beyond the expected ones.
    pub extra_calls: usize,
    /// Wall time of the conversation.
    pub seconds: f64,
    /// Why the last reply ended (`answered`, `max_iters`, `repeated_calls`, `failed`, ...).
    pub stop_reason: Option<String>,
    /// What went wrong; the prompt is then scored wrong.
    pub error: Option<String>,
}

impl Record {
    /// Scores a prompt; one with an error is wrong whatever it did before.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: &str,
        category: Category,
        turns: Vec<String>,
        calls: Vec<CallMade>,
        mut answers: Vec<String>,
        calls_score: CallScore,
        answer_ok: bool,
        seconds: f64,
        stop_reason: Option<String>,
        error: Option<String>,
    ) -> Record {
        let failed = error.is_some();
        let call_ok = calls_score.ok && !failed;
        let answer_ok = answer_ok && !failed;
        let answer = answers.pop().unwrap_or_default();
        Record {
            id: id.to_owned(),
            category: category.name(),
            turns,
            calls,
            answer,
            earlier_answers: answers,
            call_ok,
            answer_ok,
            ok: call_ok && answer_ok,
            repeated_calls: calls_score.repeats,
            extra_calls: calls_score.extra,
            seconds: (seconds * 1000.0).round() / 1000.0,
            stop_reason,
            error,
        }
    }
}

/// The scores of a group of prompts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The category, or `total`.
    pub category: String,
    /// Prompts.
    pub n: usize,
    /// Prompts whose calls were right.
    pub calls_ok: usize,
    /// Prompts whose answers were right.
    pub answers_ok: usize,
    /// Prompts with both right.
    pub ok: usize,
    /// Percentages of `n`, one decimal.
    pub calls_pct: f64,
    /// Percentages of `n`, one decimal.
    pub answers_pct: f64,
    /// Percentages of `n`, one decimal.
    pub ok_pct: f64,
    /// Median wall time per prompt.
    pub median_seconds: f64,
    /// Prompts that ended with an error.
    pub errors: usize,
    /// Identical repeated calls, summed.
    pub repeated_calls: usize,
    /// Calls made, summed.
    pub calls: usize,
    /// Of those, calls the model wrote as text (recovered by the agent's tool shim).
    pub text_calls: usize,
}

impl Row {
    fn of(category: &str, records: &[&Record]) -> Row {
        let n = records.len();
        let count = |f: fn(&Record) -> bool| records.iter().filter(|r| f(r)).count();
        let pct = |k: usize| {
            if n == 0 {
                0.0
            } else {
                (k as f64 * 1000.0 / n as f64).round() / 10.0
            }
        };
        let (calls_ok, answers_ok, ok) = (count(|r| r.call_ok), count(|r| r.answer_ok), count(|r| r.ok));
        Row {
            category: category.to_owned(),
            n,
            calls_ok,
            answers_ok,
            ok,
            calls_pct: pct(calls_ok),
            answers_pct: pct(answers_ok),
            ok_pct: pct(ok),
            median_seconds: median(records.iter().map(|r| r.seconds).collect()),
            errors: count(|r| r.error.is_some()),
            repeated_calls: records.iter().map(|r| r.repeated_calls).sum(),
            calls: records.iter().map(|r| r.calls.len()).sum(),
            text_calls: records
                .iter()
                .map(|r| r.calls.iter().filter(|c| c.from_text).count())
                .sum(),
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let middle = match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    };
    (middle * 100.0).round() / 100.0
}

/// The summary of a run (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The model's name.
    pub model: String,
    /// The set file.
    pub set: String,
    /// The prompts selected; fewer ran when the run was interrupted.
    pub selected: usize,
    /// One row per category that had prompts, in the report's order.
    pub categories: Vec<Row>,
    /// All prompts.
    pub total: Row,
    /// The command line that reproduces the run.
    pub command: String,
}

impl Summary {
    /// Sums up `records`.
    pub fn new(model: String, set: String, command: String, selected: usize, records: &[Record]) -> Summary {
        let categories = Category::ALL
            .iter()
            .filter_map(|category| {
                let of: Vec<&Record> = records.iter().filter(|r| r.category == category.name()).collect();
                (!of.is_empty()).then(|| Row::of(category.name(), &of))
            })
            .collect();
        let all: Vec<&Record> = records.iter().collect();
        Summary {
            model,
            set,
            selected,
            categories,
            total: Row::of("total", &all),
            command,
        }
    }

    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut out = format!("model: {}\nset: {}\n", self.model, self.set);
        if self.total.n < self.selected {
            out.push_str(&format!(
                "interrupted: {} of the {} prompts selected ran\n",
                self.total.n, self.selected
            ));
        }
        out.push('\n');
        out.push_str(&format!(
            "{:<10} {:>4} {:>7} {:>8} {:>7} {:>9} {:>7}\n",
            "category", "n", "calls", "answers", "both", "median s", "errors"
        ));
        let line = |row: &Row| {
            format!(
                "{:<10} {:>4} {:>6.1}% {:>7.1}% {:>6.1}% {:>9.2} {:>7}\n",
                row.category,
                row.n,
                row.calls_pct,
                row.answers_pct,
                row.ok_pct,
                row.median_seconds,
                row.errors
            )
        };
        for row in &self.categories {
            out.push_str(&line(row));
        }
        out.push_str(&line(&self.total));
        out.push_str(&format!(
            "\ncalls: {} ({} written as text and recovered, {} identical repeats)\nreproduce: {}\n",
            self.total.calls, self.total.text_calls, self.total.repeated_calls, self.command
        ));
        out
    }
}

/// `args` as a shell command line (single quotes where needed).
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    args.into_iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                arg
            } else {
                format!("'{}'", arg.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<String>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, category: Category, call_ok: bool, answer_ok: bool, seconds: f64) -> Record {
        let score = CallScore {
            ok: call_ok,
            repeats: 1,
            extra: 0,
        };
        Record::new(
            id,
            category,
            vec!["q".into()],
            Vec::new(),
            vec!["a".into()],
            score,
            answer_ok,
            seconds,
            Some("answered".into()),
            None,
        )
    }

    #[test]
    fn rows_count_per_category_and_in_total() {
        let mut failed = record("e", Category::Typed, true, true, 9.0);
        failed = Record::new(
            "e",
            Category::Typed,
            failed.turns,
            failed.calls,
            vec![],
            CallScore {
                ok: true,
                repeats: 0,
                extra: 0,
            },
            true,
            9.0,
            None,
            Some("HTTP 500".into()),
        );
        assert!(!failed.call_ok && !failed.answer_ok && !failed.ok);
        let mut records = [
            record("a", Category::Single, true, true, 1.0),
            record("b", Category::Single, true, false, 3.0),
            record("c", Category::Single, false, false, 2.0),
            record("d", Category::Typed, false, true, 4.0),
            failed,
        ];
        let call = |from_text| CallMade {
            tool: "calculate".into(),
            args: serde_json::json!({"expression": "1+1"}),
            failed: false,
            from_text,
        };
        records[0].calls = vec![call(true), call(false)];
        let summary = Summary::new("m".into(), "s.json".into(), "agentry eval".into(), 5, &records);
        let names: Vec<&str> = summary.categories.iter().map(|r| r.category.as_str()).collect();
        assert_eq!(names, ["single", "typed"]);
        let single = &summary.categories[0];
        assert_eq!(
            (single.n, single.calls_ok, single.answers_ok, single.ok),
            (3, 2, 1, 1)
        );
        assert_eq!(
            (single.calls_pct, single.answers_pct, single.ok_pct),
            (66.7, 33.3, 33.3)
        );
        assert_eq!(single.median_seconds, 2.0);
        assert_eq!(summary.categories[1].median_seconds, 6.5);
        assert_eq!(summary.categories[1].errors, 1);
        let total = &summary.total;
        assert_eq!(
            (total.n, total.calls_ok, total.answers_ok, total.ok),
            (5, 2, 2, 1)
        );
        assert_eq!(total.repeated_calls, 4);
        assert_eq!((total.calls, total.text_calls), (2, 1));
        let table = summary.table();
        assert!(table.starts_with("model: m\nset: s.json\n\ncategory"), "{table}");
        let cut = Summary::new("m".into(), "s.json".into(), "agentry eval".into(), 9, &records).table();
        assert!(
            cut.contains("interrupted: 5 of the 9 prompts selected ran\n"),
            "{cut}"
        );
        assert!(
            table.contains("single        3   66.7%    33.3%   33.3%      2.00       0"),
            "{table}"
        );
        assert!(
            table.contains("total         5   40.0%    40.0%   20.0%      3.00       1"),
            "{table}"
        );
        assert!(
            table.contains(
                "calls: 2 (1 written as text and recovered, 4 identical repeats)\nreproduce: agentry eval"
            ),
            "{table}"
        );
    }

    #[test]
    fn command_lines_quote_what_the_shell_would_split() {
        assert_eq!(
            command_line(
                ["agentry", "eval", "--category", "no_tool", "--system", "it's x"].map(String::from)
            ),
            "agentry eval --category no_tool --system 'it'\\''s x'"
        );
    }
}
