//! An agent as a tool of another agent ([`ReActAgent::as_tool`]).
//!
//! The parent's call runs one reply of the child. The child's answer streams as the call's
//! cumulative output, its tool calls as the call's progress, and its token use adds up to the
//! parent's reply. Cancelling the parent's call cancels the child's reply (its running tools get
//! their `on_cancel`), and what the child had by then (its answer so far and its tools' results)
//! becomes the call's partial result: the seed's cancel rule, one level down.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde_json::{Map, Value, json};

use super::{AgentError, AgentEvent, ReActAgent, ReActAgentBuilder, ReplyRun, ReplySoFar};
use crate::CallId;
use crate::message::Msg;
use crate::tool::{ApprovalDecision, NestedApproval, Tool, ToolContext, ToolError, ToolResponse, ToolStream};

/// How long a cancelled call waits for the child's reply to end before it hands back what the
/// child had so far: within the parent's `on_cancel` budget (100 ms by default).
const CANCEL_WAIT: Duration = Duration::from_millis(80);

/// Characters of a nested call's arguments, progress or result shown on its line.
const NESTED_CHARS: usize = 200;
/// The least time between two progress reports of one nested call that are passed on.
const NESTED_EVERY: Duration = Duration::from_secs(1);

/// Makes the agent that answers one call of an [`AgentTool::fresh`] tool.
pub type AgentSource = Arc<dyn Fn() -> Result<ReActAgent, AgentError> + Send + Sync>;

/// Makes the builder of the agent that answers one call of an [`AgentTool::from_builder`] tool.
pub type BuilderSource = Arc<dyn Fn() -> ReActAgentBuilder + Send + Sync>;

/// Keeps the conversations of a parent agent's sub-agents with the parent's session: a session
/// store gives each call's child a memory of its own, stored beside the parent's, so that the
/// child's calls too get exactly one result each across a crash. Installed as the parent's
/// [`ChildStore`] extension; [`AgentTool::from_builder`] tools use it.
#[async_trait::async_trait]
pub trait ChildConversations: Send + Sync {
    /// Gives `builder`, the child `agent` answering the parent's call `call_id`, its memory (and
    /// whatever keeps it: hooks, its own `ChildStore` for its sub-agents).
    async fn attach(
        &self,
        agent: &str,
        call_id: &CallId,
        builder: ReActAgentBuilder,
    ) -> Result<ReActAgentBuilder, String>;
}

/// The parent agent's extension ([`ReActAgentBuilder::extension`]) through which its
/// [`AgentTool::from_builder`] tools keep their children's conversations.
#[derive(Clone)]
pub struct ChildStore(pub Arc<dyn ChildConversations>);

/// A [`ReActAgent`] another agent calls as a tool: made by [`ReActAgent::as_tool`] (one agent,
/// whose conversation goes on from call to call) or [`AgentTool::fresh`] (a new agent, so a new
/// conversation, for each call).
///
/// Its one argument, `prompt` (a string), is the message the child replies to. A child's
/// approval question is asked of the parent's user, naming the child
/// ([`ToolContext::ask_approval`]): the parent's reply shows it as an `ApprovalRequested` of id
/// `"{parent call}.{child call}"`, named `"{agent}: {tool}"`, decided with the parent's
/// [`AgentHandle::decide`](crate::agent::AgentHandle::decide). Cancelling the parent's call
/// withdraws it.
#[derive(Clone)]
pub struct AgentTool {
    agent: ChildAgent,
    name: String,
    description: String,
}

#[derive(Clone)]
enum ChildAgent {
    Shared(ReActAgent),
    Fresh(AgentSource),
    Built(BuilderSource),
}

impl std::fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.agent {
            ChildAgent::Shared(_) => "shared",
            ChildAgent::Fresh(_) => "fresh",
            ChildAgent::Built(_) => "built",
        };
        f.debug_struct("AgentTool")
            .field("name", &self.name)
            .field("agent", &kind)
            .finish()
    }
}

impl AgentTool {
    /// A tool named `name`, described by `description`, each call of which is a reply of a new
    /// agent made by `agents`: calls share no conversation, and may run at the same time (one
    /// agent runs one reply at a time). A server's sessions, say, each calling a sub-agent.
    pub fn fresh(
        name: impl Into<String>,
        description: impl Into<String>,
        agents: impl Fn() -> Result<ReActAgent, AgentError> + Send + Sync + 'static,
    ) -> Self {
        AgentTool {
            agent: ChildAgent::Fresh(Arc::new(agents)),
            name: name.into(),
            description: description.into(),
        }
    }

