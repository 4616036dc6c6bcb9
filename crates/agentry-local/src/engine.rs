//! One loaded model: weights, tokenizer, template, and the generation loop with prefix reuse.

use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use std::sync::Arc;

use tokenizers::Tokenizer;

use crate::constrain::{Acceptor, CallState, Shape, call_position};
use crate::prefix_store::PrefixStore;
use crate::qwen2::{Qwen2, argmax};
use crate::template::ChatTemplate;
use crate::turn::{CallTurn, Next};
use crate::{LocalModelError, Sampler};

mod choose;

pub(crate) use choose::Chosen;

/// The most tool calls one turn may hold; more are cut.
pub(crate) const MOST_CALLS_PER_TURN: usize = 8;

/// What a turn may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnShape<'a> {
    /// Text put in the model's mouth: the turn begins with it (part of the returned text).
    pub(crate) prefill: &'a str,
    /// The calls the turn may hold, kept valid token by token; `None` leaves them free.
    pub(crate) calls: Option<&'a Shape>,
    /// The most calls the turn may hold; the turn ends once the last one is closed.
    pub(crate) most_calls: usize,
}

/// What one generation produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Generated {
    pub(crate) text: String,
    /// Tokens of the prompt.
    pub(crate) prompt_tokens: usize,
    /// Prompt tokens whose keys and values were already cached (not run again).
    pub(crate) reused_tokens: usize,
    /// Of those, the tokens read from the prefix store on disk.
    pub(crate) stored_tokens: usize,
    pub(crate) generated_tokens: usize,
    /// Tokens the call constraint chose instead of the model's pick.
    pub(crate) corrected_tokens: usize,
    pub(crate) end: End,
    pub(crate) prompt_time: Duration,
    pub(crate) generation_time: Duration,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The model ended its turn.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The caller stopped listening.
    Abandoned,
}

/// The loaded model. Not shared: callers take turns (see `LocalModel`).
pub(crate) struct Engine {
    model: Qwen2,
    /// Shared with the model's handle, which counts prompts without waiting for a generation.
    pub(crate) tokenizer: Arc<Tokenizer>,
    pub(crate) template: Arc<ChatTemplate>,
    stop_tokens: Vec<u32>,
    /// What the call constraint knows of the vocabulary.
    tokens: TokenTexts,
    /// Where the system block's keys and values are saved between processes, if anywhere.
    prefix_store: Option<PrefixStore>,
    /// `<|im_start|>`: where a message begins.
    message_start: Option<u32>,
    /// The tokens whose keys and values the cache holds, in order.
    seen: Vec<u32>,
    pub(crate) load_time: Duration,
}

