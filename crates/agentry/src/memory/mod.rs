//! Memory: the messages of a conversation, in order.
//!
//! Only the agent loop writes memory during a reply. The loop keeps it consistent: every tool
//! call in an assistant message is followed by exactly one result, in call order.
//!
//! ```
//! use agentry::memory::{InMemoryMemory, Memory};
//! use agentry::message::Msg;
//!
//! # tokio_test_block_on(async {
//! let memory = InMemoryMemory::new();
//! memory.add(vec![Msg::user("hi")]).await.unwrap();
//! assert_eq!(memory.size().await.unwrap(), 1);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

pub mod long_term;

use crate::CallId;
use crate::message::{Msg, ToolResultBlock, ToolUseBlock};
use crate::tool::ToolCallState;

/// Why a memory operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The storage behind the memory failed.
    #[error("memory storage error: {0}")]
    Storage(String),
}

/// Where an agent keeps its conversation.
#[async_trait]
pub trait Memory: Send + Sync {
    /// Appends messages in order. Messages whose id is already stored are skipped.
    async fn add(&self, msgs: Vec<Msg>) -> Result<(), MemoryError>;
    /// All messages, oldest first.
    async fn messages(&self) -> Result<Vec<Msg>, MemoryError>;
    /// Deletes messages by id; returns how many were deleted.
    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError>;
    /// Number of messages.
    async fn size(&self) -> Result<usize, MemoryError>;
    /// Deletes everything.
    async fn clear(&self) -> Result<(), MemoryError>;

    /// Inserts messages right before the stored message `before` (appends them when it is not
    /// stored). Messages whose id is already stored are skipped. The agent uses it to keep the
    /// results of parallel calls in call order while storing each as soon as it is final.
    ///
    /// The default rewrites the whole memory (`messages`, `clear`, `add`); stores that can
    /// insert in place should override it.
    async fn insert_before(&self, before: &str, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        let mut all = self.messages().await?;
        let Some(at) = all.iter().position(|m| m.id == before) else {
            return self.add(msgs).await;
        };
        let known: HashSet<&str> = all.iter().map(|m| m.id.as_str()).collect();
        let new: Vec<Msg> = msgs
            .into_iter()
            .filter(|m| !known.contains(m.id.as_str()))
            .collect();
        all.splice(at..at, new);
        self.clear().await?;
        self.add(all).await
    }

    /// Every tool call in the conversation, in order (seed 7.3).
    async fn tool_calls(&self) -> Result<Vec<ToolUseBlock>, MemoryError> {
        Ok(tool_calls(&self.messages().await?))
    }

    /// How many times each tool was called (seed 7.3).
    async fn tool_call_counts(&self) -> Result<BTreeMap<String, usize>, MemoryError> {
        Ok(tool_call_counts(&self.messages().await?))
    }

    /// How the call `call_id` ended, read off its stored result ([`result_state`]), when this
    /// memory can tell at once (no I/O, no waiting for a lock held across I/O); `None` when it
    /// holds no result for it or cannot tell now. The agent asks when a cancel names a call it
    /// no longer remembers, e.g. one of a session reopened by another process (C3). The
    /// default knows nothing.
    fn finished_call(&self, _call_id: &str) -> Option<ToolCallState> {
        None
    }

    /// How the unfinished call `call_id` can be found again, when an earlier process ran it
    /// and kept a token ([`ToolContext::set_resume_point`](crate::tool::ToolContext::set_resume_point)):
    /// `start_resumed_reply` runs such a call again with the token, without asking for
    /// approval again. The default keeps none.
    async fn resume_point(&self, _call_id: &str) -> Option<serde_json::Value> {
        None
    }
}

/// The terminal state of the call that `result` (in `msg`) answers: the state the agent wrote
/// into the message's `tool_call` metadata, else completed or failed by the result's error flag
/// (results written by other programs).
pub fn result_state(msg: &Msg, result: &ToolResultBlock) -> ToolCallState {
    msg.metadata
        .get("tool_call")
        .and_then(|v| serde_json::from_value::<ToolCallState>(v.clone()).ok())
        .unwrap_or(if result.is_error {
            ToolCallState::Failed
        } else {
            ToolCallState::Completed
        })
}

/// A shared memory is a memory: the application can keep a handle on the agent's memory.
#[async_trait]
impl<T: Memory + ?Sized> Memory for std::sync::Arc<T> {
    async fn add(&self, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        (**self).add(msgs).await
    }

