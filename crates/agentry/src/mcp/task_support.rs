//! Which of a server's tools run as MCP tasks (spec 2025-11-25, `execution.taskSupport` in
//! `tools/list`).
//!
//! rmcp's `Tool` drops the `execution` field, so the raw `tools/list` answer is read on the
//! side: on stdio by a tap on the server's stdout (the bytes go on to rmcp unchanged), over HTTP
//! by asking the same page again without rmcp ([`raw_request`]).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// Whether a tool may, must or must not be called as a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TaskSupport {
    /// Called as a plain request (the default).
    #[default]
    Forbidden,
    /// Either way: agentry calls it as a task.
    Optional,
    /// Only as a task.
    Required,
}

impl TaskSupport {
    fn parse(value: Option<&str>) -> TaskSupport {
        match value {
            Some("required") => TaskSupport::Required,
            Some("optional") => TaskSupport::Optional,
            _ => TaskSupport::Forbidden,
        }
    }

    /// Whether agentry calls the tool as a task.
    pub fn as_task(self) -> bool {
        self != TaskSupport::Forbidden
    }
}

/// The task support of each tool, as the server last listed it; and, over HTTP, the MCP
/// session each task lives in.
#[derive(Debug, Default)]
pub(crate) struct TaskSupports {
    supports: Mutex<HashMap<String, TaskSupport>>,
    /// The session id the last request went out with.
    session: Mutex<Option<Arc<str>>>,
    /// Tasks of an earlier session (found again after a restart), by task id: requests about
    /// them go out with their own session's id.
    task_sessions: Mutex<HashMap<String, Arc<str>>>,
}

/// Lines longer than this are passed on without being looked at.
const MAX_TAPPED_LINE: usize = 16 << 20;

impl TaskSupports {
    pub(crate) fn get(&self, tool: &str) -> TaskSupport {
        self.supports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(tool)
            .copied()
            .unwrap_or_default()
    }

    /// Takes the tools of a JSON-RPC message if it answers `tools/list`.
    pub(crate) fn record(&self, message: &Value) {
        let Some(tools) = message.pointer("/result/tools").and_then(Value::as_array) else {
            return;
        };
        let mut map = self.supports.lock().unwrap_or_else(|e| e.into_inner());
        for tool in tools {
            if let Some(name) = tool.get("name").and_then(Value::as_str) {
                let support = tool.pointer("/execution/taskSupport").and_then(Value::as_str);
                map.insert(name.to_owned(), TaskSupport::parse(support));
            }
        }
    }

    /// The MCP session of the last HTTP request (`None` on stdio).
    pub(crate) fn session(&self) -> Option<Arc<str>> {
        self.session.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_session(&self, session: Option<&Arc<str>>) {
        if let Some(session) = session {
            *self.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(session));
        }
    }

    /// Requests about `task_id` go out in `session`, the one it was created in.
    pub(crate) fn adopt(&self, task_id: &str, session: &str) {
        self.task_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(task_id.to_owned(), Arc::from(session));
    }

    /// The task was followed to its end: requests about it go out as any other.
    pub(crate) fn forget(&self, task_id: &str) {
        self.task_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(task_id);
    }

    /// The session a request about a task of an earlier session must carry.
    pub(crate) fn session_for(&self, method: &str, params: Option<&Value>) -> Option<Arc<str>> {
        if !method.starts_with("tasks/") {
            return None;
        }
        let task_id = params?.get("taskId")?.as_str()?;
        self.task_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(task_id)
            .cloned()
    }

    /// One line of the server's stdout: parsed only if it may declare task support.
    fn scan_line(&self, line: &[u8]) {
        if contains_bytes(line, b"\"taskSupport\"")
            && let Ok(message) = serde_json::from_slice::<Value>(line)
        {
            self.record(&message);
        }
    }
}

fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A stdio server's stdout, passed on unchanged, with each line shown to [`TaskSupports`].
pub(crate) struct StdoutTap<R> {
    inner: R,
    line: Vec<u8>,
    overlong: bool,
    supports: Arc<TaskSupports>,
}

impl<R> StdoutTap<R> {
    pub(crate) fn new(inner: R, supports: Arc<TaskSupports>) -> Self {
        StdoutTap {
            inner,
            line: Vec::new(),
            overlong: false,
            supports,
        }
    }

    fn scan(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match end {
                Some(at) => (&bytes[..at], &bytes[at + 1..]),
                None => (bytes, &[][..]),
            };
            if !self.overlong {
                if self.line.len() + part.len() > MAX_TAPPED_LINE {
                    self.overlong = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if end.is_some() {
                if !self.overlong {
                    self.supports.scan_line(&self.line);
                }
                self.line.clear();
                self.overlong = false;
            }
            bytes = rest;
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for StdoutTap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let this = &mut *self;
            this.scan(&buf.filled()[before..]);
        }
        polled
    }
}

/// Where and how to send a request to a streamable HTTP server without rmcp.
pub(crate) struct RawTarget<'a> {
    pub(crate) uri: &'a str,
    pub(crate) session_id: Option<&'a str>,
    pub(crate) auth_header: Option<&'a str>,
    pub(crate) headers: &'a HashMap<HeaderName, HeaderValue>,
}

/// Sends one JSON-RPC request (`message`, with its own id) and returns the response to it, read
/// from a JSON body or from the SSE stream the server answers with.
pub(crate) async fn raw_request(
    client: &reqwest::Client,
    target: &RawTarget<'_>,
    message: &Value,
) -> Result<Value, String> {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let mut request = client
        .post(target.uri)
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(message.to_string());
    for (name, value) in target.headers {
        request = request.header(name, value);
    }
    if let Some(auth) = target.auth_header {
        request = request.bearer_auth(auth);
    }
    if let Some(session) = target.session_id {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let is_sse = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_sse {
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
            if body.len() > MAX_TAPPED_LINE {
                return Err("the answer is too large".into());
            }
        }
        return serde_json::from_slice(&body).map_err(|e| e.to_string());
    }
    let mut events = sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| e.to_string())?;
        let Some(data) = event.data else { continue };
        if let Ok(message) = serde_json::from_str::<Value>(&data)
            && message.get("id") == Some(&id)
            && (message.get("result").is_some() || message.get("error").is_some())
        {
            return Ok(message);
        }
    }
    Err("the stream ended without the response".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_tap_passes_bytes_on_and_reads_task_support_across_reads() {
        let listing = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"plain","inputSchema":{}},{"name":"long","inputSchema":{},"execution":{"taskSupport":"required"}},{"name":"either","inputSchema":{},"execution":{"taskSupport":"optional"}}]}}"#;
        let mut stream = b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n".to_vec();
        stream.extend_from_slice(listing);
        stream.push(b'\n');
        let supports = Arc::new(TaskSupports::default());
        // Reads of 7 bytes split the lines anywhere.
        let reader = tokio::io::BufReader::with_capacity(7, &stream[..]);
        let mut tap = StdoutTap::new(reader, Arc::clone(&supports));
        let mut out = Vec::new();
        let mut chunk = [0u8; 7];
        loop {
            let n = tap.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(out, stream);
        assert_eq!(supports.get("long"), TaskSupport::Required);
        assert_eq!(supports.get("either"), TaskSupport::Optional);
        assert_eq!(supports.get("plain"), TaskSupport::Forbidden);
        assert_eq!(supports.get("unknown"), TaskSupport::Forbidden);
    }
}
