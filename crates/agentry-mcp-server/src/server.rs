//! [`AgentMcpServer`]: the MCP handler, its tool list, and the stdio transport.

use std::borrow::Cow;
use std::sync::Arc;

use agentry::agent::{AgentError, ReActAgent};
use agentry::tool::{PermissionRules, Toolkit};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams,
    GetTaskResult, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskManager, TaskOptions};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::McpServeError;
use crate::exposed::ExposedTools;

/// Makes the agent that answers one call of the reply tool: each call gets a fresh agent, so
/// that calls from one client, or from several, never share a conversation.
pub use agentry::agent::AgentSource;

/// An agent as an MCP server: a tool that runs a reply for a prompt, and optionally the agent's
/// own tools (see the [crate] documentation). Cheap to clone: every MCP session of an HTTP
/// server holds a clone.
#[derive(Clone)]
pub struct AgentMcpServer {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) agents: AgentSource,
    /// The reply tool as listed.
    pub(crate) reply_tool: Tool,
    pub(crate) exposed: Option<ExposedTools>,
    pub(crate) info: Implementation,
    /// The reply calls that run as tasks (the MCP tasks extension), of every session: their
    /// ids are random UUIDs, known only to the client that made them.
    pub(crate) tasks: TaskManager,
}

/// How long a task's result is kept after it ends.
const TASK_TTL_MS: u64 = 60 * 60 * 1000;
/// How often a client is asked to poll a task.
const TASK_POLL_MS: u64 = 500;

impl std::fmt::Debug for AgentMcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentMcpServer")
            .field("reply_tool", &self.inner.reply_tool.name)
            .field("exposed", &self.inner.exposed.is_some())
            .finish()
    }
}

/// The reply tool's arguments: one required string, the prompt.
fn reply_tool_schema() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {
            "prompt": {
                "type": "string",
                "description": "What to ask the agent, with everything it needs to answer"
            }
        },
        "required": ["prompt"]
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

impl AgentMcpServer {
    /// A server whose tool `tool_name` (described by `description`) runs a reply of an agent
    /// made by `agents`, one per call.
    ///
    /// # Errors
    /// [`McpServeError::Config`] when the name is empty.
    pub fn new(
        tool_name: impl Into<String>,
        description: impl Into<String>,
        agents: impl Fn() -> Result<ReActAgent, AgentError> + Send + Sync + 'static,
    ) -> Result<Self, McpServeError> {
        let tool_name = tool_name.into();
        if tool_name.trim().is_empty() {
            return Err(McpServeError::Config("the reply tool's name is empty".into()));
        }
        let reply_tool = Tool::new(tool_name, description.into(), reply_tool_schema());
        Ok(Self {
            inner: Arc::new(Inner {
                agents: Arc::new(agents),
                reply_tool,
                exposed: None,
                info: Implementation::new("agentry", env!("CARGO_PKG_VERSION")),
                tasks: TaskManager::new(),
            }),
        })
    }

    /// Also offers the tools of `toolkit` as MCP tools, under their own names. `permissions`
    /// decide their calls as they do the agent's: a deny rule declines, an allow rule runs it
    /// without asking, and a tool that needs approval is asked of the client through
    /// elicitation (declined when the client cannot be asked).
    ///
    /// # Errors
    /// [`McpServeError::Config`] when a tool has the reply tool's name.
    pub fn expose_tools(self, toolkit: Toolkit, permissions: PermissionRules) -> Result<Self, McpServeError> {
        let reply = &self.inner.reply_tool.name;
        if toolkit.tool_names().iter().any(|name| name == reply.as_ref()) {
            return Err(McpServeError::Config(format!(
                "the agent has a tool named {reply:?}, the name of the reply tool: give the reply tool another name"
            )));
        }
        let inner = Inner {
            agents: Arc::clone(&self.inner.agents),
            reply_tool: self.inner.reply_tool.clone(),
            exposed: Some(ExposedTools::new(toolkit, permissions)),
            info: self.inner.info.clone(),
            tasks: self.inner.tasks.clone(),
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The name of the tool that runs a reply.
    pub fn reply_tool_name(&self) -> &str {
        &self.inner.reply_tool.name
    }

    /// Serves one MCP session over standard input and output until the client closes it (or
    /// the process is stopped). Nothing else may write to standard output meanwhile.
    ///
    /// # Errors
    /// [`McpServeError::Start`] when the client never completes the handshake.
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        let running = self
            .serve(rmcp::transport::io::stdio_pipes())
            .await
            .map_err(|e| McpServeError::Start(e.to_string()))?;
        running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| McpServeError::Session(e.to_string()))
    }
}

impl AgentMcpServer {
    /// Starts the reply as a task, for a client of the tasks extension: it polls the task,
    /// answers its input requests, and may cancel it, the partial result then being the
    /// task's result.
    fn reply_task(
        &self,
        args: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CreateTaskResult, ErrorData> {
        let prompt = crate::reply::prompt(args)?;
        let (agents, peer) = (Arc::clone(&self.inner.agents), context.peer.clone());
        let options = TaskOptions::new()
            .with_ttl_ms(TASK_TTL_MS)
            .with_poll_interval_ms(TASK_POLL_MS)
            .with_status_message("starting");
        let task = self.inner.tasks.spawn(options, move |task| {
            Box::pin(async move { crate::reply::run_task(&agents, &prompt, &peer, task).await })
        });
        Ok(CreateTaskResult::new(task))
    }
}

impl ServerHandler for AgentMcpServer {
    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.inner
            .tasks
            .get_task(&request.task_id)
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner
            .tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(self.inner.info.clone())
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .with_instructions(format!(
            "Call `{}` with a prompt to have the agent answer it, using its tools.",
            self.inner.reply_tool.name
        ))
    }

    // Up to the last revision with server-to-client requests: approvals are asked through
    // elicitation requests made while the call runs.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = vec![self.inner.reply_tool.clone()];
        if let Some(exposed) = &self.inner.exposed {
            tools.extend(exposed.listed());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        if request.name == self.inner.reply_tool.name {
            if context.client_capabilities().is_some_and(|c| c.supports_tasks()) {
                return self.reply_task(&args, &context).map(CallToolResponse::Task);
            }
            return crate::reply::run(&self.inner.agents, args, context)
                .await
                .map(Into::into);
        }
        match &self.inner.exposed {
            Some(exposed) if exposed.has(&request.name) => {
                exposed.call(&request.name, args, context).await.map(Into::into)
            }
            _ => Err(ErrorData::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            )),
        }
    }
}