impl Engine {
    /// Reads a GGUF file: metadata, tokenizer, template, weights.
    pub(crate) fn load(path: &Path) -> Result<Engine, LocalModelError> {
        let started = Instant::now();
        let bad = |reason: String| LocalModelError::BadFile {
            path: path.to_owned(),
            reason,
        };
        let mut file = std::fs::File::open(path).map_err(|e| LocalModelError::Open {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let content =
            gguf_file::Content::read(&mut file).map_err(|e| bad(format!("not a readable GGUF file: {e}")))?;
        let architecture = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if architecture != "qwen2" {
            return Err(LocalModelError::Unsupported(format!(
                "the model's architecture is {architecture:?}; only qwen2 (Qwen2 and Qwen2.5) runs in-process"
            )));
        }
        let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let needed = content
            .tensor_infos
            .values()
            .map(|info| {
                let elements = info.shape.elem_count() as u64;
                content.tensor_data_offset
                    + info.offset
                    + elements / info.ggml_dtype.block_size() as u64 * info.ggml_dtype.type_size() as u64
            })
            .max()
            .unwrap_or(0);
        if needed > file_len {
            return Err(bad(format!(
                "the file is truncated: its tensors need {needed} bytes, it has {file_len}"
            )));
        }
        let tokenizer =
            Tokenizer::from_gguf(&content).map_err(|e| bad(format!("no usable tokenizer: {e}")))?;
        let template_source = content
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .ok_or_else(|| bad("no chat template (tokenizer.chat_template)".into()))?;
        let token_text = |key: &str| -> String {
            content
                .metadata
                .get(key)
                .and_then(|v| v.to_u32().ok())
                .and_then(|id| tokenizer.id_to_token(id))
                .unwrap_or_default()
        };
        let template = ChatTemplate::new(
            &template_source,
            &token_text("tokenizer.ggml.bos_token_id"),
            &token_text("tokenizer.ggml.eos_token_id"),
        )?;
        // A model that starts another message (`<|im_start|>`) has ended its own: seen as the
        // whole answer of a 1.5B model otherwise.
        let mut stop_tokens: Vec<u32> = ["<|im_end|>", "<|endoftext|>", "<|im_start|>"]
            .iter()
            .filter_map(|t| tokenizer.token_to_id(t))
            .collect();
        if let Some(eos) = content
            .metadata
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.to_u32().ok())
            && !stop_tokens.contains(&eos)
        {
            stop_tokens.push(eos);
        }
        let mut special_tokens: Vec<u32> = tokenizer.get_added_tokens_decoder().into_keys().collect();
        special_tokens.sort_unstable();
        let vocabulary = tokenizer.get_vocab_size(true);
        let device = Device::Cpu;
        let model = Qwen2::load(&content, |name| content.tensor(&mut file, name, &device), &device)
            .map_err(|e| bad(format!("cannot load the weights: {e}")))?;
        let message_start = tokenizer.token_to_id("<|im_start|>");
        Ok(Engine {
            model,
            tokenizer: Arc::new(tokenizer),
            template: Arc::new(template),
            stop_tokens,
            tokens: TokenTexts {
                special: special_tokens,
                texts: vec![None; vocabulary],
            },
            prefix_store: None,
            message_start,
            seen: Vec::new(),
            load_time: started.elapsed(),
        })
    }

    /// Empties the cache.
    pub(crate) fn forget(&mut self) -> Result<(), LocalModelError> {
        truncate(&mut self.model, &mut self.seen, 0)
    }

    /// Saves and reads system blocks' keys and values in `dir`, in at most `budget` bytes
    /// (see [`PrefixStore`]).
    pub(crate) fn keep_prefixes_in(&mut self, dir: &Path, model: &Path, budget: u64) {
        self.prefix_store = PrefixStore::new(dir, model, budget);
    }

    /// The model's tokens for `text` (special tokens written out, like `<|im_start|>`, are read
    /// as such).
    /// The context length the model was trained for.
    pub(crate) fn context(&self) -> usize {
        self.model.context()
    }

    pub(crate) fn tokenize(&self, text: &str) -> Result<Vec<u32>, LocalModelError> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| LocalModelError::Generation(format!("cannot tokenize the prompt: {e}")))?
            .get_ids()
            .to_vec())
    }

    /// The length of the prompt's system block (up to the second message), when there is one
    /// long enough to be worth saving.
    fn system_block(&self, tokens: &[u32]) -> Option<usize> {
        let start = self.message_start?;
        if tokens.first() != Some(&start) {
            return None;
        }
        let second = tokens.iter().skip(1).position(|t| *t == start)? + 1;
        (second >= 64).then_some(second)
    }

    /// Generates the model's turn after `prompt`, shaped by `turn` (see [`TurnShape`];
    /// calls are constrained as [`crate::constrain`] says). `on_text` gets the whole text so
    /// far after each token and returns false to stop.
    pub(crate) fn generate(
        &mut self,
        prompt: &str,
        turn: &TurnShape<'_>,
        sampler: &Sampler,
        max_tokens: usize,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generated, LocalModelError> {
        let started = Instant::now();
        let TurnShape {
            prefill,
            calls,
            most_calls,
        } = *turn;
        let read = self.read_prompt(&format!("{prompt}{prefill}"))?;
        let (tokens, common, mut logits) = (read.tokens, read.reused, read.logits);
        let prompt_time = started.elapsed();
        let generating = Instant::now();
        let mut processor = match *sampler {
            Sampler::Greedy => None,
            Sampler::TopP {
                temperature,
                top_p,
                seed,
            } => Some(LogitsProcessor::from_sampling(
                seed,
                Sampling::TopP {
                    p: top_p,
                    temperature,
                },
            )),
        };
        let mut generated = 0;
        let mut corrected = 0;
        let mut call_state = CallState::Free;
        // The calls of the turn, and what may follow them (`turn.rs`).
        let mut turn = CallTurn::new(most_calls);
        // A call began or ended with the last token; seen once its text is decoded.
        let (mut call_began, mut call_ended) = (false, false);
        // Decodes each token once; a character split over tokens waits for its last byte.
        let mut decoder = self.tokenizer.decode_stream(false);
        let mut text = prefill.to_owned();
        let mut end = End::Length;
        let budget = max_tokens.min(self.model.context().saturating_sub(tokens + 1));
        while generated < budget {
            let next = match processor.as_mut() {
                Some(processor) => processor.sample(&logits),
                None => argmax(&logits),
            }
            .map_err(|e| LocalModelError::Generation(e.to_string()))?;
            let next = match calls {
                // A turn that may hold no call: the answer.
                _ if most_calls == 0 => {
                    let chosen = self.tokens.avoid_call(&self.tokenizer, next, &logits, &text)?;
                    if chosen != next {
                        corrected += 1;
                    }
                    chosen
                }
                Some(shape) => {
                    let was_in_call = matches!(call_state, CallState::InCall(_));
                    let chosen = self.tokens.constrain(
                        &self.tokenizer,
                        next,
                        &logits,
                        shape,
                        &text,
                        &mut call_state,
                    )?;
                    if chosen != next {
                        corrected += 1;
                    }
                    let in_call = matches!(call_state, CallState::InCall(_));
                    call_began |= !was_in_call && in_call;
                    call_ended |= was_in_call && !in_call;
                    chosen
                }
                None => next,
            };
            if self.stop_tokens.contains(&next) {
                end = End::Stop;
                break;
            }
            generated += 1;
            let piece = decoder
                .step(next)
                .map_err(|e| LocalModelError::Generation(format!("cannot decode: {e}")))?;
            if let Some(piece) = piece {
                // Small models go on writing after their calls (another copy of one, a call
                // nobody constrains, an answer they have not got yet): after a call only its
                // closing, blank space and the next call's opening may come (`turn.rs`).
                if std::mem::take(&mut call_began) {
                    turn.call_started(&text, text.len());
                }
                text.push_str(&piece);
                let verdict = if std::mem::take(&mut call_ended) {
                    turn.call_complete(&text)
                } else if matches!(call_state, CallState::Free) {
                    turn.after(&text)
                } else {
                    Next::Go
                };
                if let Next::CutAt(at) = verdict {
                    text.truncate(at);
                    end = End::Stop;
                    break;
                }
                if !on_text(&text) {
                    end = End::Abandoned;
                    break;
                }
            }
            logits = run(&mut self.model, &mut self.seen, &[next])?;
        }
        Ok(Generated {
            text,
            prompt_tokens: tokens,
            reused_tokens: common,
            stored_tokens: read.stored,
            generated_tokens: generated,
            corrected_tokens: corrected,
            end,
            prompt_time,
            generation_time: generating.elapsed(),
        })
    }

    /// Tokenizes `prompt` and runs what the cache does not hold yet: the longest common prefix
    /// with the last prompt is reused, and the system block may come from disk.
    fn read_prompt(&mut self, prompt: &str) -> Result<ReadPrompt, LocalModelError> {
        let tokens = self.tokenize(prompt)?;
        if tokens.is_empty() {
            return Err(LocalModelError::Generation("the prompt is empty".into()));
        }
        if tokens.len() >= self.model.context() {
            return Err(LocalModelError::Generation(format!(
                "the conversation ({} tokens) does not fit the model's context of {} tokens",
                tokens.len(),
                self.model.context()
            )));
        }
        // At least the last prompt token runs, for its logits.
        let mut common = self
            .seen
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1);
        truncate(&mut self.model, &mut self.seen, common)?;
        // The system block may be on disk, whole or in part, from an earlier process.
        let mut stored = 0;
        let mut save_from = None;
        if let (Some(block), Some(store)) = (self.system_block(&tokens), &self.prefix_store)
            && block > common
        {
            let found = store.find(&tokens[..block], common);
            if found.len > common {
                match extend_from_store(&mut self.model, &found, common) {
                    Ok(()) => {
                        self.seen.extend_from_slice(&tokens[common..found.len]);
                        stored = found.len - common;
                        common = found.len;
                    }
                    Err(e) => {
                        tracing::debug!("cannot use the saved prompt prefix: {e}");
                        truncate(&mut self.model, &mut self.seen, common)?;
                    }
                }
            }
            if found.saved < block {
                save_from = Some((block, found.saved));
            }
        }
        let logits = run(&mut self.model, &mut self.seen, &tokens[common..])?;
        if let (Some((block, from)), Some(store)) = (save_from, &self.prefix_store) {
            let model = &self.model;
            store.save(&tokens[..block], from, |start, end| {
                model.export_cache(start, end)
            });
        }
        Ok(ReadPrompt {
            tokens: tokens.len(),
            reused: common,
            stored,
            logits,
        })
    }
}

