//! A short JSON answer the model must give in a fixed shape (a choice among names), read
//! after a prompt that usually shares its cached prefix with the conversation's.

use std::time::Instant;

use super::{Engine, run};
use crate::LocalModelError;
use crate::constrain::{Acceptor, CallState, Shape};
use crate::qwen2::argmax;

/// What a constrained choice produced, and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chosen {
    /// The JSON text, complete for the shape unless `max_tokens` ran out first.
    pub(crate) text: String,
    pub(crate) prompt_tokens: usize,
    pub(crate) reused_tokens: usize,
    pub(crate) stored_tokens: usize,
    pub(crate) generated_tokens: usize,
    /// Time to read the prompt tokens that were not cached.
    pub(crate) prompt_time: std::time::Duration,
    /// Time to generate the choice.
    pub(crate) generation_time: std::time::Duration,
}

impl Engine {
    /// The model's most likely JSON value of `shape` after `prompt` (greedy: a choice is not a
    /// place for variety), every token kept valid by the constraint.
    pub(crate) fn choose(
        &mut self,
        prompt: &str,
        shape: &Shape,
        max_tokens: usize,
    ) -> Result<Chosen, LocalModelError> {
        let started = Instant::now();
        let read = self.read_prompt(prompt)?;
        let prompt_time = started.elapsed();
        let generating = Instant::now();
        let mut logits = read.logits;
        let mut state = CallState::InCall(Acceptor::new(shape.clone()));
        let mut text = String::new();
        let mut generated = 0;
        while generated < max_tokens && matches!(state, CallState::InCall(_)) {
            let proposed = argmax(&logits).map_err(|e| LocalModelError::Generation(e.to_string()))?;
            let next = self
                .tokens
                .constrain(&self.tokenizer, proposed, &logits, shape, &text, &mut state)?;
            generated += 1;
            text.push_str(&self.tokens.text(&self.tokenizer, next));
            if !matches!(state, CallState::InCall(_)) {
                break;
            }
            logits = run(&mut self.model, &mut self.seen, &[next])?;
        }
        Ok(Chosen {
            text,
            prompt_tokens: read.tokens,
            reused_tokens: read.reused,
            stored_tokens: read.stored,
            generated_tokens: generated,
            prompt_time,
            generation_time: generating.elapsed(),
        })
    }
}
