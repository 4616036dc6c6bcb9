//! # agentry-store
//!
//! Durable sessions for Agentry agents: the conversation, a record per tool call, pending
//! approvals, session approval grants and token use, kept so that a crash, a reboot or a
//! double Ctrl-C loses nothing that was acknowledged.
//!
//! - [`SessionStore`] is what a store provides; [`SqliteStore`] is the default (one SQLite file
//!   under the user's data directory, WAL, a versioned schema). `PostgresStore` (cargo feature
//!   `postgres`) is the store several `agentry serve` nodes share: leases with an expiry and a
//!   fencing token, event notices through `LISTEN/NOTIFY`, controls sent between nodes. One
//!   conformance suite runs every store test on both.
//! - [`SessionMemory`] is an agent [`Memory`](agentry::memory::Memory) on one session of a
//!   store: give it to `ReActAgent::builder().memory(...)` and the loop does not care where its
//!   memory lives. Every change is committed before it returns (write-ahead).
//!   [`SessionMemory::attach`] gives a builder everything of the session at once: the memory,
//!   the grants, and the hook that keeps calls, approvals and token use.
//! - Opening a session for writing takes its [`Lease`] (one writer per session, across
//!   processes) and recovers it (spec Y4): calls left pending, queued or running by a process
//!   that stopped are closed as `Cancelled{reason: Restart}` with the model-visible
//!   `INTERRUPTED_RESTART` text.
//!
//! **Tool side effects happen at most once**: recovery never re-runs a call. A call that was
//! running when the process stopped may have had its effect, so the model is told it "may have
//! partly run" and decides what to do; a call marked non-idempotent is never retried by the
//! store or recovery ([`CallRecord::idempotent`] is kept for a UI that offers to retry).
//!
//! ```
//! use std::sync::Arc;
//! use agentry::memory::Memory;
//! use agentry_store::{SessionMemory, SqliteStore};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = Arc::new(SqliteStore::open(dir.path().join("sessions.db")).unwrap());
//! let memory = SessionMemory::open_or_create(store.clone(), "demo", &serde_json::json!({})).await.unwrap();
//! memory.add(vec![agentry::Msg::user("hi")]).await.unwrap(); // committed when it returns
//! drop(memory); // releases the session
//! let again = SessionMemory::open_or_create(store, "demo", &serde_json::json!({})).await.unwrap();
//! assert_eq!(again.size().await.unwrap(), 1);
//! # });
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod approvals;
mod attach;
mod children;
mod codec;
mod error;
mod grants;
mod knowledge;
mod long_term;
mod memory;
mod message_calls;
mod plans;
#[cfg(feature = "postgres")]
mod postgres;
mod recorder;
mod recovery;
pub mod search;
mod session_config;
mod sqlite;
mod store;
mod tool_groups;
mod transfer;
mod types;

pub use approvals::{ApprovalRecord, ApprovalState, arguments_digest};
pub use attach::SESSION_HOOK;
pub use children::PARENT_KEY;
pub use error::StoreError;
pub use grants::{restore_grants, save_grants};
pub use knowledge::StoredKnowledgeBase;
pub use long_term::StoredLongTermMemory;
pub use memory::SessionMemory;
pub use plans::{PLANS_KEY, SessionPlanStorage};
#[cfg(feature = "postgres")]
pub use postgres::{POSTGRES_SCHEMA_VERSION, PostgresOptions, PostgresStore};
pub use recorder::CallRecorder;
pub use recovery::REPLY_INTERRUPTED_BY_RESTART;
pub use sqlite::{
    KnowledgeBaseInfo, MemoryState, NewChunk, NewMemory, SCHEMA_VERSION, SqliteOptions, SqliteStore,
    StoredChunk, Synchronous,
};
pub use store::{EventNotice, Lease, Purged, SessionStore};
pub use tool_groups::{TOOL_GROUPS_KEY, ToolGroupRecorder, restore_tool_groups, save_tool_groups};
pub use transfer::{EXPORT_FORMAT, EXPORT_VERSION, SessionExport};
pub use types::{
    CallRecord, CallStatus, Grant, GrantKind, PendingApproval, PendingApprovals, Recovered, Recovery,
    SessionId, SessionInfo, StoredEvent, UsageTotals,
};
