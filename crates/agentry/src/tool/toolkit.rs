//! The Toolkit: one registry and one call path for every tool.

use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{Map, Value};

use super::options::{BASIC_GROUP, ToolGroup, ToolOptions, ToolkitError};
use super::policy::CallPolicy;
use super::registry::{Prepared, RegisteredTool, Registry};
use super::response::failure;
use super::runner::run_tool;
use super::schema::{schema_errors, unusable_arguments};
use super::{Tool, ToolContext, ToolResponse, meta};
use crate::message::ToolUseBlock;
use crate::model::ToolSchema;

/// The registry of tools an agent can call, shared by handle (clones see the same tools).
///
/// Every call goes through [`Toolkit::call`], which never fails: an unknown tool, an inactive
/// group, invalid arguments, the tool's error, a panic inside the tool, or an error in the middle
/// of its stream all become an error result the model can read.
#[derive(Clone, Default)]
pub struct Toolkit {
    registry: Arc<RwLock<Registry>>,
}

impl fmt::Debug for Toolkit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registry = self.read();
        f.debug_struct("Toolkit")
            .field(
                "tools",
                &registry.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field("groups", &registry.groups)
            .field("meta_tool", &registry.meta_tool)
            .finish()
    }
}

impl Toolkit {
    /// An empty toolkit.
    pub fn new() -> Self {
        Toolkit::default()
    }

    // A poisoned lock only means another thread panicked while holding it; the registry is
    // updated in single assignments, so its data is still consistent.
    fn read(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Registry> {
        self.registry.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a tool in the `basic` group under its own name. Returns the registered name.
    pub fn register(&self, tool: impl Tool) -> Result<String, ToolkitError> {
        self.register_with(tool, ToolOptions::default())
    }

    /// Registers a tool with options. Returns the name it was registered under (which differs
    /// from the tool's own with [`ToolOptions::name`] or [`NamesakeStrategy::Rename`]). A shared
    /// tool (`Arc<T>` or `Arc<dyn Tool>`) is a tool too.
    pub fn register_with(&self, tool: impl Tool, options: ToolOptions) -> Result<String, ToolkitError> {
        let prepared = Prepared::new(Arc::new(tool), options)?;
        let mut registry = self.write();
        let name = registry.insert(prepared)?;
        registry.refresh_schemas();
        Ok(name)
    }

    /// Replaces every tool of `source` with `tools` in one step: a call or a model request in
    /// the meantime sees either the old set or the new one, never a toolkit without them. On an
    /// error nothing changes.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn replace_source(
        &self,
        source: &str,
        tools: Vec<(Arc<dyn Tool>, ToolOptions)>,
    ) -> Result<Vec<String>, ToolkitError> {
        let prepared = tools
            .into_iter()
            .map(|(tool, options)| Prepared::new(tool, options))
            .collect::<Result<Vec<_>, _>>()?;
        let mut registry = self.write();
        let saved = registry.tools.clone();
        registry.tools.retain(|t| t.source.as_deref() != Some(source));
        registry.reindex();
        let mut names = Vec::with_capacity(prepared.len());
        for tool in prepared {
            match registry.insert(tool) {
                Ok(name) => names.push(name),
                Err(e) => {
                    registry.tools = saved;
                    registry.reindex();
                    return Err(e);
                }
            }
        }
        registry.refresh_schemas();
        Ok(names)
    }

    /// A new toolkit holding the tools `names` of this one, as registered here (same tool, same
    /// approval and timeout settings, same groups and their state), e.g. the tools a
    /// sub-agent may use. The two change apart from then on: a server's later tool-list change
    /// reaches only this toolkit.
    ///
    /// # Errors
    /// [`ToolkitError::UnknownTool`] for a name this toolkit does not hold.
    pub fn subset<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<Toolkit, ToolkitError> {
        let source = self.read();
        let mut tools = Vec::new();
        for name in names {
            let entry = source
                .index
                .get(name)
                .and_then(|&i| source.tools.get(i))
                .ok_or_else(|| ToolkitError::UnknownTool(name.to_owned()))?;
            if !tools.iter().any(|t: &Arc<RegisteredTool>| t.name == entry.name) {
                tools.push(Arc::clone(entry));
            }
        }
        let subset = Toolkit::new();
        {
            let mut registry = subset.write();
            registry.tools = tools;
            registry.groups = source.groups.clone();
            registry.reindex();
            registry.refresh_schemas();
        }
        Ok(subset)
    }

    /// Removes a tool; returns whether it existed.
    pub fn remove(&self, name: &str) -> bool {
        let mut registry = self.write();
        let Some(i) = registry.index.get(name).copied() else {
            return false;
        };
        registry.tools.remove(i);
        registry.reindex();
        registry.refresh_schemas();
        true
    }

    /// The approval and timeout settings of a tool (default settings for unknown names and the
    /// meta tool).
    pub fn policy(&self, name: &str) -> CallPolicy {
        let registry = self.read();
        registry
            .index
            .get(name)
            .and_then(|&i| registry.tools.get(i))
            .map(|t| t.policy.clone())
            .unwrap_or_default()
    }

    /// Removes every tool of a source; returns how many.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn remove_source(&self, source: &str) -> usize {
        let mut registry = self.write();
        let before = registry.tools.len();
        registry.tools.retain(|t| t.source.as_deref() != Some(source));
        let removed = before - registry.tools.len();
        if removed > 0 {
            registry.reindex();
            registry.refresh_schemas();
        }
        removed
    }

