//! [`SessionMemory`]: an agent's [`Memory`] kept in one session of a [`SessionStore`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError};

use agentry::memory::{Memory, MemoryError};
use agentry::message::Msg;
use agentry::tool::ToolCallState;
use async_trait::async_trait;
use serde_json::Value;

use crate::{
    CallRecord, CallStatus, Lease, PendingApprovals, Recovery, SessionId, SessionInfo, SessionStore,
    StoreError,
};

/// The messages as committed, in order, for reads without a round trip to the store.
#[derive(Debug, Default)]
struct Mirror {
    msgs: Vec<Msg>,
    ids: HashSet<String>,
}

impl Mirror {
    fn new(msgs: Vec<Msg>) -> Self {
        let ids = msgs.iter().map(|m| m.id.clone()).collect();
        Mirror { msgs, ids }
    }

    /// The messages of `msgs` that are not stored yet, each once.
    fn fresh(&self, msgs: Vec<Msg>) -> Vec<Msg> {
        let mut seen = HashSet::new();
        msgs.into_iter()
            .filter(|m| !self.ids.contains(&m.id) && seen.insert(m.id.clone()))
            .collect()
    }
}

/// An agent's memory in one session of a durable store, so the agent loop does not care which
/// store it has.
///
/// **Write-ahead**: every change is committed to the store before the method returns, so
/// whoever the agent tells about a message afterwards (an event, the next model request) sees
/// what a restart would load. Reads come from a copy of what was committed: this memory holds
/// the session's [`Lease`], so nobody else writes the session while it lives.
///
/// Opening it runs recovery (spec Y4): calls left unfinished by a process that stopped are
/// closed as interrupted before the agent sees the conversation.
///
/// A call's start (reported by a [`CallRecorder`](crate::CallRecorder)) is kept here and
/// written with the call's result, in the same transaction, rather than committed on its own:
/// the model's message registered the call as running already, which is what recovery needs
/// (a call without a result is closed as "may have partly run"). Until the result, the stored
/// record lacks the start's time, reply and rewritten arguments.
pub struct SessionMemory {
    store: Arc<dyn SessionStore>,
    lease: Lease,
    info: SessionInfo,
    recovery: Recovery,
    // Held across the store write, so the store and the copy see changes in the same order.
    mirror: tokio::sync::Mutex<Mirror>,
    // Starts not written yet, by call id. Never held across an await.
    starts: std::sync::Mutex<HashMap<String, CallRecord>>,
    // How each answered call ended, by call id, as committed (C3). Never held across an await.
    finished: std::sync::Mutex<HashMap<String, ToolCallState>>,
    // The resume points of the calls recovery kept open to be found again, by call id.
    resume_points: HashMap<String, Value>,
}

impl std::fmt::Debug for SessionMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionMemory")
            .field("session", &self.info.name)
            .field("id", &self.info.id)
            .finish()
    }
}

impl SessionMemory {
    /// Opens the session `id` for writing: takes its lease (refused with
    /// [`StoreError::SessionBusy`] if another writer has it), recovers it, loads its messages.
    pub async fn open(store: Arc<dyn SessionStore>, id: &SessionId) -> Result<Self, StoreError> {
        Self::open_with(store, id, PendingApprovals::Close).await
    }

    /// [`SessionMemory::open`], with calls left waiting for approval kept waiting or closed
    /// (see [`PendingApprovals`]).
    pub async fn open_with(
        store: Arc<dyn SessionStore>,
        id: &SessionId,
        pending: PendingApprovals,
    ) -> Result<Self, StoreError> {
        let lease = store.acquire(id).await?;
        let recovered = store.recover(&lease, pending).await?;
        // Its sub-agents' conversations stopped where it did.
        crate::children::recover_children(&store, id, &recovered.report.interrupted).await?;
        let info = store
            .session(id)
            .await?
            .ok_or_else(|| StoreError::SessionNotFound(id.to_string()))?;
        let finished = std::sync::Mutex::new(finished_calls(&recovered.messages).collect());
        let mut resume_points = HashMap::new();
        if !recovered.report.resumable_kept.is_empty() {
            for call in store.calls(id).await? {
                if let Some(token) = call
                    .resume
                    .filter(|_| recovered.report.resumable_kept.contains(&call.call_id))
                {
                    resume_points.insert(call.call_id.to_string(), token);
                }
            }
        }
        Ok(SessionMemory {
            store,
            lease,
            info,
            recovery: recovered.report,
            mirror: tokio::sync::Mutex::new(Mirror::new(recovered.messages)),
            starts: std::sync::Mutex::default(),
            finished,
            resume_points,
        })
    }

    /// Opens the session named `name`, creating it with `config` when there is none.
    pub async fn open_or_create(
        store: Arc<dyn SessionStore>,
        name: &str,
        config: &Value,
    ) -> Result<Self, StoreError> {
        Self::open_or_create_with(store, name, config, PendingApprovals::Close).await
    }

