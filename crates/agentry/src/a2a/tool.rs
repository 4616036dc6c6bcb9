//! [`A2aAgent`]: a remote A2A agent as a tool.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::card::{self, Card};
use super::rpc::{Rpc, Update};
use crate::tool::{
    ApprovalDecision, ApprovalRequest, NestedApproval, Tool, ToolContext, ToolError, ToolResponse, ToolStream,
};

/// How long a cancelled call waits for the remote agent's answer to `CancelTask`: within the
/// agent's `on_cancel` budget (100 ms by default).
const CANCEL_WAIT: Duration = Duration::from_millis(80);
/// How long the card may take to come.
const CARD_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a remote agent could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum A2aError {
    /// The card is missing, unreadable, or offers nothing this client speaks.
    #[error("the agent card: {0}")]
    Card(String),
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(String),
    /// The remote agent answered with a JSON-RPC error.
    #[error("the remote agent answered error {code}: {message}")]
    Remote {
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// A header given is not a valid HTTP header.
    #[error("the header {0:?} is not valid")]
    Header(String),
}

/// A remote agent that speaks A2A v1.0, as a tool taking a `prompt`: each call is a new task
/// of the remote agent (see the [module](crate::a2a) documentation).
///
/// ```no_run
/// # async fn demo(toolkit: agentry::tool::Toolkit) -> Result<(), Box<dyn std::error::Error>> {
/// use agentry::a2a::A2aAgent;
///
/// let archive = A2aAgent::connect("archive", "http://127.0.0.1:9999", &Default::default()).await?;
/// toolkit.register(archive)?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct A2aAgent {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    description: String,
    card: Card,
    rpc: Rpc,
}

impl std::fmt::Debug for A2aAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aAgent")
            .field("name", &self.inner.name)
            .field("endpoint", &self.inner.card.endpoint)
            .finish()
    }
}

impl A2aAgent {
    /// Reads the card of the agent at `url` (its base URL, or the card's own URL) and makes it
    /// a tool named `name`; `headers` go with every request (an `Authorization`, say).
    ///
    /// # Errors
    /// When the card cannot be had or offers no JSON-RPC interface of A2A 1.x.
    pub async fn connect(
        name: impl Into<String>,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Result<Self, A2aError> {
        crate::install_crypto_provider();
        let mut header_map = HeaderMap::new();
        for (key, value) in headers {
            let name = HeaderName::try_from(key.as_str()).map_err(|_| A2aError::Header(key.clone()))?;
            let value = HeaderValue::try_from(value.as_str()).map_err(|_| A2aError::Header(key.clone()))?;
            header_map.insert(name, value);
        }
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| A2aError::Http(crate::error_chain(&e)))?;
        let card_url = card::card_url(url);
        let response = http
            .get(&card_url)
            .headers(header_map.clone())
            .timeout(CARD_TIMEOUT)
            .send()
            .await
            .map_err(|e| A2aError::Card(format!("{card_url}: {}", crate::error_chain(&e))))?;
        if !response.status().is_success() {
            return Err(A2aError::Card(format!("{card_url}: HTTP {}", response.status())));
        }
        let body = super::rpc::json_body(response)
            .await
            .map_err(|e| A2aError::Card(format!("{card_url}: not JSON: {e}")))?;
        let card = card::parse(&body)?;
        let mut description = match card.description.trim().is_empty() {
            true => format!("The remote agent `{}`", card.name),
            false => card.description.clone(),
        };
        if !card.skills.is_empty() {
            description.push_str(&format!(" Skills: {}.", card.skills.join(", ")));
        }
        description.push_str(" (A remote agent, over A2A: give it the whole task in the prompt.)");
        let rpc = Rpc {
            http,
            endpoint: card.endpoint.clone(),
            headers: header_map,
        };
        Ok(A2aAgent {
            inner: Arc::new(Inner {
                name: name.into(),
                description,
                card,
                rpc,
            }),
        })
    }

    /// The remote agent's name, from its card.
    pub fn agent_name(&self) -> &str {
        &self.inner.card.name
    }

    /// Where its JSON-RPC requests go.
    pub fn endpoint(&self) -> &str {
        &self.inner.card.endpoint
    }
}

impl Tool for A2aAgent {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn description(&self) -> &str {
        &self.inner.description
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "The task for the remote agent, with everything it needs"}
            },
            "required": ["prompt"]
        })
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        let Some(prompt) = args.get("prompt").and_then(Value::as_str).map(str::to_owned) else {
            let error = ToolError::InvalidArguments("`prompt` must be a string".into());
            return futures::stream::once(async move { Err(error) }).boxed();
        };
        let (tx, rx) = mpsc::channel(16);
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            let task = Arc::new(Mutex::new(Seen::default()));
            set_on_cancel(&inner, &ctx, &task);
            let outcome = tokio::select! {
                outcome = converse(&inner, &prompt, &ctx, &task) => outcome,
                () = ctx.cancelled() => return,
            };
            let _ = tx.send(outcome).await;
        });
        futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) },
        )
        .boxed()
    }
}

/// What the call has seen of its task, shared with its `on_cancel`.
#[derive(Default, Clone)]
struct Seen {
    task: Option<(String, String)>,
    answer: String,
    status: String,
}

