//! Building a [`ReActAgent`].

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::events::EventHub;
use super::finished::{DEFAULT_FINISHED_CALLS, FinishedCalls};
use super::{AgentConfig, AgentError, AgentHook, AgentInner, ReActAgent, SessionState, Settings};
use crate::knowledge::{AgentKnowledge, KnowledgeBase, register_knowledge_tool};
use crate::memory::long_term::{
    AgentLongTermMemory, LongTermMemory, LongTermMemoryMode, register_memory_tools,
};
use crate::memory::{InMemoryMemory, Memory};
use crate::message::Msg;
use crate::model::ChatModel;
use crate::plan::{PlanNotebook, register_plan_tools};
use crate::tool::{DEFAULT_CANCEL_GRACE, DEFAULT_ON_CANCEL_BUDGET};
use crate::tool::{Extensions, PermissionRules, Toolkit};
use crate::usage::{PriceTable, ReplyBudget};

/// Builder of a [`ReActAgent`]; only the model is required.
#[derive(Default)]
pub struct ReActAgentBuilder {
    name: Option<String>,
    sys_prompt: Option<String>,
    model: Option<Arc<dyn ChatModel>>,
    toolkit: Option<Toolkit>,
    memory: Option<Arc<dyn Memory>>,
    max_iters: Option<usize>,
    parallel_tool_calls: bool,
    answer_repeated_calls: Option<bool>,
    no_tool_shim: bool,
    enable_meta_tool: bool,
    hooks: Vec<(String, Arc<dyn AgentHook>)>,
    auto_approve_tools: bool,
    on_cancel_budget: Option<Duration>,
    cancel_grace: Option<Duration>,
    approval_timeout: Option<Duration>,
    no_interrupted_note: bool,
    on_cancel_limit: Option<usize>,
    finished_calls_limit: Option<usize>,
    trace_content: Option<bool>,
    conversation_id: Option<String>,
    tracer: Option<Arc<opentelemetry::global::BoxedTracer>>,
    prices: PriceTable,
    budget: ReplyBudget,
    grants: HashMap<String, super::SessionGrant>,
    permissions: PermissionRules,
    extensions: Extensions,
    plan: Option<PlanNotebook>,
    compaction: Option<super::Compaction>,
    long_term: Option<(Arc<dyn LongTermMemory>, LongTermMemoryMode)>,
    knowledge: Vec<Arc<dyn KnowledgeBase>>,
    keep_query: bool,
}

/// How many `on_cancel` callbacks may run at once per agent by default.
pub const DEFAULT_ON_CANCEL_LIMIT: usize = 64;

