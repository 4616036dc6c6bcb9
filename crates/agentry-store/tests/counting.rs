//! A store that counts its writes, each one transaction of the store it wraps: what a step of
//! the agent loop costs in commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentry::message::Msg;
use agentry::model::ChatUsage;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use agentry::{CallId, ReplyId};
use agentry_store::{
    CallRecord, Grant, Lease, PendingApproval, PendingApprovals, Recovered, SessionId, SessionInfo,
    SessionStore, StoreError, UsageTotals,
};
use async_trait::async_trait;
use serde_json::Value;

pub struct Counting {
    pub inner: Arc<dyn SessionStore>,
    pub writes: AtomicUsize,
}

impl Counting {
    pub fn new(inner: Arc<dyn SessionStore>) -> Arc<Self> {
        Arc::new(Counting {
            inner,
            writes: AtomicUsize::new(0),
        })
    }

    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    fn write(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl SessionStore for Counting {
    async fn create_owned_session(
        &self,
        name: &str,
        config: &Value,
        owner: Option<&str>,
    ) -> Result<SessionInfo, StoreError> {
        self.write();
        self.inner.create_owned_session(name, config, owner).await
    }
    async fn session(&self, id: &SessionId) -> Result<Option<SessionInfo>, StoreError> {
        self.inner.session(id).await
    }
    async fn session_named(&self, name: &str) -> Result<Option<SessionInfo>, StoreError> {
        self.inner.session_named(name).await
    }
    async fn sessions(&self) -> Result<Vec<SessionInfo>, StoreError> {
        self.inner.sessions().await
    }
    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.write();
        self.inner.delete_session(id).await
    }
    async fn set_config(&self, lease: &Lease, config: &Value) -> Result<(), StoreError> {
        self.write();
        self.inner.set_config(lease, config).await
    }
    async fn acquire(&self, id: &SessionId) -> Result<Lease, StoreError> {
        self.inner.acquire(id).await
    }
    async fn recover(&self, lease: &Lease, pending: PendingApprovals) -> Result<Recovered, StoreError> {
        self.inner.recover(lease, pending).await
    }
    async fn messages(&self, id: &SessionId) -> Result<Vec<Msg>, StoreError> {
        self.inner.messages(id).await
    }
    async fn append_messages(&self, lease: &Lease, msgs: &[Msg]) -> Result<usize, StoreError> {
        self.write();
        self.inner.append_messages(lease, msgs).await
    }
    async fn insert_messages_with_starts(
        &self,
        lease: &Lease,
        before: Option<&str>,
        started: &[CallRecord],
        msgs: &[Msg],
    ) -> Result<usize, StoreError> {
        self.write();
        self.inner
            .insert_messages_with_starts(lease, before, started, msgs)
            .await
    }
    async fn insert_messages_before(
        &self,
        lease: &Lease,
        before: &str,
        msgs: &[Msg],
    ) -> Result<usize, StoreError> {
        self.write();
        self.inner.insert_messages_before(lease, before, msgs).await
    }
    async fn delete_messages(&self, lease: &Lease, ids: &[String]) -> Result<usize, StoreError> {
        self.write();
        self.inner.delete_messages(lease, ids).await
    }
    async fn clear_messages(&self, lease: &Lease) -> Result<(), StoreError> {
        self.write();
        self.inner.clear_messages(lease).await
    }
    async fn record_call(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError> {
        self.write();
        self.inner.record_call(lease, call).await
    }
    async fn call_started(&self, lease: &Lease, call: &CallRecord) -> Result<bool, StoreError> {
        self.write();
        self.inner.call_started(lease, call).await
    }
    async fn calls(&self, id: &SessionId) -> Result<Vec<CallRecord>, StoreError> {
        self.inner.calls(id).await
    }
    async fn request_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        self.write();
        self.inner.request_approval(lease, call_id, request).await
    }
    async fn request_approval_for(
        &self,
        lease: &Lease,
        call: &CallRecord,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        self.write();
        self.inner.request_approval_for(lease, call, request).await
    }
    async fn resolve_approval(
        &self,
        lease: &Lease,
        call_id: &CallId,
        decision: &ApprovalDecision,
        source: DecisionSource,
    ) -> Result<CallRecord, StoreError> {
        self.write();
        self.inner
            .resolve_approval(lease, call_id, decision, source)
            .await
    }
    async fn resolve_approval_and_start(
        &self,
        lease: &Lease,
        call_id: &CallId,
        decision: &ApprovalDecision,
        source: DecisionSource,
        start: &CallRecord,
    ) -> Result<CallRecord, StoreError> {
        self.write();
        self.inner
            .resolve_approval_and_start(lease, call_id, decision, source, start)
            .await
    }
    async fn pending_approvals(&self, id: &SessionId) -> Result<Vec<PendingApproval>, StoreError> {
        self.inner.pending_approvals(id).await
    }
    async fn approvals(&self, id: &SessionId) -> Result<Vec<agentry_store::ApprovalRecord>, StoreError> {
        self.inner.approvals(id).await
    }
    async fn purge(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<agentry_store::Purged, StoreError> {
        self.write();
        self.inner.purge(before).await
    }
    async fn put_grant(&self, lease: &Lease, grant: &Grant) -> Result<(), StoreError> {
        self.write();
        self.inner.put_grant(lease, grant).await
    }
    async fn revoke_grant(&self, lease: &Lease, key: &str) -> Result<bool, StoreError> {
        self.write();
        self.inner.revoke_grant(lease, key).await
    }
    async fn grants(&self, id: &SessionId) -> Result<Vec<Grant>, StoreError> {
        self.inner.grants(id).await
    }
    async fn record_usage(
        &self,
        lease: &Lease,
        reply_id: Option<&ReplyId>,
        usage: &ChatUsage,
        cost: Option<f64>,
    ) -> Result<(), StoreError> {
        self.write();
        self.inner.record_usage(lease, reply_id, usage, cost).await
    }
    async fn usage(&self, id: &SessionId) -> Result<UsageTotals, StoreError> {
        self.inner.usage(id).await
    }
}
