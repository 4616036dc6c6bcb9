//! The tool definitions of a request, encoded once. An agent sends the same tools (one shared
//! slice) with every step, and their JSON schemas are often the largest part of a request:
//! encoding them again each step cost a plan notebook's eight tools about a tenth of a step's
//! client CPU.

use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::ToolSchema;

/// Tools and their JSON.
type Encoded = (Arc<[ToolSchema]>, Arc<RawValue>);

/// The last tools a provider encoded and their JSON. The slice is kept, so a pointer equal to
/// it is the same tools (never a freed slice's successor at the same address).
#[derive(Default)]
pub(crate) struct EncodedTools {
    last: Mutex<Option<Encoded>>,
}

impl EncodedTools {
    /// The JSON of `tools`, by `encode` the first time and from the cache while the same
    /// tools come again.
    pub(crate) fn get(
        &self,
        tools: &Arc<[ToolSchema]>,
        encode: impl FnOnce(&[ToolSchema]) -> serde_json::Result<String>,
    ) -> serde_json::Result<Arc<RawValue>> {
        if let Ok(last) = self.last.lock()
            && let Some((cached, json)) = last.as_ref()
            && Arc::ptr_eq(cached, tools)
        {
            return Ok(Arc::clone(json));
        }
        let json: Arc<RawValue> = Arc::from(RawValue::from_string(encode(tools)?)?);
        if let Ok(mut last) = self.last.lock() {
            *last = Some((Arc::clone(tools), Arc::clone(&json)));
        }
        Ok(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(name: &str) -> Arc<[ToolSchema]> {
        Arc::from(vec![ToolSchema {
            name: name.into(),
            description: "d".into(),
            parameters: serde_json::json!({"type": "object"}),
        }])
    }

    #[test]
    fn the_same_tools_are_encoded_once_and_other_tools_again() {
        let cache = EncodedTools::default();
        let mut encoded = 0;
        let mut encode = |t: &[ToolSchema]| {
            encoded += 1;
            serde_json::to_string(&t.iter().map(|t| &t.name).collect::<Vec<_>>())
        };
        let first = tools("a");
        assert_eq!(cache.get(&first, &mut encode).unwrap().get(), r#"["a"]"#);
        assert_eq!(cache.get(&first, &mut encode).unwrap().get(), r#"["a"]"#);
        let second = tools("b");
        assert_eq!(cache.get(&second, &mut encode).unwrap().get(), r#"["b"]"#);
        assert_eq!(encoded, 2);
    }
}