impl ReActAgentBuilder {
    /// The agent's name (default `"assistant"`), used as the name of its messages.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The system prompt (default empty: none is sent).
    pub fn sys_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.sys_prompt = Some(prompt.into());
        self
    }

    /// The chat model; pass an `Arc` of it to share one model between agents.
    pub fn model(mut self, model: impl ChatModel) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// The toolkit (default: an empty one). The agent shares it: changes made through any
    /// clone are seen by the agent.
    pub fn toolkit(mut self, toolkit: Toolkit) -> Self {
        self.toolkit = Some(toolkit);
        self
    }

    /// The memory (default: [`InMemoryMemory`]); pass an `Arc` of it to keep a handle on it.
    pub fn memory(mut self, memory: impl Memory + 'static) -> Self {
        self.memory = Some(Arc::new(memory));
        self
    }

    /// Reasoning/acting rounds before the agent summarises (default 10).
    pub fn max_iters(mut self, max_iters: usize) -> Self {
        self.max_iters = Some(max_iters);
        self
    }

    /// Answer a call of a pure tool ([`ToolOptions::pure`](crate::tool::ToolOptions::pure))
    /// identical to one completed in an earlier round of the reply (same tool, same arguments)
    /// with the earlier result and a note to answer now, without running the tool; after
    /// [`REPEATS_BEFORE_SUMMARY`](super::REPEATS_BEFORE_SUMMARY) repeats the reply ends with the
    /// model's answer (`StopReason::RepeatedCalls`). Never across a call of a tool that is not
    /// pure (it may have changed what the earlier call read). Default: on for models that loop
    /// this way ([`ChatModel::repeats_tool_calls`](crate::model::ChatModel::repeats_tool_calls):
    /// small local ones), off for the others, whose repeated calls run.
    pub fn answer_repeated_calls(mut self, on: bool) -> Self {
        self.answer_repeated_calls = Some(on);
        self
    }

    /// The tool shim: when tools were offered and a model message has no tool calls, read calls
    /// of offered tools that the model wrote as text (a fenced JSON block, a bare JSON object,
    /// `<tool_call>` tags; see [`parse_text_calls`](crate::model::parse_text_calls)) and run
    /// them as calls; the message keeps the rest of its text. While an answer streams, text that
    /// may be such a call is not shown until it turns out not to be one. Each message so read is
    /// announced by [`AgentEvent::TextCallsRecovered`](super::AgentEvent::TextCallsRecovered).
    /// Default on: small models behind servers that do not parse their calls need it. Turn it
    /// off when answers must show JSON naming a tool as plain text.
    pub fn tool_shim(mut self, on: bool) -> Self {
        self.no_tool_shim = !on;
        self
    }

    /// Prices per model: each reply's cost is then in
    /// [`AgentEvent::ReplyFinished`](super::AgentEvent::ReplyFinished), and a cost budget can
    /// apply (default: none, no cost is known).
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// Limits on each reply's tokens and cost (default: none). A reply that reaches one stops
    /// as a cancel with [`CancelReason::Budget`](crate::tool::CancelReason::Budget): running
    /// tools get their `on_cancel`, the model's last complete text is kept, memory stays
    /// consistent, and the reply ends with [`StopReason::BudgetReached`](super::StopReason).
    /// While a model answer streams, its tokens are estimated from its text (four bytes a
    /// token) until the server reports them.
    pub fn budget(mut self, budget: ReplyBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Run the tool calls of one model message concurrently (default false: in order).
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.parallel_tool_calls = parallel;
        self
    }

    /// Let the model switch tool groups with the meta tool (default false).
    pub fn enable_meta_tool(mut self, enable: bool) -> Self {
        self.enable_meta_tool = enable;
        self
    }

    /// Session approval grants the agent starts with (A14), as a store kept them from an earlier
    /// run of the same session: see [`ReActAgent::session_grants`](super::ReActAgent::session_grants)
    /// for their keys. Later ones replace earlier ones with the same key.
    pub fn session_grants(mut self, grants: impl IntoIterator<Item = (String, super::SessionGrant)>) -> Self {
        self.grants.extend(grants);
        self
    }

    /// Permission rules (A20): calls a deny rule covers are declined without asking, also for
    /// tools that need no approval; calls an allow rule covers run without asking; the rest is
    /// asked as before. Deny wins. Rules never widen what a tool itself refuses (its `check`,
    /// e.g. a working-directory confinement).
    pub fn permissions(mut self, rules: PermissionRules) -> Self {
        self.permissions = rules;
        self
    }

    /// Approve calls of tools marked `auto_approve` without asking (A3, A4; default false).
    /// Both this and the tool's flag are needed.
    pub fn auto_approve_tools(mut self, auto: bool) -> Self {
        self.auto_approve_tools = auto;
        self
    }

    /// How long an `on_cancel` callback may take before the standard result is used instead
    /// (X10; default 100 ms).
    pub fn on_cancel_budget(mut self, budget: Duration) -> Self {
        self.on_cancel_budget = Some(budget);
        self
    }

    /// How many `on_cancel` callbacks may run at once (default 64). A callback runs on a
    /// blocking thread that cannot be stopped: one that never returns keeps its thread and its
    /// place for good. With every place taken, further callbacks are not run and the standard
    /// cancelled result is used, so stuck callbacks hold at most this many threads.
    pub fn on_cancel_limit(mut self, limit: usize) -> Self {
        self.on_cancel_limit = Some(limit);
        self
    }

    /// How many finished calls of earlier replies `cancel_call` remembers, to answer
    /// `AlreadyFinished` instead of `NotFound` (default 4096; the oldest are forgotten first).
    pub fn finished_calls_limit(mut self, limit: usize) -> Self {
        self.finished_calls_limit = Some(limit);
        self
    }

    /// How long a cancelled tool body may keep running to unwind before it is dropped (X14;
    /// default 1 s).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = Some(grace);
        self
    }

    /// Declines a call whose approval is not decided within this time (A15; default: wait).
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = Some(timeout);
        self
    }

    /// Whether a cancelled reply leaves a note for the model's next request (R5; default true).
    pub fn interrupted_note(mut self, note: bool) -> Self {
        self.no_interrupted_note = !note;
        self
    }

    /// Adds a hook under `name` (a later hook of the same name replaces it).
    pub fn hook(mut self, name: impl Into<String>, hook: impl AgentHook) -> Self {
        super::hooks::upsert(&mut self.hooks, name.into(), Arc::new(hook));
        self
    }

    /// Whether the GenAI trace spans carry message contents: prompts, answers, tool arguments
    /// and results (default: off, unless `AGENTRY_TRACE_CONTENT=1` when the agent is built).
    /// They may hold personal data; see [`trace`](super::trace).
    pub fn trace_content(mut self, on: bool) -> Self {
        self.trace_content = Some(on);
        self
    }

    /// The conversation (session) id the trace spans carry as `gen_ai.conversation.id`.
    pub fn conversation_id(mut self, id: impl Into<String>) -> Self {
        self.conversation_id = Some(id.into());
        self
    }

    /// The OpenTelemetry tracer of this agent's GenAI spans (`invoke_agent`, `chat`,
    /// `execute_tool`), instead of the process-wide one of
    /// [`set_default_tracer`](super::set_default_tracer). Without either, the agent makes no
    /// spans.
    pub fn tracer<T>(mut self, tracer: T) -> Self
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        self.tracer = Some(Arc::new(super::trace::boxed(tracer)));
        self
    }

    /// A value the agent's tools can read ([`ToolContext::extension`](crate::tool::ToolContext::extension)),
    /// one per type: how a tool registered once in a shared toolkit finds the state of the agent
    /// calling it.
    pub fn extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// Gives the agent a plan notebook: the eight plan tools
    /// ([`PLAN_TOOL_NAMES`](crate::plan::PLAN_TOOL_NAMES), in the group
    /// [`PLAN_GROUP`](crate::plan::PLAN_GROUP) when the meta tool is on) and, before every
    /// reasoning step, the plan's hint as a `<system-hint>` user message that is sent but never
    /// stored. See [`plan`](crate::plan).
    pub fn plan_notebook(mut self, notebook: PlanNotebook) -> Self {
        self.extensions.insert(notebook.clone());
        self.plan = Some(notebook);
        self
    }

    /// When and how the context is compacted (default [`Compaction::new`](super::Compaction::new):
    /// at 80 % of the model's context window, when the model knows it).
    pub fn compaction(mut self, compaction: super::Compaction) -> Self {
        self.compaction = Some(compaction);
        self
    }

    /// Gives the agent a long-term memory (one user's, across sessions), used as `mode` says:
    /// the tools `record_to_memory` and `retrieve_from_memory`, retrieval before each reply and
    /// recording after it, or both. See [`long_term`](crate::memory::long_term).
    pub fn long_term_memory(mut self, memory: impl LongTermMemory, mode: LongTermMemoryMode) -> Self {
        let memory: Arc<dyn LongTermMemory> = Arc::new(memory);
        self.extensions.insert(AgentLongTermMemory(Arc::clone(&memory)));
        self.long_term = Some((memory, mode));
        self
    }

    /// Adds a knowledge base (call again for more): before each reply the user's message
    /// retrieves its best chunks, and the model gets the tool `retrieve_knowledge`. See
    /// [`knowledge`](crate::knowledge).
    pub fn knowledge(mut self, base: impl KnowledgeBase) -> Self {
        self.knowledge.push(Arc::new(base));
        self
    }

    /// Whether the model first rewrites the user's message into a search query for the
    /// knowledge bases (default on; on any failure the message itself is used).
    pub fn rewrite_query(mut self, rewrite: bool) -> Self {
        self.keep_query = !rewrite;
        self
    }

    /// The plan notebook given with [`Self::plan_notebook`], for whoever binds it to storage
    /// (`agentry-store` binds it to the session it attaches).
    pub fn plan(&self) -> Option<&PlanNotebook> {
        self.plan.as_ref()
    }

    /// Builds the agent.
    pub fn build(mut self) -> Result<ReActAgent, AgentError> {
        let model = self
            .model
            .ok_or_else(|| AgentError::Config("a ReActAgent needs a model: call .model(...)".into()))?;
        let toolkit = self.toolkit.unwrap_or_default();
        if self.enable_meta_tool {
            toolkit
                .enable_meta_tool()
                .map_err(|e| AgentError::Config(format!("cannot enable the meta tool: {e}")))?;
        }
        if self.long_term.as_ref().is_some_and(|(_, mode)| mode.has_tools()) {
            register_memory_tools(&toolkit)
                .map_err(|e| AgentError::Config(format!("cannot add the memory tools: {e}")))?;
        }
        let knowledge =
            (!self.knowledge.is_empty()).then(|| (AgentKnowledge(self.knowledge), !self.keep_query));
        if let Some((bases, _)) = &knowledge {
            register_knowledge_tool(&toolkit)
                .map_err(|e| AgentError::Config(format!("cannot add the knowledge tool: {e}")))?;
            self.extensions.insert(bases.clone());
        }
        if self.plan.is_some() {
            register_plan_tools(&toolkit, self.enable_meta_tool)
                .map_err(|e| AgentError::Config(format!("cannot add the plan tools: {e}")))?;
        }
        let name = self.name.unwrap_or_else(|| "assistant".to_owned());
        let answer_repeated_calls = self
            .answer_repeated_calls
            .unwrap_or_else(|| model.repeats_tool_calls());
        let tracer = self
            .tracer
            .or_else(super::trace::default_tracer)
            .map(|tracer| Arc::new(super::trace::AgentTracer::new(tracer, &name, model.as_ref())));
        Ok(ReActAgent {
            inner: Arc::new(AgentInner {
                config: AgentConfig {
                    name,
                    sys_prompt: self.sys_prompt.filter(|p| !p.is_empty()).map(Msg::system),
                    model,
                    toolkit,
                    memory: self.memory.unwrap_or_else(|| Arc::new(InMemoryMemory::new())),
                    max_iters: self.max_iters.unwrap_or(10),
                    parallel_tool_calls: self.parallel_tool_calls,
                    answer_repeated_calls,
                    tool_shim: !self.no_tool_shim,
                    prices: self.prices,
                    budget: self.budget,
                    extensions: self.extensions,
                    plan: self.plan,
                    compaction: self.compaction.unwrap_or_default(),
                    long_term: self.long_term,
                    knowledge,
                    trace: super::trace::TraceSettings {
                        content: self.trace_content.unwrap_or_else(super::trace::content_from_env),
                        conversation_id: self.conversation_id,
                        tracer,
                    },
                    settings: Settings {
                        auto_approve_tools: self.auto_approve_tools,
                        on_cancel_budget: self.on_cancel_budget.unwrap_or(DEFAULT_ON_CANCEL_BUDGET),
                        cancel_grace: self.cancel_grace.unwrap_or(DEFAULT_CANCEL_GRACE),
                        approval_timeout: self.approval_timeout,
                        interrupted_note: !self.no_interrupted_note,
                        permissions: self.permissions,
                    },
                },
                session: SessionState {
                    reply_lock: tokio::sync::Mutex::new(()),
                    active: Mutex::new(None),
                    finished_calls: Mutex::new(FinishedCalls::new(
                        self.finished_calls_limit.unwrap_or(DEFAULT_FINISHED_CALLS),
                    )),
                    on_cancel_slots: Arc::new(tokio::sync::Semaphore::new(
                        self.on_cancel_limit.unwrap_or(DEFAULT_ON_CANCEL_LIMIT),
                    )),
                    grants: Mutex::new(self.grants),
                    memory_checked: AtomicBool::new(false),
                },
                hooks: RwLock::new(self.hooks.into()),
                events: Arc::new(EventHub::default()),
            }),
        })
    }
}
