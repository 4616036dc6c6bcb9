//! One way to give an agent its session: what every front end (the terminal, the server, a
//! library user) does to continue a stored conversation.

use std::sync::Arc;

use agentry::agent::{ChildStore, ReActAgentBuilder};

use crate::children::ChildSessions;
use crate::{CallRecorder, SessionMemory, SessionPlanStorage, StoreError};

/// The name under which [`SessionMemory::attach`] registers its [`CallRecorder`].
pub const SESSION_HOOK: &str = "session-calls";

impl SessionMemory {
    /// `builder` made into the agent of this session: the session is its memory and its
    /// traces' conversation id, the grants kept in it (A14) are the agent's again, and a
    /// [`CallRecorder`] (under [`SESSION_HOOK`]) keeps its calls, approval questions and
    /// decisions, new grants and each reply's token use in the session as they happen.
    ///
    /// A plan notebook given to the builder
    /// ([`plan_notebook`](agentry::agent::ReActAgentBuilder::plan_notebook)) is bound to the
    /// session ([`SessionPlanStorage`]): it continues the session's plans and keeps every change.
    /// The conversations of its sub-agents ([`AgentTool::from_builder`](agentry::agent::AgentTool::from_builder))
    /// are kept as child sessions of this one (named `SESSION/AGENT/CALL`).
    ///
    /// Register hooks that rewrite calls before attaching, so the recorder sees the arguments
    /// as they run.
    ///
    /// ```no_run
    /// # async fn demo(model: std::sync::Arc<dyn agentry::model::ChatModel>) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use agentry_store::{SessionMemory, SqliteStore};
    ///
    /// let store = Arc::new(SqliteStore::open_default()?);
    /// let memory = Arc::new(SessionMemory::open_or_create(store, "work", &serde_json::json!({})).await?);
    /// let builder = agentry::ReActAgent::builder().name("agentry").model(model);
    /// let agent = memory.attach(builder).await?.build()?;
    /// # Ok(()) }
    /// ```
    pub async fn attach(
        self: &Arc<Self>,
        builder: ReActAgentBuilder,
    ) -> Result<ReActAgentBuilder, StoreError> {
        let grants = self.store().grants(&self.session().id).await?;
        if let Some(notebook) = builder.plan() {
            notebook
                .bind(Arc::new(SessionPlanStorage::new(Arc::clone(self))))
                .await
                .map_err(|e| StoreError::Decode {
                    what: "the session's plans",
                    detail: e.0,
                })?;
        }
        Ok(builder
            .memory(Arc::clone(self))
            .extension(ChildStore(Arc::new(ChildSessions::new(Arc::clone(self)))))
            .conversation_id(self.session().id.as_str())
            .session_grants(grants.into_iter().map(crate::grants::agent_grant))
            .hook(SESSION_HOOK, CallRecorder::new(Arc::clone(self))))
    }
}
