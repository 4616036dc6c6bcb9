//! JSON-RPC to a remote A2A agent: one call, or a message whose task streams its updates.

use eventsource_stream::Eventsource;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use serde_json::{Value, json};

use super::A2aError;

/// The protocol version asked for.
const VERSION: &str = "1.0";

/// One update of a task, as a stream brings it.
#[derive(Debug, Clone)]
pub(crate) enum Update {
    /// The task as it is (the stream's first event).
    Task {
        id: String,
        context: String,
        state: String,
    },
    /// The task's status changed.
    Status {
        id: String,
        context: String,
        state: String,
        text: String,
        data: Option<Value>,
    },
    /// A piece of the answer.
    Artifact { text: String, append: bool },
    /// The agent answered with a message, without a task.
    Message { text: String },
}

/// The texts of a message's or an artifact's parts, one per line.
pub(crate) fn parts_text(parts: Option<&Value>) -> String {
    parts
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn data_part(parts: Option<&Value>) -> Option<Value> {
    parts?.as_array()?.iter().find_map(|p| p.get("data").cloned())
}

fn update(result: &Value) -> Option<Update> {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    if let Some(task) = result.get("task") {
        return Some(Update::Task {
            id: text(task, "id"),
            context: text(task, "contextId"),
            state: text(&task["status"], "state"),
        });
    }
    if let Some(status) = result.get("statusUpdate") {
        let parts = status["status"]["message"].get("parts");
        return Some(Update::Status {
            id: text(status, "taskId"),
            context: text(status, "contextId"),
            state: text(&status["status"], "state"),
            text: parts_text(parts),
            data: data_part(parts),
        });
    }
    if let Some(artifact) = result.get("artifactUpdate") {
        return Some(Update::Artifact {
            text: parts_text(artifact["artifact"].get("parts")),
            append: artifact.get("append").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    result.get("message").map(|message| Update::Message {
        text: parts_text(message.get("parts")),
    })
}

/// A response's body as JSON.
pub(crate) async fn json_body(response: reqwest::Response) -> Result<Value, String> {
    let bytes = response.bytes().await.map_err(|e| crate::error_chain(&e))?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

/// The error of a JSON-RPC response, if it is one.
fn rpc_error(response: &Value) -> Option<A2aError> {
    let error = response.get("error")?;
    Some(A2aError::Remote {
        code: error.get("code").and_then(Value::as_i64).unwrap_or_default(),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    })
}

/// The JSON-RPC endpoint of a remote agent.
#[derive(Debug, Clone)]
pub(crate) struct Rpc {
    pub http: reqwest::Client,
    pub endpoint: String,
    pub headers: HeaderMap,
}

impl Rpc {
    fn request(&self, method: &str, params: Value) -> reqwest::RequestBuilder {
        let body = json!({ "jsonrpc": "2.0", "id": uuid::Uuid::new_v4().to_string(), "method": method, "params": params });
        self.http
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .header("A2A-Version", VERSION)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
    }

    /// Calls `method`; its result.
    pub(crate) async fn call(&self, method: &str, params: Value) -> Result<Value, A2aError> {
        let response = self
            .request(method, params)
            .send()
            .await
            .map_err(|e| A2aError::Http(crate::error_chain(&e)))?;
        let status = response.status();
        let body = json_body(response).await;
        let body =
            body.map_err(|e| A2aError::Http(format!("HTTP {status}: not a JSON-RPC response: {e}")))?;
        if let Some(error) = rpc_error(&body) {
            return Err(error);
        }
        body.get("result")
            .cloned()
            .ok_or_else(|| A2aError::Http(format!("HTTP {status}: a JSON-RPC response without a result")))
    }

    /// Sends `message` with `SendStreamingMessage`; the task's updates until the server ends
    /// the stream.
    pub(crate) async fn stream(
        &self,
        message: Value,
    ) -> Result<BoxStream<'static, Result<Update, A2aError>>, A2aError> {
        let response = self
            .request("SendStreamingMessage", json!({ "message": message }))
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| A2aError::Http(crate::error_chain(&e)))?;
        let status = response.status();
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if !is_stream {
            // An error before the first event comes as one JSON-RPC response.
            let body = json_body(response)
                .await
                .map_err(|e| A2aError::Http(format!("HTTP {status}: neither events nor JSON-RPC: {e}")))?;
            return Err(
                rpc_error(&body).unwrap_or_else(|| A2aError::Http(format!("HTTP {status}: no events")))
            );
        }
        let events = response
            .bytes_stream()
            .eventsource()
            .map_err(|e| A2aError::Http(format!("the event stream broke: {e}")))
            .try_filter_map(|event| async move {
                if event.data.trim().is_empty() {
                    return Ok(None);
                }
                let body: Value = serde_json::from_str(&event.data)
                    .map_err(|e| A2aError::Http(format!("an event is not JSON: {e}")))?;
                if let Some(error) = rpc_error(&body) {
                    return Err(error);
                }
                Ok(body.get("result").and_then(update))
            });
        Ok(events.boxed())
    }
}
