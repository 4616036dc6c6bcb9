//! The tools of a command's agent: the built-in ones, the script tools of `--tools-dir`, and
//! the permission rules checked against them all (MCP tools included).

use std::collections::BTreeSet;
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

/// Which tools the model is offered: all, or those `--tools` (config `"tools"`) names; the
/// built-in ones unless `--no-builtin-tools`.
#[derive(Debug, Clone)]
pub struct ToolSelection {
    /// The names offered; `None`: every tool.
    names: Option<BTreeSet<String>>,
    /// Whether the built-in tools are registered at all.
    pub builtin: bool,
}

impl Default for ToolSelection {
    fn default() -> Self {
        ToolSelection {
            names: None,
            builtin: true,
        }
    }
}

impl ToolSelection {
    /// The flags' selection, else the config file's.
    pub fn new(flag: Option<&[String]>, file: Option<&[String]>, no_builtin: bool) -> Self {
        let names = flag.or(file).map(|names| {
            names
                .iter()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect()
        });
        ToolSelection {
            names,
            builtin: !no_builtin,
        }
    }

    /// Whether the tool the agent knows as `name` is offered.
    pub fn offers(&self, name: &str) -> bool {
        self.names.as_ref().is_none_or(|names| names.contains(name))
    }

    /// Whether some tools are chosen by name.
    pub fn by_name(&self) -> bool {
        self.names.is_some()
    }

    /// Takes the tools not offered out of `toolkit`.
    pub fn apply(&self, toolkit: &Toolkit) {
        for name in toolkit.tool_names() {
            if !self.offers(&name) {
                toolkit.remove(&name);
            }
        }
    }

    /// Warns about names chosen that no tool has (a typo, or an MCP server that did not start).
    pub fn warn_missing(&self, toolkit: &Toolkit) {
        let Some(names) = &self.names else { return };
        let have: BTreeSet<String> = toolkit.tool_names().into_iter().collect();
        let missing: Vec<&str> = names
            .iter()
            .filter(|n| !have.contains(*n))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "warning: --tools names {} that no tool has; the tools are: {}",
                sanitize::line(&missing.join(", ")),
                sanitize::line(&have.into_iter().collect::<Vec<_>>().join(", "))
            );
        }
    }
}
