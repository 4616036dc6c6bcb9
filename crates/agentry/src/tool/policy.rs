//! A tool's call policy, set at registration: approval, the pre-approval check, timeouts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::approval::{ApprovalRequest, SessionApprovalScope};

/// Builds the approval request from the call's arguments; must be free of side effects (A19).
pub type RequestFn = Arc<dyn Fn(&Map<String, Value>) -> Result<ApprovalRequest, String> + Send + Sync>;
/// Builds the model-visible text of a declined call from its arguments and the user's reason.
pub type DeclinedFn = Arc<dyn Fn(&Map<String, Value>, Option<&str>) -> String + Send + Sync>;

/// Refuses a call before approval is asked, with the reason the model reads (e.g. a path outside
/// the allowed directory); must be free of side effects.
pub type CheckFn = Arc<dyn Fn(&Map<String, Value>) -> Result<(), String> + Send + Sync>;

/// A tool's approval and timeout settings, set at registration.
#[derive(Clone, Default)]
pub struct CallPolicy {
    /// The call must be approved before it runs (A1).
    pub require_approval: bool,
    /// The call may be approved automatically when the agent allows it too (A4).
    pub auto_approve: bool,
    /// Builds the request shown to the user (A5); a generic one is used otherwise.
    pub request: Option<RequestFn>,
    /// Builds the model-visible text of a decline (A10); `DECLINED` otherwise.
    pub declined_message: Option<DeclinedFn>,
    /// How session grants match (A12).
    pub session_scope: SessionApprovalScope,
    /// Execution timeout (T1); none by default for local tools.
    pub timeout: Option<Duration>,
    /// When set, progress reports renew `timeout`, up to this hard limit (T4).
    pub progress_extends_timeout: Option<Duration>,
    /// Refuses calls that could never run, before anyone is asked to approve them.
    pub check: Option<CheckFn>,
    /// The argument a permission rule's bare pattern matches (A20), e.g. `path` for a file tool.
    pub rule_subject: Option<String>,
}

impl std::fmt::Debug for CallPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallPolicy")
            .field("require_approval", &self.require_approval)
            .field("auto_approve", &self.auto_approve)
            .field("request", &self.request.is_some())
            .field("declined_message", &self.declined_message.is_some())
            .field("session_scope", &self.session_scope)
            .field("timeout", &self.timeout)
            .field("progress_extends_timeout", &self.progress_extends_timeout)
            .field("check", &self.check.is_some())
            .field("rule_subject", &self.rule_subject)
            .finish()
    }
}

/// The key of a session grant: the tool, and the canonical arguments unless the scope is
/// [`SessionApprovalScope::AnyArguments`].
pub(crate) fn grant_key(tool: &str, args: &Map<String, Value>, scope: SessionApprovalScope) -> String {
    match scope {
        // serde_json's map is ordered by key, so this text is canonical.
        SessionApprovalScope::SameArguments => format!("{tool}\u{0}{}", Value::Object(args.clone())),
        SessionApprovalScope::AnyArguments => tool.to_owned(),
    }
}
