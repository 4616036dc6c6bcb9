//! The ReAct agent: reason (call the model) → act (run its tool calls) → repeat.
//!
//! A reply ends at the first model message without tool calls. After `max_iters` rounds the
//! agent asks the model, without tools, to summarise. With [`ReActAgent::reply_structured`] the
//! model must finish by calling `generate_response` with arguments that fit a Rust type.
//!
//! Memory holds every message: the user's, each assistant message with its tool calls, one
//! result message per call (in call order, right after the assistant message, also when calls
//! run in parallel), and the final answer.
//!
//! ```no_run
//! use agentry::agent::ReActAgent;
//! use agentry::model::{OpenAiChatModel, OpenAiConfig};
//! use agentry::message::Msg;
//! use agentry::tool::{tool, Toolkit};
//!
//! /// Add two integers.
//! #[tool]
//! fn add(a: i64, b: i64) -> i64 { a + b }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let toolkit = Toolkit::new();
//! toolkit.register(AddTool)?;
//! let agent = ReActAgent::builder()
//!     .name("Friday")
//!     .sys_prompt("You are a helpful assistant.")
//!     .model(OpenAiChatModel::new(OpenAiConfig::from_env())?)
//!     .toolkit(toolkit)
//!     .build()?;
//! let reply = agent.reply(Msg::user("What is 2 + 40?")).await?;
//! println!("{}", reply.text().unwrap_or_default());
//! # Ok(()) }
//! ```

mod acting;
mod approval;
mod as_tool;
mod asker;
mod builder;
mod compaction;
mod deadline;
mod events;
mod finished;
mod handle;
mod hooks;
mod meter;
mod react;
mod recall;
mod repeats;
mod shim;
mod so_far;
mod structured;
pub mod trace;

pub use crate::protocol::InputAnswer;
pub use crate::tool::{CancelOutcome, ToolCallState};
pub use as_tool::{AgentSource, AgentTool, BuilderSource, ChildConversations, ChildStore};
pub use builder::{DEFAULT_ON_CANCEL_LIMIT, ReActAgentBuilder};
pub use compaction::{COMPACTION_KEY, Compaction, is_summary};
pub use events::{AgentEvent, CancelTarget, EventStream, StopReason};
pub use finished::DEFAULT_FINISHED_CALLS;
pub use handle::{AgentHandle, ApprovalError, InputError, SteerError};
pub use hooks::{AgentHook, HookContext, ReplyEnd};
pub use repeats::{REPEATS_BEFORE_SUMMARY, repeated_call_note, rerun_call_note};
pub use so_far::{ReplySoFar, status_lines};
pub use structured::{FINISH_FUNCTION_NAME, Structured};
pub use trace::{TRACE_CONTENT_ENV, clear_default_tracer, set_default_tracer};

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::memory::{Memory, MemoryError};
use crate::message::Msg;
use crate::model::{ChatModel, ModelError};
use crate::tool::Toolkit;
use events::EventHub;
use react::{Incoming, ReplyCx};
use structured::StructuredSpec;

/// Why a reply failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model call failed after its retries. Memory is consistent: it holds everything up to
    /// the last complete step.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Memory could not be read or written.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The agent is misconfigured.
    #[error("agent configuration error: {0}")]
    Config(String),
    /// `reply_structured` ended without a valid structured output (the model never called
    /// `generate_response` with valid arguments within `max_iters`).
    #[error("the reply ended without the required structured output")]
    NoStructuredOutput {
        /// The reply that was produced instead.
        reply: Box<Msg>,
    },
    /// The reply task ended abnormally.
    #[error("the reply task failed: {0}")]
    Internal(String),
}

/// Named hooks in registration order.
type HookList = Arc<[(String, Arc<dyn AgentHook>)]>;

/// The model-visible note added after a cancelled reply (spec R5), as a user message.
pub const REPLY_INTERRUPTED_NOTE: &str = "<interrupted>The user interrupted the previous reply. Tool calls that were \
     running were stopped and may have partly run.</interrupted>";