    async fn messages(&self) -> Result<Vec<Msg>, MemoryError> {
        (**self).messages().await
    }

    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        (**self).delete(ids).await
    }

    async fn size(&self) -> Result<usize, MemoryError> {
        (**self).size().await
    }

    async fn clear(&self) -> Result<(), MemoryError> {
        (**self).clear().await
    }

    async fn insert_before(&self, before: &str, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        (**self).insert_before(before, msgs).await
    }

    async fn tool_calls(&self) -> Result<Vec<ToolUseBlock>, MemoryError> {
        (**self).tool_calls().await
    }

    async fn tool_call_counts(&self) -> Result<BTreeMap<String, usize>, MemoryError> {
        (**self).tool_call_counts().await
    }

    async fn resume_point(&self, call_id: &str) -> Option<serde_json::Value> {
        (**self).resume_point(call_id).await
    }

    fn finished_call(&self, call_id: &str) -> Option<ToolCallState> {
        (**self).finished_call(call_id)
    }
}

/// The tool calls in `msgs`, in order.
pub fn tool_calls(msgs: &[Msg]) -> Vec<ToolUseBlock> {
    msgs.iter().flat_map(|m| m.tool_uses().cloned()).collect()
}

/// How many times each tool was called in `msgs`.
pub fn tool_call_counts(msgs: &[Msg]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in msgs.iter().flat_map(Msg::tool_uses) {
        *counts.entry(call.name.clone()).or_insert(0) += 1;
    }
    counts
}

/// Checks the pairing rule every model request relies on (spec Y1): each tool call of an
/// assistant message is answered by exactly one result, in call order, in the messages right
/// after it, and no result lacks its call. Returns a description of the first violation.
///
/// ```
/// use agentry::memory::check_tool_pairs;
/// use agentry::message::Msg;
/// assert!(check_tool_pairs(&[Msg::user("hi"), Msg::assistant("bot", "hello")]).is_ok());
/// ```
pub fn check_tool_pairs(msgs: &[Msg]) -> Result<(), String> {
    let mut i = 0;
    while i < msgs.len() {
        let msg = &msgs[i];
        if let Some(result) = msg.tool_results().next() {
            return Err(format!(
                "message {i} holds the result of call {:?}, which no preceding assistant message is waiting for",
                result.id
            ));
        }
        i += 1;
        let calls: Vec<&str> = msg.tool_uses().map(|c| c.id.as_str()).collect();
        for (n, id) in calls.iter().enumerate() {
            let Some(next) = msgs.get(i) else {
                return Err(format!("call {id:?} (message {}) has no result", i - n - 1));
            };
            let results: Vec<&str> = next.tool_results().map(|r| r.id.as_str()).collect();
            if results != [*id] {
                return Err(format!(
                    "message {i} should hold exactly the result of call {id:?}, but holds results {results:?}"
                ));
            }
            i += 1;
        }
    }
    Ok(())
}

/// The last model message's position and its calls that no later message answers: what a
/// resumed reply acts on (`ReActAgent::start_resumed_reply`). `None` without a model message.
pub fn unanswered_last_calls(msgs: &[Msg]) -> Option<(usize, Vec<&crate::message::ToolUseBlock>)> {
    let at = msgs
        .iter()
        .rposition(|m| m.role == crate::message::Role::Assistant)?;
    let answered: std::collections::HashSet<&str> = msgs[at + 1..]
        .iter()
        .flat_map(Msg::tool_results)
        .map(|r| r.id.as_str())
        .collect();
    let calls = msgs[at]
        .tool_uses()
        .filter(|call| !answered.contains(call.id.as_str()))
        .collect();
    Some((at, calls))
}

/// The result that closes call `id` of tool `name` when the agent stopped before it finished
/// (spec Y4): `INTERRUPTED_RESTART` as an error, with `state` in the message's `tool_call`
/// metadata.
pub fn interrupted_by_restart(id: CallId, name: String, state: &crate::tool::ToolCallState) -> Msg {
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "tool_call".into(),
        serde_json::to_value(state).unwrap_or(serde_json::Value::Null),
    );
    Msg::tool_result(crate::message::ToolResultBlock {
        id,
        name,
        output: vec![crate::message::ContentBlock::text(
            crate::tool::INTERRUPTED_RESTART,
        )],
        is_error: true,
    })
    .with_metadata(metadata)
}