/// A prompt read into the cache.
struct ReadPrompt {
    tokens: usize,
    /// Tokens that were cached already.
    reused: usize,
    /// Of those, the tokens read from the prefix store.
    stored: usize,
    /// The next token's logits.
    logits: Tensor,
}

/// The vocabulary as the call constraint sees it.
struct TokenTexts {
    /// Added (special) tokens, sorted: never part of a call.
    special: Vec<u32>,
    /// Each token's text, decoded on first use.
    texts: Vec<Option<String>>,
}

impl TokenTexts {
    /// The token to take instead of `proposed` so that no call begins: `proposed` itself
    /// unless it opens one, else the most likely token that does not.
    fn avoid_call(
        &mut self,
        tokenizer: &Tokenizer,
        proposed: u32,
        logits: &Tensor,
        text: &str,
    ) -> Result<u32, LocalModelError> {
        if !self.opens_call(tokenizer, proposed, text) {
            return Ok(proposed);
        }
        Ok(by_likelihood(logits)?
            .into_iter()
            .find(|candidate| !self.opens_call(tokenizer, *candidate, text))
            .unwrap_or(proposed))
    }

    /// Whether `token` after `text` opens a call: Qwen's tag, a JSON object or fence where
    /// a call may begin, or a tag at the start of a line outside code (small models kept from
    /// calling write `<tools>`, `<function ...>` or `</tool_response>` markup instead).
    fn opens_call(&mut self, tokenizer: &Tokenizer, token: u32, text: &str) -> bool {
        let piece = self.text(tokenizer, token);
        if piece.contains("<tool_call>") {
            return true;
        }
        let start = piece.trim_start();
        if let Some(at) = piece.find('<')
            && markup_may_start(text, &piece[..at])
        {
            return true;
        }
        call_position(text).is_some() && (start.starts_with('{') || start.starts_with("```"))
    }

