//! A server on a temporary database and the fake model, and a client that reads its event
//! stream. Every wait has a deadline.

use std::sync::Arc;
use std::time::Duration;

use agentry::ReActAgent;
use agentry::model::{OpenAiChatModel, OpenAiConfig, RetryPolicy};
use agentry::tool::{FunctionTool, ToolOptions, Toolkit, once};
use agentry_server::{Security, Server};
use agentry_testkit::FakeLlm;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub const DEADLINE: Duration = Duration::from_secs(20);

pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {DEADLINE:?}"))
}

/// `write_note` asks for approval; `pages` reports progress and runs until cancelled, handing
/// back what it read.
pub fn toolkit() -> Toolkit {
    let toolkit = Toolkit::new();
    let params = json!({"type": "object", "properties": {"text": {"type": "string"}}});
    toolkit
        .register_with(
            FunctionTool::new("write_note", "Writes a note.", params.clone(), |_, _| {
                once(async { "noted".to_owned() })
            }),
            ToolOptions::new().require_approval(true),
        )
        .unwrap();
    // Asks the user a form, as an MCP server's elicitation does.
    toolkit
        .register(FunctionTool::new(
            "sign_up",
            "Signs the user up.",
            params.clone(),
            |_, ctx| {
                once(async move {
                    let question = agentry::tool::InputQuestion {
                        id: "form".into(),
                        name: "club: input".into(),
                        message: "Your details, please".into(),
                        schema: json!({"type": "object", "required": ["name"], "properties": {
                            "name": {"type": "string", "title": "Name"},
                            "news": {"type": "boolean", "title": "Newsletter", "default": false},
                            "level": {"type": "string", "enum": ["low", "high"], "default": "low"}
                        }}),
                    };
                    match ctx.ask_input(question).await {
                        agentry::agent::InputAnswer::Accept(content) => format!("signed up: {content}"),
                        other => format!("not signed up: {other:?}"),
                    }
                })
            },
        ))
        .unwrap();
    toolkit
        .register(FunctionTool::new("pages", "Reads pages.", params, |_, ctx| {
            once(async move {
                ctx.set_on_cancel(|| Some("read 1 page before the cancel".to_owned()));
                ctx.report("page 1", None);
                ctx.cancelled().await;
                "all pages".to_owned()
            })
        }))
        .unwrap();
    toolkit
}

