//! The per-call execution context.

use crate::CallId;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::approval::{ApprovalDecision, ApprovalRequest, UserAction};
use super::call::CallRecord;
use super::extensions::Extensions;
use crate::model::ChatUsage;
use crate::protocol::InputAnswer;

/// Receives `report()` progress: call id, report id, message, whether it is about a nested call.
pub(crate) type ProgressFn = Arc<dyn Fn(&str, Option<&str>, &str, bool) + Send + Sync>;

/// Receives `report_usage()`: what a tool's own model calls used.
pub(crate) type UsageFn = Arc<dyn Fn(&ChatUsage) + Send + Sync>;
/// Asks the agent's user what a running call needs: an approval of a call it makes, or input.
/// The answer comes on the receiver (dropped: nobody can answer).
pub(crate) trait Asker: Send + Sync {
    fn approval(&self, question: NestedApproval) -> oneshot::Receiver<ApprovalDecision>;
    fn input(&self, question: InputQuestion) -> oneshot::Receiver<InputAnswer>;
    /// The asker of question `question` (its id within the call) stopped waiting: it goes.
    fn withdraw(&self, question: &str);
    /// Keeps how the running call can be found again (the agent's hooks, a session store).
    fn resume_point(&self, token: Value) -> futures::future::BoxFuture<'static, ()>;
}

pub(crate) type AskFn = Arc<dyn Asker>;

/// A question asked and not answered yet: dropped so (its asker stopped waiting for it), it is
/// withdrawn from the user.
struct OpenQuestion {
    ask: Option<(AskFn, String)>,
}

impl OpenQuestion {
    fn new(ask: &AskFn, question: &str) -> Self {
        Self {
            ask: Some((Arc::clone(ask), question.to_owned())),
        }
    }

    fn answered(mut self) {
        self.ask = None;
    }
}

impl Drop for OpenQuestion {
    fn drop(&mut self) {
        if let Some((ask, question)) = self.ask.take() {
            ask.withdraw(&question);
        }
    }
}

/// Input a running call asks the agent's user for (an MCP server's elicitation form).
#[derive(Debug, Clone)]
pub struct InputQuestion {
    /// The question's id within this call: the request's id is `"{this call's id}.{id}"`.
    pub id: String,
    /// Who asks, as the user sees it: `"{server}: input"`.
    pub name: String,
    /// What is asked.
    pub message: String,
    /// The form: a JSON schema of an object of simple fields; an accepted answer must match it.
    pub schema: Value,
}

/// A question a running call asks the agent's user: may a call the tool makes on its own
/// behalf run? A sub-agent's tool call that needs approval, say
/// ([`AgentTool`](crate::agent::AgentTool)).
#[derive(Debug, Clone)]
pub struct NestedApproval {
    /// The nested call's id, unique within this call: the question's id is
    /// `"{this call's id}.{id}"`.
    pub id: String,
    /// What runs, as the user sees it: `"researcher: write_file"`.
    pub name: String,
    /// Its arguments.
    pub input: Value,
    /// What to show the user.
    pub request: ApprovalRequest,
}

/// The default time a cancelled body may keep running to unwind before it is dropped (X14).
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(1);

/// How long the agent waits for a tool's `on_cancel` by default (X10).
pub const DEFAULT_ON_CANCEL_BUDGET: Duration = Duration::from_millis(100);

/// What a running tool call can know and do about itself.
///
/// Each call gets its own context: its own cancellation token (a child of the reply's token)
/// and its own `on_cancel` slot, so cancelling one call never touches another, even two parallel
/// calls of the same tool.
///
/// ```
/// use agentry::tool::{CancellationToken, ToolContext};
///
/// let ctx = ToolContext::new("call_1", "search", CancellationToken::new());
/// let found = std::sync::Arc::new(std::sync::Mutex::new(vec!["a.txt".to_owned()]));
/// let partial = found.clone();
/// ctx.set_on_cancel(move || Some(format!("Cancelled; found so far: {:?}", partial.lock().unwrap())));
/// assert!(!ctx.is_cancelled());
/// ctx.cancellation_token().cancel();
/// assert!(ctx.is_cancelled());
/// ```
#[derive(Clone)]
pub struct ToolContext {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    record: Arc<CallRecord>,
    progress: Option<ProgressFn>,
    usage: Option<UsageFn>,
    ask: Option<AskFn>,
    user_action: Option<UserAction>,
    cancel_grace: Duration,
    // Read by the MCP tools only.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    on_cancel_budget: Duration,
    extensions: Extensions,
    /// What an earlier run of this call left to find it again, when this run resumes it.
    resumed_from: Option<Value>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("call_id", &self.call_id())
            .field("tool_name", &self.tool_name())
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl ToolContext {
    /// A context for a call run outside an agent (tests, custom drivers): running, with this
    /// token. Reports go nowhere and nobody invokes `on_cancel`; the agent does both for the
    /// calls it runs.
    pub fn new(call_id: impl Into<CallId>, tool_name: impl Into<String>, token: CancellationToken) -> Self {
        let record = CallRecord::new(call_id.into(), tool_name.into(), token, false);
        record.start();
        ToolContext::for_record(
            record,
            None,
            None,
            None,
            DEFAULT_CANCEL_GRACE,
            DEFAULT_ON_CANCEL_BUDGET,
            Extensions::default(),
        )
    }

    /// This context with the agent's `extensions` (for a call run outside an agent that needs
    /// them, such as a plan tool in a test).
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        // In place when this context is not shared yet (as when it is made), else a copy.
        Arc::make_mut(&mut self.inner).extensions = extensions;
        self
    }