/// A decision stored for the rest of the session (A12, A13): calls whose grant key matches are
/// approved, or declined with the reason, without asking.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionGrant {
    /// `ApproveForSession`: matching calls run without asking.
    Allow,
    /// `DeclineForSession`: matching calls are declined without asking.
    Deny {
        /// The reason the model reads.
        reason: Option<String>,
    },
}

pub(crate) use SessionGrant as Grant;

/// Cancellation and approval settings of an agent.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) auto_approve_tools: bool,
    pub(crate) on_cancel_budget: Duration,
    pub(crate) cancel_grace: Duration,
    pub(crate) approval_timeout: Option<Duration>,
    pub(crate) interrupted_note: bool,
    pub(crate) permissions: crate::tool::PermissionRules,
}

/// What the builder set: it never changes for the life of the agent.
pub(crate) struct AgentConfig {
    pub(crate) name: String,
    /// The system prompt as the first message of every prompt (`None` when empty).
    pub(crate) sys_prompt: Option<Msg>,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) toolkit: Toolkit,
    pub(crate) memory: Arc<dyn Memory>,
    pub(crate) max_iters: usize,
    pub(crate) parallel_tool_calls: bool,
    /// Answer a call repeated from an earlier round with its earlier result (default on).
    pub(crate) answer_repeated_calls: bool,
    /// Read calls the model wrote as text (default on; see `shim.rs`).
    pub(crate) tool_shim: bool,
    pub(crate) settings: Settings,
    /// What the GenAI spans record besides the defaults (`trace.rs`).
    pub(crate) trace: trace::TraceSettings,
    /// Prices per model, for the cost of replies.
    pub(crate) prices: crate::usage::PriceTable,
    /// Limits on each reply.
    pub(crate) budget: crate::usage::ReplyBudget,
    /// What the agent's tools can read of it.
    pub(crate) extensions: crate::tool::Extensions,
    /// The plan notebook whose hint precedes each reasoning step.
    pub(crate) plan: Option<crate::plan::PlanNotebook>,
    /// When the context is compacted.
    pub(crate) compaction: Compaction,
    /// The knowledge bases retrieved from before each reply, and whether the question is
    /// rewritten into a search query first.
    pub(crate) knowledge: Option<(crate::knowledge::AgentKnowledge, bool)>,
    /// The user's long-term memory and how the agent uses it.
    pub(crate) long_term: Option<(
        std::sync::Arc<dyn crate::memory::long_term::LongTermMemory>,
        crate::memory::long_term::LongTermMemoryMode,
    )>,
}

/// What the agent's replies share and leave behind for the next one.
pub(crate) struct SessionState {
    /// One reply at a time: replies share memory.
    pub(crate) reply_lock: tokio::sync::Mutex<()>,
    /// The reply running now, for the handle.
    pub(crate) active: Mutex<Option<Arc<handle::ActiveReply>>>,
    /// Terminal states of the calls of earlier replies of this session (C3, C4), bounded.
    pub(crate) finished_calls: Mutex<finished::FinishedCalls>,
    /// One permit per `on_cancel` callback running now; bounds the threads that callbacks which
    /// never return can hold (X10).
    pub(crate) on_cancel_slots: Arc<tokio::sync::Semaphore>,
    /// Session approval grants, keyed per A12.
    pub(crate) grants: Mutex<HashMap<String, Grant>>,
    /// Whether memory is known to pair every call with one result (Y1); false after a reply
    /// that did not end normally, and before the first reply (memory may come from elsewhere).
    pub(crate) memory_checked: AtomicBool,
}

/// An agent: its configuration, its session state, and who listens.
pub(crate) struct AgentInner {
    pub(crate) config: AgentConfig,
    pub(crate) session: SessionState,
    pub(crate) hooks: RwLock<HookList>,
    pub(crate) events: Arc<EventHub>,
}

