//! A form asked field by field at the terminal (an MCP server's elicitation): its fields from
//! the JSON schema, each line typed turned into a value of the field's type.

use serde_json::{Map, Value};

/// What a field takes.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Text,
    Bool,
    Integer,
    Number,
    /// One of these values.
    Choice(Vec<(String, String)>),
    /// Some of these values, comma-separated.
    Choices(Vec<(String, String)>),
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    title: String,
    description: String,
    kind: Kind,
    default: Option<Value>,
    required: bool,
}

/// A form being filled.
#[derive(Debug, Clone)]
pub struct Form {
    fields: Vec<Field>,
    next: usize,
    content: Map<String, Value>,
}

/// The values of an enum schema, with their labels: `enum` (and `enumNames`), or `oneOf` /
/// `anyOf` of `{const, title}`.
fn choices(schema: &Value) -> Option<Vec<(String, String)>> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let names = schema.get("enumNames").and_then(Value::as_array);
        return Some(
            values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    let value = v.as_str()?.to_owned();
                    let label = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .unwrap_or(&value)
                        .to_owned();
                    Some((value, label))
                })
                .collect(),
        );
    }
    let options = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)?;
    Some(
        options
            .iter()
            .filter_map(|o| {
                let value = o.get("const").and_then(Value::as_str)?.to_owned();
                let label = o
                    .get("title")
                    .and_then(Value::as_str)
                    .unwrap_or(&value)
                    .to_owned();
                Some((value, label))
            })
            .collect(),
    )
}

fn kind(schema: &Value) -> Kind {
    match schema.get("type").and_then(Value::as_str) {
        Some("boolean") => Kind::Bool,
        Some("integer") => Kind::Integer,
        Some("number") => Kind::Number,
        Some("array") => Kind::Choices(schema.get("items").and_then(choices).unwrap_or_default()),
        _ => match choices(schema) {
            Some(options) => Kind::Choice(options),
            None => Kind::Text,
        },
    }
}

impl Form {
    /// The form of `schema` (`{"type": "object", "properties": {...}, "required": [...]}`).
    pub fn new(schema: &Value) -> Form {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|properties| {
                properties
                    .iter()
                    .map(|(name, field)| Field {
                        name: name.clone(),
                        title: field
                            .get("title")
                            .and_then(Value::as_str)
                            .unwrap_or(name)
                            .to_owned(),
                        description: field
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        kind: kind(field),
                        default: field.get("default").cloned(),
                        required: required.contains(&name.as_str()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Form {
            fields,
            next: 0,
            content: Map::new(),
        }
    }

    /// The prompt of the field to fill now; `None` once every field is.
    pub fn prompt(&self) -> Option<String> {
        let field = self.fields.get(self.next)?;
        let mut hint = match &field.kind {
            Kind::Text => "text".to_owned(),
            Kind::Bool => "y/n".to_owned(),
            Kind::Integer => "a whole number".to_owned(),
            Kind::Number => "a number".to_owned(),
            Kind::Choice(options) => format!("one of: {}", numbered(options)),
            Kind::Choices(options) => format!("some of, comma-separated: {}", numbered(options)),
        };
        match (&field.default, field.required) {
            (Some(default), _) => hint.push_str(&format!("; Enter keeps {}", shown(default))),
            (None, false) => hint.push_str("; Enter leaves it out"),
            (None, true) => hint.push_str("; required"),
        }
        let about = match field.description.is_empty() {
            true => String::new(),
            false => format!(" — {}", field.description),
        };
        Some(format!("  {}{about} ({hint}) > ", field.title))
    }

    /// Takes the line typed for the current field; an error says why it does not fit (the
    /// field is asked again).
    pub fn take(&mut self, line: &str) -> Result<(), String> {
        let Some(field) = self.fields.get(self.next) else {
            return Ok(());
        };
        let line = line.trim();
        if line.is_empty() {
            match (&field.default, field.required) {
                (Some(default), _) => {
                    self.content.insert(field.name.clone(), default.clone());
                }
                (None, true) => return Err(format!("{} is required", field.title)),
                (None, false) => {}
            }
            self.next += 1;
            return Ok(());
        }
        let value = parse(&field.kind, line)?;
        self.content.insert(field.name.clone(), value);
        self.next += 1;
        Ok(())
    }

    /// The answer, once every field was asked.
    pub fn content(&self) -> Value {
        Value::Object(self.content.clone())
    }
}

fn numbered(options: &[(String, String)]) -> String {
    options
        .iter()
        .enumerate()
        .map(|(i, (_, label))| format!("{} {label}", i + 1))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// One option, by its number, value or label.
fn pick(options: &[(String, String)], typed: &str) -> Result<String, String> {
    let typed = typed.trim();
    if let Ok(n) = typed.parse::<usize>()
        && let Some((value, _)) = n.checked_sub(1).and_then(|i| options.get(i))
    {
        return Ok(value.clone());
    }
    options
        .iter()
        .find(|(value, label)| value.eq_ignore_ascii_case(typed) || label.eq_ignore_ascii_case(typed))
        .map(|(value, _)| value.clone())
        .ok_or_else(|| format!("{typed:?} is not one of the choices"))
}

fn parse(kind: &Kind, line: &str) -> Result<Value, String> {
    match kind {
        Kind::Text => Ok(Value::String(line.to_owned())),
        Kind::Bool => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Value::Bool(true)),
            "n" | "no" | "false" => Ok(Value::Bool(false)),
            _ => Err("answer y or n".into()),
        },
        Kind::Integer => line
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("{line:?} is not a whole number")),
        Kind::Number => line
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{line:?} is not a number")),
        Kind::Choice(options) => pick(options, line).map(Value::String),
        Kind::Choices(options) => line
            .split(',')
            .map(|typed| pick(options, typed).map(Value::String))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_form_is_filled_field_by_field_with_typed_values_and_defaults() {
        let schema = json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "title": "Name"},
            "check": {"type": "boolean"},
            "age": {"type": "integer", "default": 42},
            "pet": {"type": "string", "enum": ["pet-1", "pet-2"], "enumNames": ["Cats", "Dogs"]},
            "fish": {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"}, {"const": "f2", "title": "Trout"}]}}
        }});
        let mut form = Form::new(&schema);
        let mut answers = std::collections::HashMap::from([
            ("Name", ""),
            ("check", "maybe"),
            ("age", ""),
            ("pet", "dogs"),
            ("fish", "1, Trout"),
        ]);
        let mut errors = 0;
        while let Some(prompt) = form.prompt() {
            let field = answers
                .keys()
                .find(|k| prompt.trim_start().starts_with(*k))
                .copied()
                .unwrap();
            let typed = answers[field];
            if form.take(typed).is_err() {
                errors += 1;
                answers.insert(field, if field == "Name" { "Ada" } else { "y" });
            }
        }
        assert_eq!(
            errors, 2,
            "a missing required value and a bad boolean are asked again"
        );
        assert_eq!(
            form.content(),
            json!({"name": "Ada", "check": true, "age": 42, "pet": "pet-2", "fish": ["f1", "f2"]})
        );
    }
}
