//! [`LocalModel`]: the engine behind the `ChatModel` trait.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry::message::{ContentBlock, Msg, Role, ToolUseBlock, new_id};
use agentry::model::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, ChatUsage, ModelError, ToolChoice, ToolSchema,
    may_start_text_call, parse_text_calls,
};
use futures::StreamExt;
use serde_json::Value;
use tokenizers::Tokenizer;
use tokio::sync::mpsc;

use crate::constrain::Shape;
use crate::engine::{Chosen, End, Engine, Generated, MOST_CALLS_PER_TURN, TurnShape};
use crate::plan::{PLAN_MAX_TOKENS, PLAN_PREFILL, PlanMemo, ReplyProgress, Step, parse_plan, plan_shape};
use crate::{ChatTemplate, LocalModelError, Sampler};

/// What small models need to hear to answer after a tool result instead of calling the tool
/// again (measured: 0 of 6 plain answers without it, 4 of 4 with it).
pub const ANSWER_AFTER_TOOLS_HINT: &str = "Call a tool only when you need one. When a tool result gives you what you need, answer the user in plain text and do not call the tool again.";

/// In the answer step of a planned reply (every planned tool called), the user's question
/// again right where the model answers: a small model then answers every part of it rather
/// than the last result alone. Only in the prompt, never in memory.
fn question_again(question: &str) -> Msg {
    Msg::user(format!(
        "(Now answer my question \"{}\" in full, every part of it, with the tool results above.)",
        question.trim()
    ))
}

/// Said after a question the plan found no tool for, right where the model answers: told
/// only that it may not call, a small model writes an imitation of the call it wanted (a
/// fenced `{"name": "send_email", ...}`) instead of saying it cannot. Only in the prompt, never
/// in memory.
const NO_TOOL_NOTE: &str = "(No tool is needed for this, and no tool above can do it: answer in plain words \
     yourself. If I asked for something to be done that none of the tools does, say that you cannot do it.)";

/// What a forced call turn begins with: Qwen's call tag, so the call constraint holds from the
/// first token.
const CALL_PREFILL: &str = "<tool_call>\n";

/// The default bound of the prompt prefixes saved on disk: 400 MB, a few system blocks with
/// long tool lists for the default model (its keys and values take 57 KB per token).
pub const DEFAULT_PREFIX_CACHE_SIZE: u64 = 400_000_000;

/// How the local model generates.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LocalModelConfig {
    /// The longest answer, in tokens (default 1024).
    pub max_tokens: usize,
    /// How tokens are chosen (default greedy).
    pub sampler: Sampler,
    /// Append [`ANSWER_AFTER_TOOLS_HINT`] to the system prompt when tools are offered (default on).
    pub answer_hint: bool,
    /// The name reported by `model_name` (default: the file name).
    pub name: Option<String>,
    /// Save the keys and values of the prompt's system block (system prompt and tool
    /// descriptions) in this directory, so that the next process skips running it again,
    /// or the part it shares with a saved one (default: nowhere).
    pub prefix_cache_dir: Option<std::path::PathBuf>,
    /// The most bytes the saved prefixes may take in that directory (default
    /// [`DEFAULT_PREFIX_CACHE_SIZE`]; 0 saves nothing). The prefixes used longest ago go first.
    pub prefix_cache_size: u64,
    /// Keep every tool call the model writes valid for the offered tools and their schemas,
    /// token by token (default on; see the crate docs).
    pub constrain_calls: bool,
    /// Plan each question's tools before answering (default on; needs `constrain_calls`): the
    /// model first chooses, constrained to the offered names, which tools the question needs;
    /// each is then called, one per turn, before it may answer in text. Small models otherwise
    /// answer one part of a question with several.
    pub plan_calls: bool,
}

impl Default for LocalModelConfig {
    fn default() -> Self {
        LocalModelConfig {
            max_tokens: 1024,
            sampler: Sampler::Greedy,
            answer_hint: true,
            name: None,
            constrain_calls: true,
            plan_calls: true,
            prefix_cache_dir: None,
            prefix_cache_size: DEFAULT_PREFIX_CACHE_SIZE,
        }
    }
}