impl AgentInner {
    pub(crate) fn active_reply(&self) -> Option<Arc<handle::ActiveReply>> {
        self.session
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn finished_call(&self, call_id: &str) -> Option<ToolCallState> {
        self.session
            .finished_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(call_id)
            .cloned()
    }

    /// Whether an earlier reply of this agent had a call with this id (among those remembered).
    pub(crate) fn is_finished_call(&self, call_id: &str) -> bool {
        self.session
            .finished_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(call_id)
    }

    pub(crate) fn memory_is_checked(&self) -> bool {
        self.session.memory_checked.load(Ordering::Acquire)
    }

    pub(crate) fn set_memory_checked(&self, checked: bool) {
        self.session.memory_checked.store(checked, Ordering::Release);
    }
}

/// A ReAct agent. Cheap to clone: clones share memory, toolkit, hooks and subscribers.
#[derive(Clone)]
pub struct ReActAgent {
    inner: Arc<AgentInner>,
}

impl std::fmt::Debug for ReActAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReActAgent")
            .field("name", &self.inner.config.name)
            .field("model", &self.inner.config.model.model_name())
            .field("max_iters", &self.inner.config.max_iters)
            .field("parallel_tool_calls", &self.inner.config.parallel_tool_calls)
            .finish()
    }
}