    /// The token to take instead of `proposed` so that a call being written stays valid.
    fn constrain(
        &mut self,
        tokenizer: &Tokenizer,
        proposed: u32,
        logits: &Tensor,
        shape: &Shape,
        text: &str,
        state: &mut CallState,
    ) -> Result<u32, LocalModelError> {
        if let CallState::Free = state {
            match call_position(text) {
                Some(must) => {
                    let starts_object = self.text(tokenizer, proposed).trim_start().starts_with('{');
                    if !must && !starts_object {
                        return Ok(proposed);
                    }
                    *state = CallState::InCall(Acceptor::new(shape.clone()));
                }
                None => return Ok(proposed),
            }
        }
        let CallState::InCall(acceptor) = state else {
            return Ok(proposed);
        };
        if let Some(next) = self.accepted(tokenizer, acceptor, proposed) {
            *state = CallState::after(next);
            return Ok(proposed);
        }
        // The model's pick breaks the call: the most likely token that keeps it.
        for candidate in by_likelihood(logits)? {
            if let Some(next) = self.accepted(tokenizer, acceptor, candidate) {
                *state = CallState::after(next);
                return Ok(candidate);
            }
        }
        // Nothing fits (cannot happen with a well-formed shape): let the model go on freely.
        *state = CallState::Free;
        Ok(proposed)
    }

