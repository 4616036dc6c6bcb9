//! Running one prompt: a fresh agent (own memory, own toolkit) over the shared model, its calls
//! observed through the agent's events.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::CallId;
use agentry::agent::{AgentEvent, ReActAgent, StopReason};
use agentry::message::Msg;
use agentry::model::ChatModel;

use super::score::CallMade;
use super::set::Prompt;
use super::tools::eval_toolkit;
use crate::setup::tools::ToolSelection;

/// What happened when a prompt ran.
#[derive(Debug, Default)]
pub struct Observed {
    /// Every call the agent started, over all turns, in order.
    pub calls: Vec<CallMade>,
    /// The answer to each turn that finished.
    pub answers: Vec<String>,
    /// Why the last reply ended.
    pub stop_reason: Option<String>,
    /// What went wrong: a failed reply, a timeout. The turns after it did not run.
    pub error: Option<String>,
    /// Wall time of the whole conversation.
    pub seconds: f64,
}

impl Observed {
    /// The answer to the last turn (empty when it never finished).
    pub fn final_answer(&self) -> &str {
        self.answers.last().map(String::as_str).unwrap_or_default()
    }
}

/// How an agent for one prompt is set up.
pub struct Setup<'a> {
    /// The model, shared by every prompt.
    pub model: Arc<dyn ChatModel>,
    /// The system prompt.
    pub system: &'a str,
    /// The working directory of the file tools.
    pub workdir: &'a Path,
    /// Rounds per reply.
    pub max_iters: usize,
    /// Longest time for the whole conversation.
    pub timeout: Duration,
    /// Whether calls the model writes as text are recovered (`--no-tool-shim` turns it off).
    pub tool_shim: bool,
    /// The tools offered (`--tools`, `--no-builtin-tools`).
    pub tools: &'a ToolSelection,
}

/// Runs `prompt`'s turns in one conversation with a fresh agent. Never fails: what goes wrong
/// is recorded in [`Observed::error`].
pub async fn run_prompt(setup: &Setup<'_>, prompt: &Prompt) -> Observed {
    let started = Instant::now();
    let mut observed = Observed::default();
    let converse = converse(setup, prompt, &mut observed);
    let outcome = tokio::time::timeout(setup.timeout, converse).await;
    // On a timeout the conversation future is dropped here, and with it the running reply,
    // which cancels it (and a local model's generation with it).
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => observed.error = Some(format!("{e:#}")),
        Err(_) => observed.error = Some(format!("timed out after {} s", setup.timeout.as_secs_f64())),
    }
    observed.seconds = started.elapsed().as_secs_f64();
    observed
}

async fn converse(setup: &Setup<'_>, prompt: &Prompt, observed: &mut Observed) -> anyhow::Result<()> {
    let agent = ReActAgent::builder()
        .name("agentry")
        .sys_prompt(setup.system)
        .model(Arc::clone(&setup.model))
        .toolkit(offered(eval_toolkit(setup.workdir)?, setup.tools))
        .max_iters(setup.max_iters)
        .tool_shim(setup.tool_shim)
        .build()?;
    for turn in prompt.user_turns() {
        let mut run = agent.start_reply(Msg::user(turn));
        // The index in `observed.calls` of each call still running.
        let mut running: Vec<(CallId, usize)> = Vec::new();
        // Calls the model wrote as text, which the agent turned into real calls.
        let mut recovered: HashSet<CallId> = HashSet::new();
        while let Some(event) = run.next_event().await {
            match event {
                AgentEvent::TextCallsRecovered { call_ids, .. } => recovered.extend(call_ids),
                AgentEvent::ToolStarted {
                    call_id, name, input, ..
                } => {
                    let from_text = recovered.contains(&call_id);
                    running.push((call_id, observed.calls.len()));
                    observed.calls.push(CallMade {
                        tool: name,
                        args: input,
                        failed: false,
                        from_text,
                    });
                }
                AgentEvent::ToolFinished { call_id, state, .. } => {
                    if let Some(&(_, index)) = running.iter().find(|(id, _)| *id == call_id)
                        && let Some(call) = observed.calls.get_mut(index)
                    {
                        call.failed = state.is_error();
                    }
                }
                AgentEvent::ReplyFinished { stop_reason, .. } => {
                    observed.stop_reason = Some(stop_name(&stop_reason));
                    if let StopReason::Failed(why) = stop_reason {
                        observed.error = Some(why);
                    }
                }
                _ => {}
            }
        }
        let answer = run.finish().await?;
        if observed.error.is_some() {
            break;
        }
        observed.answers.push(answer.text().unwrap_or_default());
    }
    Ok(())
}

/// A stop reason's name, as the protocol spells it (`answered`, `max_iters`, ...).
fn stop_name(reason: &StopReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_owned))
        .unwrap_or_else(|| format!("{reason:?}"))
}

/// The evaluation's tools, as `selection` offers them.
fn offered(toolkit: agentry::tool::Toolkit, selection: &ToolSelection) -> agentry::tool::Toolkit {
    if !selection.builtin {
        for name in agentry_tools::BUILTIN_TOOL_NAMES {
            toolkit.remove(name);
        }
    }
    selection.apply(&toolkit);
    toolkit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_are_named_as_on_the_wire() {
        assert_eq!(stop_name(&StopReason::Answered), "answered");
        assert_eq!(stop_name(&StopReason::MaxIters), "max_iters");
        assert_eq!(stop_name(&StopReason::RepeatedCalls), "repeated_calls");
        assert_eq!(stop_name(&StopReason::Failed("x".into())), "failed");
    }
}
