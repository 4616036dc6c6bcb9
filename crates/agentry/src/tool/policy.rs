//! A tool's call policy, set at registration: approval, the pre-approval check, timeouts.

use std::panic::AssertUnwindSafe;
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
    /// The result depends only on the arguments, and the call changes nothing (a calculator):
    /// a call repeated within a reply may be answered with the earlier result.
    pub pure: bool,
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
            .field("pure", &self.pure)
            .finish()
    }
}

impl CallPolicy {
    /// The request to show the user for a call of `tool` with `args`: the tool's own
    /// ([`CallPolicy::request`]), or the generic one when it has none, or its function fails or
    /// panics (A6).
    pub fn approval_request(&self, tool: &str, args: &Map<String, Value>) -> ApprovalRequest {
        let Some(build) = &self.request else {
            return ApprovalRequest::generic(tool, args);
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| build(args))) {
            Ok(Ok(request)) => request,
            Ok(Err(e)) => {
                tracing::warn!(tool, error = %e, "the approval request function failed; asking generically");
                ApprovalRequest::generic(tool, args)
            }
            Err(_) => {
                tracing::warn!(tool, "the approval request function panicked; asking generically");
                ApprovalRequest::generic(tool, args)
            }
        }
    }
}

/// The key of a session grant: the tool, and the canonical arguments unless the scope is
/// [`SessionApprovalScope::AnyArguments`].
pub(crate) fn grant_key(tool: &str, args: &Map<String, Value>, scope: SessionApprovalScope) -> String {
    match scope {
        SessionApprovalScope::SameArguments => {
            let mut key = format!("{tool}\u{0}");
            canonical_json(&mut key, &Value::Object(args.clone()));
            key
        }
        SessionApprovalScope::AnyArguments => tool.to_owned(),
    }
}

/// `value` as JSON with every object's keys sorted, whatever order the map keeps (serde_json
/// keeps insertion order when any crate of the build enables its `preserve_order`), so that
/// the same arguments always give the same key (A12).
fn canonical_json(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(out, value);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(out, item);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A12: the key is the same text serde_json writes for a key-sorted object, nested too, so
    /// keys stored by earlier versions still match.
    #[test]
    fn a12_the_grant_key_is_canonical_json_with_sorted_keys() {
        let args = json!({"b": [{"z": 1, "a": null}], "a": "x\u{0}y"});
        let key = grant_key(
            "t",
            args.as_object().unwrap(),
            SessionApprovalScope::SameArguments,
        );
        assert_eq!(key, "t\u{0}{\"a\":\"x\\u0000y\",\"b\":[{\"a\":null,\"z\":1}]}");
        assert_eq!(key, format!("t\u{0}{args}"), "as serde_json writes a sorted map");
    }
}
