//! # agentry-tools
//!
//! The built-in tools of the `agentry` command, for any agent: `current_time`, `calculate`
//! (exact arithmetic), and the file tools `list_files`, `read_file`, `search_files` (which only
//! read) and `write_file` (which asks for approval before every write), all confined to one
//! working directory: a path that leads outside it, by `..` or a symbolic link, is refused
//! before anyone is asked about it.
//!
//! ```
//! use agentry::tool::Toolkit;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let toolkit = Toolkit::new();
//! agentry_tools::register_builtin_tools(&toolkit, dir.path()).unwrap();
//! assert!(toolkit.tool_names().contains(&"write_file".to_owned()));
//! assert!(toolkit.policy("write_file").require_approval);
//! ```
//!
//! Permission rules (`agentry::tool::PermissionRules`) match the file tools' `path` and
//! `calculate`'s `expression`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod calc;
mod clock;
mod files;
mod search;
mod write;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentry::tool::{FunctionTool, ToolOptions, Toolkit, ToolkitError};
use schemars::JsonSchema;
use serde::Deserialize;

use files::Sandbox;

/// The tools [`register_builtin_tools`] registers, in order.
pub const BUILTIN_TOOL_NAMES: [&str; 6] = [
    "current_time",
    "calculate",
    "list_files",
    "read_file",
    "search_files",
    "write_file",
];