impl LocalModelConfig {
    /// Saves the system block's keys and values in `dir` between processes.
    pub fn prefix_cache_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.prefix_cache_dir = Some(dir.into());
        self
    }

    /// Bounds the saved prefixes to `bytes` (0 saves none).
    pub fn prefix_cache_size(mut self, bytes: u64) -> Self {
        self.prefix_cache_size = bytes;
        self
    }

    /// Turns the call constraint on or off.
    pub fn constrain_calls(mut self, on: bool) -> Self {
        self.constrain_calls = on;
        self
    }

    /// Turns the planning of each question's tools on or off.
    pub fn plan_calls(mut self, on: bool) -> Self {
        self.plan_calls = on;
        self
    }

    /// Sets the longest answer in tokens.
    pub fn max_tokens(mut self, max_tokens: usize) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Sets the sampler.
    pub fn sampler(mut self, sampler: Sampler) -> Self {
        self.sampler = sampler;
        self
    }

    /// Turns the answer-after-tools hint on or off.
    pub fn answer_hint(mut self, on: bool) -> Self {
        self.answer_hint = on;
        self
    }

    /// Sets the reported model name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// Figures of the last call and of all calls since the model was loaded, for `--verbose` and
/// the benchmarks.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LocalStats {
    /// Time to read the file and build the model.
    pub load_time: Duration,
    /// Prompt tokens of the last call.
    pub prompt_tokens: usize,
    /// Of those, how many came from the cache of the previous call or from disk.
    pub reused_tokens: usize,
    /// Of those, how many were read from the prefixes saved on disk.
    pub stored_tokens: usize,
    /// Tokens generated by the last call.
    pub generated_tokens: usize,
    /// Time to run the prompt tokens that were not cached.
    pub prompt_time: Duration,
    /// Time to generate.
    pub generation_time: Duration,
    /// The same figures added up over every call since the model was loaded.
    pub totals: LocalTotals,
}

/// Figures added up over calls.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LocalTotals {
    /// Calls (generations).
    pub calls: usize,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of those, how many came from the cache (of an earlier call, or from disk).
    pub reused_tokens: usize,
    /// Of those, how many were read from the prefixes saved on disk.
    pub stored_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Generated tokens the call constraint chose instead of the model's pick.
    pub corrected_tokens: usize,
    /// Time spent on the prompt tokens that were not cached.
    pub prompt_time: Duration,
    /// Time spent generating.
    pub generation_time: Duration,
}

impl LocalTotals {
    /// Prompt tokens run per second (the cached ones excluded).
    pub fn prompt_tokens_per_second(&self) -> f64 {
        rate(
            self.prompt_tokens.saturating_sub(self.reused_tokens),
            self.prompt_time,
        )
    }

    /// Tokens generated per second.
    pub fn generation_tokens_per_second(&self) -> f64 {
        rate(self.generated_tokens, self.generation_time)
    }

    /// The share of prompt tokens that came from the cache, from 0 to 1.
    pub fn cache_hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.reused_tokens as f64 / self.prompt_tokens as f64
        }
    }

    /// About how long running the cached prompt tokens would have taken, at the speed the
    /// prompt tokens that did run were read.
    pub fn prompt_time_saved(&self) -> Duration {
        let speed = self.prompt_tokens_per_second();
        if speed > 0.0 {
            Duration::from_secs_f64(self.reused_tokens as f64 / speed)
        } else {
            Duration::ZERO
        }
    }
}

fn rate(tokens: usize, time: Duration) -> f64 {
    let seconds = time.as_secs_f64();
    if seconds > 0.0 {
        tokens as f64 / seconds
    } else {
        0.0
    }
}

/// A GGUF model running in this process. Calls take turns: one generation at a time (the
/// cache holds one conversation, and the CPU has no room for two).
#[derive(Clone)]
pub struct LocalModel {
    name: String,
    engine: Arc<Mutex<Engine>>,
    config: LocalModelConfig,
    stats: Arc<Mutex<LocalStats>>,
    /// The tools planned for the question being answered (see [`crate::plan`]).
    plans: Arc<Mutex<PlanMemo>>,
    /// The engine's tokenizer and template, to count a prompt while the engine generates.
    tokenizer: Arc<Tokenizer>,
    template: Arc<ChatTemplate>,
    /// The context length the model was trained for.
    trained_context: usize,
}

