//! Putting an MCP server's tools in a [`Toolkit`], next to local tools.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::client::{McpClient, McpToolInfo};
use super::tool::McpTool;
use super::{McpError, McpServerConfig};
use crate::tool::{NamesakeStrategy, Tool, ToolOptions, Toolkit};

/// The default execution timeout of MCP calls, renewed by progress (spec T1, T4).
pub const MCP_DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The hard limit of MCP calls, whatever progress says (spec T4).
pub const MCP_MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// One tool's approval settings; `None` leaves the decision to the server-wide rules.
#[derive(Debug, Clone, Copy, Default)]
struct Approval {
    require: Option<bool>,
    auto: Option<bool>,
}

/// How a server's tools are registered.
///
/// Approval: an MCP tool needs the user's approval unless the server annotates it
/// `readOnlyHint: true`, or the user trusts it: the whole server ([`trust`](Self::trust), `"trust":
/// true` in `mcp.json`) or the tool ([`trust_tools`](Self::trust_tools), `"autoApprove": [...]`).
/// The most specific setting wins: [`require_approval`](Self::require_approval) for one tool, then
/// the trusted tools, then the trusted server, then
/// [`require_approval_for_all`](Self::require_approval_for_all), then the annotation.
///
/// ```
/// use agentry::mcp::McpToolOptions;
/// use serde_json::json;
/// let options = McpToolOptions::new()
///     .group("files")
///     .disable(["write_file"])
///     .preset("read_text_file", "head", json!(100))
///     .require_approval("move_file", true)
///     .prefix("fs__");
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct McpToolOptions {
    group: Option<String>,
    enable: Option<BTreeSet<String>>,
    disable: BTreeSet<String>,
    presets: BTreeMap<String, Map<String, Value>>,
    approval: BTreeMap<String, Approval>,
    /// `None`: by the tools' annotations.
    default_require: Option<bool>,
    default_auto: bool,
    trust: bool,
    trusted: BTreeSet<String>,
    prefix: String,
    timeout: Duration,
    max_timeout: Duration,
    namesake: NamesakeStrategy,
}

impl Default for McpToolOptions {
    fn default() -> Self {
        McpToolOptions {
            group: None,
            enable: None,
            disable: BTreeSet::new(),
            presets: BTreeMap::new(),
            approval: BTreeMap::new(),
            default_require: None,
            default_auto: false,
            trust: false,
            trusted: BTreeSet::new(),
            prefix: String::new(),
            timeout: MCP_DEFAULT_TIMEOUT,
            max_timeout: MCP_MAX_TIMEOUT,
            namesake: NamesakeStrategy::Raise,
        }
    }
}

impl McpToolOptions {
    /// Every tool, in `basic`, unprefixed, approval unless annotated read-only, 60 s renewable
    /// timeout, 10 min at most.
    pub fn new() -> Self {
        McpToolOptions::default()
    }

    /// [`new`](Self::new) with the trust the server's configuration gives
    /// ([`McpServerConfig::trust`], [`McpServerConfig::auto_approve`]).
    pub fn for_server(config: &McpServerConfig) -> Self {
        McpToolOptions::new()
            .trust(config.trust)
            .trust_tools(config.auto_approve.iter().cloned())
    }

    /// Puts the tools in this group (which must exist).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Registers only these tools (server names).
    pub fn enable<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.enable = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Leaves these tools out (server names).
    pub fn disable<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.disable.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Fixes an argument of one tool (hidden from the model, always sent).
    pub fn preset(mut self, tool: impl Into<String>, arg: impl Into<String>, value: Value) -> Self {
        self.presets
            .entry(tool.into())
            .or_default()
            .insert(arg.into(), value);
        self
    }

    /// Whether one tool's calls must be approved (overrides every other approval setting).
    pub fn require_approval(mut self, tool: impl Into<String>, required: bool) -> Self {
        self.approval.entry(tool.into()).or_default().require = Some(required);
        self
    }

    /// Whether one tool may be approved automatically (with the agent's `auto_approve_tools`).
    pub fn auto_approve(mut self, tool: impl Into<String>, auto: bool) -> Self {
        self.approval.entry(tool.into()).or_default().auto = Some(auto);
        self
    }

    /// Approval for every tool not configured one by one, whatever the annotations say.
    pub fn require_approval_for_all(mut self, required: bool, auto: bool) -> Self {
        self.default_require = Some(required);
        self.default_auto = auto;
        self
    }

    /// Trusts the whole server: its tools run without approval (`"trust": true` in `mcp.json`).
    pub fn trust(mut self, trusted: bool) -> Self {
        self.trust = trusted;
        self
    }