    /// The acceptor after `token`, if the token keeps the call valid.
    fn accepted(&mut self, tokenizer: &Tokenizer, acceptor: &Acceptor, token: u32) -> Option<Acceptor> {
        if self.special.binary_search(&token).is_ok() {
            return None;
        }
        let text = self.text(tokenizer, token);
        if text.is_empty() {
            return None;
        }
        let mut next = acceptor.clone();
        next.feed_str(&text).map(|_| next)
    }

    fn text(&mut self, tokenizer: &Tokenizer, token: u32) -> String {
        if let Some(Some(text)) = self.texts.get(token as usize) {
            return text.clone();
        }
        let text = tokenizer.decode(&[token], false).unwrap_or_default();
        if let Some(slot) = self.texts.get_mut(token as usize) {
            *slot = Some(text.clone());
        }
        text
    }
}

/// Every token, the most likely first.
fn by_likelihood(logits: &Tensor) -> Result<Vec<u32>, LocalModelError> {
    let scores = logits
        .to_vec1::<f32>()
        .map_err(|e| LocalModelError::Generation(e.to_string()))?;
    let mut order: Vec<u32> = (0..scores.len() as u32).collect();
    order.sort_unstable_by(|a, b| scores[*b as usize].total_cmp(&scores[*a as usize]));
    Ok(order)
}

/// Whether a tag written after `text` and then `before` would open a line outside a code
/// block: only blank space between it and the line's start, and every fence closed.
fn markup_may_start(text: &str, before: &str) -> bool {
    let line = format!("{}{before}", text.rsplit('\n').next().unwrap_or_default());
    let line = line.rsplit('\n').next().unwrap_or_default();
    line.trim().is_empty() && (text.matches("```").count() + before.matches("```").count()).is_multiple_of(2)
}

/// Appends the positions from `held` on of the chunks `found` in the store (the cache holds
/// exactly `held` positions).
fn extend_from_store(
    model: &mut Qwen2,
    found: &crate::prefix_store::Found,
    held: usize,
) -> candle_core::Result<()> {
    for chunk in &found.chunks {
        let skip = held.saturating_sub(chunk.start);
        if skip < chunk.len {
            model.extend_cache(&chunk.tensors, skip, chunk.len - skip)?;
        }
    }
    Ok(())
}

/// Cuts the cache, and `seen` with it, back to `len` positions.
fn truncate(model: &mut Qwen2, seen: &mut Vec<u32>, len: usize) -> Result<(), LocalModelError> {
    seen.truncate(len);
    model
        .truncate(len)
        .map_err(|e| LocalModelError::Generation(e.to_string()))
}

