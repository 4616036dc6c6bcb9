//! An OpenAI-compatible `/v1/embeddings` endpoint as an [`Embedder`] (OpenAI, llama.cpp's
//! server with `--embeddings`, vLLM, Ollama).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{EmbedError, EmbedPurpose, Embedder};

/// Texts sent in one request at most.
const BATCH: usize = 64;

/// An embeddings endpoint: `{base_url}/embeddings` with `model`.
///
/// The vectors are normalised to unit length. E5-style models need a prefix that says whether
/// a text is a query or a document: set it with [`OpenAiEmbedder::prefixes`].
#[derive(Debug, Clone)]
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    model: String,
    id: String,
    api_key: Option<String>,
    /// The length every vector must have: set, or learnt from the first answer (0 before).
    dimensions: Arc<AtomicUsize>,
    prefixes: (String, String),
}

impl OpenAiEmbedder {
    /// The endpoint under `base_url` (`http://127.0.0.1:8080/v1`), for `model`. The length of
    /// its vectors is learnt from its first answer; every later one must have it.
    pub fn new(base_url: &str, model: &str) -> Result<Self, EmbedError> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| EmbedError::Endpoint(e.to_string()))?;
        Ok(OpenAiEmbedder {
            client,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            id: format!("openai:{model}"),
            api_key: None,
            dimensions: Arc::new(AtomicUsize::new(0)),
            prefixes: (String::new(), String::new()),
        })
    }

    /// The bearer token to send.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Text put before queries and before documents (`"query: "`, `"passage: "` for E5).
    pub fn prefixes(mut self, query: impl Into<String>, document: impl Into<String>) -> Self {
        self.prefixes = (query.into(), document.into());
        self.id = format!("openai:{}:{}|{}", self.model, self.prefixes.0, self.prefixes.1);
        self
    }

    async fn batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut request = self
            .client
            .post(&self.url)
            .json(&json!({"model": self.model, "input": texts}));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| EmbedError::Endpoint(format!("{}: {}", self.url, crate::error_chain(&e))))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| EmbedError::Endpoint(format!("{}: {e}", self.url)))?;
        if !status.is_success() {
            return Err(EmbedError::Endpoint(format!(
                "{} answered {status}: {}",
                self.url,
                crate::model::excerpt(&body, 300)
            )));
        }
        let vectors = parse_vectors(&body, texts.len(), self.dimensions.load(Ordering::Relaxed))?;
        if let Some(first) = vectors.first() {
            let _ = self
                .dimensions
                .compare_exchange(0, first.len(), Ordering::Relaxed, Ordering::Relaxed);
        }
        Ok(vectors)
    }
}

/// The vectors of an embeddings response, in input order, normalised; each must have
/// `dimensions` values (any length while that is 0, but all the same).
fn parse_vectors(body: &str, expected: usize, mut dimensions: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let bad = |why: &str| EmbedError::Endpoint(format!("the embeddings response {why}"));
    let value: Value = serde_json::from_str(body).map_err(|_| bad("is not JSON"))?;
    let data = value["data"]
        .as_array()
        .ok_or_else(|| bad("has no \"data\" list"))?;
    if data.len() != expected {
        return Err(bad(&format!("has {} vectors for {expected} texts", data.len())));
    }
    let mut out: Vec<(u64, Vec<f32>)> = Vec::with_capacity(expected);
    for (n, item) in data.iter().enumerate() {
        let index = item["index"].as_u64().unwrap_or(n as u64);
        let vector: Vec<f32> = item["embedding"]
            .as_array()
            .ok_or_else(|| bad("has an item without \"embedding\""))?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("has a vector that is not numbers"))?;
        if dimensions == 0 {
            dimensions = vector.len();
        }
        if vector.len() != dimensions || dimensions == 0 {
            return Err(bad(&format!(
                "has vectors of {} values, not {dimensions}",
                vector.len()
            )));
        }
        out.push((index, normalized(vector)));
    }
    out.sort_by_key(|(index, _)| *index);
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

fn normalized(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.dimensions.load(Ordering::Relaxed)
    }

    async fn embed(&self, texts: Vec<String>, purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prefix = match purpose {
            EmbedPurpose::Query => &self.prefixes.0,
            _ => &self.prefixes.1,
        };
        let texts: Vec<String> = texts.into_iter().map(|t| format!("{prefix}{t}")).collect();
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            out.extend(self.batch(chunk).await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_come_back_in_input_order_normalised_and_bad_answers_are_errors() {
        let body = r#"{"data": [{"index": 1, "embedding": [0, 2]}, {"index": 0, "embedding": [3, 4]}]}"#;
        let vectors = parse_vectors(body, 2, 2).unwrap();
        assert_eq!(vectors, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert!(
            parse_vectors(body, 3, 2)
                .unwrap_err()
                .to_string()
                .contains("2 vectors for 3 texts")
        );
        assert!(
            parse_vectors(body, 2, 3)
                .unwrap_err()
                .to_string()
                .contains("vectors of 2 values, not 3")
        );
        let ragged = r#"{"data": [{"embedding": [1, 0]}, {"embedding": [1]}]}"#;
        assert!(parse_vectors(ragged, 2, 0).is_err());
        assert!(
            parse_vectors("<html>", 1, 2)
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
    }
}
