//! Text embeddings: what long-term memory and knowledge bases search by meaning with.
//!
//! An [`Embedder`] turns texts into vectors whose cosine similarity says how close their
//! meanings are. The embedded model (`agentry-embed`, multilingual, in the process, offline)
//! and an OpenAI-compatible `/v1/embeddings` endpoint both implement it.

use async_trait::async_trait;

#[cfg(feature = "openai")]
mod openai;
#[cfg(feature = "openai")]
pub use openai::OpenAiEmbedder;

/// What a text is embedded for: models like E5 embed questions and stored passages apart
/// (`"query: "` and `"passage: "`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmbedPurpose {
    /// A question or search text, to be compared with documents.
    Query,
    /// A text to be stored and found: a memory, a knowledge-base chunk.
    Document,
}

/// Why texts could not be embedded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The model could not be loaded or run.
    #[error("the embedding model failed: {0}")]
    Model(String),
    /// The embedding endpoint failed or answered something unreadable.
    #[error("the embedding endpoint failed: {0}")]
    Endpoint(String),
}

/// Turns texts into vectors. Implementations are cheap to share (`Arc`) and safe to call
/// concurrently.
#[async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// Names the model and every setting that changes its vectors: vectors under different ids
    /// are never compared (a store keeps the id beside each vector and embeds again when it
    /// changes).
    fn model_id(&self) -> &str;
    /// The length of every vector.
    fn dimensions(&self) -> usize;
    /// One unit-length vector per text, in order.
    async fn embed(&self, texts: Vec<String>, purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError>;
}

#[async_trait]
impl<T: Embedder + ?Sized> Embedder for std::sync::Arc<T> {
    fn model_id(&self) -> &str {
        (**self).model_id()
    }

    fn dimensions(&self) -> usize {
        (**self).dimensions()
    }

    async fn embed(&self, texts: Vec<String>, purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed(texts, purpose).await
    }
}

/// The cosine similarity of two vectors (their dot product when both have unit length).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot / (na.sqrt() * nb.sqrt())
}