/// Restores the pairing rule (spec Y4): every call of an assistant message gets exactly one
/// result right after it, in call order: its first result found anywhere later, or an
/// `INTERRUPTED_RESTART` result (`Cancelled{reason: Restart}`) when it has none. Results that
/// answer no call are dropped.
pub fn repair_tool_pairs(msgs: Vec<Msg>) -> Vec<Msg> {
    use std::collections::HashMap;

    use crate::message::{ContentBlock, ToolResultBlock};
    use crate::tool::{CancelPhase, CancelReason, ToolCallState};

    // The first result block for every id, with the metadata of its message.
    let mut results: HashMap<CallId, (ToolResultBlock, serde_json::Map<String, serde_json::Value>)> =
        HashMap::new();
    for msg in &msgs {
        for result in msg.tool_results() {
            results
                .entry(result.id.clone())
                .or_insert_with(|| (result.clone(), msg.metadata.clone()));
        }
    }
    let mut out = Vec::with_capacity(msgs.len());
    for mut msg in msgs {
        if msg.has_blocks(crate::message::BlockKind::ToolResult) {
            // Results are re-inserted after their calls; keep what else the message says.
            msg.content.retain(|b| !matches!(b, ContentBlock::ToolResult(_)));
            if msg.content.is_empty() {
                continue;
            }
            out.push(msg);
            continue;
        }
        let calls: Vec<(CallId, String)> = msg.tool_uses().map(|c| (c.id.clone(), c.name.clone())).collect();
        out.push(msg);
        for (id, name) in calls {
            let answer = match results.remove(&id) {
                Some((block, metadata)) => Msg::tool_result(block).with_metadata(metadata),
                None => interrupted_by_restart(
                    id,
                    name,
                    &ToolCallState::Cancelled {
                        phase: CancelPhase::Running,
                        partial: false,
                        reason: CancelReason::Restart,
                    },
                ),
            };
            out.push(answer);
        }
    }
    out
}

/// Memory in a `Vec`, for one process's lifetime.
#[derive(Debug, Default)]
pub struct InMemoryMemory {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    msgs: Vec<Msg>,
    ids: HashSet<String>,
}

impl InMemoryMemory {
    /// An empty memory.
    pub fn new() -> Self {
        InMemoryMemory::default()
    }

    // A poisoned lock means a panic elsewhere while holding it; every mutation here completes
    // before it can panic, so the data is consistent.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Memory for InMemoryMemory {
    async fn add(&self, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        let mut state = self.state();
        for msg in msgs {
            if state.ids.insert(msg.id.clone()) {
                state.msgs.push(msg);
            }
        }
        Ok(())
    }

    async fn messages(&self) -> Result<Vec<Msg>, MemoryError> {
        Ok(self.state().msgs.clone())
    }

