//! What the runtime brings into a reply before its loop and keeps after it: long-term memories
//! (static mode) retrieved with the user's message and added as a `<long_term_memory>` user
//! message, the knowledge bases' best chunks as a `<retrieved_knowledge>` one, and the exchange
//! recorded in long-term memory once the reply is answered.
//!
//! A store that fails is logged and skipped: a reply never fails because its memory did.

use super::AgentError;
use super::react::ReplyCx;
use crate::knowledge::retrieved_knowledge_block;
use crate::memory::long_term::{RecordSource, long_term_memory_block};
use crate::message::{ContentBlock, Msg, Role};
use crate::model::ChatRequest;

/// How many memories static retrieval adds.
const RECALLED: usize = 5;

/// How many chunks knowledge retrieval adds.
const RETRIEVED: usize = 5;

const REWRITE_SYSTEM: &str = "You turn a user's message into a search query for a document search. Answer \
     with the query only: the key words and names of what the user wants to know, in the user's language, \
     with anything the message refers to spelled out.";

impl ReplyCx<'_> {
    /// Adds what long-term memory and the knowledge bases hold about `question` to memory,
    /// before the loop.
    pub(super) async fn recall(&mut self, question: &str) -> Result<(), AgentError> {
        self.recall_memories(question).await?;
        self.retrieve_knowledge(question).await
    }

    async fn retrieve_knowledge(&mut self, question: &str) -> Result<(), AgentError> {
        let Some((bases, rewrite)) = self.inner.config.knowledge.clone() else {
            return Ok(());
        };
        if question.trim().is_empty() {
            return Ok(());
        }
        let query = match rewrite {
            true => self.rewritten(question).await,
            false => question.to_owned(),
        };
        let chunks = bases.retrieve(&query, RETRIEVED, None).await;
        if chunks.is_empty() {
            return Ok(());
        }
        let msg = Msg::new(
            "knowledge",
            Role::User,
            vec![ContentBlock::text(retrieved_knowledge_block(&chunks))],
        );
        self.inner.config.memory.add(vec![msg]).await?;
        Ok(())
    }

    /// `question` as a search query, written by the model; `question` itself on any failure.
    async fn rewritten(&mut self, question: &str) -> String {
        let request = ChatRequest {
            messages: vec![Msg::system(REWRITE_SYSTEM), Msg::user(question)],
            tools: Vec::new().into(),
            tool_choice: None,
            max_tokens: Some(64),
        };
        match self.side_call(request).await {
            Ok(Some(query)) if !query.trim().is_empty() => {
                let query = query.trim().trim_matches('"').trim();
                query.lines().next().unwrap_or(query).to_owned()
            }
            Ok(_) => question.to_owned(),
            Err(e) => {
                tracing::warn!(error = %e, "the query could not be rewritten; the message itself is searched");
                question.to_owned()
            }
        }
    }

    async fn recall_memories(&mut self, question: &str) -> Result<(), AgentError> {
        let Some((memory, mode)) = &self.inner.config.long_term else {
            return Ok(());
        };
        if !mode.is_static() || question.trim().is_empty() {
            return Ok(());
        }
        let found = match memory.retrieve(question, RECALLED).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "long-term memory could not be searched; the reply goes on without it");
                return Ok(());
            }
        };
        if found.is_empty() {
            return Ok(());
        }
        let msg = Msg::new(
            "long_term_memory",
            Role::User,
            vec![ContentBlock::text(long_term_memory_block(&found))],
        );
        self.inner.config.memory.add(vec![msg]).await?;
        Ok(())
    }

    /// Records the exchange in long-term memory, after an answered reply (static mode).
    pub(super) async fn remember(&self, question: &str, answer: &Msg) {
        let Some((memory, mode)) = &self.inner.config.long_term else {
            return;
        };
        let answer = answer.text().unwrap_or_default();
        if !mode.is_static() || question.trim().is_empty() || answer.trim().is_empty() {
            return;
        }
        let exchange = format!("User: {}\nAssistant: {}", question.trim(), answer.trim());
        if let Err(e) = memory.record(vec![exchange], RecordSource::Reply).await {
            tracing::warn!(error = %e, "the reply could not be recorded in long-term memory");
        }
    }
}