    /// [`AgentTool::fresh`], each call's agent built from a builder of `builders`: when the
    /// parent agent has a [`ChildStore`] (a session store's, say), the child's conversation is
    /// kept there, with the parent's session; otherwise it lives in memory for the call.
    pub fn from_builder(
        name: impl Into<String>,
        description: impl Into<String>,
        builders: impl Fn() -> ReActAgentBuilder + Send + Sync + 'static,
    ) -> Self {
        AgentTool {
            agent: ChildAgent::Built(Arc::new(builders)),
            name: name.into(),
            description: description.into(),
        }
    }

    /// The agent that answers a call of `ctx`.
    async fn child(&self, ctx: &ToolContext) -> Result<ReActAgent, ToolError> {
        let made = |e: String| ToolError::msg(format!("the agent `{}` could not be made: {e}", self.name));
        match &self.agent {
            ChildAgent::Shared(agent) => Ok(agent.clone()),
            ChildAgent::Fresh(agents) => agents().map_err(|e| made(e.to_string())),
            ChildAgent::Built(builders) => {
                let mut builder = builders();
                if let Some(ChildStore(store)) = ctx.extension::<ChildStore>() {
                    builder = store
                        .attach(&self.name, ctx.call_id(), builder)
                        .await
                        .map_err(made)?;
                }
                builder.build().map_err(|e| made(e.to_string()))
            }
        }
    }
}

impl ReActAgent {
    /// This agent as a tool named `name` of another agent, described by `description` (what
    /// the parent's model reads to choose it). Every call is a reply of this agent, in its one
    /// conversation; see [`AgentTool::fresh`] for a new conversation per call.
    ///
    /// ```no_run
    /// # fn demo(researcher: agentry::agent::ReActAgent) -> Result<(), Box<dyn std::error::Error>> {
    /// use agentry::tool::Toolkit;
    ///
    /// let toolkit = Toolkit::new();
    /// toolkit.register(researcher.as_tool("researcher", "Finds and summarizes sources on a question"))?;
    /// # Ok(()) }
    /// ```
    pub fn as_tool(&self, name: impl Into<String>, description: impl Into<String>) -> AgentTool {
        AgentTool {
            agent: ChildAgent::Shared(self.clone()),
            name: name.into(),
            description: description.into(),
        }
    }
}

impl Tool for AgentTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "prompt": {
                    "type": "string",
                    "description": "What to ask, with everything needed to answer it"
                }
            },
            "required": ["prompt"]
        })
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        let Some(prompt) = args.get("prompt").and_then(Value::as_str).map(str::to_owned) else {
            let error = ToolError::InvalidArguments("`prompt` must be a string".into());
            return futures::stream::once(async move { Err(error) }).boxed();
        };
        let sofar = Arc::new(SoFar::default());
        let seen = Arc::clone(&sofar);
        let name = self.name.clone();
        // Before anything is awaited: a cancel while the child is made hands back a result too.
        ctx.set_on_cancel(move || Some(seen.when_ended(CANCEL_WAIT).cancelled_text(&name)));
        let starting = async move {
            let agent = match self.child(&ctx).await {
                Ok(agent) => agent,
                Err(e) => {
                    sofar.update(|s| s.ended = true);
                    return futures::stream::once(async move { Err(e) }).boxed();
                }
            };
            let child = Child {
                run: Some(agent.start_reply(Msg::user(prompt))),
                ctx,
                sofar,
                cancel_sent: false,
                name: self.name.clone(),
                asking: FuturesUnordered::new(),
                calls: std::collections::HashMap::new(),
                reported: std::collections::HashMap::new(),
            };
            futures::stream::unfold(child, |mut child| async move {
                let chunk = child.next_chunk().await?;
                Some((chunk, child))
            })
            .boxed()
        };
        futures::stream::once(starting).flatten().boxed()
    }
}

/// What the child's reply has shown so far, shared with the call's `on_cancel`.
#[derive(Default)]
struct SoFar {
    state: Mutex<Shown>,
    ended: Condvar,
}

#[derive(Default, Clone)]
struct Shown {
    so_far: ReplySoFar,
    ended: bool,
}

impl SoFar {
    fn update(&self, f: impl FnOnce(&mut Shown)) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut state);
        if state.ended {
            self.ended.notify_all();
        }
    }

    /// What was shown once the child's reply ended, or after `wait` if it has not.
    fn when_ended(&self, wait: Duration) -> ReplySoFar {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (state, _) = self
            .ended
            .wait_timeout_while(state, wait, |s| !s.ended)
            .unwrap_or_else(PoisonError::into_inner);
        state.so_far.clone()
    }
}

/// The child's reply as the call's stream.
struct Child {
    run: Option<ReplyRun>,
    ctx: ToolContext,
    sofar: Arc<SoFar>,
    cancel_sent: bool,
    name: String,
    /// The child's approval questions, asked of the parent's user.
    asking: FuturesUnordered<BoxFuture<'static, (CallId, ApprovalDecision)>>,
    /// The tool of each of the child's calls, by call id.
    calls: std::collections::HashMap<CallId, String>,
    /// When each nested call's progress was last passed on.
    reported: std::collections::HashMap<String, std::time::Instant>,
}

