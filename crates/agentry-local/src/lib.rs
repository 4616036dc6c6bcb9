//! # agentry-local
//!
//! A [`ChatModel`](agentry::model::ChatModel) that runs a GGUF model inside the process, on
//! the CPU, with candle: no server, no API key, no network. Qwen2 / Qwen2.5 models (the
//! `qwen2` GGUF architecture), the tokenizer and the chat template taken from the file itself.
//!
//! Small models often write a tool call as text instead of in Qwen's tags; the provider finds
//! such calls ([`agentry::model::parse_text_calls`]) and returns them as real calls. Small models
//! also answer one part of a question with several: before its first turn the model plans the
//! question (each part quoted, with the tool it needs), each planned tool is called, then it
//! answers with no call ([`LocalModelConfig::plan_calls`]).
//!
//! Each step reuses the cached keys and values of the prompt it shares with the last one. With
//! [`LocalModelConfig::prefix_cache_dir`], the system block (system prompt and tools) is also
//! saved on disk in chunks, so that a later process reads the longest saved prefix of its own,
//! within [`LocalModelConfig::prefix_cache_size`] bytes; [`LocalStats`] counts what the cache
//! served.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agentry::ReActAgent;
//! use agentry_local::{LocalModel, LocalModelConfig};
//!
//! let model = LocalModel::load("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", LocalModelConfig::default())?;
//! let agent = ReActAgent::builder().name("Friday").model(model).build()?;
//! let answer = agent.reply(agentry::Msg::user("Say hello.")).await?;
//! # let _ = answer;
//! # Ok(())
//! # }
//! ```

mod constrain;
mod engine;
mod linear;
mod plan;
mod prefix_store;
mod provider;
#[cfg(feature = "pull")]
mod pull;
mod q8_kernel;
mod qwen2;
mod template;
mod turn;

use std::path::PathBuf;

pub use provider::{
    ANSWER_AFTER_TOOLS_HINT, DEFAULT_LOCAL_CONTEXT_WINDOW, DEFAULT_PREFIX_CACHE_SIZE, LocalModel,
    LocalModelConfig, LocalStats, LocalTotals,
};
#[cfg(feature = "pull")]
pub use pull::{
    CachedModel, DEFAULT_MODEL, EMBEDDING_MODEL, HF_ENDPOINT_ENV, KnownModel, MODELS_DIR_ENV, ModelCache,
    ModelKind, ModelSource, PYPI_URL_ENV, PullError, PullEvent, catalog, convert_q5_0_to_q8_0,
    find_known_model,
};
pub use template::ChatTemplate;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Sampler {
    /// Always the most likely token: reproducible, and what tool calls want.
    Greedy,
    /// Nucleus sampling.
    TopP {
        /// Softmax temperature (above 0).
        temperature: f64,
        /// Keep the smallest set of tokens whose probabilities add up to this.
        top_p: f64,
        /// Random seed.
        seed: u64,
    },
}

/// Why the local model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalModelError {
    /// The file could not be opened.
    #[error("cannot open the model file {path}: {reason}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not a usable GGUF model (corrupt, truncated, missing parts).
    #[error("the model file {path} is not usable: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A model this provider does not run.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// The chat template could not be compiled or rendered.
    #[error("the model's chat template failed: {0}")]
    Template(String),
    /// Generation failed.
    #[error("generation failed: {0}")]
    Generation(String),
}