    /// [`SessionMemory::open_or_create`], with calls left waiting for approval kept waiting
    /// or closed (see [`PendingApprovals`]).
    pub async fn open_or_create_with(
        store: Arc<dyn SessionStore>,
        name: &str,
        config: &Value,
        pending: PendingApprovals,
    ) -> Result<Self, StoreError> {
        let info = match store.session_named(name).await? {
            Some(info) => info,
            None => match store.create_session(name, config).await {
                Ok(info) => info,
                // Created by someone else in between: open theirs.
                Err(StoreError::NameTaken(_)) => store
                    .session_named(name)
                    .await?
                    .ok_or_else(|| StoreError::SessionNotFound(name.to_owned()))?,
                Err(e) => return Err(e),
            },
        };
        Self::open_with(store, &info.id, pending).await
    }

    /// The session, as it was when opened.
    pub fn session(&self) -> &SessionInfo {
        &self.info
    }

    /// What recovery did when the session was opened.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The session's lease, for the other writes of this session (calls, approvals, grants,
    /// usage).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Keeps the start of a call, to write with its result. A call resumed from an earlier
    /// process started then (its record says so, and its approval was used then): its result is
    /// written alone.
    pub(crate) fn call_started(&self, record: CallRecord) {
        if self.resume_points.contains_key(record.call_id.as_str()) {
            return;
        }
        self.starts().insert(record.call_id.to_string(), record);
    }

    /// Commits how the running call `call_id` can be found again, with its start: recovery
    /// keeps a call that has one open to be resumed (see [`Recovery::resumable_kept`]).
    pub(crate) async fn call_resumable(&self, call_id: &str, token: &Value) -> Result<(), StoreError> {
        let kept = self.starts().get(call_id).cloned();
        let record = match kept {
            Some(record) => Some(record),
            // An approved call's start was written with the decision: the stored record.
            None => self
                .store
                .calls(&self.info.id)
                .await?
                .into_iter()
                .find(|c| c.call_id.as_str() == call_id && c.status == CallStatus::Running),
        };
        let Some(mut record) = record else {
            tracing::warn!(call_id, "a resume point for a call that is not running; not kept");
            return Ok(());
        };
        record.resume = Some(token.clone());
        self.store.record_call(&self.lease, &record).await?;
        Ok(())
    }

    /// Takes back the start kept for `call_id`, to write it now.
    pub(crate) fn take_start(&self, call_id: &str) -> Option<CallRecord> {
        self.starts().remove(call_id)
    }

    fn starts(&self) -> std::sync::MutexGuard<'_, HashMap<String, CallRecord>> {
        // Plain map updates: a panic elsewhere cannot leave it half-changed.
        self.starts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finished(&self) -> std::sync::MutexGuard<'_, HashMap<String, ToolCallState>> {
        self.finished.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `msgs` (appended, or before the message `before`) with the kept starts of the
    /// calls they answer, in one transaction.
    async fn write(&self, before: Option<&str>, msgs: &[Msg]) -> Result<(), StoreError> {
        let started = self.starts_for(msgs);
        match (before, started.is_empty()) {
            (None, true) => self.store.append_messages(&self.lease, msgs).await?,
            (Some(before), true) => {
                self.store
                    .insert_messages_before(&self.lease, before, msgs)
                    .await?
            }
            (_, false) => {
                self.store
                    .insert_messages_with_starts(&self.lease, before, &started, msgs)
                    .await?
            }
        };
        self.forget_starts(msgs);
        Ok(())
    }

    /// The kept starts of the calls whose results are in `msgs`, except those that ended
    /// before they started (declined, or cancelled while waiting for approval): a start
    /// written for them would claim an approval that was never given.
    fn starts_for(&self, msgs: &[Msg]) -> Vec<CallRecord> {
        let starts = self.starts();
        if starts.is_empty() {
            return Vec::new();
        }
        msgs.iter()
            .flat_map(|msg| msg.tool_results().map(move |result| (msg, result)))
            .filter(|(msg, result)| started(&agentry::memory::result_state(msg, result)))
            .filter_map(|(_, result)| starts.get(result.id.as_str()).cloned())
            .collect()
    }

    /// Forgets the starts written with `msgs`. A model message with calls begins a new turn:
    /// every call of the last one has its result by then (the loop writes one for each, even a
    /// cancelled one), so a start still kept belongs to a result that failed to be written and
    /// is dropped rather than kept forever.
    fn forget_starts(&self, msgs: &[Msg]) {
        let mut starts = self.starts();
        if starts.is_empty() {
            return;
        }
        if msgs.iter().any(|m| m.tool_uses().next().is_some()) {
            starts.clear();
            return;
        }
        for result in msgs.iter().flat_map(Msg::tool_results) {
            starts.remove(result.id.as_str());
        }
    }
}

/// Whether a call that ended in `state` had started.
fn started(state: &ToolCallState) -> bool {
    !matches!(
        state,
        ToolCallState::Declined { .. }
            | ToolCallState::Cancelled {
                phase: agentry::tool::CancelPhase::BeforeStart,
                ..
            }
    )
}