    /// Keeps the task following a source's tool list (replacing and stopping an older one).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn set_watcher(&self, source: String, task: tokio::task::AbortHandle) {
        if let Some(old) = self.write().watchers.insert(source, task) {
            old.abort();
        }
    }

    /// Stops following a source's tool list.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn stop_watcher(&self, source: &str) {
        if let Some(task) = self.write().watchers.remove(source) {
            task.abort();
        }
    }

    /// The names of all registered tools, in registration order.
    pub fn tool_names(&self) -> Vec<String> {
        self.read().tools.iter().map(|t| t.name.clone()).collect()
    }

    /// The schemas the model is offered now: tools of `basic` and of active groups, in
    /// registration order, then the meta tool when enabled. Cheap: the list is cached.
    pub fn json_schemas(&self) -> Arc<[ToolSchema]> {
        Arc::clone(&self.read().schemas)
    }

    /// Creates a tool group.
    pub fn create_group(
        &self,
        name: impl Into<String>,
        description: impl Into<String>,
        active: bool,
        notes: Option<String>,
    ) -> Result<(), ToolkitError> {
        let name = name.into();
        if name == BASIC_GROUP {
            return Err(ToolkitError::BasicGroup);
        }
        let mut registry = self.write();
        if registry.group(&name).is_some() {
            return Err(ToolkitError::GroupExists(name));
        }
        registry.groups.push(ToolGroup {
            name,
            description: description.into(),
            active,
            notes,
        });
        registry.refresh_schemas();
        Ok(())
    }

    /// Activates or deactivates groups. Unknown names are an error and nothing changes.
    pub fn set_groups_active(&self, names: &[&str], active: bool) -> Result<(), ToolkitError> {
        let mut registry = self.write();
        for name in names {
            if *name == BASIC_GROUP {
                return Err(ToolkitError::BasicGroup);
            }
            if registry.group(name).is_none() {
                return Err(ToolkitError::UnknownGroup((*name).to_owned()));
            }
        }
        for group in registry
            .groups
            .iter_mut()
            .filter(|g| names.contains(&g.name.as_str()))
        {
            group.active = active;
        }
        registry.refresh_schemas();
        Ok(())
    }

    /// Removes groups and all their tools. Unknown names are an error and nothing changes.
    pub fn remove_groups(&self, names: &[&str]) -> Result<(), ToolkitError> {
        let mut registry = self.write();
        for name in names {
            if *name == BASIC_GROUP {
                return Err(ToolkitError::BasicGroup);
            }
            if registry.group(name).is_none() {
                return Err(ToolkitError::UnknownGroup((*name).to_owned()));
            }
        }
        registry.groups.retain(|g| !names.contains(&g.name.as_str()));
        registry.tools.retain(|t| !names.contains(&t.group.as_str()));
        registry.reindex();
        registry.refresh_schemas();
        Ok(())
    }

    /// The groups, in creation order (without `basic`).
    pub fn groups(&self) -> Vec<ToolGroup> {
        self.read().groups.clone()
    }

    /// The notes of the active groups, formatted for a prompt (empty when there are none).
    pub fn activated_notes(&self) -> String {
        meta::activated_notes(&self.read().groups)
    }

    /// Offers the model the meta tool [`META_TOOL_NAME`](super::META_TOOL_NAME), with which it
    /// chooses the active groups itself.
    pub fn enable_meta_tool(&self) -> Result<(), ToolkitError> {
        let mut registry = self.write();
        if registry.index.contains_key(meta::META_TOOL_NAME) {
            return Err(ToolkitError::NameTaken(meta::META_TOOL_NAME.to_owned()));
        }
        registry.meta_tool = true;
        registry.refresh_schemas();
        Ok(())
    }

    /// Calls a tool. The returned stream yields cumulative chunks and always ends with exactly
    /// one chunk whose `is_last` is set; failures are error chunks, never a missing result.
    ///
    /// The tool runs on its own task, so a panic or a long computation in it cannot take the
    /// caller down. The same as [`Toolkit::prepare`] followed by [`Toolkit::run`].
    pub fn call(&self, call: &ToolUseBlock, ctx: ToolContext) -> BoxStream<'static, ToolResponse> {
        match self.prepare(call) {
            Ok(prepared) => self.run(prepared, call, ctx),
            Err(refused) => one(refused),
        }
    }

    /// Checks a call without running it: the tool exists and its group is active, the arguments
    /// match the schema (presets are added), and the tool's own check passes. The error is the
    /// result the model reads. What approval is decided on, and what [`Toolkit::run`] runs, even
    /// if the tool is replaced meanwhile.
    pub fn prepare(&self, call: &ToolUseBlock) -> Result<PreparedCall, ToolResponse> {
        let entry = {
            let registry = self.read();
            if registry.meta_tool && call.name == meta::META_TOOL_NAME {
                return Ok(PreparedCall {
                    target: Target::Meta,
                    policy: CallPolicy::default(),
                });
            }
            match registry
                .index
                .get(&call.name)
                .and_then(|&i| registry.tools.get(i))
            {
                None => return Err(failure(unknown_tool(&registry, &call.name))),
                Some(entry) if !registry.is_active(&entry.group) => {
                    let hint = if registry.meta_tool {
                        format!(
                            " Activate the group by calling \"{}\" first.",
                            meta::META_TOOL_NAME
                        )
                    } else {
                        String::new()
                    };
                    return Err(failure(format!(
                        "the tool \"{}\" is in the inactive group \"{}\", so it cannot be called now.{hint}",
                        entry.name, entry.group
                    )));
                }
                Some(entry) => Arc::clone(entry),
            }
        };
        let args = checked_arguments(&entry, call).map_err(failure)?;
        if let Some(check) = &entry.policy.check {
            check(&args).map_err(failure)?;
        }
        Ok(PreparedCall {
            policy: entry.policy.clone(),
            target: Target::Tool { entry, args },
        })
    }

    /// Runs a prepared call; see [`Toolkit::call`].
    pub fn run(
        &self,
        prepared: PreparedCall,
        call: &ToolUseBlock,
        ctx: ToolContext,
    ) -> BoxStream<'static, ToolResponse> {
        match prepared.target {
            Target::Meta => {
                let mut registry = self.write();
                let response = meta::call(&mut registry.groups, &call.input);
                registry.refresh_schemas();
                stream::once(std::future::ready(response)).boxed()
            }
            Target::Tool { entry, args } => run_tool(entry, call, args, ctx),
        }
    }
}

