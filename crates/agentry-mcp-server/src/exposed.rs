//! The agent's own tools as MCP tools (`--expose-tools`): each call checked, approved and run
//! as the agent would, with the client's cancel reaching the tool's `on_cancel`.

use std::sync::Arc;

use agentry::CallId;
use agentry::message::ToolUseBlock;
use agentry::tool::{
    ApprovalDecision, DEFAULT_ON_CANCEL_BUDGET, PermissionRules, RuleEffect, ToolContext, ToolResponse,
    Toolkit, declined_text,
};
use futures::StreamExt;
use rmcp::model::{CallToolResult, ContentBlock as Content, JsonObject, Tool};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use crate::approval::Approver;
use crate::progress::Progress;

/// The tools of a toolkit, offered as they are, under the agent's permission rules.
pub(crate) struct ExposedTools {
    toolkit: Toolkit,
    permissions: PermissionRules,
}

impl ExposedTools {
    pub(crate) fn new(toolkit: Toolkit, permissions: PermissionRules) -> Self {
        Self { toolkit, permissions }
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.toolkit.json_schemas().iter().any(|tool| tool.name == name)
    }

    /// The tools offered now (an inactive group's are not).
    pub(crate) fn listed(&self) -> Vec<Tool> {
        self.toolkit
            .json_schemas()
            .iter()
            .map(|tool| {
                let schema = match &tool.parameters {
                    Value::Object(map) => map.clone(),
                    _ => JsonObject::new(),
                };
                Tool::new(tool.name.clone(), tool.description.clone(), Arc::new(schema))
            })
            .collect()
    }

    /// Runs one call: refused when the toolkit refuses it, declined by a deny rule or by the
    /// client (or for want of a client who can be asked), else run until it ends or the client
    /// cancels it.
    pub(crate) async fn call(
        &self,
        name: &str,
        args: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = ToolUseBlock {
            id: CallId::new(format!("mcp-{}", context.id)),
            name: name.to_owned(),
            input: Value::Object(args.clone()),
            raw_input: None,
        };
        let prepared = match self.toolkit.prepare(&call) {
            Ok(prepared) => prepared,
            Err(refused) => return Ok(result_of(&refused)),
        };
        let policy = prepared.policy().clone();
        let verdict = self
            .permissions
            .verdict(name, policy.rule_subject.as_deref(), &args);
        if let Some(rule) = verdict.as_ref().filter(|v| v.effect == RuleEffect::Deny) {
            let reason = format!("a permission rule forbids it ({})", rule.rule);
            return Ok(declined(&reason));
        }
        let allowed = verdict.is_some_and(|v| v.effect == RuleEffect::Allow);
        if policy.require_approval && !allowed {
            let request = policy.approval_request(name, &args);
            let approver = Approver::of(&context.peer);
            let asked = approver.ask("agentry", name, &call.input, &request);
            let decision = tokio::select! {
                decision = asked => decision,
                // A cancelled request gets no response: nothing ran, nothing to hand back.
                () = context.ct.cancelled() => return Ok(declined("the client cancelled the call")),
            };
            if let ApprovalDecision::Decline { reason } = decision {
                return Ok(declined(reason.as_deref().unwrap_or("declined")));
            }
        }
        let ctx = ToolContext::new(call.id.clone(), name, context.ct.child_token());
        let mut stream = self.toolkit.run(prepared, &call, ctx.clone());
        let mut progress = Progress::of(&context);
        let mut last: Option<ToolResponse> = None;
        loop {
            tokio::select! {
                biased;
                () = context.ct.cancelled() => {
                    let text = on_cancel_text(&ctx).await;
                    progress.send_whole(&text).await;
                    return Ok(CallToolResult::error(vec![Content::text(text)]));
                }
                chunk = stream.next() => match chunk {
                    Some(chunk) if chunk.is_last => return Ok(result_of(&chunk)),
                    Some(chunk) => {
                        let text = chunk.text_content();
                        if last.as_ref().is_none_or(|l| l.text_content() != text) {
                            progress.send(&text).await;
                        }
                        last = Some(chunk);
                    }
                    None => return Ok(result_of(&last.unwrap_or_else(|| ToolResponse::text("")))),
                },
            }
        }
    }
}

/// What the cancelled tool hands back: its `on_cancel` text, run off the async threads within
/// the agent's default budget, else the standard cancelled text.
async fn on_cancel_text(ctx: &ToolContext) -> String {
    let fallback = agentry::tool::CANCELLED_RUNNING.to_owned();
    let Some(on_cancel) = ctx.take_on_cancel() else {
        return fallback;
    };
    let ran = tokio::task::spawn_blocking(on_cancel);
    match tokio::time::timeout(DEFAULT_ON_CANCEL_BUDGET, ran).await {
        Ok(Ok(Some(text))) => text,
        _ => fallback,
    }
}

fn declined(reason: &str) -> CallToolResult {
    CallToolResult::error(vec![Content::text(declined_text(Some(reason)))])
}

fn result_of(response: &ToolResponse) -> CallToolResult {
    let content = vec![Content::text(response.text_content())];
    match response.is_error {
        true => CallToolResult::error(content),
        false => CallToolResult::success(content),
    }
}
