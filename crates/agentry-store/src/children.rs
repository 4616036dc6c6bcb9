//! The conversations of a session's sub-agents, kept as sessions of their own beside it: each
//! call of a sub-agent ([`AgentTool::from_builder`](agentry::agent::AgentTool::from_builder)) is
//! a child session named `PARENT/AGENT/CALL`, of the parent's owner, whose config names the
//! parent. Opening the parent recovers its children too, so that after a crash every call has
//! exactly one result at every level.

use std::sync::Arc;

use agentry::CallId;
use agentry::agent::{ChildConversations, ReActAgentBuilder};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::{PendingApprovals, SessionId, SessionInfo, SessionMemory, SessionStore, StoreError};

/// The key of a child session's config that holds its parent's id.
pub const PARENT_KEY: &str = "parent_session";

/// How many names a child session tries before it gives up (`NAME`, `NAME-2`, …).
const NAME_TRIES: usize = 100;

/// Gives each sub-agent call of a session a child session (see the module documentation).
pub(crate) struct ChildSessions {
    parent: Arc<SessionMemory>,
}

impl ChildSessions {
    pub(crate) fn new(parent: Arc<SessionMemory>) -> Self {
        Self { parent }
    }

    async fn create(&self, agent: &str, call_id: &CallId) -> Result<SessionInfo, StoreError> {
        let parent = self.parent.session();
        let config = json!({ PARENT_KEY: parent.id.as_str(), "agent": agent, "call_id": call_id.as_str() });
        let base = format!("{}/{agent}/{call_id}", parent.name);
        let store = self.parent.store();
        for n in 1..=NAME_TRIES {
            let name = match n {
                1 => base.clone(),
                n => format!("{base}-{n}"),
            };
            match store
                .create_owned_session(&name, &config, parent.owner.as_deref())
                .await
            {
                Err(StoreError::NameTaken(_)) => continue,
                other => return other,
            }
        }
        Err(StoreError::NameTaken(base))
    }
}

#[async_trait]
impl ChildConversations for ChildSessions {
    async fn attach(
        &self,
        agent: &str,
        call_id: &CallId,
        builder: ReActAgentBuilder,
    ) -> Result<ReActAgentBuilder, String> {
        let info = self.create(agent, call_id).await.map_err(|e| e.to_string())?;
        let store = Arc::clone(self.parent.store());
        let memory = SessionMemory::open_with(store, &info.id, PendingApprovals::Close)
            .await
            .map_err(|e| e.to_string())?;
        Arc::new(memory).attach(builder).await.map_err(|e| e.to_string())
    }
}

/// Recovers the child sessions of the calls of `parent` that recovery closed as interrupted
/// (`interrupted`), and theirs in turn: a crash left them as it left the parent. A child still
/// held by a process is left to it. Returns how many were recovered.
pub(crate) async fn recover_children(
    store: &Arc<dyn SessionStore>,
    parent: &SessionId,
    interrupted: &[CallId],
) -> Result<usize, StoreError> {
    if interrupted.is_empty() {
        return Ok(0);
    }
    let sessions = store.sessions().await?;
    let child_of = |info: &SessionInfo, id: &SessionId, calls: &[CallId]| {
        info.config.get(PARENT_KEY).and_then(Value::as_str) == Some(id.as_str())
            && info
                .config
                .get("call_id")
                .and_then(Value::as_str)
                .is_some_and(|call| calls.iter().any(|c| c.as_str() == call))
    };
    let mut parents = vec![(parent.clone(), interrupted.to_vec())];
    let mut recovered = 0;
    while let Some((id, calls)) = parents.pop() {
        for child in sessions.iter().filter(|s| child_of(s, &id, &calls)) {
            let Ok(lease) = store.acquire(&child.id).await else {
                continue;
            };
            let report = store.recover(&lease, PendingApprovals::Close).await?.report;
            if !report.interrupted.is_empty() {
                parents.push((child.id.clone(), report.interrupted.clone()));
            }
            if !report.is_empty() {
                recovered += 1;
            }
        }
    }
    Ok(recovered)
}
