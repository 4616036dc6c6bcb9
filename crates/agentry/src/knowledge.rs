//! Knowledge bases: documents an agent retrieves from before it answers.
//!
//! A [`KnowledgeBase`] returns the chunks of its documents closest to a query, each naming the
//! file it comes from. Give bases to
//! [`ReActAgentBuilder::knowledge`](crate::agent::ReActAgentBuilder::knowledge): before the loop,
//! the user's message (rewritten by the model into a search query first, unless turned off;
//! any failure falls back to the message itself) retrieves the best chunks across the bases,
//! added as a `<retrieved_knowledge>` user message; the model also gets the tool
//! `retrieve_knowledge(query, limit = 5, score_threshold?)`.
//!
//! `agentry-store` keeps bases in the session database (`agentry kb add NAME PATH…`).

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::tool::{Tool, ToolContext, ToolError, ToolResponse, ToolStream, Toolkit, ToolkitError};

/// Why a knowledge base could not be searched.
#[derive(Debug, thiserror::Error)]
#[error("the knowledge base {base} could not be searched: {reason}")]
pub struct KnowledgeError {
    /// The base's name.
    pub base: String,
    /// What went wrong.
    pub reason: String,
}

/// One retrieved piece of a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KnowledgeChunk {
    /// The text.
    pub content: String,
    /// The file it comes from.
    pub source: String,
    /// The base it is in.
    pub base: String,
    /// How close it is to the query: the cosine similarity of their embeddings when the base
    /// has them (comparable across bases), else a rank-based score.
    pub score: f32,
}

impl KnowledgeChunk {
    /// A chunk as bases build it.
    pub fn new(content: String, source: String, base: String, score: f32) -> Self {
        KnowledgeChunk {
            content,
            source,
            base,
            score,
        }
    }
}

/// A searchable collection of document chunks.
#[async_trait]
pub trait KnowledgeBase: Send + Sync + 'static {
    /// Its name (`--knowledge NAME`).
    fn name(&self) -> &str;
    /// The chunks closest to `query`, best first, at most `limit`, none scoring below
    /// `score_threshold`.
    async fn retrieve(
        &self,
        query: &str,
        limit: usize,
        score_threshold: Option<f32>,
    ) -> Result<Vec<KnowledgeChunk>, KnowledgeError>;
}

#[async_trait]
impl<T: KnowledgeBase + ?Sized> KnowledgeBase for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    async fn retrieve(
        &self,
        query: &str,
        limit: usize,
        score_threshold: Option<f32>,
    ) -> Result<Vec<KnowledgeChunk>, KnowledgeError> {
        (**self).retrieve(query, limit, score_threshold).await
    }
}

/// The agent's bases as the `retrieve_knowledge` tool finds them in its context.
#[derive(Clone, Default)]
pub struct AgentKnowledge(pub Vec<Arc<dyn KnowledgeBase>>);

impl AgentKnowledge {
    /// The best `limit` chunks across every base, by score. A base that fails is skipped with
    /// a warning.
    pub async fn retrieve(
        &self,
        query: &str,
        limit: usize,
        score_threshold: Option<f32>,
    ) -> Vec<KnowledgeChunk> {
        let mut all = Vec::new();
        for base in &self.0 {
            match base.retrieve(query, limit, score_threshold).await {
                Ok(chunks) => all.extend(chunks),
                Err(e) => tracing::warn!(error = %e, "a knowledge base is left out of this retrieval"),
            }
        }
        all.sort_by(|a, b| b.score.total_cmp(&a.score));
        all.truncate(limit);
        all
    }
}

/// The name of the retrieval tool.
pub const KNOWLEDGE_TOOL_NAME: &str = "retrieve_knowledge";

/// The chunks as the model reads them: each with its source file and score.
pub fn chunks_text(chunks: &[KnowledgeChunk]) -> String {
    chunks
        .iter()
        .map(|c| {
            format!(
                "[source: {} ({}), score: {:.3}]\n{}",
                c.source,
                c.base,
                c.score,
                c.content.trim()
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The block added before the loop.
pub fn retrieved_knowledge_block(chunks: &[KnowledgeChunk]) -> String {
    format!(
        "<retrieved_knowledge>Use the following content from the knowledge base(s) if it is helpful:\n{}\n</retrieved_knowledge>",
        chunks_text(chunks)
    )
}

/// Registers `retrieve_knowledge` in `toolkit` (once); each call uses the calling agent's
/// [`AgentKnowledge`].
pub fn register_knowledge_tool(toolkit: &Toolkit) -> Result<(), ToolkitError> {
    if toolkit.tool_names().iter().any(|n| n == KNOWLEDGE_TOOL_NAME) {
        return Ok(());
    }
    toolkit.register(KnowledgeTool)?;
    Ok(())
}

struct KnowledgeTool;

impl Tool for KnowledgeTool {
    fn name(&self) -> &str {
        KNOWLEDGE_TOOL_NAME
    }

    fn description(&self) -> &str {
        "Searches the knowledge bases (the user's documents) and returns the passages closest to the \
         query, each with the file it comes from. Use it for questions the documents may answer."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for, as a question or keywords."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5,
                    "description": "The most passages to return."},
                "score_threshold": {"type": "number", "minimum": -1, "maximum": 1,
                    "description": "Leave out passages scoring below this (0 to 1)."}
            },
            "required": ["query"]
        })
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        futures::stream::once(async move {
            let Some(knowledge) = ctx.extension::<AgentKnowledge>().cloned() else {
                return Err(ToolError::msg("This agent has no knowledge base."));
            };
            let query = args.get("query").and_then(Value::as_str).unwrap_or_default();
            if query.trim().is_empty() {
                return Err(ToolError::msg("The query is empty."));
            }
            let limit = args
                .get("limit")
                .and_then(Value::as_u64)
                .unwrap_or(5)
                .clamp(1, 50) as usize;
            let threshold = args
                .get("score_threshold")
                .and_then(Value::as_f64)
                .map(|t| t as f32);
            let chunks = knowledge.retrieve(query, limit, threshold).await;
            if chunks.is_empty() {
                return Ok(ToolResponse::text(match threshold {
                    Some(_) => "No relevant passage found. Try a lower score_threshold or other words.",
                    None => "No relevant passage found. Try other words.",
                }));
            }
            Ok(ToolResponse::text(chunks_text(&chunks)))
        })
        .boxed()
    }
}
