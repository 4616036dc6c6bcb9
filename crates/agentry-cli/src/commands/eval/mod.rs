//! `agentry eval`: how well a model calls tools, measured on a fixed set of prompts
//! (`eval/tool-calls.json`, format in `eval/README.md`).
//!
//! The model is built once and shared; each prompt gets a fresh agent (memory, toolkit) over a
//! fixture directory, and its calls are observed through the agent's events. A prompt is right
//! when the expected calls were made (`call_ok`) and the answer passes its check (`answer_ok`).

mod report;
mod runner;
mod score;
mod set;
mod tools;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::config::{ModelArgs, load_config_file, parse_duration, provider_config};
use crate::exit::EXIT_INTERRUPTED;
use crate::setup::tools::ToolSelection;
use crate::terminal::received;
use crate::terminal::sanitize;
use report::{Record, Summary, command_line};
use runner::{Setup, run_prompt};
use score::{Today, answer_ok, score_calls};
use set::{Category, EvalSet, Prompt};
use tools::{Fixture, eval_toolkit};

/// Exit code when the set, the flags or the model cannot be used.
const EXIT_CONFIG: u8 = 2;
/// Characters of an answer or of the calls shown in the progress of a wrong prompt.
const SHOWN_CHARS: usize = 160;

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The evaluation set
    #[arg(long, value_name = "FILE", default_value = "eval/tool-calls.json")]
    pub set: PathBuf,
    /// Only the prompts of this category (repeatable)
    #[arg(long, value_name = "NAME")]
    pub category: Vec<Category>,
    /// Only the prompt with this id (repeatable)
    #[arg(long, value_name = "ID")]
    pub id: Vec<String>,
    /// Only the first N prompts (after --category and --id)
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Reasoning/acting rounds per reply
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub max_iters: usize,
    /// Longest time one prompt (all its turns) may take, e.g. 90, 5m
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5m")]
    pub timeout: Duration,
    /// Replace the set's system prompt
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Write one JSON line per prompt to FILE (calls, answer, scores, seconds, stop reason, error)
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the summary as JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Offer only these tools (comma-separated or repeated); also "tools" in the config
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Offer none of the built-in tools, only the synthetic ones of the evaluation
    #[arg(long)]
    pub no_builtin_tools: bool,
}

