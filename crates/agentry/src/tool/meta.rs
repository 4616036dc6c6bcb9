//! The meta tool: the model chooses which tool groups are active.

use serde_json::{Map, Value, json};

use super::options::{BASIC_GROUP, ToolGroup};
use super::response::{ToolResponse, failure};
use crate::model::ToolSchema;

/// Name of the meta tool.
pub const META_TOOL_NAME: &str = "reset_equipped_tools";

/// The meta tool's schema: one boolean per group.
pub(super) fn schema(groups: &[ToolGroup]) -> ToolSchema {
    let properties: Map<String, Value> = groups
        .iter()
        .map(|g| {
            (
                g.name.clone(),
                json!({"type": "boolean", "default": false, "description": g.description}),
            )
        })
        .collect();
    ToolSchema {
        name: META_TOOL_NAME.to_owned(),
        description: "Choose which tool groups are active. Groups set to true are activated; all other \
                      groups are deactivated. Call it with no arguments to deactivate every group."
            .to_owned(),
        parameters: json!({"type": "object", "properties": properties, "additionalProperties": false}),
    }
}

/// Applies a meta tool call: absolute semantics, and nothing changes unless the whole input is
/// valid.
pub(super) fn call(groups: &mut [ToolGroup], input: &Value) -> ToolResponse {
    let empty = Map::new();
    let input = match input {
        Value::Object(map) => map,
        Value::Null => &empty,
        other => {
            return failure(format!(
                "invalid arguments for \"{META_TOOL_NAME}\": expected an object of group names to true/false, got {other}."
            ));
        }
    };
    let mut errors = Vec::new();
    for (name, value) in input {
        if name == BASIC_GROUP {
            errors.push(format!(
                "\"{BASIC_GROUP}\" is always active and cannot be switched"
            ));
        } else if !groups.iter().any(|g| g.name == *name) {
            errors.push(format!("there is no group \"{name}\""));
        } else if !value.is_boolean() {
            errors.push(format!(
                "the value for \"{name}\" must be true or false, not {value}"
            ));
        }
    }
    if !errors.is_empty() {
        let known: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        return failure(format!(
            "invalid arguments for \"{META_TOOL_NAME}\": {}. No group was changed. Known groups: {}.",
            errors.join("; "),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    for group in groups.iter_mut() {
        group.active = input.get(&group.name).and_then(Value::as_bool).unwrap_or(false);
    }
    let active: Vec<&ToolGroup> = groups.iter().filter(|g| g.active).collect();
    if active.is_empty() {
        return ToolResponse::text("All tool groups are now deactivated.");
    }
    let names: Vec<String> = active.iter().map(|g| format!("'{}'", g.name)).collect();
    let notes = activated_notes(groups);
    let mut text = format!("Now tool groups {} are activated.", names.join(", "));
    if !notes.is_empty() {
        text.push_str(" You MUST follow these notes to use these tools:\n<notes>");
        text.push_str(&notes);
        text.push_str("</notes>");
    }
    ToolResponse::text(text)
}

/// `## About Tool Group '<g>'` sections for the active groups that have notes.
pub(super) fn activated_notes(groups: &[ToolGroup]) -> String {
    groups
        .iter()
        .filter(|g| g.active)
        .filter_map(|g| {
            g.notes
                .as_ref()
                .map(|n| format!("## About Tool Group '{}'\n{n}", g.name))
        })
        .collect::<Vec<_>>()
        .join("\n")
}