/// On a cancel, the task is cancelled too, and what the remote agent says of it is the call's
/// partial result.
fn set_on_cancel(inner: &Arc<Inner>, ctx: &ToolContext, seen: &Arc<Mutex<Seen>>) {
    let (inner, seen) = (Arc::clone(inner), Arc::clone(seen));
    let runtime = tokio::runtime::Handle::current();
    ctx.set_on_cancel(move || {
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut text = format!("[cancelled] The remote agent `{}` was stopped.", inner.card.name);
        if let Some((id, _)) = &seen.task {
            let cancel = inner.rpc.call("CancelTask", json!({ "id": id }));
            // `on_cancel` runs on a blocking thread, where waiting on the runtime is allowed.
            match runtime.block_on(async { tokio::time::timeout(CANCEL_WAIT, cancel).await }) {
                Ok(Ok(task)) => {
                    let said = super::rpc::parts_text(task["status"]["message"].get("parts"));
                    if !said.is_empty() {
                        text.push_str(&format!(" It said: {said}"));
                    }
                }
                Ok(Err(e)) => text.push_str(&format!(" Its task could not be cancelled: {e}")),
                Err(_) => text.push_str(" Its task was asked to stop."),
            }
        }
        if !seen.answer.trim().is_empty() {
            text.push_str(&format!("\nIts answer so far:\n{}", seen.answer));
        } else if !seen.status.trim().is_empty() {
            text.push_str(&format!("\nIts last status: {}", seen.status));
        }
        Some(text)
    });
}

/// The task's conversation: the prompt, the remote agent's questions asked of this agent's
/// user and answered, until the task ends.
async fn converse(
    inner: &Inner,
    prompt: &str,
    ctx: &ToolContext,
    seen: &Mutex<Seen>,
) -> Result<ToolResponse, ToolError> {
    let mut message = json!({ "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{ "text": prompt }] });
    let mut questions = 0u32;
    loop {
        let mut updates = inner
            .rpc
            .stream(message)
            .await
            .map_err(|e| ToolError::msg(format!("the remote agent `{}`: {e}", inner.card.name)))?;
        let mut state = String::new();
        let mut data = None;
        while let Some(update) = updates.next().await {
            let update =
                update.map_err(|e| ToolError::msg(format!("the remote agent `{}`: {e}", inner.card.name)))?;
            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            match update {
                Update::Task {
                    id,
                    context,
                    state: now,
                } => {
                    seen.task = Some((id, context));
                    state = now;
                }
                Update::Status {
                    id,
                    context,
                    state: now,
                    text,
                    data: with,
                } => {
                    seen.task.get_or_insert((id, context));
                    if !text.is_empty() {
                        ctx.report(&text, Some("status"));
                        seen.status = text;
                    }
                    state = now;
                    data = with;
                }
                Update::Artifact { text, append } => match append {
                    true => seen.answer.push_str(&text),
                    false if seen.answer.is_empty() => seen.answer = text,
                    false => seen.answer = format!("{}\n{text}", seen.answer),
                },
                Update::Message { text } => {
                    seen.answer = text;
                    state = "TASK_STATE_COMPLETED".into();
                }
            }
        }
        let seen_now = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let agent = &inner.card.name;
        match state.as_str() {
            "TASK_STATE_COMPLETED" => {
                let answer = match seen_now.answer.is_empty() {
                    true => seen_now.status,
                    false => seen_now.answer,
                };
                return Ok(ToolResponse::text(answer));
            }
            "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED" => {
                questions += 1;
                let Some((id, context)) = seen_now.task.clone() else {
                    return Err(ToolError::msg(format!(
                        "the remote agent `{agent}` asked a question outside a task"
                    )));
                };
                let answer = ask_user(inner, ctx, &seen_now.status, data.take(), &id, questions).await;
                message = json!({
                    "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                    "parts": [{ "text": answer }], "taskId": id, "contextId": context
                });
            }
            "TASK_STATE_CANCELED" => {
                return Err(ToolError::msg(format!(
                    "the remote agent `{agent}` cancelled its task: {}",
                    seen_now.status
                )));
            }
            "" => {
                return Err(ToolError::msg(format!(
                    "the remote agent `{agent}` ended the stream before its task ended"
                )));
            }
            other => {
                let why = match seen_now.status.is_empty() {
                    true => other.to_owned(),
                    false => seen_now.status,
                };
                return Err(ToolError::msg(format!(
                    "the remote agent `{agent}` failed: {why}"
                )));
            }
        }
    }
}

/// The remote agent's question, asked of this agent's user; the answer to send back: "yes",
/// or "no" and the reason.
async fn ask_user(
    inner: &Inner,
    ctx: &ToolContext,
    question: &str,
    data: Option<Value>,
    task: &str,
    n: u32,
) -> String {
    let agent = &inner.card.name;
    let mut request = ApprovalRequest::generic(&inner.name, &Map::new());
    request.title = Some(format!("The remote agent `{agent}` asks"));
    request.message = format!("The remote agent `{agent}` asks: {question}");
    let decision = ctx
        .ask_approval(NestedApproval {
            id: format!("{task}-{n}"),
            name: format!("{}: question", inner.name),
            input: data.unwrap_or_else(|| json!({ "question": question })),
            request,
        })
        .await;
    match decision {
        ApprovalDecision::Approve | ApprovalDecision::ApproveForSession => "yes".to_owned(),
        ApprovalDecision::Decline { reason }
        | ApprovalDecision::DeclineForSession { reason }
        | ApprovalDecision::DeclineAndStop { reason } => match reason {
            Some(reason) => format!("no: {reason}"),
            None => "no".to_owned(),
        },
    }
}
