//! What an MCP server asks of agentry while it serves a call: the agent's model
//! (`sampling/createMessage`, under the server's [`SamplingPolicy`]), the user's input
//! (`elicitation/create`, a form), and the roots (the directories it may work in).
//!
//! A server's request names no call, so it is taken as part of the call of that server running
//! now (the latest when several run): that call's user is the one asked to approve it, and its
//! reply pays for the tokens.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use rmcp::ErrorData;
use serde_json::{Value, json};

use super::config::SamplingPolicy;
use crate::message::{Msg, Role};
use crate::model::{ChatModel, ChatRequest};
use crate::protocol::InputAnswer;
use crate::tool::{ApprovalDecision, ApprovalRequest, InputQuestion, NestedApproval, ToolContext};

/// The code of a refused sampling request (as the MCP SDKs answer "User rejected sampling
/// request").
const REJECTED: i32 = -1;
/// Longest text of the request shown in the approval question.
const SHOWN_CHARS: usize = 2_000;

/// The calls of one server running now, whose contexts its requests are asked through.
#[derive(Default)]
pub(crate) struct InFlight {
    calls: Mutex<Vec<(u64, ToolContext)>>,
    next: AtomicU64,
}

impl InFlight {
    /// Counts `ctx`'s call as running until the guard drops.
    pub(crate) fn enter(self: &Arc<Self>, ctx: ToolContext) -> InFlightGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().push((id, ctx));
        InFlightGuard {
            owner: Arc::clone(self),
            id,
        }
    }

    /// The call started last among those running.
    pub(crate) fn latest(&self) -> Option<ToolContext> {
        self.lock().last().map(|(_, ctx)| ctx.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, ToolContext)>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running call; dropping it ends it.
pub(crate) struct InFlightGuard {
    owner: Arc<InFlight>,
    id: u64,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.owner.lock().retain(|(id, _)| *id != self.id);
    }
}

/// The roots to answer `roots/list` with: each directory as a `file://` URI.
pub(crate) fn roots(dirs: &[PathBuf]) -> Value {
    let roots: Vec<Value> = dirs
        .iter()
        .map(|dir| {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            json!({ "uri": format!("file://{}", dir.display()), "name": name })
        })
        .collect();
    json!({ "roots": roots })
}