/// The context window the embedded model reports for compaction: prompts past 80 % of it are
/// compacted. Smaller than what the models were trained for (32,768 tokens), because on a CPU
/// every token of a long prompt costs time and memory; `--context-window` sets another.
pub const DEFAULT_LOCAL_CONTEXT_WINDOW: usize = 8192;

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LocalModel {
    /// Loads a GGUF file (blocking: seconds for a 1 GB model).
    pub fn load(path: impl AsRef<Path>, config: LocalModelConfig) -> Result<LocalModel, LocalModelError> {
        let path = path.as_ref();
        let mut engine = Engine::load(path)?;
        if let Some(dir) = &config.prefix_cache_dir {
            engine.keep_prefixes_in(dir, path, config.prefix_cache_size);
        }
        let name = config.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "local".into())
        });
        let stats = LocalStats {
            load_time: engine.load_time,
            ..LocalStats::default()
        };
        Ok(LocalModel {
            name,
            tokenizer: Arc::clone(&engine.tokenizer),
            template: Arc::clone(&engine.template),
            trained_context: engine.context(),
            engine: Arc::new(Mutex::new(engine)),
            config,
            stats: Arc::new(Mutex::new(stats)),
            plans: Arc::default(),
        })
    }

    /// Drops the cached keys and values: the next call runs its whole prompt (for
    /// measurements, or to give the memory back between conversations).
    pub fn forget_cache(&self) -> Result<(), LocalModelError> {
        let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        engine.forget()
    }

    /// Figures of the last call and totals since loading.
    pub fn stats(&self) -> LocalStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The model's tokens for `text`, as a prompt is read (to count a prompt's tokens).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, LocalModelError> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| LocalModelError::Generation(format!("cannot tokenize the prompt: {e}")))?
            .get_ids()
            .to_vec())
    }

    /// The prompt this model would see for `request` (what the template renders).
    pub fn render_prompt(&self, request: &ChatRequest) -> Result<String, LocalModelError> {
        let (messages, tools) = self.prompt_parts(request);
        self.template.render(&messages, &tools)
    }

    /// The context length the model was trained for (from its file).
    pub fn trained_context(&self) -> usize {
        self.trained_context
    }

    fn prompt_parts(&self, request: &ChatRequest) -> (Vec<Msg>, Vec<ToolSchema>) {
        let tools: Vec<ToolSchema> = match request.tool_choice {
            Some(ToolChoice::None) => Vec::new(),
            _ => request.tools.to_vec(),
        };
        let mut messages = request.messages.clone();
        if !tools.is_empty() && self.config.answer_hint {
            match messages.first_mut() {
                Some(first) if first.role == Role::System => {
                    let text = first.text().unwrap_or_default();
                    *first = Msg::system(format!("{text}\n\n{ANSWER_AFTER_TOOLS_HINT}"));
                }
                _ => messages.insert(0, Msg::system(ANSWER_AFTER_TOOLS_HINT)),
            }
        }
        (messages, tools)
    }

    /// Runs one call on a blocking thread, sending cumulative responses to `tx`.
    fn generate(&self, request: ChatRequest, tx: mpsc::UnboundedSender<Result<ChatResponse, ModelError>>) {
        let started = Instant::now();
        let (mut messages, tools) = self.prompt_parts(&request);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let id = new_id();
        let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        let step = match self.step(&mut engine, &request, &messages, &tools) {
            Ok(step) => step,
            Err(e) => {
                let _ = tx.send(Err(ModelError::Stream(e.to_string())));
                return;
            }
        };
        let (prefill, calls, most_calls) = match &step {
            Step::Call(missing) => {
                let planned = tools.iter().filter(|t| missing.contains(&t.name));
                let shape = Shape::call(planned.map(|t| (t.name.as_str(), &t.parameters)));
                (CALL_PREFILL, Some(shape), 1)
            }
            // The answer, with no call: small models otherwise call again what they have.
            Step::Direct | Step::Answer(_) => ("", None, 0),
            _ => {
                let shape = (self.config.constrain_calls && !tools.is_empty())
                    .then(|| Shape::call(tools.iter().map(|t| (t.name.as_str(), &t.parameters))));
                ("", shape, MOST_CALLS_PER_TURN)
            }
        };
        match &step {
            Step::Answer(question) => messages.push(question_again(question)),
            Step::Direct => messages.push(Msg::user(NO_TOOL_NOTE)),
            _ => {}
        }
        let outcome = engine.template.render(&messages, &tools).and_then(|prompt| {
            let mut shown = 0;
            let turn = TurnShape {
                prefill,
                calls: calls.as_ref(),
                most_calls,
            };
            engine.generate(
                &prompt,
                &turn,
                &self.config.sampler,
                request.max_tokens.map_or(self.config.max_tokens, |cap| {
                    (cap as usize).min(self.config.max_tokens)
                }),
                |text| {
                    let visible = if names.is_empty() {
                        text
                    } else {
                        visible_part(text)
                    };
                    if visible.len() > shown {
                        shown = visible.len();
                        let partial = ChatResponse {
                            id: id.clone(),
                            content: vec![ContentBlock::text(visible)],
                            ..ChatResponse::default()
                        };
                        return tx.send(Ok(partial)).is_ok();
                    }
                    !tx.is_closed()
                },
            )
        });
        drop(engine);
        match outcome {
            Ok(generated) if generated.end == End::Abandoned => {}
            Ok(generated) => {
                tracing::debug!(
                    step = ?step,
                    text = %generated.text,
                    end = ?generated.end,
                    tokens = generated.generated_tokens,
                    "the local model's turn"
                );
                self.record(&generated);
                // A turn that may hold no call is all text, even where it looks like one.
                let callable = if most_calls == 0 { &[][..] } else { &names[..] };
                let _ = tx.send(Ok(final_response(id, &generated, callable, started.elapsed())));
            }
            Err(e) => {
                let _ = tx.send(Err(ModelError::Stream(e.to_string())));
            }
        }
    }

    /// What this turn must be: planned replies call their tools before answering.
    fn step(
        &self,
        engine: &mut Engine,
        request: &ChatRequest,
        messages: &[Msg],
        tools: &[ToolSchema],
    ) -> Result<Step, LocalModelError> {
        let planning = self.config.plan_calls
            && self.config.constrain_calls
            && !tools.is_empty()
            && matches!(request.tool_choice, None | Some(ToolChoice::Auto));
        let Some(progress) = ReplyProgress::of(messages).filter(|_| planning) else {
            return Ok(Step::Free);
        };
        let key = PlanMemo::key(&progress.question, tools);
        let known = self.plans.lock().unwrap_or_else(|e| e.into_inner()).get(&key);
        let plan = match known {
            Some(plan) => plan,
            None => {
                // The prompt as it was when the reply began: its cached prefix serves the choice.
                let prompt = engine
                    .template
                    .render(&messages[..=progress.question_at], tools)?;
                let chosen = engine.choose(
                    &format!("{prompt}{PLAN_PREFILL}"),
                    &plan_shape(&progress.question, tools),
                    PLAN_MAX_TOKENS,
                )?;
                self.record_choice(&chosen);
                tracing::debug!(choice = %chosen.text, "the local model's plan");
                let Some(plan) = parse_plan(&chosen.text, &progress.question) else {
                    return Ok(Step::Free);
                };
                let plan = Arc::new(plan);
                self.plans
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .put(key, plan.clone());
                plan
            }
        };
        Ok(progress.step(&plan))
    }

    fn record_choice(&self, chosen: &Chosen) {
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let totals = &mut stats.totals;
        totals.prompt_tokens += chosen.prompt_tokens;
        totals.reused_tokens += chosen.reused_tokens;
        totals.stored_tokens += chosen.stored_tokens;
        totals.generated_tokens += chosen.generated_tokens;
        totals.prompt_time += chosen.prompt_time;
        totals.generation_time += chosen.generation_time;
    }

    fn record(&self, generated: &Generated) {
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.prompt_tokens = generated.prompt_tokens;
        stats.reused_tokens = generated.reused_tokens;
        stats.stored_tokens = generated.stored_tokens;
        stats.generated_tokens = generated.generated_tokens;
        stats.prompt_time = generated.prompt_time;
        stats.generation_time = generated.generation_time;
        let totals = &mut stats.totals;
        totals.calls += 1;
        totals.prompt_tokens += generated.prompt_tokens;
        totals.reused_tokens += generated.reused_tokens;
        totals.stored_tokens += generated.stored_tokens;
        totals.generated_tokens += generated.generated_tokens;
        totals.corrected_tokens += generated.corrected_tokens;
        totals.prompt_time += generated.prompt_time;
        totals.generation_time += generated.generation_time;
    }
}

