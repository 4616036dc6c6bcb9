//! What the runtime brings into a reply before its loop and keeps after it: long-term memories
//! (static mode) retrieved with the user's message and added as a `<long_term_memory>` user
//! message, and the exchange recorded once the reply is answered.
//!
//! A store that fails is logged and skipped: a reply never fails because its memory did.

use super::AgentError;
use super::react::ReplyCx;
use crate::memory::long_term::{RecordSource, long_term_memory_block};
use crate::message::{ContentBlock, Msg, Role};

/// How many memories static retrieval adds.
const RECALLED: usize = 5;

impl ReplyCx<'_> {
    /// Adds what long-term memory holds about `question` to memory, before the loop.
    pub(super) async fn recall(&mut self, question: &str) -> Result<(), AgentError> {
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