    /// Trusts these tools (server names): they run without approval (`"autoApprove": [...]` in
    /// `mcp.json`).
    pub fn trust_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.trusted.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Whether a call of `tool` must be approved, and whether it may be approved automatically.
    fn approval_of(&self, tool: &McpToolInfo) -> (bool, bool) {
        let own = self.approval.get(&tool.name).copied().unwrap_or_default();
        let trusted = (self.trusted.contains(&tool.name) || self.trust).then_some(false);
        let require = own
            .require
            .or(trusted)
            .or(self.default_require)
            .unwrap_or(!tool.read_only);
        (require, own.auto.unwrap_or(self.default_auto))
    }

    /// Registers the tools as `{prefix}{name}`, to keep servers' names apart.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Execution timeout, renewed by each progress notification (default 60 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The hard limit, whatever progress says (default 10 min).
    pub fn max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout = timeout;
        self
    }

    /// What to do when a name is taken (default: refuse).
    pub fn namesake(mut self, strategy: NamesakeStrategy) -> Self {
        self.namesake = strategy;
        self
    }

    fn check(&self, available: &[McpToolInfo], server: &str) -> Result<(), McpError> {
        if let Some(enable) = &self.enable
            && let Some(both) = enable.intersection(&self.disable).next()
        {
            return Err(McpError::Config(format!(
                "tool {both:?} of {server:?} is both enabled and disabled"
            )));
        }
        let names: BTreeSet<&str> = available.iter().map(|t| t.name.as_str()).collect();
        let named = self
            .enable
            .iter()
            .flatten()
            .chain(&self.disable)
            .chain(self.presets.keys())
            .chain(self.approval.keys())
            .chain(&self.trusted);
        for name in named {
            if !names.contains(name.as_str()) {
                return Err(McpError::Config(format!(
                    "{server:?} has no tool {name:?}; it offers: {}",
                    names.iter().copied().collect::<Vec<_>>().join(", ")
                )));
            }
        }
        Ok(())
    }

    fn selected(&self, tool: &str) -> bool {
        self.enable.as_ref().is_none_or(|e| e.contains(tool)) && !self.disable.contains(tool)
    }
}

