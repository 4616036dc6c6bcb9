//! The Toolkit: one registry and one call path for every tool.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{Map, Value};

use super::approval::{ApprovalRequest, CallPolicy, SessionApprovalScope};
use super::runner::{failure, run_tool};
use super::schema::{remove_presets, schema_errors, strip_titles, unusable_arguments};
use super::{Tool, ToolContext, ToolResponse, meta};
use crate::message::ToolUseBlock;
use crate::model::ToolSchema;

/// The group every tool joins unless told otherwise; it is always active.
pub const BASIC_GROUP: &str = "basic";

/// What to do when a tool is registered under a name that is taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NamesakeStrategy {
    /// Refuse with [`ToolkitError::NameTaken`].
    #[default]
    Raise,
    /// Keep the existing tool and ignore the new one.
    Skip,
    /// Replace the existing tool.
    Override,
    /// Register the new tool as `name_xxxxx` (five random characters).
    Rename,
}

/// A function applied to every chunk of a tool's result, e.g. to trim or redact output.
pub type Postprocess = Arc<dyn Fn(&ToolUseBlock, ToolResponse) -> ToolResponse + Send + Sync>;

/// How a tool is registered.
///
/// ```
/// use agentry::tool::{NamesakeStrategy, ToolOptions};
/// use serde_json::json;
/// let options = ToolOptions::new()
///     .group("web")
///     .preset("api_key", json!("secret"))
///     .namesake(NamesakeStrategy::Rename);
/// # let _ = options;
/// ```
#[derive(Clone, Default)]
pub struct ToolOptions {
    group: Option<String>,
    name: Option<String>,
    description: Option<String>,
    preset_args: Map<String, Value>,
    namesake: NamesakeStrategy,
    postprocess: Option<Postprocess>,
    policy: CallPolicy,
    source: Option<String>,
}

impl ToolOptions {
    /// Defaults: group `basic`, the tool's own name and description, no presets, `Raise`.
    pub fn new() -> Self {
        ToolOptions::default()
    }

    /// Puts the tool in this group (which must exist).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Registers the tool under another name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Replaces the tool's description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Fixes an argument: it disappears from the schema the model sees, is always passed to the
    /// tool, and a model that tries to set it gets an error result.
    pub fn preset(mut self, name: impl Into<String>, value: Value) -> Self {
        self.preset_args.insert(name.into(), value);
        self
    }

    /// What to do if the name is taken.
    pub fn namesake(mut self, strategy: NamesakeStrategy) -> Self {
        self.namesake = strategy;
        self
    }

    /// Every call must be approved by the user before it runs (spec A1).
    pub fn require_approval(mut self, required: bool) -> Self {
        self.policy.require_approval = required;
        self
    }

    /// Calls may be approved automatically when the agent's `auto_approve_tools` is on too (A4).
    pub fn auto_approve(mut self, auto: bool) -> Self {
        self.policy.auto_approve = auto;
        self
    }

    /// Builds the request shown to the user from the call's arguments (A5). It must be free of
    /// side effects (A19); when it fails, a generic request is shown instead (A6).
    pub fn approval_request(
        mut self,
        f: impl Fn(&Map<String, Value>) -> Result<ApprovalRequest, String> + Send + Sync + 'static,
    ) -> Self {
        self.policy.request = Some(Arc::new(f));
        self
    }

    /// Builds what the model reads when the user declines a call (A10).
    pub fn declined_message(
        mut self,
        f: impl Fn(&Map<String, Value>, Option<&str>) -> String + Send + Sync + 'static,
    ) -> Self {
        self.policy.declined_message = Some(Arc::new(f));
        self
    }

    /// How "for this session" decisions match later calls (A12; default: same arguments).
    pub fn session_scope(mut self, scope: SessionApprovalScope) -> Self {
        self.policy.session_scope = scope;
        self
    }

    /// Stops a call that runs longer than this (T1, T2); time spent waiting for approval does
    /// not count (A18).
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.policy.timeout = Some(timeout);
        self
    }

    /// Lets progress reports renew the timeout, up to `max` in all (T4).
    pub fn progress_extends_timeout(mut self, max: std::time::Duration) -> Self {
        self.policy.progress_extends_timeout = Some(max);
        self
    }

    /// Where the tool comes from (e.g. `mcp:server`), so all of a source's tools can go at once.
    pub(crate) fn source(mut self, source: String) -> Self {
        self.source = Some(source);
        self
    }

    /// A function applied to every chunk of the tool's result.
    pub fn postprocess(
        mut self,
        f: impl Fn(&ToolUseBlock, ToolResponse) -> ToolResponse + Send + Sync + 'static,
    ) -> Self {
        self.postprocess = Some(Arc::new(f));
        self
    }
}

