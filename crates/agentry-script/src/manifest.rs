//! `assistant_tool.json`: what a script tool is called, what it does, its parameters and how
//! it is approved.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::LoadError;

/// A tool's manifest, as the AssistantTool API defines it, plus the permissions Agentry adds.
///
/// ```json
/// {
///   "id": "search_notes",
///   "displayName": "Search notes",
///   "description": "Searches the notes for a phrase.",
///   "parameters": [
///     { "name": "phrase", "type": "string", "description": "What to look for" },
///     { "name": "limit", "type": "integer", "required": false }
///   ],
///   "requireApproval": false,
///   "autoApprove": false
/// }
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Manifest {
    /// The name the model calls the tool by.
    pub id: String,
    /// The name shown to people (the id when absent).
    #[serde(default)]
    pub display_name: Option<String>,
    /// What the tool does, for the model.
    pub description: String,
    /// The parameters: a list of `{name, type, description?, required?, enum?, items?}` (each
    /// required unless `"required": false`), or a JSON schema object. Empty: no input.
    #[serde(default)]
    pub parameters: Option<Value>,
    /// Every call goes through approval (`registerApprovalRequest` and
    /// `registerExecuteToolWithApproval`).
    #[serde(default)]
    pub require_approval: bool,
    /// Calls may be approved automatically when the user allows auto-approval too.
    #[serde(default)]
    pub auto_approve: bool,
    /// The script may use `fetch` (only if the user allows script network access as well).
    #[serde(default)]
    pub network: bool,
    /// Stops a call that runs longer than this many seconds.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Fields of the AssistantTool manifest that have no meaning here (`icon`, `color`,
    /// `scriptEditorOnly`, ...), kept so that a manifest written for it loads unchanged.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Manifest {
    /// Reads a manifest from its JSON text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Manifest, LoadError> {
        let manifest: Manifest = serde_json::from_str(text).map_err(|e| LoadError::Manifest {
            file: file.to_owned(),
            detail: e.to_string(),
        })?;
        manifest.check(file)?;
        Ok(manifest)
    }

    fn check(&self, file: &str) -> Result<(), LoadError> {
        let bad = |detail: String| LoadError::Manifest {
            file: file.to_owned(),
            detail,
        };
        let id_ok = !self.id.is_empty()
            && self.id.len() <= 64
            && self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !id_ok {
            return Err(bad(format!(
                "the id {:?} is not a tool name (1 to 64 letters, digits, '_' or '-')",
                self.id
            )));
        }
        if self.description.trim().is_empty() {
            return Err(bad("the description is empty".into()));
        }
        if let Some(seconds) = self.timeout_seconds
            && !(seconds.is_finite() && seconds > 0.0)
        {
            return Err(bad(format!(
                "timeoutSeconds must be a positive number, not {seconds}"
            )));
        }
        Ok(())
    }

    /// The name shown to people.
    pub fn display_name(&self) -> &str {
        self.display_name.as_deref().unwrap_or(&self.id)
    }

    /// The JSON schema of the arguments object, checked to be a valid schema.
    pub fn schema(&self, file: &str) -> Result<Value, LoadError> {
        let bad = |detail: String| LoadError::Schema {
            file: file.to_owned(),
            detail,
        };
        let schema = match &self.parameters {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(Value::Array(list)) => schema_of_list(list).map_err(bad)?,
            Some(Value::Object(object)) => {
                if object.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(bad(r#"a parameters schema must have "type": "object""#.into()));
                }
                Value::Object(object.clone())
            }
            Some(other) => {
                return Err(bad(format!(
                    "parameters must be a list or a JSON schema object, not {other}"
                )));
            }
        };
        jsonschema::validator_for(&schema).map_err(|e| bad(e.to_string()))?;
        Ok(schema)
    }
}

/// The JSON types a listed parameter may have.
const TYPES: &[&str] = &["string", "number", "integer", "boolean", "array", "object"];

fn schema_of_list(list: &[Value]) -> Result<Value, String> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (index, parameter) in list.iter().enumerate() {
        let Some(fields) = parameter.as_object() else {
            return Err(format!("parameter {index} is not an object"));
        };
        let Some(name) = fields
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Err(format!("parameter {index} has no name"));
        };
        if properties.contains_key(name) {
            return Err(format!("the parameter {name:?} is listed twice"));
        }
        let kind = fields.get("type").and_then(Value::as_str).unwrap_or("string");
        if !TYPES.contains(&kind) {
            return Err(format!(
                "the parameter {name:?} has the type {kind:?}; the types are {}",
                TYPES.join(", ")
            ));
        }
        let mut property = Map::new();
        property.insert("type".into(), json!(kind));
        for key in [
            "description",
            "enum",
            "items",
            "properties",
            "default",
            "minimum",
            "maximum",
        ] {
            if let Some(value) = fields.get(key) {
                property.insert(key.into(), value.clone());
            }
        }
        if fields.get("required").and_then(Value::as_bool).unwrap_or(true) {
            required.push(json!(name));
        }
        properties.insert(name.to_owned(), Value::Object(property));
    }
    Ok(json!({"type": "object", "properties": properties, "required": required}))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_parameter_list_becomes_a_schema_with_every_parameter_required_unless_it_says_otherwise() {
        let manifest = Manifest::parse(
            r#"{"id": "find", "description": "Finds.", "icon": "magnifyingglass",
                "parameters": [{"name": "q", "type": "string", "description": "what"},
                               {"name": "n", "type": "integer", "required": false}]}"#,
            "assistant_tool.json",
        )
        .unwrap();
        assert_eq!(
            manifest.schema("f").unwrap(),
            json!({"type": "object", "properties": {
                "q": {"type": "string", "description": "what"},
                "n": {"type": "integer"}}, "required": ["q"]})
        );
        assert_eq!(manifest.other["icon"], "magnifyingglass");
    }

    #[test]
    fn a_bad_manifest_or_schema_says_what_is_wrong() {
        let error = Manifest::parse(r#"{"id": "a b", "description": "x"}"#, "m.json").unwrap_err();
        assert!(
            error.to_string().contains("\"a b\" is not a tool name"),
            "{error}"
        );
        let manifest = Manifest::parse(
            r#"{"id": "t", "description": "x", "parameters": [{"name": "p", "type": "text"}]}"#,
            "m.json",
        )
        .unwrap();
        let error = manifest.schema("m.json").unwrap_err();
        assert!(error.to_string().contains("\"text\""), "{error}");
        let manifest = Manifest::parse(
            r#"{"id": "t", "description": "x", "parameters": {"type": "object", "properties": {"p": {"type": 7}}}}"#,
            "m.json",
        )
        .unwrap();
        assert!(manifest.schema("m.json").is_err());
    }
}