    async fn insert_before(&self, before: &str, msgs: Vec<Msg>) -> Result<(), MemoryError> {
        let mut state = self.state();
        let mut at = state
            .msgs
            .iter()
            .position(|m| m.id == before)
            .unwrap_or(state.msgs.len());
        for msg in msgs {
            if state.ids.insert(msg.id.clone()) {
                state.msgs.insert(at, msg);
                at += 1;
            }
        }
        Ok(())
    }

    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        let mut state = self.state();
        let before = state.msgs.len();
        state.msgs.retain(|m| !ids.contains(&m.id));
        for id in ids {
            state.ids.remove(id);
        }
        Ok(before - state.msgs.len())
    }

    async fn size(&self) -> Result<usize, MemoryError> {
        Ok(self.state().msgs.len())
    }

    async fn clear(&self) -> Result<(), MemoryError> {
        let mut state = self.state();
        state.msgs.clear();
        state.ids.clear();
        Ok(())
    }

    fn finished_call(&self, call_id: &str) -> Option<ToolCallState> {
        let state = self.state();
        state.msgs.iter().rev().find_map(|msg| {
            msg.tool_results()
                .find(|r| r.id == call_id)
                .map(|result| result_state(msg, result))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ContentBlock, Role};
    use serde_json::json;

    fn call(name: &str) -> ContentBlock {
        ContentBlock::ToolUse(ToolUseBlock {
            id: crate::message::new_id().into(),
            name: name.into(),
            input: json!({}),
            raw_input: None,
        })
    }

    #[tokio::test]
    async fn add_skips_known_ids_and_delete_works() {
        let memory = InMemoryMemory::new();
        let a = Msg::user("a");
        memory
            .add(vec![a.clone(), a.clone(), Msg::user("b")])
            .await
            .unwrap();
        assert_eq!(memory.size().await.unwrap(), 2);
        assert_eq!(memory.delete(std::slice::from_ref(&a.id)).await.unwrap(), 1);
        memory.add(vec![a]).await.unwrap();
        assert_eq!(memory.size().await.unwrap(), 2, "a deleted id can be added again");
        memory.clear().await.unwrap();
        assert_eq!(memory.size().await.unwrap(), 0);
    }

    #[test]
    fn pairing_violations_are_described() {
        let call_msg = |ids: &[&str]| {
            Msg::new(
                "bot",
                Role::Assistant,
                ids.iter()
                    .map(|id| {
                        ContentBlock::ToolUse(ToolUseBlock {
                            id: (*id).into(),
                            name: "t".into(),
                            input: json!({}),
                            raw_input: None,
                        })
                    })
                    .collect(),
            )
        };
        let result = |id: &str| {
            Msg::tool_result(crate::message::ToolResultBlock {
                id: id.into(),
                name: "t".into(),
                output: vec![],
                is_error: false,
            })
        };
        let ok = [
            Msg::user("q"),
            call_msg(&["a", "b"]),
            result("a"),
            result("b"),
            Msg::assistant("bot", "x"),
        ];
        assert_eq!(check_tool_pairs(&ok), Ok(()));
        let missing = [call_msg(&["a", "b"]), result("a")];
        assert!(check_tool_pairs(&missing).unwrap_err().contains("\"b\""));
        let swapped = [call_msg(&["a", "b"]), result("b"), result("a")];
        assert!(check_tool_pairs(&swapped).is_err());
        let orphan = [Msg::user("q"), result("z")];
        assert!(check_tool_pairs(&orphan).unwrap_err().contains("\"z\""));
        let late = [call_msg(&["a"]), Msg::user("interjection"), result("a")];
        assert!(check_tool_pairs(&late).is_err());
    }

    #[test]
    fn y4_repair_closes_dangling_calls_and_drops_orphans() {
        let call = |id: &str| {
            ContentBlock::ToolUse(ToolUseBlock {
                id: id.into(),
                name: "t".into(),
                input: json!({}),
                raw_input: None,
            })
        };
        let result = |id: &str| {
            Msg::tool_result(crate::message::ToolResultBlock {
                id: id.into(),
                name: "t".into(),
                output: vec![ContentBlock::text(format!("r{id}"))],
                is_error: false,
            })
        };
        let broken = vec![
            Msg::user("q"),
            Msg::new("bot", Role::Assistant, vec![call("a"), call("b")]),
            result("b"),
            result("zz"),
            Msg::user("next"),
            result("a"),
        ];
        assert!(check_tool_pairs(&broken).is_err());
        let fixed = repair_tool_pairs(broken);
        assert_eq!(check_tool_pairs(&fixed), Ok(()));
        let texts: Vec<String> = fixed
            .iter()
            .map(|m| {
                m.text()
                    .unwrap_or_else(|| m.tool_results().map(|r| r.text()).collect::<Vec<_>>().join(","))
            })
            .collect();
        assert_eq!(texts, ["q", "", "ra", "rb", "next"]);
        let dangling = repair_tool_pairs(vec![Msg::new("bot", Role::Assistant, vec![call("c")])]);
        let closed = dangling[1].tool_results().next().unwrap();
        assert_eq!(closed.text(), crate::tool::INTERRUPTED_RESTART);
        assert!(closed.is_error);
        assert_eq!(dangling[1].metadata["tool_call"]["reason"], "restart");
    }

    #[tokio::test]
    async fn tool_call_helpers_list_and_count() {
        let memory = InMemoryMemory::new();
        memory
            .add(vec![
                Msg::new("bot", Role::Assistant, vec![call("add"), call("search")]),
                Msg::new("bot", Role::Assistant, vec![ContentBlock::text("x"), call("add")]),
            ])
            .await
            .unwrap();
        let names: Vec<String> = memory
            .tool_calls()
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["add", "search", "add"]);
        let counts = memory.tool_call_counts().await.unwrap();
        assert_eq!(counts.get("add"), Some(&2));
        assert_eq!(counts.get("search"), Some(&1));
    }
}