/// Why a toolkit operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolkitError {
    /// The tool name is taken and the strategy is [`NamesakeStrategy::Raise`].
    #[error("a tool named {0:?} is already registered")]
    NameTaken(String),
    /// The group does not exist.
    #[error("there is no tool group named {0:?}")]
    UnknownGroup(String),
    /// The group exists already.
    #[error("a tool group named {0:?} already exists")]
    GroupExists(String),
    /// The `basic` group cannot be created, removed or deactivated.
    #[error("the {BASIC_GROUP:?} group is built in and always active")]
    BasicGroup,
    /// The tool's schema is not usable.
    #[error("the parameters schema of tool {tool:?} is invalid: {reason}")]
    InvalidSchema {
        /// Tool name.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// A tool name that models cannot call.
    #[error("invalid tool name {0:?}: use 1-64 characters among a-z, A-Z, 0-9, '_' and '-'")]
    InvalidName(String),
}

/// A named set of tools the model can switch on and off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolGroup {
    /// Group name.
    pub name: String,
    /// What the group is for (shown to the model in the meta tool's schema).
    pub description: String,
    /// Whether its tools are offered to the model.
    pub active: bool,
    /// Instructions shown to the model when the group is activated.
    pub notes: Option<String>,
}

pub(super) struct RegisteredTool {
    pub(super) name: String,
    pub(super) group: String,
    pub(super) tool: Arc<dyn Tool>,
    pub(super) schema: ToolSchema,
    pub(super) validator: jsonschema::Validator,
    pub(super) preset_args: Map<String, Value>,
    pub(super) postprocess: Option<Postprocess>,
    pub(super) policy: CallPolicy,
    pub(super) source: Option<String>,
}

#[derive(Default)]
pub(super) struct Registry {
    pub(super) tools: Vec<Arc<RegisteredTool>>,
    pub(super) index: HashMap<String, usize>,
    pub(super) groups: Vec<ToolGroup>,
    pub(super) meta_tool: bool,
    schemas: Arc<[ToolSchema]>,
    /// Tasks following a source's tool list (MCP `tools/list_changed`), by source.
    watchers: HashMap<String, tokio::task::AbortHandle>,
}

impl Registry {
    pub(super) fn group(&self, name: &str) -> Option<&ToolGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    fn is_active(&self, group: &str) -> bool {
        group == BASIC_GROUP || self.group(group).is_some_and(|g| g.active)
    }

    fn reindex(&mut self) {
        self.index = self
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
    }

