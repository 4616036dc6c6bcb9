//! The config's sub-agents (`"agents"`): each a tool of the agent that runs a reply of its own,
//! with its own prompt, model and tools; and its remote A2A agents (`"a2a"`), tools too.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentry::a2a::A2aAgent;
use agentry::agent::{AgentTool, ReActAgent};
use agentry::model::ChatModel;
use agentry::tool::{PermissionRules, Toolkit};
use anyhow::Context;

use super::model::build_model;
use super::plan::SubAgentPlan;
use crate::config::RemoteAgentConfig;
use crate::terminal::sanitize;

/// What a sub-agent takes from the agent.
pub struct Inherited {
    /// The agent's model, for sub-agents that name none.
    pub model: Arc<dyn ChatModel>,
    /// The permission rules: a sub-agent's calls are allowed and denied as the agent's are.
    pub permissions: PermissionRules,
    pub max_iters: usize,
    pub parallel: bool,
    pub tool_shim: bool,
}

/// Registers the remote A2A agents of the config in `toolkit`, each a tool named as in the
/// config. One whose card cannot be had costs a warning, not the command (as a dead MCP
/// server does).
pub async fn register_remote_agents(remotes: &BTreeMap<String, RemoteAgentConfig>, toolkit: &Toolkit) {
    let connecting = remotes.iter().map(|(name, remote)| async move {
        let (url, headers) = match remote {
            RemoteAgentConfig::Url(url) => (url.clone(), BTreeMap::new()),
            RemoteAgentConfig::Full { url, headers } => (url.clone(), headers.clone()),
        };
        (name, A2aAgent::connect(name.clone(), &url, &headers).await)
    });
    for (name, connected) in futures::future::join_all(connecting).await {
        let registered = connected
            .map_err(|e| e.to_string())
            .and_then(|agent| toolkit.register(agent).map_err(|e| e.to_string()));
        if let Err(e) = registered {
            eprintln!(
                "warning: the A2A agent {:?} is not used: {}",
                sanitize::line(name),
                sanitize::line(&e)
            );
        }
    }
}

/// The default system prompt of a sub-agent.
fn default_prompt(name: &str, description: &str) -> String {
    format!(
        "You are `{name}`, an agent that another agent calls as a tool. Your task: {description} \
         Use your tools whenever they give a more reliable answer than guessing. Your answer is \
         all the other agent sees: make it complete and concise."
    )
}

/// Registers each sub-agent of `plans` in `toolkit` as a tool named after it. Each call is a
/// new conversation of the sub-agent: calls never share one, even from two sessions at once.
/// In a session, the conversation is stored as a child session (`SESSION/AGENT/CALL`).
pub async fn register_sub_agents(
    plans: &[SubAgentPlan],
    toolkit: &Toolkit,
    inherited: &Inherited,
) -> anyhow::Result<()> {
    // Taken before any sub-agent is registered: sub-agents do not call each other.
    let all_tools = toolkit.tool_names();
    let mut made = Vec::new();
    for plan in plans {
        let model = match &plan.provider {
            Some(provider) => build_model(provider.clone())
                .await
                .with_context(|| format!("the sub-agent {:?}", plan.name))?,
            None => Arc::clone(&inherited.model),
        };
        let names: Vec<&str> = match &plan.tools {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => all_tools.iter().map(String::as_str).collect(),
        };
        let tools = toolkit
            .subset(names)
            .with_context(|| format!("the sub-agent {:?}'s \"tools\"", plan.name))?;
        let system = plan
            .system
            .clone()
            .unwrap_or_else(|| default_prompt(&plan.name, &plan.description));
        let name = plan.name.clone();
        let (permissions, max_iters, parallel, shim) = (
            inherited.permissions.clone(),
            inherited.max_iters,
            inherited.parallel,
            inherited.tool_shim,
        );
        let builders = move || {
            ReActAgent::builder()
                .name(name.clone())
                .sys_prompt(system.clone())
                .model(Arc::clone(&model))
                .toolkit(tools.clone())
                .max_iters(max_iters)
                .parallel_tool_calls(parallel)
                .tool_shim(shim)
                .permissions(permissions.clone())
        };
        // Built once now, so that a setting it refuses stops the command at its start.
        builders()
            .build()
            .with_context(|| format!("the sub-agent {:?}", plan.name))?;
        // With a session, each call's conversation is kept as a child session of it.
        made.push(AgentTool::from_builder(
            plan.name.clone(),
            plan.description.clone(),
            builders,
        ));
    }
    for tool in made {
        let name = tool_name(&tool);
        toolkit
            .register(tool)
            .with_context(|| format!("the sub-agent {name:?} cannot be a tool of the agent"))?;
    }
    Ok(())
}

fn tool_name(tool: &AgentTool) -> String {
    agentry::tool::Tool::name(tool).to_owned()
}
