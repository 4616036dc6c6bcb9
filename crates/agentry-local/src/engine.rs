//! One loaded model: weights, tokenizer, template, and the generation loop with prefix reuse.

use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use tokenizers::Tokenizer;

use crate::qwen2::{Qwen2, argmax};
use crate::template::ChatTemplate;
use crate::{LocalModelError, Sampler};

/// What one generation produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Generated {
    pub(crate) text: String,
    /// Tokens of the prompt.
    pub(crate) prompt_tokens: usize,
    /// Prompt tokens whose keys and values were already cached (not run again).
    pub(crate) reused_tokens: usize,
    pub(crate) generated_tokens: usize,
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
    tokenizer: Tokenizer,
    pub(crate) template: ChatTemplate,
    stop_tokens: Vec<u32>,
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
        let mut stop_tokens: Vec<u32> = ["<|im_end|>", "<|endoftext|>"]
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
        let device = Device::Cpu;
        let model = Qwen2::load(&content, |name| content.tensor(&mut file, name, &device), &device)
            .map_err(|e| bad(format!("cannot load the weights: {e}")))?;
        Ok(Engine {
            model,
            tokenizer,
            template,
            stop_tokens,
            seen: Vec::new(),
            load_time: started.elapsed(),
        })
    }

    /// Generates the model's turn after `prompt`. `on_text` gets the whole text so far after
    /// each token and returns false to stop.
    pub(crate) fn generate(
        &mut self,
        prompt: &str,
        sampler: &Sampler,
        max_tokens: usize,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generated, LocalModelError> {
        let started = Instant::now();
        let tokens = self
            .tokenizer
            .encode(prompt, false)
            .map_err(|e| LocalModelError::Generation(format!("cannot tokenize the prompt: {e}")))?
            .get_ids()
            .to_vec();
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
        // Re-use the cached keys and values of the longest common prefix; at least the last
        // prompt token runs, for its logits.
        let common = self
            .seen
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1);
        truncate(&mut self.model, &mut self.seen, common)?;
        let mut logits = run(&mut self.model, &mut self.seen, &tokens[common..])?;
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
        // Decodes each token once; a character split over tokens waits for its last byte.
        let mut decoder = self.tokenizer.decode_stream(false);
        let mut text = String::new();
        let mut end = End::Length;
        let budget = max_tokens.min(self.model.context().saturating_sub(tokens.len() + 1));
        while generated < budget {
            let next = match processor.as_mut() {
                Some(processor) => processor.sample(&logits),
                None => argmax(&logits),
            }
            .map_err(|e| LocalModelError::Generation(e.to_string()))?;
            if self.stop_tokens.contains(&next) {
                end = End::Stop;
                break;
            }
            generated += 1;
            let piece = decoder
                .step(next)
                .map_err(|e| LocalModelError::Generation(format!("cannot decode: {e}")))?;
            if let Some(piece) = piece {
                text.push_str(&piece);
                if !on_text(&text) {
                    end = End::Abandoned;
                    break;
                }
            }
            logits = run(&mut self.model, &mut self.seen, &[next])?;
        }
        Ok(Generated {
            text,
            prompt_tokens: tokens.len(),
            reused_tokens: common,
            generated_tokens: generated,
            end,
            prompt_time,
            generation_time: generating.elapsed(),
        })
    }
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