    /// Recomputes the schemas offered to the model; runs after every change.
    pub(super) fn refresh_schemas(&mut self) {
        let mut schemas: Vec<ToolSchema> = self
            .tools
            .iter()
            .filter(|t| self.is_active(&t.group))
            .map(|t| t.schema.clone())
            .collect();
        if self.meta_tool {
            schemas.push(meta::schema(&self.groups));
        }
        self.schemas = schemas.into();
    }
}

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

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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
    /// from the tool's own with [`ToolOptions::name`] or [`NamesakeStrategy::Rename`]).
    pub fn register_with(&self, tool: impl Tool, options: ToolOptions) -> Result<String, ToolkitError> {
        self.register_arc(Arc::new(tool), options)
    }

    /// Registers a shared tool object with options.
    pub fn register_arc(&self, tool: Arc<dyn Tool>, options: ToolOptions) -> Result<String, ToolkitError> {
        let mut name = options.name.clone().unwrap_or_else(|| tool.name().to_owned());
        if !valid_tool_name(&name) {
            return Err(ToolkitError::InvalidName(name));
        }
        let group = options.group.clone().unwrap_or_else(|| BASIC_GROUP.to_owned());
        let description = options
            .description
            .clone()
            .unwrap_or_else(|| tool.description().to_owned());
        let (parameters, validator) = prepare_schema(&name, tool.parameters(), &options.preset_args)?;

        let mut registry = self.write();
        if group != BASIC_GROUP && registry.group(&group).is_none() {
            return Err(ToolkitError::UnknownGroup(group));
        }
        let taken =
            registry.index.contains_key(&name) || (registry.meta_tool && name == meta::META_TOOL_NAME);
        if taken {
            match options.namesake {
                NamesakeStrategy::Raise => return Err(ToolkitError::NameTaken(name)),
                NamesakeStrategy::Skip => {
                    tracing::warn!(tool = %name, "a tool with this name exists; the new one is skipped");
                    return Ok(name);
                }
                NamesakeStrategy::Override => {
                    tracing::warn!(tool = %name, "a tool with this name exists; it is replaced");
                }
                NamesakeStrategy::Rename => {
                    let base = name.clone();
                    let mut attempts = 0;
                    while registry.index.contains_key(&name) || name == meta::META_TOOL_NAME {
                        attempts += 1;
                        if attempts > 100 {
                            return Err(ToolkitError::NameTaken(base));
                        }
                        let suffix: String = crate::message::new_id().chars().take(5).collect();
                        name = format!("{}_{suffix}", truncate(&base, 58));
                    }
                }
            }
        }
        let entry = Arc::new(RegisteredTool {
            schema: ToolSchema {
                name: name.clone(),
                description,
                parameters,
            },
            name: name.clone(),
            group,
            tool,
            validator,
            preset_args: options.preset_args,
            postprocess: options.postprocess,
            policy: options.policy,
            source: options.source,
        });
        match registry.index.get(&name) {
            Some(&i) => registry.tools[i] = entry,
            None => {
                let position = registry.tools.len();
                registry.index.insert(name.clone(), position);
                registry.tools.push(entry);
            }
        }
        registry.refresh_schemas();
        Ok(name)
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
    pub(crate) fn set_watcher(&self, source: String, task: tokio::task::AbortHandle) {
        if let Some(old) = self.write().watchers.insert(source, task) {
            old.abort();
        }
    }

    /// Stops following a source's tool list.
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
    /// caller down.
    pub fn call(&self, call: &ToolUseBlock, ctx: ToolContext) -> BoxStream<'static, ToolResponse> {
        let entry = {
            let registry = self.read();
            if registry.meta_tool && call.name == meta::META_TOOL_NAME {
                drop(registry);
                return stream::once(std::future::ready(meta::call(self, &call.input))).boxed();
            }
            match registry
                .index
                .get(&call.name)
                .and_then(|&i| registry.tools.get(i))
            {
                None => return one(failure(unknown_tool(&registry, &call.name))),
                Some(entry) if !registry.is_active(&entry.group) => {
                    let hint = if registry.meta_tool {
                        format!(
                            " Activate the group by calling \"{}\" first.",
                            meta::META_TOOL_NAME
                        )
                    } else {
                        String::new()
                    };
                    return one(failure(format!(
                        "the tool \"{}\" is in the inactive group \"{}\", so it cannot be called now.{hint}",
                        entry.name, entry.group
                    )));
                }
                Some(entry) => Arc::clone(entry),
            }
        };
        match checked_arguments(&entry, call) {
            Ok(args) => run_tool(entry, call, args, ctx),
            Err(message) => one(failure(message)),
        }
    }
}

fn one(response: ToolResponse) -> BoxStream<'static, ToolResponse> {
    stream::once(std::future::ready(response)).boxed()
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
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

/// Makes the schema the model sees and the validator that checks what the model sends.
fn prepare_schema(
    name: &str,
    parameters: Value,
    presets: &Map<String, Value>,
) -> Result<(Value, jsonschema::Validator), ToolkitError> {
    let invalid = |reason: String| ToolkitError::InvalidSchema {
        tool: name.to_owned(),
        reason,
    };
    let Value::Object(mut schema) = parameters else {
        return Err(invalid("it must be a JSON object".into()));
    };
    match schema.get("type") {
        None => {
            schema.insert("type".into(), Value::String("object".into()));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => return Err(invalid(format!("its type must be \"object\", not {other}"))),
    }
    schema.remove("$schema");
    let unknown = remove_presets(&mut schema, presets);
    if !unknown.is_empty() {
        return Err(invalid(format!(
            "preset argument(s) {} are not among its properties",
            unknown.join(", ")
        )));
    }
    if !schema.contains_key("properties") {
        schema.insert("properties".into(), Value::Object(Map::new()));
    }
    let mut schema = Value::Object(schema);
    strip_titles(&mut schema);
    let validator = jsonschema::validator_for(&schema).map_err(|e| invalid(e.to_string()))?;
    Ok((schema, validator))
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
