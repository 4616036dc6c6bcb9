//! Tools: what the model can call.
//!
//! Every tool, local or remote, is a [`Tool`]: a name, a description, a JSON schema for its
//! arguments, and a `call` that returns a stream of **cumulative** [`ToolResponse`] chunks
//! (each chunk is the whole result so far; the one with `is_last` is the result). Sync, async
//! and streaming functions all become that one stream.
//!
//! The easiest way to write a tool is the [`tool`](crate::tool::tool) attribute on a plain
//! function: its doc comment becomes the description, its parameters the schema.
//!
//! ```
//! use agentry::tool::{tool, Toolkit};
//!
//! /// Add two integers.
//! ///
//! /// # Arguments
//! /// * `a` - the first addend
//! /// * `b` - the second addend
//! #[tool]
//! async fn add(a: i64, b: i64) -> i64 {
//!     a + b
//! }
//!
//! let toolkit = Toolkit::new();
//! toolkit.register(AddTool).unwrap();
//! assert_eq!(toolkit.json_schemas()[0].name, "add");
//! ```
//!
//! Register tools in a [`Toolkit`]; it validates arguments against the schema, applies preset
//! arguments, manages tool groups, and turns every failure into a result the model can read.

mod approval;
mod call;
mod context;
mod extensions;
mod function;
mod meta;
mod options;
mod permissions;
mod policy;
mod process;
mod registry;
mod response;
mod runner;
pub(crate) mod schema;
mod toolkit;

#[cfg(feature = "macros")]
pub use agentry_macros::tool;
pub use approval::{ApprovalDecision, ApprovalRequest, DecisionSource, SessionApprovalScope, UserAction};
pub use call::OnCancel;
pub use call::{
    CANCELLED_BEFORE_START, CANCELLED_RUNNING, CancelCause, CancelOutcome, CancelPhase, CancelReason,
    DECLINED, INTERRUPTED_RESTART, ToolCallState, declined_text, timed_out_text,
};
pub(crate) use call::{CallRecord, CancelCommit};
pub(crate) use context::{AskFn, Asker, ProgressFn, UsageFn};
pub use context::{
    DEFAULT_CANCEL_GRACE, DEFAULT_ON_CANCEL_BUDGET, InputQuestion, NestedApproval, ToolContext,
};
pub use extensions::Extensions;
pub use function::{FunctionTool, IntoToolChunk, IntoToolOutput, once, parse_args, streaming};
pub use meta::META_TOOL_NAME;
pub use options::{BASIC_GROUP, NamesakeStrategy, Postprocess, ToolGroup, ToolOptions, ToolkitError};
pub use permissions::{PermissionRule, PermissionRules, RuleEffect, RuleError, RuleMatch};
pub(crate) use policy::grant_key;
pub use policy::{CallPolicy, CheckFn, DeclinedFn, RequestFn};
pub use process::{ToolProcess, spawn_process};
pub use response::ToolResponse;
pub use schema::schema_for;
/// Re-exported so callers can build a [`ToolContext`] without depending on tokio-util.
pub use tokio_util::sync::CancellationToken;
pub use toolkit::{PreparedCall, Toolkit};

use std::sync::Arc;

use futures::stream::BoxStream;
use serde_json::{Map, Value};

/// The stream a tool call returns: cumulative chunks, or an error.
///
/// An error ends the call; the toolkit turns it into an error result that keeps the content of
/// the chunks streamed before it.
pub type ToolStream = BoxStream<'static, Result<ToolResponse, ToolError>>;

/// A tool's failure, shown to the model as the result of the call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The arguments did not fit the tool.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
}

impl ToolError {
    /// A [`ToolError::Failed`] with this message.
    pub fn msg(message: impl std::fmt::Display) -> Self {
        ToolError::Failed(message.to_string())
    }
}

/// Something the model can call.
///
/// Implement it directly for tools with state or dynamic schemas (an MCP tool, a tool built
/// from configuration); use [`tool`](crate::tool::tool) or [`FunctionTool`] otherwise.
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls the tool by.
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// JSON schema of the arguments object (`{"type": "object", "properties": ...}`).
    fn parameters(&self) -> Value;
    /// Runs the tool. `args` were validated against [`Tool::parameters`] and include preset
    /// arguments. The stream is driven on its own task; `ctx` tells whether the call was
    /// cancelled.
    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream;
}

/// A shared tool is a tool: one tool object can be registered in several toolkits.
impl<T: Tool + ?Sized> Tool for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn description(&self) -> &str {
        (**self).description()
    }

    fn parameters(&self) -> Value {
        (**self).parameters()
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        Arc::clone(&*self).call(args, ctx)
    }
}
