//! The tools of a command's agent: the built-in ones, the script tools of `--tools-dir`, and
//! the permission rules checked against them all (MCP tools included).

use std::path::PathBuf;

use agentry::tool::{PermissionRules, RuleEffect, Toolkit};
use agentry_script::{ScriptSettings, ScriptTools};

use super::args::ScriptArgs;
use crate::config::ConfigFile;
use crate::terminal::sanitize;

/// The script tools `args` and the config file name (the flags' folders first).
pub fn load_script_tools(args: &ScriptArgs, file: &ConfigFile) -> ScriptTools {
    let dirs: Vec<PathBuf> = args.tools_dirs.iter().chain(&file.tools_dirs).cloned().collect();
    if dirs.is_empty() {
        return ScriptTools::default();
    }
    let network = args.allow_script_network || file.allow_script_network == Some(true);
    ScriptTools::load(&dirs, &ScriptSettings::default().allow_network(network))
}

/// Checks `rules` against the tools: a deny rule whose pattern can never match a tool it names
/// (the tool names no argument for patterns) is refused, as it would look like protection and
/// be none; rules that name no tool, or allow nothing, are warned about.
pub(crate) fn check_permission_rules(rules: &PermissionRules, toolkit: &Toolkit) -> anyhow::Result<()> {
    let tools = toolkit.tool_names();
    for rule in rules.rules() {
        let named: Vec<&String> = tools.iter().filter(|t| rule.names_tool(t)).collect();
        if named.is_empty() {
            eprintln!(
                "warning: the permission rule {} names no tool agentry has",
                sanitize::line(&rule.to_string())
            );
        }
        let blind: Vec<&str> = named
            .iter()
            .filter(|t| rule.needs_subject() && toolkit.policy(t).rule_subject.is_none())
            .map(|t| t.as_str())
            .collect();
        if blind.is_empty() {
            continue;
        }
        let why = format!(
            "the permission rule {} has a pattern, but {} names no argument for it: write TOOL:ARG=GLOB",
            sanitize::line(&rule.to_string()),
            sanitize::line(&blind.join(", "))
        );
        match rule.effect() {
            RuleEffect::Deny => anyhow::bail!(why),
            RuleEffect::Allow => eprintln!("warning: {why}"),
        }
    }
    Ok(())
}