/// Answers a sampling request (`params` as sent) with `model`, after asking the user when the
/// policy says so. The result as the protocol writes it.
pub(crate) async fn sample(
    server: &str,
    policy: SamplingPolicy,
    model: Option<Arc<dyn ChatModel>>,
    caller: Option<ToolContext>,
    params: Value,
) -> Result<Value, ErrorData> {
    let rejected = |why: &str| ErrorData::new(rmcp::model::ErrorCode(REJECTED), why.to_owned(), None);
    if policy == SamplingPolicy::Deny {
        return Err(rejected(
            "User rejected sampling request: sampling is off for this server",
        ));
    }
    let Some(model) = model else {
        return Err(rejected("no model to sample with"));
    };
    let request = chat_request(&params)?;
    if policy == SamplingPolicy::Ask {
        let Some(caller) = caller.as_ref() else {
            return Err(rejected("User rejected sampling request: nobody can be asked"));
        };
        let decision = caller.ask_approval(question(server, &params, &request)).await;
        if !matches!(
            decision,
            ApprovalDecision::Approve | ApprovalDecision::ApproveForSession
        ) {
            return Err(rejected("User rejected sampling request"));
        }
    }
    let mut stream = model.chat(request);
    let mut last = None;
    while let Some(response) = stream.next().await {
        last = Some(response.map_err(|e| ErrorData::internal_error(format!("the model failed: {e}"), None))?);
    }
    let response = last.ok_or_else(|| ErrorData::internal_error("the model gave no answer", None))?;
    if let (Some(caller), Some(usage)) = (caller.as_ref(), response.usage.as_ref()) {
        // The tokens count in the reply whose call the server serves.
        caller.report_usage(usage);
    }
    let text: String = response
        .content
        .iter()
        .filter_map(|b| match b {
            crate::message::ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let stop = match response.finish_reason.as_deref() {
        Some("length" | "max_tokens") => "maxTokens",
        _ => "endTurn",
    };
    Ok(json!({
        "role": "assistant",
        "content": { "type": "text", "text": text },
        "model": model.model_name(),
        "stopReason": stop,
    }))
}

/// Answers an elicitation request (`params` as sent): a form is asked of the user of the call
/// the server serves; a URL request, or one nobody can be asked, is declined or cancelled.
pub(crate) async fn elicit(server: &str, caller: Option<ToolContext>, params: Value) -> Value {
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        // Sending the user to a web page is not something agentry does for a server.
        return json!({ "action": "decline" });
    }
    let Some(caller) = caller else {
        return json!({ "action": "cancel" });
    };
    let schema = params
        .get("requestedSchema")
        .cloned()
        .unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
    let question = InputQuestion {
        id: format!("input-{}", uuid::Uuid::new_v4()),
        name: format!("{server}: input"),
        message: params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("The server asks for input.")
            .to_owned(),
        schema,
    };
    match caller.ask_input(question).await {
        InputAnswer::Accept(content) => json!({ "action": "accept", "content": content }),
        InputAnswer::Decline => json!({ "action": "decline" }),
        _ => json!({ "action": "cancel" }),
    }
}

/// The model request of a sampling request: its system prompt, its text messages, its limit.
fn chat_request(params: &Value) -> Result<ChatRequest, ErrorData> {
    let invalid = |why: &str| ErrorData::invalid_params(why.to_owned(), None);
    let mut messages = Vec::new();
    if let Some(system) = params.get("systemPrompt").and_then(Value::as_str) {
        messages.push(Msg::system(system));
    }
    for message in params
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("no messages"))?
    {
        let text = content_text(message.get("content"));
        match message.get("role").and_then(Value::as_str) {
            Some("user") => messages.push(Msg::user(text)),
            Some("assistant") => messages.push(Msg::new(
                "server",
                Role::Assistant,
                vec![crate::message::ContentBlock::text(text)],
            )),
            _ => return Err(invalid("a message's role must be user or assistant")),
        }
    }
    let max_tokens = params
        .get("maxTokens")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    Ok(ChatRequest {
        messages,
        tools: Arc::from(Vec::new()),
        tool_choice: None,
        max_tokens,
    })
}

/// The text of a sampling message's content (one block or several); other blocks are named.
fn content_text(content: Option<&Value>) -> String {
    let blocks: Vec<&Value> = match content {
        Some(Value::Array(blocks)) => blocks.iter().collect(),
        Some(block) => vec![block],
        None => Vec::new(),
    };
    blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            Some(other) => format!("[{other}]"),
            None => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The approval question of a sampling request.
fn question(server: &str, params: &Value, request: &ChatRequest) -> NestedApproval {
    let shown: String = request
        .messages
        .iter()
        .filter_map(|m| {
            let who = match m.role {
                Role::System => "system",
                Role::Assistant => "assistant",
                _ => "user",
            };
            m.text().map(|t| format!("{who}: {t}"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let shown: String = shown.chars().take(SHOWN_CHARS).collect();
    let mut approval = ApprovalRequest::generic("sampling", &serde_json::Map::new());
    approval.title = Some(format!("The MCP server `{server}` asks the model"));
    approval.message =
        format!("The MCP server `{server}` asks to use the agent's model (its tokens count in this reply).");
    approval.preview = Some(shown);
    NestedApproval {
        id: format!("sampling-{}", uuid::Uuid::new_v4()),
        name: format!("{server}: sampling"),
        input: json!({
            "systemPrompt": params.get("systemPrompt"),
            "maxTokens": params.get("maxTokens"),
            "messages": request.messages.len(),
        }),
        request: approval,
    }
}
