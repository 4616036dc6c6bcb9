//! [`CallRecorder`]: the agent hook that marks a session's calls as running.

use std::sync::Arc;

use agentry::agent::{AgentHook, HookContext, SessionGrant};
use agentry::message::ToolUseBlock;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use async_trait::async_trait;
use chrono::Utc;

use crate::{CallRecord, CallStatus, SessionMemory};

/// Keeps a session's call records current while the agent acts, beside its [`SessionMemory`].
///
/// The memory registers each call when the model's message is stored and closes it when its
/// result is, in the same transactions. What only the loop knows is when a call starts: this
/// hook marks the call as running, with the arguments it runs with, before the agent goes on,
/// so that recovery after a crash tells the model the call "may have partly run" rather than
/// that it never started.
///
/// It also keeps session grants (spec A14) as they are made, before the call they came from
/// runs, and approval questions (the call waits, with what the user is asked) and
/// decisions, so that a call waiting for approval when the process stopped can be asked about
/// again ([`PendingApprovals::Keep`](crate::PendingApprovals)). Register this hook after any
/// hook that rewrites calls, so it records the arguments as they run.
///
/// ```no_run
/// # async fn demo(model: std::sync::Arc<dyn agentry::model::ChatModel>) -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use agentry_store::{CallRecorder, SessionMemory, SqliteStore};
///
/// let store = Arc::new(SqliteStore::open_default()?);
/// let memory = Arc::new(SessionMemory::open_or_create(store, "work", &serde_json::json!({})).await?);
/// let agent = agentry::ReActAgent::builder()
///     .name("agentry")
///     .model(model)
///     .memory(Arc::clone(&memory))
///     .hook("session-calls", CallRecorder::new(memory))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct CallRecorder {
    memory: Arc<SessionMemory>,
}

impl CallRecorder {
    /// A recorder writing into `memory`'s session.
    pub fn new(memory: Arc<SessionMemory>) -> Self {
        CallRecorder { memory }
    }
}

#[async_trait]
impl AgentHook for CallRecorder {
    async fn pre_acting(&self, ctx: &HookContext, call: &mut ToolUseBlock) {
        let mut record = CallRecord::new(call.id.clone(), call.name.clone(), call.input.clone());
        record.reply_id = Some(ctx.reply_id.clone());
        record.status = CallStatus::Running;
        record.started_at = Some(Utc::now());
        // A hook cannot stop the call; the result closes the record whatever happens here.
        if let Err(e) = self
            .memory
            .store()
            .call_started(self.memory.lease(), &record)
            .await
        {
            tracing::warn!(call = %call.id, error = %e, "the session store did not record the call's start");
        }
    }

    async fn approval_requested(&self, _ctx: &HookContext, call: &ToolUseBlock, request: &ApprovalRequest) {
        if let Err(e) = self
            .memory
            .store()
            .request_approval(self.memory.lease(), &call.id, request)
            .await
        {
            tracing::warn!(call = %call.id, error = %e, "the session store did not keep the approval question");
        }
    }

    async fn session_grant_stored(&self, _ctx: &HookContext, key: &str, grant: &SessionGrant) {
        let row = crate::grants::grant_row(key, grant);
        if let Err(e) = self.memory.store().put_grant(self.memory.lease(), &row).await {
            tracing::warn!(error = %e, "the session store did not keep the grant (saved again after the reply)");
        }
    }

    async fn approval_decided(
        &self,
        ctx: &HookContext,
        call: &ToolUseBlock,
        decision: &ApprovalDecision,
        source: DecisionSource,
    ) {
        let store = self.memory.store();
        let lease = self.memory.lease();
        if let Err(e) = store.resolve_approval(lease, &call.id, decision, source).await {
            tracing::warn!(call = %call.id, error = %e, "the session store did not record the decision");
            return;
        }
        // Approved: the body starts now (or when a slot frees), so a crash from here on may
        // leave it partly run.
        if matches!(
            decision,
            ApprovalDecision::Approve | ApprovalDecision::ApproveForSession
        ) {
            let mut record = CallRecord::new(call.id.clone(), call.name.clone(), call.input.clone());
            record.reply_id = Some(ctx.reply_id.clone());
            record.status = CallStatus::Running;
            record.started_at = Some(Utc::now());
            if let Err(e) = store.call_started(lease, &record).await {
                tracing::warn!(call = %call.id, error = %e, "the session store did not record the call's start");
            }
        }
    }
}