/// A call that passed [`Toolkit::prepare`], ready for approval and [`Toolkit::run`].
pub struct PreparedCall {
    target: Target,
    policy: CallPolicy,
}

enum Target {
    Meta,
    Tool {
        entry: Arc<RegisteredTool>,
        args: Map<String, Value>,
    },
}

impl PreparedCall {
    /// The approval and timeout settings of the tool that will run.
    pub fn policy(&self) -> &CallPolicy {
        &self.policy
    }
}

impl fmt::Debug for PreparedCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tool = match &self.target {
            Target::Meta => meta::META_TOOL_NAME,
            Target::Tool { entry, .. } => entry.name.as_str(),
        };
        f.debug_struct("PreparedCall").field("tool", &tool).finish()
    }
}

fn one(response: ToolResponse) -> BoxStream<'static, ToolResponse> {
    stream::once(std::future::ready(response)).boxed()
}

fn unknown_tool(registry: &Registry, name: &str) -> String {
    let mut available: Vec<&str> = registry
        .tools
        .iter()
        .filter(|t| registry.is_active(&t.group))
        .map(|t| t.name.as_str())
        .collect();
    if registry.meta_tool {
        available.push(meta::META_TOOL_NAME);
    }
    if available.is_empty() {
        format!("there is no tool named \"{name}\"; no tools are available.")
    } else {
        format!(
            "there is no tool named \"{name}\". Available tools: {}.",
            available.join(", ")
        )
    }
}

