//! Which tool groups are active, kept with the session: the model chooses them with the meta
//! tool ([`META_TOOL_NAME`]) and a continued session offers it the same tools.

use std::sync::Arc;

use agentry::agent::{AgentHook, HookContext};
use agentry::message::{ToolResultBlock, ToolUseBlock};
use agentry::tool::{META_TOOL_NAME, ToolCallState, Toolkit};
use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::session_config::{config_value, set_config_value};
use crate::{SessionMemory, StoreError};

/// The key of the session's configuration that holds each group's state (name → active).
pub const TOOL_GROUPS_KEY: &str = "tool_groups";

/// Writes the state of `toolkit`'s groups into `memory`'s session configuration (nothing when
/// it is already there).
pub async fn save_tool_groups(toolkit: &Toolkit, memory: &SessionMemory) -> Result<(), StoreError> {
    let groups: Map<String, Value> = toolkit
        .groups()
        .into_iter()
        .map(|g| (g.name, Value::Bool(g.active)))
        .collect();
    set_config_value(memory, TOOL_GROUPS_KEY, Value::Object(groups)).await
}

/// Activates and deactivates `toolkit`'s groups as `memory`'s session keeps them; returns how
/// many groups were set. Groups the toolkit no longer has are left out; groups the session
/// never saw keep their state.
pub async fn restore_tool_groups(toolkit: &Toolkit, memory: &SessionMemory) -> Result<usize, StoreError> {
    let Some(Value::Object(saved)) = config_value(memory, TOOL_GROUPS_KEY).await? else {
        return Ok(0);
    };
    let known: Vec<String> = toolkit.groups().into_iter().map(|g| g.name).collect();
    let mut set = 0;
    for (name, active) in &saved {
        if let (true, Some(active)) = (known.contains(name), active.as_bool())
            && toolkit.set_groups_active(&[name.as_str()], active).is_ok()
        {
            set += 1;
        }
    }
    Ok(set)
}

/// Keeps the session's tool groups current: after each call of the meta tool, their state is
/// written into the session (see [`save_tool_groups`]), so a session continued after a crash
/// offers the tools the model had chosen.
///
/// ```no_run
/// # async fn demo(model: std::sync::Arc<dyn agentry::model::ChatModel>, memory: std::sync::Arc<agentry_store::SessionMemory>) -> Result<(), Box<dyn std::error::Error>> {
/// use agentry_store::{ToolGroupRecorder, restore_tool_groups};
///
/// let toolkit = agentry::tool::Toolkit::new();
/// toolkit.create_group("web", "Browse the web", false, None)?;
/// toolkit.enable_meta_tool()?;
/// restore_tool_groups(&toolkit, &memory).await?;
/// let agent = agentry::ReActAgent::builder()
///     .name("agentry")
///     .model(model)
///     .toolkit(toolkit.clone())
///     .memory(std::sync::Arc::clone(&memory))
///     .hook("session-tool-groups", ToolGroupRecorder::new(memory, toolkit))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ToolGroupRecorder {
    memory: Arc<SessionMemory>,
    toolkit: Toolkit,
}

impl std::fmt::Debug for ToolGroupRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolGroupRecorder")
            .field("session", &self.memory.session().name)
            .finish_non_exhaustive()
    }
}

impl ToolGroupRecorder {
    /// A recorder of `toolkit`'s groups (the agent's own, a clone shares it) into `memory`'s
    /// session.
    pub fn new(memory: Arc<SessionMemory>, toolkit: Toolkit) -> Self {
        ToolGroupRecorder { memory, toolkit }
    }
}

#[async_trait]
impl AgentHook for ToolGroupRecorder {
    async fn post_acting(
        &self,
        _ctx: &HookContext,
        call: &ToolUseBlock,
        state: &ToolCallState,
        _result: &mut ToolResultBlock,
    ) {
        if call.name == META_TOOL_NAME
            && *state == ToolCallState::Completed
            && let Err(e) = save_tool_groups(&self.toolkit, &self.memory).await
        {
            tracing::warn!(error = %e, "the session store did not keep the tool groups");
        }
    }
}
