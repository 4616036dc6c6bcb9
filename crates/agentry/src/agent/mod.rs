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
mod builder;
mod events;
mod hooks;
mod react;
mod structured;

pub use builder::ReActAgentBuilder;
pub use events::{AgentEvent, EventStream, StopReason, ToolCallState};
pub use hooks::{AgentHook, HookContext};
pub use structured::{FINISH_FUNCTION_NAME, Structured};

use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

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
use react::ReplyCx;
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

pub(crate) struct AgentInner {
    pub(crate) name: String,
    /// The system prompt as the first message of every prompt (`None` when empty).
    pub(crate) sys_prompt: Option<Msg>,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) toolkit: Toolkit,
    pub(crate) memory: Arc<dyn Memory>,
    pub(crate) max_iters: usize,
    pub(crate) parallel_tool_calls: bool,
    pub(crate) hooks: RwLock<HookList>,
    pub(crate) events: EventHub,
    /// One reply at a time: replies share memory.
    pub(crate) reply_lock: tokio::sync::Mutex<()>,
}

/// A ReAct agent. Cheap to clone: clones share memory, toolkit, hooks and subscribers.
#[derive(Clone)]
pub struct ReActAgent {
    inner: Arc<AgentInner>,
}

impl std::fmt::Debug for ReActAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReActAgent")
            .field("name", &self.inner.name)
            .field("model", &self.inner.model.model_name())
            .field("max_iters", &self.inner.max_iters)
            .field("parallel_tool_calls", &self.inner.parallel_tool_calls)
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
        &self.inner.name
    }

    /// The agent's memory.
    pub fn memory(&self) -> &Arc<dyn Memory> {
        &self.inner.memory
    }

    /// The agent's toolkit.
    pub fn toolkit(&self) -> &Toolkit {
        &self.inner.toolkit
    }

    /// Replies to `msg` (or continues the conversation when `None`) and returns the answer.
    /// Concurrent replies of one agent run one after the other.
    pub async fn reply(&self, msg: impl Into<Option<Msg>>) -> Result<Msg, AgentError> {
        ReplyCx::run(&self.inner, msg.into(), None, None).await
    }

    /// Replies and returns the structured output of type `T` produced through the finish
    /// function `generate_response`, whose parameters are `T`'s JSON schema. Arguments that do
    /// not fit `T` go back to the model as an error result, and it tries again.
    pub async fn reply_structured<T>(&self, msg: impl Into<Option<Msg>>) -> Result<Structured<T>, AgentError>
    where
        T: JsonSchema + DeserializeOwned,
    {
        let spec = StructuredSpec::new::<T>()?;
        let reply = ReplyCx::run(&self.inner, msg.into(), Some(spec), None).await?;
        Structured::from_reply(reply)
    }

    /// Starts a reply on its own task and returns its events as they happen, then its result.
    pub fn start_reply(&self, msg: impl Into<Option<Msg>>) -> ReplyRun {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::clone(&self.inner);
        let msg = msg.into();
        let task = tokio::spawn(async move { ReplyCx::run(&inner, msg, None, Some(tx)).await });
        ReplyRun {
            events: EventStream::new(rx),
            task,
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
/// The stream ends after the reply's [`AgentEvent::ReplyFinished`].
#[derive(Debug)]
pub struct ReplyRun {
    events: EventStream,
    task: JoinHandle<Result<Msg, AgentError>>,
}

impl ReplyRun {
    /// The next event of this reply, or `None` once it finished.
    pub async fn next_event(&mut self) -> Option<AgentEvent> {
        self.events.recv().await
    }

    /// Waits for the reply's result (events not read yet are dropped).
    pub async fn finish(self) -> Result<Msg, AgentError> {
        self.task.await.map_err(|e| AgentError::Internal(e.to_string()))?
    }
}

impl Stream for ReplyRun {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        Pin::new(&mut self.events).poll_next(cx)
    }
}