/// The text that can be shown while generating: everything before what may be the start of a
/// call written as text (shown later, as text, if it turns out not to be one).
fn visible_part(text: &str) -> &str {
    let mut cut = text.len();
    for opener in ["<tool_call>", "```", "{"] {
        if let Some(at) = text.find(opener) {
            cut = cut.min(at);
        }
    }
    // A partial opener at the very end ("<tool", "``").
    for (at, _) in text.char_indices().rev().take(11) {
        if at < cut && may_start_text_call(&text[at..]) {
            cut = at;
        }
    }
    &text[..cut]
}

fn final_response(id: String, generated: &Generated, tools: &[&str], time: Duration) -> ChatResponse {
    let parsed = parse_text_calls(&generated.text, tools);
    let mut content = Vec::new();
    let text = if parsed.calls.is_empty() {
        generated.text.trim()
    } else {
        parsed.text.as_str()
    };
    if !text.is_empty() {
        content.push(ContentBlock::text(text));
    }
    let has_calls = !parsed.calls.is_empty();
    for call in parsed.calls {
        content.push(ContentBlock::ToolUse(ToolUseBlock {
            id: format!("call_{}", new_id()).into(),
            name: call.name,
            input: Value::Object(call.arguments),
            raw_input: Some(call.raw_arguments),
        }));
    }
    let finish_reason = match (has_calls, generated.end) {
        (true, _) => "tool_calls",
        (false, End::Length) => "length",
        _ => "stop",
    };
    ChatResponse {
        id,
        content,
        usage: Some(ChatUsage {
            input_tokens: generated.prompt_tokens as u64,
            output_tokens: generated.generated_tokens as u64,
            time,
            ..ChatUsage::default()
        }),
        finish_reason: Some(finish_reason.to_owned()),
    }
}

