//! Built-in tools of the `agentry` command: safe and read-only.
//!
//! `current_time`, `calculate`, and `list_files` / `read_file` confined to the working directory.

mod calc;
mod files;

use std::path::Path;

use agentry::tool::{FunctionTool, Toolkit, tool};
use chrono::{Local, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::Deserialize;

use files::Sandbox;

/// Tell the current date and time (RFC 3339, with the weekday).
///
/// # Arguments
/// * `utc` - give the time in UTC instead of the local time zone
#[tool]
fn current_time(utc: Option<bool>) -> String {
    if utc.unwrap_or(false) {
        let now = Utc::now();
        format!(
            "{} ({})",
            now.to_rfc3339_opts(SecondsFormat::Secs, true),
            now.format("%A")
        )
    } else {
        let now = Local::now();
        format!(
            "{} ({})",
            now.to_rfc3339_opts(SecondsFormat::Secs, false),
            now.format("%A")
        )
    }
}

/// Evaluate an arithmetic expression exactly, instead of computing in your head. Supports
/// + - * / % and ^ (power), parentheses, decimals and scientific notation (1.5e3), the
/// constants pi and e, and the functions sqrt, abs, round, floor, ceil, ln, log10, sin, cos,
/// tan, min and max.
///
/// # Arguments
/// * `expression` - the expression, e.g. `(17.5 * 3) / 2^4`
#[tool]
fn calculate(expression: String) -> Result<String, String> {
    calc::evaluate(&expression).map(calc::format_number)
}

#[derive(Deserialize, JsonSchema)]
struct ListArgs {
    /// Directory to list, relative to the working directory (default ".").
    path: Option<String>,
    /// List subdirectories too (default false).
    recursive: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
struct ReadArgs {
    /// File to read, relative to the working directory.
    path: String,
    /// First line to return, starting at 1 (default 1).
    offset: Option<usize>,
    /// How many lines to return at most (default 400).
    limit: Option<usize>,
}

/// Registers the built-in tools; the file tools only see `workdir` and what is inside it.
pub fn register_builtin_tools(toolkit: &Toolkit, workdir: &Path) -> anyhow::Result<()> {
    toolkit.register(CurrentTimeTool)?;
    toolkit.register(CalculateTool)?;
    let sandbox = Sandbox::new(workdir)?;

    let list_box = sandbox.clone();
    toolkit.register(FunctionTool::typed(
        "list_files",
        "List the files and directories in a directory of the working directory, sorted by name: directories \
         end with '/', files show their size, symbolic links show their target. Paths are relative to the \
         working directory; nothing outside it can be listed. With recursive=true, subdirectories are listed \
         too (except .git, target and node_modules), up to 1000 entries.",
        move |args: ListArgs, _ctx| {
            let sandbox = list_box.clone();
            async move {
                let path = args.path.unwrap_or_else(|| ".".to_owned());
                tokio::task::spawn_blocking(move || sandbox.list(&path, args.recursive.unwrap_or(false)))
                    .await
            }
        },
    ))?;

    let read_box = sandbox;
    toolkit.register(FunctionTool::typed(
        "read_file",
        "Read a text file of the working directory, by lines. Paths are relative to the working directory; \
         nothing outside it can be read. Returns at most `limit` lines (default 400) from line `offset` \
         (default 1) and says which lines were returned when the file has more. Binary files and files \
         over 5 MiB are refused.",
        move |args: ReadArgs, _ctx| {
            let sandbox = read_box.clone();
            async move {
                let offset = args.offset.unwrap_or(1);
                let limit = args.limit.unwrap_or(files::DEFAULT_LINES);
                tokio::task::spawn_blocking(move || {
                    sandbox.read(&args.path, offset, limit, files::MAX_FILE_BYTES)
                })
                .await
            }
        },
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::message::ToolUseBlock;
    use agentry::tool::{CancellationToken, ToolContext, ToolResponse};
    use futures::StreamExt;
    use serde_json::{Value, json};

    async fn call(toolkit: &Toolkit, name: &str, input: Value) -> ToolResponse {
        let call = ToolUseBlock {
            id: "c".into(),
            name: name.into(),
            input,
            raw_input: None,
        };
        let chunks: Vec<ToolResponse> = toolkit
            .call(&call, ToolContext::new("c", name, CancellationToken::new()))
            .collect()
            .await;
        chunks.last().cloned().unwrap()
    }

    #[tokio::test]
    async fn every_builtin_works_through_the_toolkit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "one\ntwo\n").unwrap();
        let toolkit = Toolkit::new();
        register_builtin_tools(&toolkit, dir.path()).unwrap();
        let names: Vec<String> = toolkit.json_schemas().iter().map(|s| s.name.clone()).collect();
        assert_eq!(names, ["current_time", "calculate", "list_files", "read_file"]);

        let time = call(&toolkit, "current_time", json!({"utc": true}))
            .await
            .text_content();
        assert!(
            time.contains('T') && time.contains("Z (") && time.ends_with("day)"),
            "{time}"
        );
        assert_eq!(
            call(&toolkit, "calculate", json!({"expression": "2+2*3"}))
                .await
                .text_content(),
            "8"
        );
        let err = call(&toolkit, "calculate", json!({"expression": "1/0"})).await;
        assert!(err.is_error && err.text_content().contains("division by zero"));
        assert_eq!(
            call(&toolkit, "list_files", json!({})).await.text_content(),
            "notes.txt (8 bytes)"
        );
        assert_eq!(
            call(&toolkit, "read_file", json!({"path": "notes.txt"}))
                .await
                .text_content(),
            "one\ntwo"
        );
        let escape = call(&toolkit, "read_file", json!({"path": "../../etc/passwd"})).await;
        assert!(escape.is_error && escape.text_content().contains("outside the working directory"));
        let bad = call(&toolkit, "read_file", json!({"offset": 2})).await;
        assert!(bad.is_error && bad.text_content().contains("\"path\" is a required property"));
    }
}