/// A running server.
pub struct Harness {
    pub base: String,
    pub fake: FakeLlm,
    pub client: reqwest::Client,
    pub dir: tempfile::TempDir,
    /// The bearer token requests carry, if any.
    pub bearer: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Harness {
    pub async fn start() -> Harness {
        Self::start_with(
            FakeLlm::start().await,
            tempfile::tempdir().unwrap(),
            Security::Loopback,
        )
        .await
    }

    /// A server on the database in `dir`, behind `security`.
    pub async fn start_with(fake: FakeLlm, dir: tempfile::TempDir, security: Security) -> Harness {
        Self::start_configured(fake, dir, security, |server| server).await
    }

    /// A server whose agents have a plan notebook each.
    pub async fn start_planned() -> Harness {
        Self::start_inner(
            FakeLlm::start().await,
            tempfile::tempdir().unwrap(),
            Security::Loopback,
            |server| server,
            true,
        )
        .await
    }

    /// [`Harness::start_with`], the server changed by `configure` before it serves.
    pub async fn start_configured(
        fake: FakeLlm,
        dir: tempfile::TempDir,
        security: Security,
        configure: impl FnOnce(Server) -> Server,
    ) -> Harness {
        Self::start_inner(fake, dir, security, configure, false).await
    }

    async fn start_inner(
        fake: FakeLlm,
        dir: tempfile::TempDir,
        security: Security,
        configure: impl FnOnce(Server) -> Server,
        plan: bool,
    ) -> Harness {
        let store = Arc::new(agentry_store::SqliteStore::open(dir.path().join("s.db")).unwrap());
        let tools = toolkit();
        let model = Arc::new(
            OpenAiChatModel::new(
                OpenAiConfig::new("fake-model")
                    .base_url(fake.base_url())
                    .stream(true)
                    .retry(RetryPolicy {
                        max_retries: 0,
                        initial_backoff: Duration::from_millis(1),
                        max_delay: Duration::from_millis(1),
                    }),
            )
            .unwrap(),
        );
        // A sub-agent on the same model, with a tool of its own: its calls show under the
        // parent's card.
        let helper_tools = Toolkit::new();
        helper_tools
            .register(FunctionTool::new(
                "lookup",
                "Looks a thing up.",
                json!({"type": "object", "properties": {}}),
                |_, _| once(async { "found <b>it</b>".to_owned() }),
            ))
            .unwrap();
        let helper_model = Arc::clone(&model);
        tools
            .register(agentry::agent::AgentTool::from_builder(
                "helper",
                "Looks things up.",
                move || {
                    ReActAgent::builder()
                        .name("helper")
                        .model(Arc::clone(&helper_model) as Arc<dyn agentry::model::ChatModel>)
                        .toolkit(helper_tools.clone())
                },
            ))
            .unwrap();
        let agent_tools = tools.clone();
        let server = Server::new(
            store,
            tools,
            Arc::new(move |_owner: Option<&str>| {
                let builder = ReActAgent::builder()
                    .name("agentry")
                    .model(Arc::clone(&model) as Arc<dyn agentry::model::ChatModel>)
                    .toolkit(agent_tools.clone());
                match plan {
                    true => builder.plan_notebook(agentry::plan::PlanNotebook::new()),
                    false => builder,
                }
            }),
        );
        let server = configure(server);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(async move {
            server
                .serve(listener, security, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Harness {
            base,
            fake,
            client: {
                // reqwest is built without a default TLS crypto provider.
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::new()
            },
            dir,
            bearer: None,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Stops the server; its database stays in `dir`.
    pub async fn stop(mut self) -> (FakeLlm, tempfile::TempDir) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            within("the server's stop", served).await.unwrap();
        }
        (self.fake, self.dir)
    }

    pub async fn send(&self, method: reqwest::Method, path: &str, body: Option<&str>) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        // The body too within the deadline: an event stream answered where a refusal was
        // expected would otherwise hang the test instead of failing it.
        let (status, text) = within("a response", async {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        })
        .await;
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
        };
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(&body.to_string()))
            .await
    }

    /// Creates session `name`; its id.
    pub async fn session(&self, name: &str) -> String {
        let (status, created) = self.post("/v1/sessions", json!({"name": name})).await;
        assert_eq!(status, 201, "{created}");
        created["id"].as_str().unwrap().to_owned()
    }

    /// Opens the event stream of session `id` (after event `after`, when given).
    pub async fn events(&self, id: &str, after: Option<u64>) -> Events {
        let mut request = self.client.get(format!("{}/v1/sessions/{id}/events", self.base));
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        if let Some(after) = after {
            request = request.header("last-event-id", after.to_string());
        }
        let response = within("the event stream", request.send()).await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut body = response.bytes_stream();
            let mut pending = String::new();
            while let Some(Ok(chunk)) = body.next().await {
                pending.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = pending.find("\n\n") {
                    let block: String = pending.drain(..end + 2).collect();
                    if let Some(event) = SseEvent::parse(&block)
                        && tx.send(event).is_err()
                    {
                        return;
                    }
                }
            }
        });
        Events { rx, reader }
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub kind: String,
    pub data: Value,
}

impl SseEvent {
    fn parse(block: &str) -> Option<SseEvent> {
        let mut id = None;
        let mut kind = "message".to_owned();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                kind = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if data.is_empty() {
            return None; // a keep-alive comment
        }
        Some(SseEvent {
            id,
            kind,
            data: serde_json::from_str(&data).unwrap_or(Value::String(data)),
        })
    }

    /// The agent event's type (`message`, `tool_started`, ...).
    pub fn agent_type(&self) -> &str {
        self.data["type"].as_str().unwrap_or_default()
    }
}

/// A client's event stream.
pub struct Events {
    rx: mpsc::UnboundedReceiver<SseEvent>,
    reader: tokio::task::JoinHandle<()>,
}

impl Events {
    /// The next event.
    pub async fn next(&mut self) -> SseEvent {
        within("the next event", self.rx.recv())
            .await
            .expect("the stream ended")
    }

    /// Events up to and including the first that `matches`.
    pub async fn until(&mut self, matches: impl Fn(&SseEvent) -> bool) -> Vec<SseEvent> {
        let mut seen = Vec::new();
        loop {
            let event = self.next().await;
            let done = matches(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

    /// Events up to the end of the reply.
    pub async fn reply(&mut self) -> Vec<SseEvent> {
        self.until(|e| e.agent_type() == "reply_finished").await
    }

    /// Drops the connection.
    pub fn close(self) {
        self.reader.abort();
    }
}

/// Runs a third-party program (a browser script, a fuzzer) to its end within `limit`; its
/// stdout and stderr. Fails the test when it fails or takes longer.
pub async fn run_peer(mut command: tokio::process::Command, limit: Duration) -> String {
    let what = format!("{:?}", command.as_std().get_program());
    let out = tokio::time::timeout(limit, command.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{said}");
    said
}
