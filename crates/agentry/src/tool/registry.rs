//! The registry behind a `Toolkit`: registered tools, groups, the cached schemas, and how a
//! tool enters it (schema compiled and validated first, then the namesake strategy).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::options::{BASIC_GROUP, NamesakeStrategy, Postprocess, ToolGroup, ToolOptions, ToolkitError};
use super::policy::CallPolicy;
use super::schema::{remove_presets, strip_titles};
use super::{Tool, meta};
use crate::model::ToolSchema;

#[cfg_attr(not(feature = "mcp"), allow(dead_code))] // the source is an MCP server for now
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
#[cfg_attr(not(feature = "mcp"), allow(dead_code))] // watchers follow MCP servers
pub(super) struct Registry {
    pub(super) tools: Vec<Arc<RegisteredTool>>,
    pub(super) index: HashMap<String, usize>,
    pub(super) groups: Vec<ToolGroup>,
    pub(super) meta_tool: bool,
    pub(super) schemas: Arc<[ToolSchema]>,
    /// Tasks following a source's tool list (MCP `tools/list_changed`), by source.
    pub(super) watchers: HashMap<String, tokio::task::AbortHandle>,
}

impl Registry {
    pub(super) fn group(&self, name: &str) -> Option<&ToolGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    pub(super) fn is_active(&self, group: &str) -> bool {
        group == BASIC_GROUP || self.group(group).is_some_and(|g| g.active)
    }

    pub(super) fn reindex(&mut self) {
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

pub(super) fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A tool with its schema compiled, ready to enter the registry (done before taking the lock).
pub(super) struct Prepared {
    name: String,
    group: String,
    description: String,
    parameters: Value,
    validator: jsonschema::Validator,
    tool: Arc<dyn Tool>,
    options: ToolOptions,
}

impl Prepared {
    pub(super) fn new(tool: Arc<dyn Tool>, options: ToolOptions) -> Result<Self, ToolkitError> {
        let name = options.name.clone().unwrap_or_else(|| tool.name().to_owned());
        if !valid_tool_name(&name) {
            return Err(ToolkitError::InvalidName(name));
        }
        let group = options.group.clone().unwrap_or_else(|| BASIC_GROUP.to_owned());
        let description = options
            .description
            .clone()
            .unwrap_or_else(|| tool.description().to_owned());
        let (parameters, validator) = prepare_schema(&name, tool.parameters(), &options.preset_args)?;
        Ok(Prepared {
            name,
            group,
            description,
            parameters,
            validator,
            tool,
            options,
        })
    }
}

impl Registry {
    /// Adds a prepared tool under its namesake strategy; the caller refreshes the schemas.
    pub(super) fn insert(&mut self, prepared: Prepared) -> Result<String, ToolkitError> {
        let Prepared {
            mut name,
            group,
            description,
            parameters,
            validator,
            tool,
            options,
        } = prepared;
        if group != BASIC_GROUP && self.group(&group).is_none() {
            return Err(ToolkitError::UnknownGroup(group));
        }
        let taken = self.index.contains_key(&name) || (self.meta_tool && name == meta::META_TOOL_NAME);
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
                    while self.index.contains_key(&name) || name == meta::META_TOOL_NAME {
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
        match self.index.get(&name) {
            Some(&i) => self.tools[i] = entry,
            None => {
                let position = self.tools.len();
                self.index.insert(name.clone(), position);
                self.tools.push(entry);
            }
        }
        Ok(name)
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
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
