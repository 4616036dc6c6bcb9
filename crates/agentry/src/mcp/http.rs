//! The HTTP client under rmcp's Streamable HTTP transport: reqwest, plus one fix for servers that
//! report a lost session as `400 Bad Request` instead of `404 Not Found`.
//!
//! The TypeScript SDK answers a request carrying a session id it does not know (after a restart,
//! say) with `400` and a JSON-RPC error without an id. rmcp only treats `404` as an expired
//! session; it would pass the id-less error on, nobody could match it to the request, and the call
//! would wait forever. Mapped to `SessionExpired`, rmcp re-initializes and sends the request again.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use super::task_support::{RawTarget, TaskSupports, raw_request};

/// `reqwest::Client` that also recognizes a `400` lost-session answer, and reads the tools' task
/// support from the raw `tools/list` answer.
#[derive(Clone)]
pub(crate) struct SessionAwareClient(reqwest::Client, Arc<TaskSupports>);

type Result<T> = std::result::Result<T, StreamableHttpError<reqwest::Error>>;

impl SessionAwareClient {
    /// A client like rmcp's own: no idle pooling (avoids delayed-ACK stalls on reuse), redirects
    /// only within the same origin, so custom headers never leave for another host.
    pub(crate) fn new(supports: Arc<TaskSupports>) -> std::result::Result<Self, reqwest::Error> {
        let redirect = reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if same_origin && attempt.previous().len() < 10 {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirect)
            .build()
            .map(|client| SessionAwareClient(client, supports))
    }

    /// Asks a `tools/list` page again without rmcp, to read what rmcp's types drop.
    async fn read_task_support(
        &self,
        uri: &str,
        message: &ClientJsonRpcMessage,
        session_id: Option<&str>,
        auth_header: Option<&str>,
        headers: &HashMap<HeaderName, HeaderValue>,
    ) {
        let Ok(mut raw) = serde_json::to_value(message) else {
            return;
        };
        raw["id"] = serde_json::Value::String("agentry-task-support".into());
        let target = RawTarget {
            uri,
            session_id,
            auth_header,
            headers,
        };
        match raw_request(&self.0, &target, &raw).await {
            Ok(answer) => self.1.record(&answer),
            Err(e) => tracing::debug!(error = %e, "could not read the tools' task support"),
        }
    }
}

fn lists_tools(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, JsonRpcMessage::Request(request) if matches!(request.request, ClientRequest::ListToolsRequest(_)))
}

/// A JSON-RPC error with no id, about the session, to a request that carried a session id.
fn lost_session(response: &StreamableHttpPostResponse, had_session: bool) -> bool {
    match response {
        StreamableHttpPostResponse::Json(JsonRpcMessage::Error(error), _)
            if had_session && error.id.is_none() =>
        {
            error.error.message.to_ascii_lowercase().contains("session")
        }
        _ => false,
    }
}

fn expired_if_lost(
    response: Result<StreamableHttpPostResponse>,
    had_session: bool,
) -> Result<StreamableHttpPostResponse> {
    match response {
        Ok(response) if lost_session(&response, had_session) => Err(StreamableHttpError::SessionExpired),
        other => other,
    }
}

impl StreamableHttpClient for SessionAwareClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse> {
        self.1.set_session(session_id.as_ref());
        // A task found again after a restart lives in the session it was created in.
        let session_id = match &message {
            JsonRpcMessage::Request(request) => match &request.request {
                ClientRequest::CustomRequest(custom) => self
                    .1
                    .session_for(&custom.method, custom.params.as_ref())
                    .or(session_id),
                _ => session_id,
            },
            _ => session_id,
        };
        let had_session = session_id.is_some();
        if !lists_tools(&message) {
            let response = self
                .0
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await;
            return expired_if_lost(response, had_session);
        }
        // `tools/list`: the page is asked again afterwards, with the same target.
        let listing = message.clone();
        let response = self
            .0
            .post_message_with_response_limits(
                Arc::clone(&uri),
                message,
                session_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
                limits,
            )
            .await;
        if response.is_ok() {
            self.read_task_support(
                &uri,
                &listing,
                session_id.as_deref(),
                auth_header.as_deref(),
                &custom_headers,
            )
            .await;
        }
        expired_if_lost(response, had_session)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<()> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, std::result::Result<Sse, SseError>>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, std::result::Result<Sse, SseError>>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> StreamableHttpPostResponse {
        StreamableHttpPostResponse::Json(serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}")), None)
    }

    #[test]
    fn an_id_less_session_error_is_an_expired_session() {
        let body = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
        assert!(lost_session(&json(body), true));
        // Without a session id sent, the server is right to complain: not a lost session.
        assert!(!lost_session(&json(body), false));
    }

    #[test]
    fn other_errors_pass_through() {
        let with_id = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"session busy"},"id":4}"#;
        assert!(!lost_session(&json(with_id), true));
        let other = r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"}}"#;
        assert!(!lost_session(&json(other), true));
    }
}