pub async fn eval(args: EvalArgs) -> ExitCode {
    match evaluate(&args).await {
        Ok(Finished::All) => ExitCode::SUCCESS,
        Ok(Finished::Interrupted) => ExitCode::from(EXIT_INTERRUPTED),
        Err(e) => {
            eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// How a run ended.
enum Finished {
    /// Every selected prompt ran.
    All,
    /// Ctrl-C or SIGTERM stopped it; the summary covers the prompts done before.
    Interrupted,
}

/// The prompts the flags select, in the set's order.
fn select<'a>(set: &'a EvalSet, args: &EvalArgs) -> anyhow::Result<Vec<&'a Prompt>> {
    for id in &args.id {
        anyhow::ensure!(
            set.prompts.iter().any(|p| &p.id == id),
            "the set has no prompt with id {id:?}"
        );
    }
    let selected: Vec<&Prompt> = set
        .prompts
        .iter()
        .filter(|p| args.category.is_empty() || args.category.contains(&p.category))
        .filter(|p| args.id.is_empty() || args.id.contains(&p.id))
        .take(args.limit.unwrap_or(usize::MAX))
        .collect();
    anyhow::ensure!(!selected.is_empty(), "no prompt of the set fits the filters");
    Ok(selected)
}

async fn evaluate(args: &EvalArgs) -> anyhow::Result<Finished> {
    // From the start, so that an interrupted run still removes its fixture and sums up.
    let mut interrupt = listen(SignalKind::interrupt());
    let mut terminate = listen(SignalKind::terminate());
    let set = EvalSet::load(&args.set)?;
    let fixture = Fixture::create(&set.fixture)?;
    let tool_names = eval_toolkit(fixture.path())?.tool_names();
    set.check(&tool_names)
        .map_err(|e| anyhow::anyhow!("invalid evaluation set {}: {e}", args.set.display()))?;
    let prompts = select(&set, args)?;
    anyhow::ensure!(args.max_iters > 0, "--max-iters must be at least 1");
    let mut out = match &args.out {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };

    let file = load_config_file(args.model.config.as_deref())?;
    let tools = ToolSelection::new(
        args.tools.as_deref(),
        file.tools.as_deref(),
        args.no_builtin_tools,
    );
    let model = crate::setup::model::build_model(provider_config(&args.model, &file)?).await?;
    let model_name = model.model_name().to_owned();
    let workdir = fixture.path().canonicalize()?;
    let system = args
        .system
        .clone()
        .unwrap_or_else(|| set.system.clone())
        .replace("{workdir}", &workdir.display().to_string());
    let setup = Setup {
        model,
        system: &system,
        workdir: &workdir,
        max_iters: args.max_iters,
        timeout: args.timeout,
        tool_shim: crate::config::tool_shim(&args.model, &file),
        tools: &tools,
    };
    let today = Today::now();
    let mut records = Vec::with_capacity(prompts.len());
    let mut finished = Finished::All;
    for (index, prompt) in prompts.iter().enumerate() {
        // Dropping the prompt's future cancels its reply.
        let observed = tokio::select! {
            observed = run_prompt(&setup, prompt) => observed,
            () = received(&mut interrupt) => {
                finished = Finished::Interrupted;
                break;
            }
            () = received(&mut terminate) => {
                finished = Finished::Interrupted;
                break;
            }
        };
        let calls_score = score_calls(
            &prompt.calls,
            prompt.category.any_order(),
            prompt.allow_extra,
            &observed.calls,
        );
        let answered = answer_ok(&prompt.answer, observed.final_answer(), &today);
        let record = Record::new(
            &prompt.id,
            prompt.category,
            prompt.user_turns().into_iter().map(str::to_owned).collect(),
            observed.calls,
            observed.answers,
            calls_score,
            answered,
            observed.seconds,
            observed.stop_reason,
            observed.error,
        );
        progress(index + 1, prompts.len(), &record);
        if let Some(out) = out.as_mut() {
            serde_json::to_writer(&mut *out, &record)?;
            writeln!(out)?;
            // Each line as it comes: an interrupted run keeps the prompts done so far.
            out.flush()?;
        }
        records.push(record);
    }

    let command = command_line(std::iter::once("agentry".to_owned()).chain(std::env::args().skip(1)));
    if matches!(finished, Finished::Interrupted) {
        eprintln!(
            "interrupted: the summary covers the {} of {} prompts done",
            records.len(),
            prompts.len()
        );
    }
    let summary = Summary::new(
        model_name,
        args.set.display().to_string(),
        command,
        prompts.len(),
        &records,
    );
    let mut stdout = std::io::stdout().lock();
    let written = match args.json {
        true => serde_json::to_writer_pretty(&mut stdout, &summary)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(stdout)),
        false => write!(stdout, "{}", sanitize::multiline(&summary.table())),
    }
    .and_then(|()| stdout.flush());
    if let Err(e) = written {
        // Nobody reads the summary any more (`| head`): done, quietly.
        crate::terminal::output::exit_if_closed(&e);
        return Err(e.into());
    }
    Ok(finished)
}

fn listen(kind: SignalKind) -> Option<Signal> {
    signal(kind)
        .inspect_err(|e| tracing::warn!(error = %e, "cannot handle a signal: it will stop the run at once"))
        .ok()
}