impl ReActAgent {
    /// Starts building an agent.
    pub fn builder() -> ReActAgentBuilder {
        ReActAgentBuilder::default()
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The agent's memory.
    pub fn memory(&self) -> &Arc<dyn Memory> {
        &self.inner.config.memory
    }

    /// The agent's toolkit.
    pub fn toolkit(&self) -> &Toolkit {
        &self.inner.config.toolkit
    }

    /// A handle to cancel calls, cancel the reply, or decide approvals, from anywhere.
    pub fn handle(&self) -> AgentHandle {
        AgentHandle {
            inner: Arc::clone(&self.inner),
        }
    }

    /// The session approval grants (A12, A13) by grant key, in key order: the tool name, then
    /// (unless the tool's scope is any arguments) a NUL and the call's arguments as canonical
    /// JSON. A store keeps them with the session (A14) and gives them back with
    /// [`ReActAgent::restore_session_grants`].
    pub fn session_grants(&self) -> Vec<(String, SessionGrant)> {
        let grants = self
            .inner
            .session
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<(String, SessionGrant)> =
            grants.iter().map(|(k, g)| (k.clone(), g.clone())).collect();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        list
    }

    /// Adds grants kept from an earlier run of the same session (A14), replacing any with the
    /// same key.
    pub fn restore_session_grants(&self, grants: impl IntoIterator<Item = (String, SessionGrant)>) {
        self.inner
            .session
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(grants);
    }

    /// Removes the grant with this key; whether there was one.
    pub fn revoke_session_grant(&self, key: &str) -> bool {
        self.inner
            .session
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
            .is_some()
    }

    /// Forgets every session approval grant (A12, A13).
    pub fn clear_session_grants(&self) {
        self.inner
            .session
            .grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Replies to `msg` (or continues the conversation when `None`) and returns the answer.
    /// A cancelled reply (through [`AgentHandle::cancel_reply`]) returns normally too: its
    /// message carries `"interrupted": true` in its metadata.
    /// Concurrent replies of one agent run one after the other.
    pub async fn reply(&self, msg: impl Into<Option<Msg>>) -> Result<Msg, AgentError> {
        ReplyCx::run(
            &self.inner,
            Incoming::Message(msg.into()),
            None,
            react::new_reply(None),
        )
        .await
    }

    /// Replies and returns the structured output of type `T` produced through the finish
    /// function `generate_response`, whose parameters are `T`'s JSON schema. Arguments that do
    /// not fit `T` go back to the model as an error result, and it tries again.
    pub async fn reply_structured<T>(&self, msg: impl Into<Option<Msg>>) -> Result<Structured<T>, AgentError>
    where
        T: JsonSchema + DeserializeOwned,
    {
        let spec = StructuredSpec::new::<T>()?;
        let reply = ReplyCx::run(
            &self.inner,
            Incoming::Message(msg.into()),
            Some(spec),
            react::new_reply(None),
        )
        .await?;
        Structured::from_reply(reply)
    }

    /// Starts a reply on its own task and returns its events as they happen, then its result.
    pub fn start_reply(&self, msg: impl Into<Option<Msg>>) -> ReplyRun {
        self.spawn_reply(Incoming::Message(msg.into()))
    }

    /// Starts a reply that first acts on the calls of the last model message that have no
    /// result yet, asking for approval and running them as any call, then goes on from their
    /// results. This resumes a conversation stored while its calls waited for approval (a
    /// session reopened by a new process); without such calls it is `start_reply(None)`.
    ///
    /// Only for calls that never started: one that may have run must be closed as interrupted
    /// instead (the session store's recovery does), or its side effects would happen twice.
    pub fn start_resumed_reply(&self) -> ReplyRun {
        self.spawn_reply(Incoming::Resume)
    }

    fn spawn_reply(&self, incoming: Incoming) -> ReplyRun {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::clone(&self.inner);
        let active = react::new_reply(Some(tx));
        let reply = Arc::downgrade(&active);
        // In the caller's OpenTelemetry context: the reply's span is a child of the caller's.
        let task = tokio::spawn(crate::trace_context::in_current_context(async move {
            ReplyCx::run(&inner, incoming, None, active).await
        }));
        ReplyRun {
            events: EventStream::new(rx),
            task: Some(task),
            handle: self.handle(),
            reply,
        }
    }

    /// Receives every event of every later reply of this agent (and its clones).
    pub fn subscribe(&self) -> EventStream {
        self.inner.events.subscribe()
    }

    /// Registers a hook under `name`, after the existing ones; a hook of the same name is
    /// replaced in place. Takes effect from the next reply.
    pub fn register_hook(&self, name: impl Into<String>, hook: impl AgentHook) {
        let mut hooks = self.inner.hooks.write().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<(String, Arc<dyn AgentHook>)> = hooks.to_vec();
        hooks::upsert(&mut list, name.into(), Arc::new(hook));
        *hooks = list.into();
    }

    /// Removes the hook registered under `name`; returns whether there was one.
    pub fn remove_hook(&self, name: &str) -> bool {
        let mut hooks = self.inner.hooks.write().unwrap_or_else(|e| e.into_inner());
        let before = hooks.len();
        let list: Vec<(String, Arc<dyn AgentHook>)> =
            hooks.iter().filter(|(n, _)| n != name).cloned().collect();
        let removed = list.len() != before;
        *hooks = list.into();
        removed
    }
}

/// A reply running on its own task: a stream of its events, then its result.
///
/// The stream ends after the reply's [`AgentEvent::ReplyFinished`]. Dropping a `ReplyRun`
/// before [`finish`](ReplyRun::finish) cancels the reply: nobody is left to see it.
#[derive(Debug)]
pub struct ReplyRun {
    events: EventStream,
    task: Option<JoinHandle<Result<Msg, AgentError>>>,
    handle: AgentHandle,
    /// Weak: the reply's state owns the event sender, and the stream must end with the reply.
    reply: std::sync::Weak<handle::ActiveReply>,
}

impl ReplyRun {
    /// The next event of this reply, or `None` once it finished.
    pub async fn next_event(&mut self) -> Option<AgentEvent> {
        self.events.recv().await
    }

    /// The handle of the agent running this reply.
    pub fn handle(&self) -> &AgentHandle {
        &self.handle
    }

    /// Waits for the reply's result (events not read yet are dropped).
    pub async fn finish(mut self) -> Result<Msg, AgentError> {
        match self.task.take() {
            Some(task) => task.await.map_err(|e| AgentError::Internal(e.to_string()))?,
            None => Err(AgentError::Internal("the reply was already awaited".into())),
        }
    }
}

impl ReplyRun {
    /// Cancels this reply (not whichever reply runs at the time, unlike
    /// [`AgentHandle::cancel_reply`]).
    pub fn cancel(&self) -> CancelOutcome {
        match self.reply.upgrade() {
            Some(reply) => reply.cancel(&self.handle.inner.events),
            None => CancelOutcome::AlreadyFinished(None),
        }
    }
}

impl Drop for ReplyRun {
    fn drop(&mut self) {
        if let Some(task) = &self.task
            && !task.is_finished()
        {
            // Nobody is left to decide or to watch: pending approvals are declined for want of a
            // decision (A15), then the reply is cancelled.
            if let Some(reply) = self.reply.upgrade() {
                reply.decline_pending(&self.handle.inner.events);
                reply.cancel(&self.handle.inner.events);
            }
        }
    }
}

impl Stream for ReplyRun {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        Pin::new(&mut self.events).poll_next(cx)
    }
}