impl ChatModel for LocalModel {
    fn model_name(&self) -> &str {
        &self.name
    }

    fn provider_name(&self) -> &str {
        "agentry.local"
    }

    fn is_streaming(&self) -> bool {
        true
    }

    /// Small models call the same tool again and again instead of answering.
    fn repeats_tool_calls(&self) -> bool {
        true
    }

    /// [`DEFAULT_LOCAL_CONTEXT_WINDOW`], or less when the model was trained for less.
    fn context_window(&self) -> Option<u64> {
        Some(self.trained_context.min(DEFAULT_LOCAL_CONTEXT_WINDOW) as u64)
    }

    /// The tokens of the prompt the template renders for `request`, exactly.
    fn count_tokens(&self, request: &ChatRequest) -> Option<u64> {
        let prompt = self.render_prompt(request).ok()?;
        self.tokenize(&prompt).ok().map(|tokens| tokens.len() as u64)
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let model = self.clone();
        // Nothing runs until the stream is polled; dropping the stream stops the generation
        // at the next token.
        futures::stream::once(async move {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::task::spawn_blocking(move || model.generate(request, tx));
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
        })
        .flatten()
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_may_start_a_call_is_held_back() {
        assert_eq!(visible_part("Hello there"), "Hello there");
        assert_eq!(visible_part("Sure.\n```json\n{\"name\""), "Sure.\n");
        assert_eq!(visible_part("Sure. <tool"), "Sure.");
        assert_eq!(visible_part("{\"name\": \"add\""), "");
        assert_eq!(visible_part("Sure ``"), "Sure");
    }
}