/// The name an MCP tool gets in the toolkit: `prefix` + its name, made into a name models accept
/// (`[a-zA-Z0-9_-]`, at most 64 characters).
///
/// ```
/// assert_eq!(agentry::mcp::mcp_tool_name("fs__", "read.file"), "fs__read_file");
/// ```
pub fn mcp_tool_name(prefix: &str, tool: &str) -> String {
    let name: String = format!("{prefix}{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() { "_".to_owned() } else { name }
}

fn source_of(client: &McpClient) -> String {
    format!("mcp:{}", client.name())
}

impl Toolkit {
    /// Registers the tools of an MCP server; returns the names they got. They are called like
    /// local tools: validated, approved, cancelled and timed out the same way. When the server
    /// says its tool list changed, the registration is refreshed.
    pub async fn register_mcp_client(
        &self,
        client: &McpClient,
        options: McpToolOptions,
    ) -> Result<Vec<String>, McpError> {
        let tools = client.list_tools().await?;
        self.register_mcp_tools(client, &tools, options).await
    }

    /// [`register_mcp_client`](Self::register_mcp_client) with the tools the caller already
    /// listed (`client.list_tools()`), saving the server a second `tools/list`. Async like it
    /// because it starts the task that follows the server's tool list.
    pub async fn register_mcp_tools(
        &self,
        client: &McpClient,
        tools: &[McpToolInfo],
        options: McpToolOptions,
    ) -> Result<Vec<String>, McpError> {
        options.check(tools, client.name())?;
        let names = self.install_mcp_tools(client, tools, &options)?;
        self.watch_mcp_client(client, options);
        Ok(names)
    }

    /// Puts the server's selected tools in the toolkit, replacing the ones it had (in one step).
    fn install_mcp_tools(
        &self,
        client: &McpClient,
        tools: &[McpToolInfo],
        options: &McpToolOptions,
    ) -> Result<Vec<String>, McpError> {
        let source = source_of(client);
        let mut entries: Vec<(Arc<dyn Tool>, ToolOptions)> = Vec::new();
        for info in tools.iter().filter(|t| options.selected(&t.name)) {
            let (require, auto) = options.approval_of(info);
            let mut tool_options = ToolOptions::new()
                .name(mcp_tool_name(&options.prefix, &info.name))
                .namesake(options.namesake)
                .require_approval(require)
                .auto_approve(auto)
                .timeout(options.timeout)
                .progress_extends_timeout(options.max_timeout)
                .source(source.clone());
            if let Some(group) = &options.group {
                tool_options = tool_options.group(group.clone());
            }
            for (arg, value) in options.presets.get(&info.name).into_iter().flatten() {
                tool_options = tool_options.preset(arg.clone(), value.clone());
            }
            let tool: Arc<dyn Tool> = Arc::new(McpTool {
                client: client.clone(),
                info: info.clone(),
            });
            entries.push((tool, tool_options));
        }
        self.replace_source(&source, entries)
            .map_err(|e| McpError::Config(format!("cannot register the tools of {:?}: {e}", client.name())))
    }

    /// Refreshes the registration whenever the server announces a new tool list.
    fn watch_mcp_client(&self, client: &McpClient, options: McpToolOptions) {
        let mut changed = client.tools_changed();
        let toolkit = self.clone();
        let watched = client.clone();
        let task = tokio::spawn(async move {
            while changed.changed().await.is_ok() {
                match watched.list_tools().await {
                    Ok(tools) => {
                        if let Err(e) = toolkit.install_mcp_tools(&watched, &tools, &options) {
                            tracing::warn!(mcp = %watched.name(), error = %e, "refreshing the MCP tools failed");
                        } else {
                            tracing::info!(mcp = %watched.name(), tools = tools.len(), "MCP tool list refreshed");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(mcp = %watched.name(), error = %e, "listing the MCP tools failed")
                    }
                }
            }
        });
        self.set_watcher(source_of(client), task.abort_handle());
    }

    /// Removes an MCP server's tools (and stops following its tool list); returns how many.
    pub fn remove_mcp_client(&self, name: &str) -> usize {
        let source = format!("mcp:{name}");
        self.stop_watcher(&source);
        self.remove_source(&source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, read_only: bool) -> McpToolInfo {
        McpToolInfo {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            read_only,
            task_support: Default::default(),
        }
    }

    #[test]
    fn mcp_tools_need_approval_unless_read_only_or_trusted() {
        let (write, read) = (info("write_file", false), info("read_file", true));
        let default = McpToolOptions::new();
        assert_eq!(default.approval_of(&write), (true, false), "approval by default");
        assert_eq!(
            default.approval_of(&read),
            (false, false),
            "readOnlyHint skips it"
        );
        let listed = McpToolOptions::new().trust_tools(["write_file"]);
        assert_eq!(listed.approval_of(&write), (false, false), "autoApprove skips it");
        let server = McpToolOptions::new().trust(true);
        assert_eq!(server.approval_of(&write), (false, false), "a trusted server");
        // The most specific setting wins.
        let own = McpToolOptions::new()
            .trust(true)
            .require_approval("write_file", true);
        assert_eq!(own.approval_of(&write), (true, false));
        let all = McpToolOptions::new().require_approval_for_all(true, true);
        assert_eq!(
            all.approval_of(&read),
            (true, true),
            "for all, whatever the annotation"
        );
        let auto_only = McpToolOptions::new().auto_approve("write_file", true);
        assert_eq!(
            auto_only.approval_of(&write),
            (true, true),
            "auto alone keeps approval"
        );
        // The configuration's trust reaches the options.
        let mut config = McpServerConfig::stdio("fs", "x", Vec::<String>::new());
        config.auto_approve.insert("write_file".into());
        assert_eq!(
            McpToolOptions::for_server(&config).approval_of(&write),
            (false, false)
        );
        assert!(
            McpToolOptions::new()
                .trust_tools(["nope"])
                .check(&[write], "s")
                .is_err(),
            "a trusted tool must exist"
        );
    }

    #[test]
    fn model_names_are_sanitized_and_prefixed() {
        assert_eq!(mcp_tool_name("fs__", "read_text_file"), "fs__read_text_file");
        assert_eq!(mcp_tool_name("", "get.sum v2"), "get_sum_v2");
        assert_eq!(mcp_tool_name("", &"x".repeat(80)).len(), 64);
    }

    #[test]
    fn options_name_real_tools_only() {
        let tools = vec![info("echo", false)];
        assert!(McpToolOptions::new().enable(["echo"]).check(&tools, "s").is_ok());
        let err = McpToolOptions::new()
            .disable(["nope"])
            .check(&tools, "s")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("has no tool \"nope\"") && err.contains("echo"),
            "{err}"
        );
        let err = McpToolOptions::new()
            .enable(["echo"])
            .disable(["echo"])
            .check(&tools, "s")
            .unwrap_err();
        assert!(err.to_string().contains("both enabled and disabled"));
    }
}
