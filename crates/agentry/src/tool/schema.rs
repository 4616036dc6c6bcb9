//! JSON schemas of tool arguments.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// The JSON schema of `T` as a tool's `parameters`: draft 2020-12, subschemas inlined where
/// possible, without `$schema` and `title` keywords (models do not need them).
pub fn schema_for<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        if !map.contains_key("type") && !map.contains_key("$ref") {
            map.insert("type".into(), Value::String("object".into()));
        }
    }
    strip_titles(&mut value);
    value
}

/// Every way `value` breaks `validator`, as "at /path: message" (the path left out at the root).
pub(crate) fn schema_errors(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    validator
        .iter_errors(value)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("at {path}: {e}")
            }
        })
        .collect()
}

/// Why a tool call's arguments cannot be used when its `input` is not an object: invalid JSON
/// (with the parser's message), JSON of another kind, or nothing at all.
pub(crate) fn unusable_arguments(call: &crate::message::ToolUseBlock) -> String {
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    match (&call.input, call.raw_input.as_deref()) {
        (Value::Null, Some(raw)) => match serde_json::from_str::<Value>(raw) {
            Err(e) => format!("the arguments are not valid JSON ({e})"),
            Ok(v) => format!("the arguments are {}, not a JSON object", kind(&v)),
        },
        (Value::Null, None) => "the arguments are missing".to_owned(),
        (other, _) => format!("the arguments are {}, not a JSON object", kind(other)),
    }
}

/// Removes `title` keywords from a schema and its subschemas, leaving properties that happen
/// to be named "title" alone.
pub(crate) fn strip_titles(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    map.remove("title");
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(strip_titles);
        }
    }
    for key in [
        "items",
        "additionalProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
    ] {
        if let Some(child) = map.get_mut(key) {
            strip_titles(child);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(strip_titles);
        }
    }
}

/// Removes preset arguments from a schema's `properties` and `required` (an emptied
/// `required` is dropped). Returns the names that were not properties of the schema.
pub(crate) fn remove_presets(schema: &mut Map<String, Value>, presets: &Map<String, Value>) -> Vec<String> {
    let mut unknown = Vec::new();
    let properties = schema.get_mut("properties").and_then(Value::as_object_mut);
    match properties {
        Some(properties) => {
            for name in presets.keys() {
                if properties.remove(name).is_none() {
                    unknown.push(name.clone());
                }
            }
        }
        None => unknown.extend(presets.keys().cloned()),
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|r| r.as_str().is_none_or(|r| !presets.contains_key(r)));
        if required.is_empty() {
            schema.remove("required");
        }
    }
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        title: String,
    }

    /// Args doc.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// The query.
        query: String,
        limit: Option<u32>,
        inner: Inner,
    }

    #[test]
    fn schema_is_inline_and_titleless() {
        let s = schema_for::<Args>();
        assert!(s.get("$schema").is_none());
        assert!(s.get("title").is_none());
        assert_eq!(s["type"], "object");
        assert_eq!(s["properties"]["query"]["description"], "The query.");
        assert_eq!(s["properties"]["inner"]["properties"]["title"]["type"], "string");
        let required: Vec<&str> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(required.contains(&"query") && !required.contains(&"limit"));
    }

    #[test]
    fn presets_leave_properties_and_required() {
        let mut s = json!({"type": "object", "properties": {"a": {}, "key": {}}, "required": ["key"]});
        let presets = Map::from_iter([("key".to_owned(), json!("secret")), ("nope".to_owned(), json!(1))]);
        let unknown = remove_presets(s.as_object_mut().unwrap(), &presets);
        assert_eq!(unknown, vec!["nope".to_owned()]);
        assert_eq!(s, json!({"type": "object", "properties": {"a": {}}}));
    }
}
