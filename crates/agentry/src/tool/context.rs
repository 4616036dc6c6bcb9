//! The per-call execution context.

use std::sync::Arc;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// What a running tool call can know about itself.
///
/// Each call gets its own context with its own cancellation token (a child of the reply's
/// token), so cancelling one call never touches another, even of the same tool.
///
/// ```
/// use agentry::tool::ToolContext;
/// use tokio_util::sync::CancellationToken;
///
/// let ctx = ToolContext::new("call_1", "search", CancellationToken::new());
/// assert!(!ctx.is_cancelled());
/// ctx.cancellation_token().cancel();
/// assert!(ctx.is_cancelled());
/// ```
#[derive(Clone, Debug)]
pub struct ToolContext {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    call_id: String,
    tool_name: String,
    token: CancellationToken,
}

impl ToolContext {
    /// A context for one call. The agent creates these; tests and custom drivers may too.
    pub fn new(call_id: impl Into<String>, tool_name: impl Into<String>, token: CancellationToken) -> Self {
        ToolContext {
            inner: Arc::new(Inner {
                call_id: call_id.into(),
                tool_name: tool_name.into(),
                token,
            }),
        }
    }

    /// The id of the call being executed.
    pub fn call_id(&self) -> &str {
        &self.inner.call_id
    }

    /// The name the tool was called by.
    pub fn tool_name(&self) -> &str {
        &self.inner.tool_name
    }

    /// Whether this call was cancelled. Once true, it stays true.
    pub fn is_cancelled(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Resolves when this call is cancelled; use it in `tokio::select!`.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.token.cancelled()
    }

    /// The call's cancellation token, to hand to code that takes one.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.inner.token
    }
}
