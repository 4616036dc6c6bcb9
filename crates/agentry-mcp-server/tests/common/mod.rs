//! What the suites share: an agent on the fake model server, a tool that runs until cancelled,
//! and an MCP client (rmcp's) connected to the server in process.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentry::agent::ReActAgent;
use agentry::model::{OpenAiChatModel, OpenAiConfig, RetryPolicy};
use agentry::tool::{Tool, ToolContext, ToolResponse, ToolStream, Toolkit};
use agentry_mcp_server::AgentMcpServer;
use agentry_testkit::FakeLlm;
use futures::StreamExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    ElicitRequestParams, ElicitResult, Implementation, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RequestHandle, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc};

const DEADLINE: Duration = Duration::from_secs(20);

/// `fut`, failing the test after a deadline.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: not within {DEADLINE:?}"),
    }
}

/// An agent named "helper" on `fake`, with `toolkit`.
pub fn agent(base_url: &str, toolkit: Toolkit) -> ReActAgent {
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("fake-model")
            .base_url(base_url)
            .retry(RetryPolicy {
                max_retries: 0,
                initial_backoff: Duration::from_millis(1),
                max_delay: Duration::from_millis(1),
            }),
    )
    .unwrap();
    ReActAgent::builder()
        .name("helper")
        .sys_prompt("You are a test agent.")
        .model(model)
        .toolkit(toolkit)
        .build()
        .unwrap()
}

/// A server whose reply tool `ask` runs an agent on `fake` with `toolkit`.
pub fn server(fake: &FakeLlm, toolkit: Toolkit) -> AgentMcpServer {
    let base_url = fake.base_url();
    AgentMcpServer::new("ask", "Ask the helper", move || {
        Ok(agent(&base_url, toolkit.clone()))
    })
    .unwrap()
}

/// A tool that runs until cancelled; its `on_cancel` hands back what it "found".
#[derive(Clone, Default)]
pub struct Slow {
    pub started: Arc<Notify>,
    pub on_cancel_runs: Arc<AtomicUsize>,
    pub calls: Arc<AtomicUsize>,
}

impl Slow {
    pub fn on_cancel_runs(&self) -> usize {
        self.on_cancel_runs.load(Ordering::SeqCst)
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Tool for Slow {
    fn name(&self) -> &str {
        "slow_search"
    }
    fn description(&self) -> &str {
        "Searches, slowly"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn call(self: Arc<Self>, _args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let runs = Arc::clone(&self.on_cancel_runs);
        ctx.set_on_cancel(move || {
            runs.fetch_add(1, Ordering::SeqCst);
            Some("found 2 of 5 sources before the stop".to_owned())
        });
        self.started.notify_one();
        futures::stream::once(async move {
            ctx.cancelled().await;
            Ok(ToolResponse::text("never seen"))
        })
        .boxed()
    }
}

/// A tool that asks the user a form (as an MCP server's elicitation does).
pub fn sign_up() -> agentry::tool::FunctionTool {
    agentry::tool::FunctionTool::new(
        "sign_up",
        "Signs up",
        json!({"type": "object", "properties": {}}),
        |_, ctx| {
            agentry::tool::once(async move {
                let question = agentry::tool::InputQuestion {
                    id: "form".into(),
                    name: "club: input".into(),
                    message: "Your name?".into(),
                    schema: json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}),
                };
                match ctx.ask_input(question).await {
                    agentry::agent::InputAnswer::Accept(content) => format!("signed up {}", content["name"]),
                    other => format!("not signed up: {other:?}"),
                }
            })
        },
    )
}

/// How the test client answers elicitation requests; `None`: it does not declare elicitation.
#[derive(Clone, Debug)]
pub enum Elicit {
    Approve,
    Refuse,
}

/// A toolkit of `slow`, which needs approval when `approval`.
pub fn slow_toolkit(slow: &Slow, approval: bool) -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            slow.clone(),
            agentry::tool::ToolOptions::new().require_approval(approval),
        )
        .unwrap();
    toolkit
}

/// rmcp's client, recording progress messages and elicitation questions.
pub struct TestClient {
    elicit: Option<Elicit>,
    /// Whether it declares the tasks extension.
    tasks: bool,
    progress: mpsc::UnboundedSender<String>,
    questions: mpsc::UnboundedSender<String>,
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = json!({});
        if self.elicit.is_some() {
            capabilities["elicitation"] = json!({"form": {}});
        }
        if self.tasks {
            capabilities["extensions"] = json!({ rmcp::model::TASKS_EXTENSION_ID: {} });
        }
        let capabilities: ClientCapabilities = serde_json::from_value(capabilities).unwrap();
        ClientConfig::new(capabilities, Implementation::new("test-client", "1"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let wire = serde_json::to_value(&request).unwrap();
        let _ = self
            .questions
            .send(wire["message"].as_str().unwrap_or_default().to_owned());
        let form = wire["requestedSchema"]["properties"].get("name").is_some();
        let answer = match (&self.elicit, form) {
            (Some(Elicit::Approve), true) => json!({"action": "accept", "content": {"name": "Ada"}}),
            (Some(Elicit::Approve), false) => json!({"action": "accept", "content": {"approve": true}}),
            _ => json!({"action": "decline"}),
        };
        Ok(serde_json::from_value(answer).unwrap())
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.progress.send(params.message.unwrap_or_default());
    }
}

/// A client connected in process to `server`.
pub struct Connected {
    pub client: RunningService<RoleClient, TestClient>,
    pub progress: mpsc::UnboundedReceiver<String>,
    pub questions: mpsc::UnboundedReceiver<String>,
}

pub async fn connect(server: AgentMcpServer, elicit: Option<Elicit>) -> Connected {
    connect_with(server, elicit, false).await
}

/// [`connect`], with a client that declares the tasks extension when `tasks`.
pub async fn connect_with(server: AgentMcpServer, elicit: Option<Elicit>, tasks: bool) -> Connected {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let (progress_tx, progress) = mpsc::unbounded_channel();
    let (questions_tx, questions) = mpsc::unbounded_channel();
    let handler = TestClient {
        elicit,
        tasks,
        progress: progress_tx,
        questions: questions_tx,
    };
    let client = within("the MCP handshake", handler.serve(client_io))
        .await
        .unwrap();
    Connected {
        client,
        progress,
        questions,
    }
}

impl Connected {
    /// Sends a `tools/call` of `tool` with `args`, with a progress token; the handle cancels it.
    pub async fn start_call(&self, tool: &str, args: Value) -> RequestHandle<RoleClient> {
        let Value::Object(args) = args else {
            panic!("arguments are an object")
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_owned()).with_arguments(args),
        ));
        self.client
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .unwrap()
    }

    /// The next progress message.
    pub async fn next_progress(&mut self) -> String {
        within("a progress notification", self.progress.recv())
            .await
            .unwrap()
    }

    /// Progress messages until one contains `text`, which it returns.
    pub async fn progress_until(&mut self, text: &str) -> String {
        loop {
            let message = self.next_progress().await;
            if message.contains(text) {
                return message;
            }
        }
    }
}
