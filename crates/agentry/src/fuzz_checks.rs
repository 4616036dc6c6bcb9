//! Invariants the fuzz targets of the toolkit and the MCP configuration check (`fuzz/`), kept
//! here so the corpus also replays as a plain test on stable. Not part of the public API.

use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::message::ToolUseBlock;
use crate::tool::{FunctionTool, ToolOptions, Toolkit, once};

fn toolkit() -> &'static Toolkit {
    static TOOLKIT: OnceLock<Toolkit> = OnceLock::new();
    TOOLKIT.get_or_init(|| {
        let toolkit = Toolkit::new();
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 64},
                "count": {"type": "integer", "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["a", "b"]},
                "nested": {"type": "object", "properties": {"x": {"type": "number"}}}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        let tool = FunctionTool::new("t", "fuzzed", schema, |_, _| once(async { "ok" }));
        let options = ToolOptions::new().preset("secret", json!("s")).check(|args| {
            match args.get("path").and_then(Value::as_str) {
                Some(path) if path.starts_with('/') => Err("outside".into()),
                _ => Ok(()),
            }
        });
        // A fixed, valid registration: failing here is a bug of this file, not of the input.
        let _ = toolkit.register_with(tool, options);
        toolkit
    })
}

/// Tool-call arguments as a model sends them, validated by `Toolkit::prepare`: never a panic;
/// a call is accepted only with an object that satisfies the schema, and a refusal is an error
/// result the model can read.
pub fn check_tool_arguments(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let input = serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let call = ToolUseBlock {
        id: "c".into(),
        name: "t".into(),
        input: input.clone(),
        raw_input: Some(text.to_owned()),
    };
    match toolkit().prepare(&call) {
        Ok(_) => {
            let args = input.as_object();
            assert!(
                args.is_some_and(|a| a.get("path").is_some_and(Value::is_string)),
                "accepted {text:?}"
            );
            assert!(
                args.is_some_and(|a| !a.contains_key("secret")),
                "a preset overridden by {text:?}"
            );
        }
        Err(refused) => {
            assert!(refused.is_error, "a refusal is an error result");
            assert!(!refused.content.is_empty(), "a refusal says why");
        }
    }
}

/// An `mcpServers` configuration file: never a panic; an accepted file names each server with
/// a command or a URL.
#[cfg(feature = "mcp")]
pub fn check_mcp_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(servers) = crate::mcp::parse_mcp_servers(text) {
        for server in servers {
            assert!(!server.name.is_empty(), "a server without a name from {text:?}");
        }
    }
}