    /// This context, its nested approval questions asked through `ask`.
    pub(crate) fn with_asker(mut self, ask: AskFn) -> Self {
        Arc::make_mut(&mut self.inner).ask = Some(ask);
        self
    }

    /// This context, for a run that resumes the call from `token` (its earlier run's
    /// [`Self::set_resume_point`]).
    pub(crate) fn with_resumed_from(mut self, token: Option<Value>) -> Self {
        if token.is_some() {
            Arc::make_mut(&mut self.inner).resumed_from = token;
        }
        self
    }

    /// Says how this call can be found again if the process stops while it runs (work that
    /// goes on elsewhere: an MCP task's id, say). A session store keeps `token` with the call
    /// before this returns; when the session is opened again, the call is not closed as
    /// interrupted but run again by `start_resumed_reply`, with the token in
    /// [`Self::resumed_from`], without asking for approval again. A later call replaces the
    /// token. Outside an agent, or without a store, it does nothing.
    pub async fn set_resume_point(&self, token: Value) {
        if let Some(ask) = &self.inner.ask {
            ask.resume_point(token).await;
        }
    }

    /// The token an earlier run of this call left with [`Self::set_resume_point`], when this
    /// run resumes it after a restart: the tool finds its work again instead of starting it.
    pub fn resumed_from(&self) -> Option<&Value> {
        self.inner.resumed_from.as_ref()
    }

