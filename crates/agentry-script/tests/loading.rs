//! Loading tool folders: bad manifests, schemas and code are reported, and the other tools
//! still load.

use agentry::tool::{Tool, Toolkit};
use agentry_script::{LoadError, ScriptSettings};
use serde_json::json;

use crate::common::ToolDirs;

#[test]
fn a_bad_tool_is_reported_clearly_and_the_others_still_load() {
    let dirs = ToolDirs::new();
    let ok = "AssistantTool.registerExecuteTool(async () => ({ success: true, message: 'ok' }))";
    dirs.add(
        "good",
        json!({"parameters": [{"name": "q", "type": "string"}]}),
        "assistant_tool.js",
        ok,
    );
    dirs.add(
        "bad_schema",
        json!({"parameters": {"type": "object", "properties": {"q": {"type": "text"}}}}),
        "assistant_tool.js",
        ok,
    );
    dirs.add("bad_code", json!({}), "assistant_tool.ts", "const x: number = \n");
    dirs.add(
        "throws_at_load",
        json!({}),
        "assistant_tool.js",
        "undefinedFunction()",
    );
    dirs.add("registers_nothing", json!({}), "assistant_tool.js", "const x = 1");
    std::fs::create_dir_all(dirs.root.path().join("no_code")).unwrap();
    std::fs::write(
        dirs.root.path().join("no_code/assistant_tool.json"),
        r#"{"id": "no_code", "description": "x"}"#,
    )
    .unwrap();
    std::fs::create_dir_all(dirs.root.path().join("bad_json")).unwrap();
    std::fs::write(
        dirs.root.path().join("bad_json/assistant_tool.json"),
        "{ not json",
    )
    .unwrap();

    let toolkit = Toolkit::new();
    let mut tools = dirs.load(&ScriptSettings::default());
    tools.register(&toolkit);
    let names: Vec<&str> = tools.tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["good"]);
    assert_eq!(toolkit.json_schemas()[0].parameters["required"], json!(["q"]));
    let errors: Vec<String> = tools.errors.iter().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 6, "{errors:#?}");
    let said = |dir: &str, what: &str| {
        assert!(
            errors.iter().any(|e| e.contains(dir) && e.contains(what)),
            "{dir}: {what} in {errors:#?}"
        )
    };
    said("bad_schema", "bad parameters");
    said("bad_code", "line 2: Unexpected token");
    said("throws_at_load", "undefinedFunction");
    said("registers_nothing", "registers no execute function");
    said("no_code", "no assistant_tool.tsx");
    said("bad_json", "assistant_tool.json");
    assert!(tools.errors.iter().any(|e| matches!(e, LoadError::NoCode { .. })));
}

#[test]
fn two_tools_with_one_id_keep_the_first() {
    let dirs = ToolDirs::new();
    let ok = "AssistantTool.registerExecuteTool(async () => 'ok')";
    dirs.add("a", json!({}), "assistant_tool.js", ok);
    let second = dirs.add("b", json!({}), "assistant_tool.js", ok);
    std::fs::write(
        second.join("assistant_tool.json"),
        r#"{"id": "a", "description": "the same id"}"#,
    )
    .unwrap();
    let tools = dirs.load(&ScriptSettings::default());
    assert_eq!(tools.tools.len(), 1);
    assert!(
        tools.errors[0].to_string().contains("the id \"a\" is taken"),
        "{}",
        tools.errors[0]
    );
}
