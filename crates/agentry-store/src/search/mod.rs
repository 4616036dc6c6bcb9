//! Search by words and by meaning, shared by long-term memory and knowledge bases: the terms
//! full-text search indexes ([`terms`]), vectors compared in memory ([`vectors`]), and the two
//! rankings merged ([`fusion`]).

pub mod fusion;
pub mod terms;
pub mod vectors;

use std::sync::Arc;

use agentry::embedding::{EmbedPurpose, Embedder};

/// `texts` embedded with `embedder`, with its model id; `None` when there is no embedder or it
/// failed (logged with `what`: the caller goes on by words alone, losing nothing).
pub async fn embed_or_words(
    embedder: Option<&Arc<dyn Embedder>>,
    texts: Vec<String>,
    purpose: EmbedPurpose,
    what: &str,
) -> Option<(String, Vec<Vec<f32>>)> {
    let embedder = embedder?;
    match embedder.embed(texts, purpose).await {
        Ok(vectors) => Some((embedder.model_id().to_owned(), vectors)),
        Err(e) => {
            tracing::warn!(error = %e, "{what} by their words only");
            None
        }
    }
}