/// Runs `tokens` after what the cache holds; `seen` follows the cache.
fn run(model: &mut Qwen2, seen: &mut Vec<u32>, tokens: &[u32]) -> Result<Tensor, LocalModelError> {
    match model.forward(tokens) {
        Ok(logits) => {
            seen.extend_from_slice(tokens);
            Ok(logits)
        }
        Err(e) => {
            // The cache may hold part of the batch: start from nothing next time.
            let _ = truncate(model, seen, 0);
            Err(LocalModelError::Generation(e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use gguf_file::Value as Meta;

    #[test]
    fn markup_is_refused_where_a_line_begins_outside_code() {
        assert!(markup_may_start("", ""));
        assert!(markup_may_start("Sure.\n", "  "));
        assert!(markup_may_start("Sure.", "\n"));
        assert!(!markup_may_start("Use a", " "), "a tag within a sentence is text");
        assert!(
            !markup_may_start("```html\n", ""),
            "a tag in a code block is code"
        );
        assert!(markup_may_start("```html\n<p>hi</p>\n```\n", ""));
    }

    /// A small GGUF file: `architecture`, and one 64×64 tensor.
    fn gguf(architecture: &str) -> Vec<u8> {
        let tensor = QTensor::quantize(
            &Tensor::zeros((64, 64), candle_core::DType::F32, &Device::Cpu).unwrap(),
            GgmlDType::F32,
        )
        .unwrap();
        let arch = Meta::String(architecture.into());
        let mut out = std::io::Cursor::new(Vec::new());
        gguf_file::write(
            &mut out,
            &[("general.architecture", &arch)],
            &[("token_embd.weight", &tensor)],
        )
        .unwrap();
        out.into_inner()
    }

    fn load_bytes(bytes: &[u8]) -> LocalModelError {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), bytes).unwrap();
        match Engine::load(file.path()) {
            Ok(_) => panic!("loaded"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_missing_file_says_it_cannot_be_opened() {
        let err = match Engine::load(Path::new("/nonexistent/model.gguf")) {
            Ok(_) => panic!("loaded"),
            Err(e) => e,
        };
        assert!(matches!(err, LocalModelError::Open { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/model.gguf"), "{err}");
    }

    #[test]
    fn a_file_that_is_not_gguf_is_a_clear_error() {
        let err = load_bytes(b"<html>404 Not Found</html>");
        assert!(matches!(err, LocalModelError::BadFile { .. }), "{err}");
        assert!(err.to_string().contains("not a readable GGUF file"), "{err}");
    }

    #[test]
    fn a_truncated_file_is_a_clear_error() {
        let whole = gguf("qwen2");
        // Cut inside the header, and inside the tensor data.
        for cut in [20, whole.len() - 100] {
            let err = load_bytes(&whole[..cut]);
            assert!(
                matches!(err, LocalModelError::BadFile { .. }),
                "cut at {cut}: {err}"
            );
        }
        let err = load_bytes(&whole[..whole.len() - 100]);
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn another_architecture_is_refused_by_name() {
        let err = load_bytes(&gguf("llama"));
        assert!(matches!(err, LocalModelError::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("\"llama\""), "{err}");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod constraint_tests {
    use std::str::FromStr;

    use serde_json::json;

    use super::*;

    /// A word-level tokenizer whose tokens decode to themselves.
    fn tokenizer() -> Tokenizer {
        let words = [
            "{",
            "\"name\"",
            ":",
            " \"",
            "get_time",
            "calculate",
            "\"",
            ",",
            " \"arguments\"",
            " {",
            "\"expression\"",
            "\"1+1\"",
            "}",
            "Hello",
            "\n",
            "1+1",
        ];
        let vocab: serde_json::Map<String, serde_json::Value> = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.to_string(), json!(i)))
            .collect();
        let definition = json!({
            "version": "1.0",
            "added_tokens": [{"id": words.len(), "content": "<|im_end|>", "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "Hello"},
        });
        Tokenizer::from_str(&definition.to_string()).unwrap()
    }

    fn id(tokenizer: &Tokenizer, word: &str) -> u32 {
        tokenizer.token_to_id(word).unwrap()
    }

    /// Logits preferring `words` in that order.
    fn logits(tokenizer: &Tokenizer, words: &[&str]) -> Tensor {
        let mut scores = vec![0f32; tokenizer.get_vocab_size(true)];
        for (rank, word) in words.iter().enumerate() {
            scores[id(tokenizer, word) as usize] = 10.0 - rank as f32;
        }
        Tensor::new(scores, &Device::Cpu).unwrap()
    }

    fn texts(tokenizer: &Tokenizer) -> TokenTexts {
        TokenTexts {
            special: vec![id(tokenizer, "<|im_end|>")],
            texts: vec![None; tokenizer.get_vocab_size(true)],
        }
    }

    fn shape() -> Shape {
        let calc = json!({"type": "object", "properties": {"expression": {"type": "string"}},
            "required": ["expression"]});
        Shape::call([("calculate", &calc)])
    }

    #[test]
    fn a_tool_name_that_is_not_offered_is_replaced_by_the_likeliest_valid_token() {
        let tokenizer = tokenizer();
        let mut tokens = texts(&tokenizer);
        let mut acceptor = Acceptor::new(shape());
        acceptor.feed_str("{\"name\": \"").unwrap();
        let mut state = CallState::InCall(acceptor);
        let logits = logits(&tokenizer, &["get_time", "<|im_end|>", "Hello", "calculate"]);
        let text = "<tool_call>\n{\"name\": \"";

        let chosen = tokens
            .constrain(
                &tokenizer,
                id(&tokenizer, "get_time"),
                &logits,
                &shape(),
                text,
                &mut state,
            )
            .unwrap();

        assert_eq!(chosen, id(&tokenizer, "calculate"));
        assert!(matches!(state, CallState::InCall(_)));
    }

    #[test]
    fn the_end_of_turn_cannot_cut_a_call_short() {
        let tokenizer = tokenizer();
        let mut tokens = texts(&tokenizer);
        let mut acceptor = Acceptor::new(shape());
        acceptor
            .feed_str("{\"name\": \"calculate\", \"arguments\": {\"expression\": \"")
            .unwrap();
        let mut state = CallState::InCall(acceptor);
        let logits = logits(&tokenizer, &["<|im_end|>", "1+1"]);

        let chosen = tokens
            .constrain(
                &tokenizer,
                id(&tokenizer, "<|im_end|>"),
                &logits,
                &shape(),
                "",
                &mut state,
            )
            .unwrap();

        assert_eq!(chosen, id(&tokenizer, "1+1"));
    }

    #[test]
    fn a_valid_pick_is_kept_and_the_end_of_the_call_frees_the_model() {
        let tokenizer = tokenizer();
        let mut tokens = texts(&tokenizer);
        let mut acceptor = Acceptor::new(shape());
        acceptor
            .feed_str("{\"name\": \"calculate\", \"arguments\": {\"expression\": \"1+1\"}")
            .unwrap();
        let mut state = CallState::InCall(acceptor);
        let logits = logits(&tokenizer, &["}"]);

        let chosen = tokens
            .constrain(&tokenizer, id(&tokenizer, "}"), &logits, &shape(), "", &mut state)
            .unwrap();

        assert_eq!(chosen, id(&tokenizer, "}"));
        assert!(matches!(state, CallState::Free), "the call is complete");
    }

    #[test]
    fn text_is_free_and_a_call_starts_only_where_one_can() {
        let tokenizer = tokenizer();
        let mut tokens = texts(&tokenizer);
        let mut state = CallState::Free;
        let prefer_hello = logits(&tokenizer, &["Hello"]);
        let hello = id(&tokenizer, "Hello");
        assert_eq!(
            tokens
                .constrain(&tokenizer, hello, &prefer_hello, &shape(), "", &mut state)
                .unwrap(),
            hello
        );
        assert!(
            matches!(state, CallState::Free),
            "an answer in words is left alone"
        );

        // After the tag a call must come: a word is replaced by the start of one.
        let prefer_hello_then_brace = logits(&tokenizer, &["Hello", "<|im_end|>", "{"]);
        let chosen = tokens
            .constrain(
                &tokenizer,
                hello,
                &prefer_hello_then_brace,
                &shape(),
                "<tool_call>\n",
                &mut state,
            )
            .unwrap();
        assert_eq!(chosen, id(&tokenizer, "{"));
        assert!(matches!(state, CallState::InCall(_)));
    }
}