impl Child {
    /// The call's next chunk: the child's answer so far, then its result; `None` after it.
    async fn next_chunk(&mut self) -> Option<Result<ToolResponse, ToolError>> {
        loop {
            let run = self.run.as_mut()?;
            let event = tokio::select! {
                biased;
                () = self.ctx.cancelled(), if !self.cancel_sent => {
                    self.cancel_sent = true;
                    run.cancel();
                    continue;
                }
                Some((call_id, decision)) = self.asking.next(), if !self.asking.is_empty() => {
                    // Refused when the child's call was cancelled meanwhile: nothing to decide.
                    let _ = run.handle().decide(call_id, decision);
                    continue;
                }
                event = run.next_event() => event,
            };
            let Some(event) = event else {
                return Some(self.finish().await);
            };
            if let Some(chunk) = self.on_event(event) {
                return Some(Ok(chunk));
            }
        }
    }

    /// Follows one event of the child; a chunk to stream when its answer grew.
    fn on_event(&mut self, event: AgentEvent) -> Option<ToolResponse> {
        let mut grown = None;
        self.sofar.update(|s| {
            if s.so_far.observe(&event) {
                grown = Some(s.so_far.answer().to_owned());
            }
        });
        if let Some(text) = grown.filter(|_| !self.cancel_sent) {
            return Some(ToolResponse::partial(text));
        }
        match event {
            // The child's calls, each a line of its own under the parent's call.
            AgentEvent::ToolStarted {
                call_id, name, input, ..
            } => {
                let args = crate::message::truncate_chars(&input.to_string(), NESTED_CHARS);
                self.ctx
                    .report_nested(call_id.as_str(), format!("{}: {name}({args})", self.name));
                self.calls.insert(call_id, name);
                None
            }
            AgentEvent::ToolProgress {
                call_id,
                id,
                message,
                nested,
                ..
            } => {
                // At most one report a second per nested call: its start and its result always show.
                let key = format!("{call_id}.{}", id.as_deref().unwrap_or_default());
                let now = std::time::Instant::now();
                if self
                    .reported
                    .get(&key)
                    .is_some_and(|at| now.duration_since(*at) < NESTED_EVERY)
                {
                    return None;
                }
                self.reported.insert(key, now);
                let message = crate::message::truncate_chars(&message, NESTED_CHARS);
                match (nested, id) {
                    // A grandchild's call: under its own id, within this child's call.
                    (true, Some(id)) => self
                        .ctx
                        .report_nested(&format!("{call_id}.{id}"), format!("{}: {message}", self.name)),
                    _ => {
                        let tool = self.calls.get(&call_id).map(String::as_str).unwrap_or("tool");
                        self.ctx
                            .report_nested(call_id.as_str(), format!("{}: {tool} ⋯ {message}", self.name));
                    }
                }
                None
            }
            AgentEvent::Message { msg, last: true } if msg.role != crate::message::Role::Assistant => {
                for result in msg.tool_results() {
                    let mark = if result.is_error { "✗" } else { "→" };
                    let text = crate::message::truncate_chars(&result.text(), NESTED_CHARS);
                    self.ctx.report_nested(
                        result.id.as_str(),
                        format!("{}: {} {mark} {text}", self.name, result.name),
                    );
                }
                None
            }
            AgentEvent::ApprovalRequested {
                call_id,
                name,
                input,
                mut request,
                automatic: false,
                ..
            } => {
                // Asked of the parent's user, naming the child; the answer decides the child's call.
                request.message = format!("The agent `{}` asks: {}", self.name, request.message);
                let question = NestedApproval {
                    id: call_id.as_str().to_owned(),
                    name: format!("{}: {name}", self.name),
                    input,
                    request,
                };
                let answer = self.ctx.ask_approval(question);
                self.asking.push(async move { (call_id, answer.await) }.boxed());
                None
            }
            AgentEvent::ReplyFinished { usage, .. } => {
                self.ctx.report_usage(&usage);
                None
            }
            _ => None,
        }
    }

    /// The child's reply ended: its answer is the call's result.
    async fn finish(&mut self) -> Result<ToolResponse, ToolError> {
        let run = self
            .run
            .take()
            .ok_or_else(|| ToolError::msg("the agent's reply was already finished"))?;
        let outcome = run.finish().await;
        self.sofar.update(|s| {
            if let Ok(msg) = &outcome {
                s.so_far.set_answer(msg.text().unwrap_or_default());
            }
            s.ended = true;
        });
        let msg = outcome.map_err(|e| ToolError::msg(format!("the agent `{}` failed: {e}", self.name)))?;
        Ok(ToolResponse::text(msg.text().unwrap_or_default()))
    }
}