/// Checks what the model sent and adds the presets, or says what is wrong.
fn checked_arguments(entry: &RegisteredTool, call: &ToolUseBlock) -> Result<Map<String, Value>, String> {
    let name = &entry.name;
    let Value::Object(input) = &call.input else {
        return Err(format!(
            "the call to \"{name}\" could not be used: {}. Call \"{name}\" again with a JSON object as arguments.",
            unusable_arguments(call)
        ));
    };
    if let Some(preset) = input.keys().find(|k| entry.preset_args.contains_key(*k)) {
        return Err(format!(
            "the argument \"{preset}\" of \"{name}\" is fixed by the application and cannot be set. Call \
             \"{name}\" again without \"{preset}\"."
        ));
    }
    let errors = schema_errors(&entry.validator, &call.input);
    if !errors.is_empty() {
        return Err(format!(
            "invalid arguments for \"{name}\": {}. Call \"{name}\" again with arguments that match its schema.",
            errors.join("; ")
        ));
    }
    let mut args = input.clone();
    for (k, v) in &entry.preset_args {
        args.insert(k.clone(), v.clone());
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::FunctionTool;

    fn tool(name: &str) -> Arc<dyn Tool> {
        Arc::new(FunctionTool::new(
            name,
            "test",
            serde_json::json!({"type": "object"}),
            |_, _| crate::tool::once(async { "ok" }),
        ))
    }

    fn from(source: &str, names: &[&str]) -> Vec<(Arc<dyn Tool>, ToolOptions)> {
        names
            .iter()
            .map(|n| (tool(n), ToolOptions::new().source(source.to_owned())))
            .collect()
    }

    fn with_local_tool() -> Toolkit {
        let toolkit = Toolkit::new();
        toolkit
            .register_with(tool("local"), ToolOptions::new())
            .unwrap_or_else(|e| panic!("{e}"));
        toolkit
    }

    #[test]
    fn replacing_a_source_swaps_its_tools_at_once_and_keeps_the_rest() {
        let toolkit = with_local_tool();
        let names = toolkit.replace_source("mcp:a", from("mcp:a", &["x", "y"]));
        assert_eq!(names.unwrap_or_default(), ["x", "y"]);
        let names = toolkit.replace_source("mcp:a", from("mcp:a", &["y", "z"]));
        assert_eq!(names.unwrap_or_default(), ["y", "z"]);
        assert_eq!(toolkit.tool_names(), ["local", "y", "z"]);
        let schemas: Vec<String> = toolkit.json_schemas().iter().map(|s| s.name.clone()).collect();
        assert_eq!(schemas, ["local", "y", "z"]);
    }

    #[test]
    fn a_subset_holds_the_named_tools_with_their_settings_and_changes_apart() {
        let toolkit = with_local_tool();
        toolkit
            .register_with(tool("guarded"), ToolOptions::new().require_approval(true))
            .unwrap_or_else(|e| panic!("{e}"));
        let subset = toolkit.subset(["guarded"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(subset.tool_names(), ["guarded"]);
        assert!(subset.policy("guarded").require_approval);
        toolkit.remove("guarded");
        assert_eq!(
            subset.tool_names(),
            ["guarded"],
            "a change of one is not the other's"
        );
        assert!(matches!(
            toolkit.subset(["missing"]),
            Err(ToolkitError::UnknownTool(name)) if name == "missing"
        ));
    }

    #[test]
    fn a_failed_replacement_changes_nothing() {
        let toolkit = with_local_tool();
        toolkit
            .replace_source("mcp:a", from("mcp:a", &["x"]))
            .unwrap_or_else(|e| panic!("{e}"));
        // "local" is taken and the default strategy refuses: the old set stays.
        let err = toolkit.replace_source("mcp:a", from("mcp:a", &["w", "local"]));
        assert!(matches!(err, Err(ToolkitError::NameTaken(_))), "{err:?}");
        assert_eq!(toolkit.tool_names(), ["local", "x"]);
        let schemas: Vec<String> = toolkit.json_schemas().iter().map(|s| s.name.clone()).collect();
        assert_eq!(schemas, ["local", "x"]);
    }
}
