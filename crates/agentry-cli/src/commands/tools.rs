//! `agentry tools list`: the script tools of `--tools-dir` and the config's `tools_dirs`, and
//! the ones that do not load, with why.

use std::path::PathBuf;
use std::process::ExitCode;

use agentry::tool::Tool;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::config::load_config_file;
use crate::exit::EXIT_CONFIG;
use crate::setup::args::ScriptArgs;
use crate::setup::tools::load_script_tools;
use crate::terminal::output::outln;
use crate::terminal::sanitize;

#[derive(Debug, Args)]
pub struct ToolsArgs {
    #[command(subcommand)]
    command: ToolsCommand,
}

#[derive(Debug, Subcommand)]
enum ToolsCommand {
    /// The script tools in --tools-dir and the config's tools_dirs, and the ones that do not
    /// load, with why.
    ///
    /// Exit code 0 when all load, 1 when one does not, 2 for a configuration error.
    List(ListArgs),
}

#[derive(Debug, Args)]
struct ListArgs {
    #[command(flatten)]
    scripts: ScriptArgs,
    /// The config file [default: $XDG_CONFIG_HOME/agentry/config.json or ~/.config/agentry/config.json]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print {"tools": [...], "errors": [...]} as JSON instead of text
    #[arg(long)]
    json: bool,
}

/// Runs `agentry tools <command>`.
pub fn tools(args: ToolsArgs) -> ExitCode {
    match args.command {
        ToolsCommand::List(args) => list(args),
    }
}

fn list(args: ListArgs) -> ExitCode {
    let file = match load_config_file(args.config.as_deref()) {
        Ok(file) => file,
        Err(e) => {
            eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let loaded = load_script_tools(&args.scripts, &file);
    if args.json {
        let tools: Vec<_> = loaded
            .tools
            .iter()
            .map(|tool| {
                let manifest = tool.manifest();
                json!({
                    "id": tool.name(),
                    "display_name": manifest.display_name(),
                    "description": tool.description(),
                    "parameters": tool.parameters(),
                    "require_approval": manifest.require_approval,
                    "auto_approve": manifest.auto_approve,
                    "network": tool.network(),
                    "dir": tool.dir(),
                })
            })
            .collect();
        let errors: Vec<_> = loaded
            .errors
            .iter()
            .map(|e| json!({"message": e.to_string()}))
            .collect();
        outln!("{}", json!({"tools": tools, "errors": errors}));
    } else if loaded.tools.is_empty() && loaded.errors.is_empty() {
        outln!("No script tools: pass --tools-dir DIR or set tools_dirs in the config file.");
    } else {
        for tool in &loaded.tools {
            let manifest = tool.manifest();
            let mut flags = Vec::new();
            if manifest.require_approval {
                flags.push(if manifest.auto_approve {
                    "approval (may be automatic)"
                } else {
                    "approval"
                });
            }
            if tool.network() {
                flags.push("network");
            }
            let flags = if flags.is_empty() {
                String::new()
            } else {
                format!(" [{}]", flags.join(", "))
            };
            outln!(
                "{} ({}){flags}: {}\n    {}",
                sanitize::line(tool.name()),
                sanitize::line(manifest.display_name()),
                sanitize::line(tool.description()),
                sanitize::line(&tool.dir().display().to_string()),
            );
        }
        for error in &loaded.errors {
            outln!("✗ {}", sanitize::multiline(&error.to_string()));
        }
    }
    if loaded.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