    /// Asks the agent's user whether a call this tool makes on its own behalf may run (a
    /// sub-agent's call that needs approval): the agent shows it as an `ApprovalRequested` of
    /// id `"{this call's id}.{question.id}"`, answered with
    /// [`AgentHandle::decide`](crate::agent::AgentHandle::decide) like any other. Declined
    /// ("no decision") when nobody can answer: outside an agent, or once this call is
    /// cancelled (the question is then withdrawn).
    pub fn ask_approval(
        &self,
        question: NestedApproval,
    ) -> impl Future<Output = ApprovalDecision> + Send + 'static {
        let open = self
            .inner
            .ask
            .as_ref()
            .map(|ask| OpenQuestion::new(ask, &question.id));
        let answer = self.inner.ask.as_ref().map(|ask| ask.approval(question));
        async move {
            let no_decision = || ApprovalDecision::Decline {
                reason: Some("no decision".to_owned()),
            };
            let decision = match answer {
                Some(answer) => answer.await.unwrap_or_else(|_| no_decision()),
                None => no_decision(),
            };
            if let Some(open) = open {
                open.answered();
            }
            decision
        }
    }

    /// Asks the agent's user for input (an MCP server's elicitation): the agent shows it as an
    /// `InputRequested` of id `"{this call's id}.{question.id}"`, answered with
    /// [`AgentHandle::answer_input`](crate::agent::AgentHandle::answer_input), an accepted
    /// answer checked against the schema. [`InputAnswer::Cancel`] when nobody can answer:
    /// outside an agent, or once this call is cancelled (the question is then withdrawn).
    pub fn ask_input(&self, question: InputQuestion) -> impl Future<Output = InputAnswer> + Send + 'static {
        let open = self
            .inner
            .ask
            .as_ref()
            .map(|ask| OpenQuestion::new(ask, &question.id));
        let answer = self.inner.ask.as_ref().map(|ask| ask.input(question));
        async move {
            let answer = match answer {
                Some(answer) => answer.await.unwrap_or(InputAnswer::Cancel),
                None => InputAnswer::Cancel,
            };
            if let Some(open) = open {
                open.answered();
            }
            answer
        }
    }

    /// The calling agent's value of type `T` ([`ReActAgentBuilder::extension`](crate::agent::ReActAgentBuilder::extension)),
    /// such as its [`PlanNotebook`](crate::plan::PlanNotebook).
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.inner.extensions.get::<T>()
    }

    pub(crate) fn for_record(
        record: Arc<CallRecord>,
        progress: Option<ProgressFn>,
        usage: Option<UsageFn>,
        user_action: Option<UserAction>,
        cancel_grace: Duration,
        on_cancel_budget: Duration,
        extensions: Extensions,
    ) -> Self {
        ToolContext {
            inner: Arc::new(Inner {
                record,
                progress,
                usage,
                ask: None,
                user_action,
                cancel_grace,
                on_cancel_budget,
                extensions,
                resumed_from: None,
            }),
        }
    }

    /// The id of the call being executed.
    pub fn call_id(&self) -> &CallId {
        &self.inner.record.call_id
    }

    /// The name the tool was called by.
    pub fn tool_name(&self) -> &str {
        &self.inner.record.tool_name
    }

    /// Whether this call was cancelled (by the user, the whole reply, or its timeout). It becomes
    /// true the moment the cancel is accepted and never returns to false (X1).
    pub fn is_cancelled(&self) -> bool {
        self.inner.record.token.is_cancelled()
    }

    /// Resolves when this call is cancelled; use it in `tokio::select!`.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.record.token.cancelled()
    }

    /// The call's cancellation token, to hand to code that takes one.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.inner.record.token
    }

    /// Registers what to hand back if this call is cancelled while it runs: `Some(text)` becomes
    /// the result the model reads (label it as partial); `None` or blank text gives the standard
    /// "cancelled" result. Call it inside the tool's body; registering again replaces the
    /// previous callback, and it has no effect before the body runs or after the call ended
    /// (X2, X3). It runs off the tool's task and must return quickly, without side effects.
    pub fn set_on_cancel(&self, on_cancel: impl FnOnce() -> Option<String> + Send + 'static) {
        self.inner.record.set_on_cancel(Box::new(on_cancel), false);
    }

    /// [`Self::set_on_cancel`] for a callback of the runtime's own that returns within
    /// [`Self::on_cancel_budget`] by construction (the MCP cancel notification): it runs even
    /// when every `on_cancel` slot is held by callbacks that never returned, so that its
    /// effect (the notification) is never skipped (L4).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn set_bounded_on_cancel(&self, on_cancel: impl FnOnce() -> Option<String> + Send + 'static) {
        self.inner.record.set_on_cancel(Box::new(on_cancel), true);
    }

    /// How long the agent waits for `on_cancel` before it records the standard result (X10).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn on_cancel_budget(&self) -> Duration {
        self.inner.on_cancel_budget
    }

    /// Removes the registered `on_cancel` callback.
    pub fn clear_on_cancel(&self) {
        self.inner.record.clear_on_cancel();
    }

    /// Reports progress to the user (a `ToolProgress` event). A report with the same `id`
    /// replaces the earlier one. Reports never reach the model, and are dropped after a cancel
    /// (X11, X13). A report also renews a timeout that progress may extend (T4).
    pub fn report(&self, message: impl AsRef<str>, id: Option<&str>) {
        let message = message.as_ref();
        self.emit_progress(id, message, false);
    }

    /// Reports a call this call makes on its own behalf (a sub-agent's tool call), as a line of
    /// its own under this call: a `ToolProgress` with `nested: true` and `id` naming the nested
    /// call, so that each report of that call replaces its line. Like [`Self::report`]: never
    /// sent to the model, dropped after a cancel, and it renews a timeout progress extends.
    pub fn report_nested(&self, id: &str, message: impl AsRef<str>) {
        self.emit_progress(Some(id), message.as_ref(), true);
    }

    fn emit_progress(&self, id: Option<&str>, message: &str, nested: bool) {
        self.inner.record.while_running(|| {
            if let Some(progress) = &self.inner.progress {
                progress(&self.inner.record.call_id, id, message, nested);
            }
        });
    }

    /// Adds what this tool's own model calls used (a tool that runs another agent, say) to the
    /// reply's usage and cost: it counts towards the reply's budget, and reaching it cancels
    /// the reply, this call included (its `on_cancel` answers then).
    pub fn report_usage(&self, usage: &ChatUsage) {
        if let Some(sink) = &self.inner.usage {
            sink(usage);
        }
    }

    /// Why this call was cancelled (user, whole reply, timeout), once it was.
    pub fn cancel_cause(&self) -> Option<super::CancelCause> {
        self.inner.record.cancel_cause()
    }

    /// How the call was approved, for tools that require approval (A8); `None` otherwise.
    pub fn user_action(&self) -> Option<UserAction> {
        self.inner.user_action
    }

    /// For a driver that runs tools outside an agent ([`ToolContext::new`]): the callback the
    /// tool set with [`Self::set_on_cancel`], taken from its slot. Run it once, after cancelling
    /// the token, off the async threads and within a budget, as the agent does (X10).
    pub fn take_on_cancel(&self) -> Option<super::call::OnCancel> {
        self.inner.record.take_on_cancel()
    }

    pub(crate) fn cancel_grace(&self) -> Duration {
        self.inner.cancel_grace
    }
}