/// Why the tools could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolsError {
    /// The working directory does not exist or cannot be resolved.
    #[error("cannot use {} as the working directory: {source}", path.display())]
    Workdir {
        /// The directory given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A tool's name is taken in the toolkit.
    #[error(transparent)]
    Register(#[from] ToolkitError),
}

#[derive(Deserialize, JsonSchema)]
struct ListArgs {
    /// Directory to list, relative to the working directory (default ".", the working directory
    /// itself).
    path: Option<String>,
    /// true to list the contents of subdirectories too, as relative paths (default false).
    recursive: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
struct ReadArgs {
    /// File to read, relative to the working directory, e.g. "src/main.rs".
    path: String,
    /// Number of the first line to return, counting from 1 (default 1).
    offset: Option<usize>,
    /// Maximum number of lines to return (default 400).
    limit: Option<usize>,
}

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// Text to look for, ignoring case (plain text, not a regular expression).
    pattern: String,
    /// Directory to search, relative to the working directory (default ".").
    path: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// File to write, relative to the working directory; its directory must exist.
    path: String,
    /// The complete new content of the file.
    content: String,
}

/// Registers every built-in tool in `toolkit` ([`BUILTIN_TOOL_NAMES`]); the file tools are
/// confined to `workdir`. Fails when `workdir` cannot be resolved (it does not exist) or a name
/// is taken.
pub fn register_builtin_tools(toolkit: &Toolkit, workdir: &Path) -> Result<(), ToolsError> {
    register_basic_tools(toolkit)?;
    register_file_tools(toolkit, workdir)
}

/// Registers `current_time` and `calculate`.
pub fn register_basic_tools(toolkit: &Toolkit) -> Result<(), ToolsError> {
    toolkit.register(clock::CurrentTimeTool)?;
    // Pure: a repeated calculation may be answered from the first one.
    toolkit.register_with(
        calc::CalculateTool,
        ToolOptions::new().rule_subject("expression").pure(true),
    )?;
    Ok(())
}

/// Registers `list_files`, `read_file`, `search_files` and `write_file`, confined to `workdir`
/// (resolved once, here). Their rule subject is `path`.
pub fn register_file_tools(toolkit: &Toolkit, workdir: &Path) -> Result<(), ToolsError> {
    let sandbox = Sandbox::new(workdir).map_err(|source| ToolsError::Workdir {
        path: workdir.to_owned(),
        source,
    })?;

    let list_box = sandbox.clone();
    toolkit.register_with(
        FunctionTool::typed(
            "list_files",
            "List the entries of a directory in the working directory, sorted by name: directories end with \
         '/', files show their size in bytes ('Cargo.toml (1234 bytes)'), symbolic links show their target \
         ('link -> target') and are never followed. Hidden files are included. Paths are relative to the \
         working directory; nothing outside it can be listed. With recursive=true the contents of \
         subdirectories are listed too, as relative paths, except inside .git, target and node_modules. \
         At most 1000 entries are shown; a note at the end says when the listing was cut.",
            move |args: ListArgs, _ctx| {
                let sandbox = list_box.clone();
                async move {
                    let path = args.path.unwrap_or_else(|| ".".to_owned());
                    tokio::task::spawn_blocking(move || sandbox.list(&path, args.recursive.unwrap_or(false)))
                        .await
                }
            },
        ),
        ToolOptions::new().rule_subject("path"),
    )?;

    let read_box = sandbox.clone();
    toolkit.register_with(
        FunctionTool::typed(
            "read_file",
            "Read a UTF-8 text file in the working directory and return its lines (without line numbers). \
         Paths are relative to the working directory; nothing outside it can be read. Returns at most \
         `limit` lines (default 400) starting at line `offset` (1-based, default 1); when the file has \
         more lines, a final note like '[lines 1-400 of 1234; call read_file with offset=401 to read \
         more]' says how to continue; at most 256 KiB are returned at once (a longer line is cut, and \
         the note says so). Binary files, directories and files over 5 MiB are refused; use \
         list_files to find files.",
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
        ),
        ToolOptions::new().rule_subject("path"),
    )?;
    let search_box = sandbox.clone();
    toolkit.register_with(
        FunctionTool::typed(
            "search_files",
            "Search the text files under a directory of the working directory for lines containing a text, \
         ignoring case. Files are searched in name order, skipping .git, target and node_modules, binary \
         files and files over 5 MiB. Returns 'path:line: text' for each match (at most 200 shown). On a \
         large tree this takes a while; the user sees the progress and may stop it, and you then get the \
         matches found so far.",
            move |args: SearchArgs, ctx| {
                let sandbox = search_box.clone();
                async move {
                    let found = Arc::new(Mutex::new(search::Found::default()));
                    let pattern = args.pattern;
                    let partial = Arc::clone(&found);
                    let cancel_pattern = pattern.clone();
                    ctx.set_on_cancel(move || {
                        let found = partial.lock().unwrap_or_else(|e| e.into_inner());
                        Some(found.cancelled(&cancel_pattern))
                    });
                    let search_pattern = pattern.clone();
                    let path = args.path.unwrap_or_else(|| ".".to_owned());
                    let searched = tokio::task::spawn_blocking(move || {
                        sandbox.search(&path, &search_pattern, &|| ctx.is_cancelled(), &mut |now| {
                            *found.lock().unwrap_or_else(|e| e.into_inner()) = now.clone();
                            ctx.report(
                                format!("searched {} files, {} matches", now.files, now.matches),
                                Some("search"),
                            );
                        })
                    })
                    .await;
                    searched.map(|result| result.map(|found| found.summary(&pattern)))
                }
            },
        ),
        ToolOptions::new().rule_subject("path"),
    )?;

    let write_box = sandbox.clone();
    let check_box = sandbox.clone();
    let describe_box = sandbox;
    let text = |args: &serde_json::Map<String, serde_json::Value>, key: &str| {
        args.get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    toolkit.register_with(
        FunctionTool::typed(
            "write_file",
            "Create or overwrite a text file in the working directory with the given content. The user \
             is asked to approve every write and may decline; do not retry a declined write unless the \
             user asks. The file's directory must already exist; nothing outside the working directory \
             can be written.",
            move |args: WriteArgs, _ctx| {
                let sandbox = write_box.clone();
                async move { tokio::task::spawn_blocking(move || sandbox.write(&args.path, &args.content)).await }
            },
        ),
        ToolOptions::new()
            .require_approval(true)
            .rule_subject("path")
            // A write that could never happen is refused before the user is asked about it.
            .check(move |args| check_box.write_target(&text(args, "path")).map(|_| ()))
            .approval_request(move |args| describe_box.describe_write(&text(args, "path"), &text(args, "content"))),
    )?;

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
        assert_eq!(
            names,
            [
                "current_time",
                "calculate",
                "list_files",
                "read_file",
                "search_files",
                "write_file"
            ]
        );

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

    #[tokio::test]
    async fn schemas_name_the_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let toolkit = Toolkit::new();
        register_builtin_tools(&toolkit, dir.path()).unwrap();
        let schemas = toolkit.json_schemas();
        let find = |name: &str| schemas.iter().find(|s| s.name == name).unwrap().clone();
        let args = |name: &str| {
            let schema = find(name);
            let props = schema.parameters["properties"].as_object().unwrap().clone();
            let mut names: Vec<String> = props.keys().cloned().collect();
            names.sort();
            let required = schema.parameters.get("required").cloned().unwrap_or(json!([]));
            (names, required)
        };
        assert_eq!(args("current_time"), (vec!["utc".to_owned()], json!([])));
        assert_eq!(
            args("calculate"),
            (vec!["expression".to_owned()], json!(["expression"]))
        );
        assert_eq!(
            args("list_files"),
            (vec!["path".to_owned(), "recursive".to_owned()], json!([]))
        );
        assert_eq!(
            args("read_file"),
            (
                vec!["limit".to_owned(), "offset".to_owned(), "path".to_owned()],
                json!(["path"])
            )
        );
        for schema in schemas.iter() {
            assert!(schema.description.len() > 80, "{}", schema.name);
            for (arg, prop) in schema.parameters["properties"].as_object().unwrap() {
                assert!(
                    prop.get("description").is_some(),
                    "{}.{arg} has no description",
                    schema.name
                );
            }
        }
        assert!(
            find("list_files")
                .description
                .contains("relative to the working directory")
        );
        assert!(
            find("read_file")
                .description
                .contains("relative to the working directory")
        );
    }

    #[tokio::test]
    async fn file_tools_through_the_toolkit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "a\nb\nc\n").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s3cret").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let toolkit = Toolkit::new();
        register_builtin_tools(&toolkit, dir.path()).unwrap();

        let listing = call(&toolkit, "list_files", json!({"recursive": true})).await;
        assert!(!listing.is_error);
        assert_eq!(
            listing.text_content(),
            format!("out -> {}\nsrc/\nsrc/lib.rs (6 bytes)", outside.path().display())
        );
        let window = call(
            &toolkit,
            "read_file",
            json!({"path": "src/lib.rs", "offset": 2, "limit": 1}),
        )
        .await;
        assert_eq!(
            window.text_content(),
            "b\n[lines 2-2 of 3; call read_file with offset=3 to read more]"
        );
        for (tool, input) in [
            ("read_file", json!({"path": "out/secret.txt"})),
            ("read_file", json!({"path": outside.path().join("secret.txt")})),
            ("list_files", json!({"path": "out"})),
            ("list_files", json!({"path": ".."})),
        ] {
            let refused = call(&toolkit, tool, input.clone()).await;
            assert!(refused.is_error, "{tool} {input}");
            assert!(
                refused
                    .text_content()
                    .contains("is outside the working directory")
                    && !refused.text_content().contains("s3cret"),
                "{tool} {input}: {}",
                refused.text_content()
            );
        }
        let missing = call(&toolkit, "read_file", json!({"path": "nope.rs"})).await;
        assert!(missing.is_error && missing.text_content().contains("\"nope.rs\" does not exist"));
        let bad_type = call(
            &toolkit,
            "read_file",
            json!({"path": "src/lib.rs", "offset": "two"}),
        )
        .await;
        assert!(bad_type.is_error, "{}", bad_type.text_content());
    }

    #[tokio::test]
    async fn local_time_has_an_offset_and_a_weekday() {
        let toolkit = Toolkit::new();
        register_builtin_tools(&toolkit, Path::new(".")).unwrap();
        let text = call(&toolkit, "current_time", json!({})).await.text_content();
        let (stamp, weekday) = text.split_once(" (").unwrap();
        let parsed = chrono::DateTime::parse_from_rfc3339(stamp).unwrap();
        assert_eq!(weekday, format!("{})", parsed.format("%A")));
        assert!((chrono::Utc::now() - parsed.to_utc()).num_seconds().abs() < 60);
    }

    #[test]
    fn a_missing_workdir_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = register_builtin_tools(&Toolkit::new(), &dir.path().join("nope")).unwrap_err();
        assert!(format!("{err:#}").contains("cannot use"), "{err:#}");
    }
}