/// How each call answered in `msgs` ended.
fn finished_calls(msgs: &[Msg]) -> impl Iterator<Item = (String, ToolCallState)> + '_ {
    msgs.iter().flat_map(|msg| {
        msg.tool_results()
            .map(move |result| (result.id.to_string(), agentry::memory::result_state(msg, result)))
    })
}

#[async_trait]
impl Memory for SessionMemory {
    async fn add(&self, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        let mut mirror = self.mirror.lock().await;
        let fresh = mirror.fresh(msgs);
        if fresh.is_empty() {
            return Ok(());
        }
        self.write(None, &fresh).await?;
        self.finished().extend(finished_calls(&fresh));
        for msg in fresh {
            mirror.ids.insert(msg.id.clone());
            mirror.msgs.push(msg);
        }
        Ok(())
    }

    async fn messages(&self) -> Result<Vec<Msg>, MemoryError> {
        Ok(self.mirror.lock().await.msgs.clone())
    }

    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        let mut mirror = self.mirror.lock().await;
        let deleted = self.store.delete_messages(&self.lease, ids).await?;
        let gone: Vec<&Msg> = mirror.msgs.iter().filter(|m| ids.contains(&m.id)).collect();
        let mut finished = self.finished();
        for result in gone.iter().flat_map(|m| m.tool_results()) {
            finished.remove(result.id.as_str());
        }
        drop(finished);
        mirror.msgs.retain(|m| !ids.contains(&m.id));
        for id in ids {
            mirror.ids.remove(id);
        }
        Ok(deleted)
    }

    async fn size(&self) -> Result<usize, MemoryError> {
        Ok(self.mirror.lock().await.msgs.len())
    }

    async fn clear(&self) -> Result<(), MemoryError> {
        let mut mirror = self.mirror.lock().await;
        self.store.clear_messages(&self.lease).await?;
        *mirror = Mirror::default();
        self.starts().clear();
        self.finished().clear();
        Ok(())
    }

    fn finished_call(&self, call_id: &str) -> Option<ToolCallState> {
        self.finished().get(call_id).cloned()
    }

    async fn resume_point(&self, call_id: &str) -> Option<Value> {
        self.resume_points.get(call_id).cloned()
    }

    async fn insert_before(&self, before: &str, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        let mut mirror = self.mirror.lock().await;
        let fresh = mirror.fresh(msgs);
        if fresh.is_empty() {
            return Ok(());
        }
        self.write(Some(before), &fresh).await?;
        self.finished().extend(finished_calls(&fresh));
        let at = mirror
            .msgs
            .iter()
            .position(|m| m.id == before)
            .unwrap_or(mirror.msgs.len());
        for msg in &fresh {
            mirror.ids.insert(msg.id.clone());
        }
        mirror.msgs.splice(at..at, fresh);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use agentry::message::{ContentBlock, Role, ToolResultBlock, ToolUseBlock};
    use serde_json::json;

    use super::*;
    use crate::{CallStatus, SqliteStore};

    fn result(id: &str) -> Msg {
        Msg::tool_result(ToolResultBlock {
            id: id.into(),
            name: "t".into(),
            output: vec![ContentBlock::text("ok")],
            is_error: false,
        })
    }

    #[tokio::test]
    async fn a_start_is_written_with_its_result_appended_or_inserted() {
        let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::in_memory().unwrap());
        let memory = SessionMemory::open_or_create(Arc::clone(&store), "s", &json!({}))
            .await
            .unwrap();
        let uses = ["c1", "c2"].map(|id| {
            ContentBlock::ToolUse(ToolUseBlock {
                id: id.into(),
                name: "t".into(),
                input: json!({"n": id}),
                raw_input: None,
            })
        });
        memory
            .add(vec![Msg::new("bot", Role::Assistant, uses.to_vec())])
            .await
            .unwrap();
        for id in ["c1", "c2"] {
            let mut start = CallRecord::new(id, "t", json!({"ran": id}));
            start.reply_id = Some("r".into());
            start.started_at = Some(chrono::Utc::now());
            memory.call_started(start);
        }
        let calls = store.calls(&memory.session().id).await.unwrap();
        assert!(calls.iter().all(|c| c.started_at.is_none()), "kept, not written");

        // In parallel, c2 finishes first; c1's result goes before it.
        let second = result("c2");
        memory.add(vec![second.clone()]).await.unwrap();
        memory
            .insert_before(&second.id, vec![result("c1")])
            .await
            .unwrap();
        let calls = store.calls(&memory.session().id).await.unwrap();
        for call in &calls {
            assert_eq!(
                call.status,
                CallStatus::Finished(agentry::tool::ToolCallState::Completed)
            );
            assert!(call.started_at.is_some() && call.reply_id.is_some(), "{call:?}");
            assert_eq!(call.arguments, json!({"ran": call.call_id.as_str()}));
        }
        assert!(memory.starts().is_empty(), "written, then forgotten");
    }
}
