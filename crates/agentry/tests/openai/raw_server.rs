//! A hand-written HTTP/1.1 server for the provider tests: it misbehaves exactly as scripted
//! (closes a kept-alive connection, breaks a stream, never answers), which axum will not do.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request (requests take the actions in order, whatever
/// connection they arrive on).
#[derive(Debug, Clone)]
pub enum Action {
    /// A complete JSON answer; the connection stays open for the next request.
    Json(String),
    /// A complete SSE answer (events written as given); the connection stays open.
    Sse(String),
    /// Closes the connection without answering.
    Close,
    /// Sends an SSE head, then closes the connection before any event.
    HeadThenClose,
    /// Never answers (the connection stays open until the server is dropped).
    Silent,
}

/// The server; it stops when dropped.
pub struct RawServer {
    pub base_url: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawServer {
    pub async fn start(actions: impl IntoIterator<Item = Action>) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let actions = Arc::new(Mutex::new(actions.into_iter().collect::<VecDeque<_>>()));
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (c, r) = (Arc::clone(&connections), Arc::clone(&requests));
        let task = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                open.push(tokio::spawn(serve(socket, Arc::clone(&actions), Arc::clone(&r))));
            }
        });
        RawServer {
            base_url,
            connections,
            requests,
            task,
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests read so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Reads one request (head and `Content-Length` body); `false` when the client closed.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                buf.drain(..end + 4 + length);
                return true;
            }
        }
        let mut chunk = [0u8; 8192];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn serve(mut socket: TcpStream, actions: Arc<Mutex<VecDeque<Action>>>, requests: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    while read_request(&mut socket, &mut buf).await {
        requests.fetch_add(1, Ordering::SeqCst);
        let action = actions.lock().unwrap().pop_front().unwrap_or(Action::Close);
        let reply = match action {
            Action::Json(body) => format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            ),
            Action::Sse(events) => format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
                events.len()
            ),
            Action::Close => return,
            Action::HeadThenClose => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.flush().await;
                return;
            }
            Action::Silent => {
                std::future::pending::<()>().await;
                return;
            }
        };
        if socket.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A complete non-streamed answer with `text`.
pub fn completion(text: &str) -> String {
    serde_json::json!({"id": "raw", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
        "finish_reason": "stop"}]})
    .to_string()
}

/// A complete streamed answer with `text`.
pub fn sse(text: &str) -> String {
    let chunk = serde_json::json!({"id": "raw", "choices": [{"index": 0, "delta": {"content": text},
        "finish_reason": "stop"}]});
    format!("data: {chunk}\n\ndata: [DONE]\n\n")
}
