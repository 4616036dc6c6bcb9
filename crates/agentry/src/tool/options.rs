//! How a tool is registered (`ToolOptions`), the groups it joins, and why the toolkit refuses.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::approval::{ApprovalRequest, SessionApprovalScope};
use super::policy::CallPolicy;
use super::response::ToolResponse;
use crate::message::ToolUseBlock;

/// The group every tool joins unless told otherwise; it is always active.
pub const BASIC_GROUP: &str = "basic";

/// What to do when a tool is registered under a name that is taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NamesakeStrategy {
    /// Refuse with [`ToolkitError::NameTaken`].
    #[default]
    Raise,
    /// Keep the existing tool and ignore the new one.
    Skip,
    /// Replace the existing tool.
    Override,
    /// Register the new tool as `name_xxxxx` (five random characters).
    Rename,
}

/// A function applied to every chunk of a tool's result, e.g. to trim or redact output.
pub type Postprocess = Arc<dyn Fn(&ToolUseBlock, ToolResponse) -> ToolResponse + Send + Sync>;

/// How a tool is registered.
///
/// ```
/// use agentry::tool::{NamesakeStrategy, ToolOptions};
/// use serde_json::json;
/// let options = ToolOptions::new()
///     .group("web")
///     .preset("api_key", json!("secret"))
///     .namesake(NamesakeStrategy::Rename);
/// # let _ = options;
/// ```
#[derive(Clone, Default)]
pub struct ToolOptions {
    pub(super) group: Option<String>,
    pub(super) name: Option<String>,
    pub(super) description: Option<String>,
    pub(super) preset_args: Map<String, Value>,
    pub(super) namesake: NamesakeStrategy,
    pub(super) postprocess: Option<Postprocess>,
    pub(super) policy: CallPolicy,
    pub(super) source: Option<String>,
}

impl ToolOptions {
    /// Defaults: group `basic`, the tool's own name and description, no presets, `Raise`.
    pub fn new() -> Self {
        ToolOptions::default()
    }

    /// Puts the tool in this group (which must exist).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Registers the tool under another name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Replaces the tool's description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Fixes an argument: it disappears from the schema the model sees, is always passed to the
    /// tool, and a model that tries to set it gets an error result.
    pub fn preset(mut self, name: impl Into<String>, value: Value) -> Self {
        self.preset_args.insert(name.into(), value);
        self
    }

    /// What to do if the name is taken.
    pub fn namesake(mut self, strategy: NamesakeStrategy) -> Self {
        self.namesake = strategy;
        self
    }

    /// Every call must be approved by the user before it runs (spec A1).
    pub fn require_approval(mut self, required: bool) -> Self {
        self.policy.require_approval = required;
        self
    }

    /// Calls may be approved automatically when the agent's `auto_approve_tools` is on too (A4).
    pub fn auto_approve(mut self, auto: bool) -> Self {
        self.policy.auto_approve = auto;
        self
    }

    /// Builds the request shown to the user from the call's arguments (A5). It must be free of
    /// side effects (A19); when it fails, a generic request is shown instead (A6).
    pub fn approval_request(
        mut self,
        f: impl Fn(&Map<String, Value>) -> Result<ApprovalRequest, String> + Send + Sync + 'static,
    ) -> Self {
        self.policy.request = Some(Arc::new(f));
        self
    }

    /// Builds what the model reads when the user declines a call (A10).
    pub fn declined_message(
        mut self,
        f: impl Fn(&Map<String, Value>, Option<&str>) -> String + Send + Sync + 'static,
    ) -> Self {
        self.policy.declined_message = Some(Arc::new(f));
        self
    }

    /// The argument that a permission rule's bare pattern matches (A20): with `path`,
    /// `--allow write_file:notes/**` allows the calls whose `path` is under `notes/`. Without
    /// one, rules name the argument (`TOOL:ARG=GLOB`).
    pub fn rule_subject(mut self, argument: impl Into<String>) -> Self {
        self.policy.rule_subject = Some(argument.into());
        self
    }

    /// Declares the tool pure: its result depends only on its arguments and a call changes
    /// nothing (a calculator; not a file read, whose file may change, nor the time). A pure
    /// call repeated in a reply may be answered with its earlier result
    /// ([`ReActAgentBuilder::answer_repeated_calls`](crate::agent::ReActAgentBuilder::answer_repeated_calls)).
    pub fn pure(mut self, pure: bool) -> Self {
        self.policy.pure = pure;
        self
    }

    /// How "for this session" decisions match later calls (A12; default: same arguments).
    pub fn session_scope(mut self, scope: SessionApprovalScope) -> Self {
        self.policy.session_scope = scope;
        self
    }

    /// Stops a call that runs longer than this (T1, T2); time spent waiting for approval does
    /// not count (A18).
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.policy.timeout = Some(timeout);
        self
    }

    /// Refuses calls before approval is asked: `f` gets the validated arguments (with presets)
    /// and returns the reason the model reads. Use it for checks a JSON schema cannot express,
    /// such as a path outside the allowed directory. Must be free of side effects.
    ///
    /// ```
    /// use agentry::tool::ToolOptions;
    /// let options = ToolOptions::new().require_approval(true).check(|args| {
    ///     match args.get("path").and_then(|p| p.as_str()) {
    ///         Some(p) if p.starts_with('/') => Err(format!("{p:?} is outside the working directory")),
    ///         _ => Ok(()),
    ///     }
    /// });
    /// # let _ = options;
    /// ```
    pub fn check(
        mut self,
        f: impl Fn(&Map<String, Value>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.policy.check = Some(Arc::new(f));
        self
    }

    /// Lets progress reports renew the timeout, up to `max` in all (T4).
    pub fn progress_extends_timeout(mut self, max: std::time::Duration) -> Self {
        self.policy.progress_extends_timeout = Some(max);
        self
    }

    /// Where the tool comes from (e.g. `mcp:server`), so all of a source's tools can go at once.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn source(mut self, source: String) -> Self {
        self.source = Some(source);
        self
    }

    /// A function applied to every chunk of the tool's result.
    pub fn postprocess(
        mut self,
        f: impl Fn(&ToolUseBlock, ToolResponse) -> ToolResponse + Send + Sync + 'static,
    ) -> Self {
        self.postprocess = Some(Arc::new(f));
        self
    }
}

/// Why a toolkit operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolkitError {
    /// The tool name is taken and the strategy is [`NamesakeStrategy::Raise`].
    #[error("a tool named {0:?} is already registered")]
    NameTaken(String),
    /// The group does not exist.
    #[error("there is no tool group named {0:?}")]
    UnknownGroup(String),
    /// The group exists already.
    #[error("a tool group named {0:?} already exists")]
    GroupExists(String),
    /// The `basic` group cannot be created, removed or deactivated.
    #[error("the {BASIC_GROUP:?} group is built in and always active")]
    BasicGroup,
    /// The tool's schema is not usable.
    #[error("the parameters schema of tool {tool:?} is invalid: {reason}")]
    InvalidSchema {
        /// Tool name.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// No tool has this name.
    #[error("there is no tool named {0:?}")]
    UnknownTool(String),
    /// A tool name that models cannot call.
    #[error("invalid tool name {0:?}: use 1-64 characters among a-z, A-Z, 0-9, '_' and '-'")]
    InvalidName(String),
}

/// A named set of tools the model can switch on and off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolGroup {
    /// Group name.
    pub name: String,
    /// What the group is for (shown to the model in the meta tool's schema).
    pub description: String,
    /// Whether its tools are offered to the model.
    pub active: bool,
    /// Instructions shown to the model when the group is activated.
    pub notes: Option<String>,
}
