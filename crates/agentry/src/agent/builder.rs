//! Building a [`ReActAgent`].

use std::sync::{Arc, RwLock};

use super::events::EventHub;
use super::{AgentError, AgentHook, AgentInner, ReActAgent};
use crate::memory::{InMemoryMemory, Memory};
use crate::message::Msg;
use crate::model::ChatModel;
use crate::tool::Toolkit;

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
    enable_meta_tool: bool,
    hooks: Vec<(String, Arc<dyn AgentHook>)>,
}

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

    /// The chat model.
    pub fn model(self, model: impl ChatModel) -> Self {
        self.model_arc(Arc::new(model))
    }

    /// The chat model, shared.
    pub fn model_arc(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// The toolkit (default: an empty one). The agent shares it: changes made through any
    /// clone are seen by the agent.
    pub fn toolkit(mut self, toolkit: Toolkit) -> Self {
        self.toolkit = Some(toolkit);
        self
    }

    /// The memory (default: [`InMemoryMemory`]).
    pub fn memory(mut self, memory: impl Memory + 'static) -> Self {
        self.memory = Some(Arc::new(memory));
        self
    }

    /// The memory, shared.
    pub fn memory_arc(mut self, memory: Arc<dyn Memory>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Reasoning/acting rounds before the agent summarises (default 10).
    pub fn max_iters(mut self, max_iters: usize) -> Self {
        self.max_iters = Some(max_iters);
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

    /// Adds a hook under `name` (a later hook of the same name replaces it).
    pub fn hook(mut self, name: impl Into<String>, hook: impl AgentHook) -> Self {
        super::hooks::upsert(&mut self.hooks, name.into(), Arc::new(hook));
        self
    }

    /// Builds the agent.
    pub fn build(self) -> Result<ReActAgent, AgentError> {
        let model = self
            .model
            .ok_or_else(|| AgentError::Config("a ReActAgent needs a model: call .model(...)".into()))?;
        let toolkit = self.toolkit.unwrap_or_default();
        if self.enable_meta_tool {
            toolkit
                .enable_meta_tool()
                .map_err(|e| AgentError::Config(format!("cannot enable the meta tool: {e}")))?;
        }
        Ok(ReActAgent {
            inner: Arc::new(AgentInner {
                name: self.name.unwrap_or_else(|| "assistant".to_owned()),
                sys_prompt: self.sys_prompt.filter(|p| !p.is_empty()).map(Msg::system),
                model,
                toolkit,
                memory: self.memory.unwrap_or_else(|| Arc::new(InMemoryMemory::new())),
                max_iters: self.max_iters.unwrap_or(10),
                parallel_tool_calls: self.parallel_tool_calls,
                hooks: RwLock::new(self.hooks.into()),
                events: EventHub::default(),
                reply_lock: tokio::sync::Mutex::new(()),
            }),
        })
    }
}
