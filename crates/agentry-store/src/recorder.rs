//! [`CallRecorder`]: the agent hook that marks a session's calls as running.

use std::sync::Arc;

use agentry::agent::{AgentHook, HookContext, ReplyEnd, SessionGrant};
use agentry::message::ToolUseBlock;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use async_trait::async_trait;
use chrono::Utc;

use crate::{CallRecord, CallStatus, SessionMemory};

/// Keeps a session's call records current while the agent acts, beside its [`SessionMemory`].
///
/// The memory registers each call as running when the model's message is stored and closes it
/// when its result is, in the same transactions. What only the loop knows is when a call
/// starts and with which arguments (hooks may rewrite them): this hook hands that to the
/// memory, which writes it with the result, so a step commits twice (the model's message, the
/// result), not three times. A call approved by the user is marked running in the commit of the
/// decision (it was waiting, and may have partly run once it starts), so that recovery after a
/// crash tells the model the call "may have partly run" rather than that it never started.
///
/// It also keeps session grants (spec A14) as they are made, before the call they came from
/// runs, and approval questions (the call waits, with what the user is asked) and
/// decisions, so that a call waiting for approval when the process stopped can be asked about
/// again ([`PendingApprovals::Keep`](crate::PendingApprovals)), and each reply's token use
/// (the session's ledger) before `ReplyFinished` announces it. Register this hook after any
/// hook that rewrites calls, so it records the arguments as they run;
/// [`SessionMemory::attach`] registers it with the rest of the session.
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
    /// Approvals the store refused to record as used, by call: those calls must not run.
    refused: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

impl CallRecorder {
    /// A recorder writing into `memory`'s session.
    pub fn new(memory: Arc<SessionMemory>) -> Self {
        CallRecorder {
            memory,
            refused: Arc::default(),
        }
    }
}

/// The start of `call` in reply `ctx.reply_id`, now.
fn start(ctx: &HookContext, call: &ToolUseBlock) -> CallRecord {
    let mut record = CallRecord::new(call.id.clone(), call.name.clone(), call.input.clone());
    record.reply_id = Some(ctx.reply_id.clone());
    record.status = CallStatus::Running;
    record.started_at = Some(Utc::now());
    record
}

#[async_trait]
impl AgentHook for CallRecorder {
    async fn pre_acting(&self, ctx: &HookContext, call: &mut ToolUseBlock) {
        // Kept by the memory and written with the result: the call is registered as running
        // already, so a commit here would change nothing recovery reads.
        self.memory.call_started(start(ctx, call));
    }

    async fn call_resumable(&self, _ctx: &HookContext, call_id: &agentry::CallId, token: &serde_json::Value) {
        if let Err(e) = self.memory.call_resumable(call_id.as_str(), token).await {
            // The call goes on; after a crash it is closed as interrupted, as without a token.
            tracing::warn!(%call_id, error = %e, "could not keep the call's resume point");
        }
    }

    async fn approval_requested(&self, ctx: &HookContext, call: &ToolUseBlock, request: &ApprovalRequest) {
        // Its own commit: the question must be on disk before the user sees it.
        if let Err(e) = self
            .memory
            .store()
            .request_approval_for(self.memory.lease(), &start(ctx, call), request)
            .await
        {
            tracing::warn!(call = %call.id, error = %e, "the session store did not keep the approval question");
        }
    }

    async fn session_grant_stored(&self, _ctx: &HookContext, key: &str, grant: &SessionGrant) {
        let row = crate::grants::grant_row(key, grant);
        if let Err(e) = self.memory.store().put_grant(self.memory.lease(), &row).await {
            tracing::warn!(error = %e, "the session store did not keep the grant: it holds for this run only");
        }
    }

    async fn reply_finished(&self, ctx: &HookContext, end: &ReplyEnd) {
        if let Err(e) = self
            .memory
            .store()
            .record_usage(self.memory.lease(), Some(&ctx.reply_id), &end.usage, end.cost)
            .await
        {
            tracing::warn!(error = %e, "the session store did not record the reply's token use");
        }
    }

    async fn approval_decided(
        &self,
        ctx: &HookContext,
        call: &ToolUseBlock,
        decision: &ApprovalDecision,
        source: DecisionSource,
    ) {
        // Approved, the body starts now (or when a slot frees), so a crash from here on may
        // leave it partly run: the decision and the start are one commit. Declined, it never
        // started, and the start kept before the question is dropped.
        let kept = self.memory.take_start(call.id.as_str());
        let mut record = kept.unwrap_or_else(|| start(ctx, call));
        record.started_at = Some(Utc::now());
        if let Err(e) = self
            .memory
            .store()
            .resolve_approval_and_start(self.memory.lease(), &call.id, decision, source, &record)
            .await
        {
            tracing::warn!(call = %call.id, error = %e, "the session store did not record the decision");
            // An approval not recorded as used may not be used (see `admit_approved`): the
            // session was taken over by another process, or the approval was for other
            // arguments.
            if matches!(
                decision,
                ApprovalDecision::Approve | ApprovalDecision::ApproveForSession
            ) {
                self.refused
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(call.id.to_string(), e.to_string());
            }
        }
    }

    async fn admit_approved(&self, _ctx: &HookContext, call: &ToolUseBlock) -> Result<(), String> {
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(call.id.as_str());
        match refused {
            Some(error) => Err(format!(
                "the approval could not be recorded, so the call did not run: {error}"
            )),
            None => Ok(()),
        }
    }
}