/// One line on stderr per prompt; for a wrong one, what the model did.
fn progress(done: usize, total: usize, record: &Record) {
    let mark = |ok: bool| if ok { "ok" } else { "WRONG" };
    let width = total.to_string().len();
    let mut text = format!(
        "[{done:>width$}/{total}] {:<14} calls {:<5} answer {:<5} {:>6.1}s  {}",
        sanitize::short(&record.id, 40),
        mark(record.call_ok),
        mark(record.answer_ok),
        record.seconds,
        record.stop_reason.as_deref().unwrap_or("-"),
    );
    if !record.ok {
        let calls: Vec<String> = record
            .calls
            .iter()
            .map(|c| format!("{}({})", c.tool, c.args))
            .collect();
        text.push_str(&format!(
            "\n      calls: {}\n      answer: {}",
            sanitize::short(&calls.join(", "), SHOWN_CHARS),
            sanitize::short(&record.answer, SHOWN_CHARS)
        ));
    }
    if let Some(error) = &record.error {
        text.push_str(&format!("\n      error: {}", sanitize::short(error, SHOWN_CHARS)));
    }
    eprintln!("{text}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::message::ToolUseBlock;
    use agentry::tool::{CancellationToken, ToolContext, ToolResponse};
    use futures::StreamExt;
    use serde_json::{Map, Value};
    use set::ArgMatch;

    fn committed_set() -> EvalSet {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../eval/tool-calls.json");
        EvalSet::load(&path).unwrap()
    }

    /// A value that fits `want`, when one can be written down (not for `expr`).
    fn example(want: &ArgMatch) -> Option<Value> {
        match want {
            ArgMatch::Is(value) => Some(value.clone()),
            ArgMatch::AnyOf(alternatives) => alternatives.iter().find_map(example),
            ArgMatch::Expr(_) => None,
        }
    }

    #[test]
    fn the_committed_set_is_complete_and_names_only_existing_tools() {
        let set = committed_set();
        let fixture = Fixture::create(&set.fixture).unwrap();
        let tools = eval_toolkit(fixture.path()).unwrap().tool_names();
        set.check(&tools).unwrap();
        assert!(set.prompts.len() >= 44, "{} prompts", set.prompts.len());
        for category in Category::ALL {
            let n = set.prompts.iter().filter(|p| p.category == category).count();
            assert!(n >= 5, "{} has {n} prompts", category.name());
        }
        assert!(!tools.contains(&"write_file".to_owned()));
        assert!(set.system.contains("{workdir}"));
    }

    /// Every expected call whose arguments can be written down runs without error on the
    /// fixture: no typo in a path, an order number or a symbol makes a prompt impossible.
    #[tokio::test]
    async fn the_expected_calls_of_the_committed_set_work() {
        let set = committed_set();
        let fixture = Fixture::create(&set.fixture).unwrap();
        let toolkit = eval_toolkit(fixture.path()).unwrap();
        let mut ran = 0;
        for prompt in &set.prompts {
            for call in prompt.calls.iter().flat_map(set::Step::alternatives) {
                let Some(args) = call
                    .args
                    .iter()
                    .map(|(name, want)| example(want).map(|v| (name.clone(), v)))
                    .collect::<Option<Map<String, Value>>>()
                else {
                    continue;
                };
                let args: Map<String, Value> = args.into_iter().filter(|(_, v)| !v.is_null()).collect();
                let block = ToolUseBlock {
                    id: "c".into(),
                    name: call.tool.clone(),
                    input: Value::Object(args.clone()),
                    raw_input: None,
                };
                let chunks: Vec<ToolResponse> = toolkit
                    .call(
                        &block,
                        ToolContext::new("c", &call.tool, CancellationToken::new()),
                    )
                    .collect()
                    .await;
                let last = chunks.last().unwrap();
                assert!(
                    !last.is_error,
                    "{}: {}({args:?}) failed: {}",
                    prompt.id,
                    call.tool,
                    last.text_content()
                );
                ran += 1;
            }
        }
        assert!(ran >= 30, "only {ran} calls could be tried");
    }
}
