//! `agentry mcp serve`: the agent as an MCP server, over stdio or (with `--addr`) streamable
//! HTTP at `/mcp` (see the `agentry-mcp-server` crate).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agentry_mcp_server::{AgentMcpServer, HttpOptions, MCP_PATH};
use agentry_server::Security;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::setup::args::AgentArgs;
use crate::setup::plan::AgentPlan;
use crate::setup::{DEFAULT_AGENT_NAME, Recipe, recipe};

/// `agentry mcp serve`
#[derive(Debug, Args)]
pub struct McpServeArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio; anything but loopback needs a
    /// token
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<SocketAddr>,
    /// Also offer the agent's own tools as MCP tools (their approvals asked of the client, as
    /// the reply's are)
    #[arg(long)]
    pub expose_tools: bool,
    /// The reply tool's name [default: the config's "name", else "agentry"]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The reply tool's description, what the host's model reads [default: the config's
    /// "description", else one naming the agent's tools]
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// With --addr: a file holding the bearer token every request must carry [env:
    /// AGENTRY_SERVER_TOKEN]
    #[arg(long, value_name = "FILE", requires = "addr")]
    pub token_file: Option<PathBuf>,
    /// With --addr and no token: also answer requests addressed to this host name (or
    /// `name:port`); loopback names always are (repeatable)
    #[arg(long = "allowed-host", value_name = "HOST", requires = "addr")]
    pub allowed_hosts: Vec<String>,
    /// With --addr: also accept requests sent by web pages of this origin (`http://name:port`);
    /// any other Origin gets 403 (repeatable)
    #[arg(long = "allowed-origin", value_name = "ORIGIN", requires = "addr")]
    pub allowed_origins: Vec<String>,
}

/// Runs `agentry mcp serve`.
pub async fn mcp_serve(args: McpServeArgs) -> ExitCode {
    crate::exit::config_exit(serve_until_closed(args).await)
}

async fn serve_until_closed(args: McpServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.agent.session.is_none(),
        "mcp serve answers each call with a fresh conversation; --session is for run and chat"
    );
    let token = token(&args)?;
    let plan = AgentPlan::resolve(&args.agent)?;
    let name = args
        .name
        .clone()
        .or_else(|| plan.file.name.clone())
        .unwrap_or_else(|| DEFAULT_AGENT_NAME.to_owned());
    check_tool_name(&name)?;
    let description = args.description.clone().or_else(|| plan.file.description.clone());
    let permissions = plan.permissions.clone();
    let listener = match args.addr {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?,
        ),
        None => None,
    };
    let Recipe {
        builder,
        toolkit,
        mcp,
        local: _,
    } = recipe(plan).await?;
    let description = description.unwrap_or_else(|| default_description(&toolkit.tool_names()));
    let agents = move || builder(None).build();
    let mut server = AgentMcpServer::new(name, description, agents)?;
    if args.expose_tools {
        server = server.expose_tools(toolkit, permissions)?;
    }
    let served = match listener {
        None => server.serve_stdio().await.map_err(anyhow::Error::from),
        Some(listener) => serve_http(server, listener, token, &args).await,
    };
    mcp.close().await;
    served
}

async fn serve_http(
    server: AgentMcpServer,
    listener: tokio::net::TcpListener,
    token: Option<String>,
    args: &McpServeArgs,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let addr = listener.local_addr()?;
    // The server's own loopback origins are not foreign.
    let port = addr.port();
    let mut allowed_origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|host| format!("http://{host}:{port}"))
        .collect();
    allowed_origins.extend(args.allowed_origins.iter().cloned());
    let router = server.http_router(HttpOptions {
        token,
        allowed_hosts: args.allowed_hosts.clone(),
        allowed_origins,
        shutdown: shutdown.clone(),
    });
    eprintln!("agentry mcp serve: listening on http://{addr}{MCP_PATH} (Ctrl-C or SIGTERM stops)");
    let stopping = shutdown.clone();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            crate::commands::serve::stop_signal().await;
            stopping.cancel();
        })
        .await?;
    Ok(())
}

/// The bearer token of `--token-file` or the environment, read as `agentry serve` reads it;
/// none is allowed only on loopback.
fn token(args: &McpServeArgs) -> anyhow::Result<Option<String>> {
    let Some(addr) = args.addr else {
        return Ok(None);
    };
    match super::serve::security(args.token_file.as_deref(), addr)? {
        Security::Token(token) => Ok(Some(token)),
        Security::Loopback => Ok(None),
        Security::Users(_) => anyhow::bail!("mcp serve takes one token, not a list of user:token lines"),
    }
}

/// MCP tool names: 1 to 128 of ASCII letters, digits, `_`, `-` and `.`.
fn check_tool_name(name: &str) -> anyhow::Result<()> {
    let valid = (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    anyhow::ensure!(
        valid,
        "{name:?} cannot be an MCP tool's name: use 1 to 128 letters, digits, '_', '-' or '.' (--name or \"name\" in the config)"
    );
    Ok(())
}

fn default_description(tools: &[String]) -> String {
    let mut text = "Ask an agent: it answers the prompt, using its tools when they help.".to_owned();
    if !tools.is_empty() {
        text.push_str(&format!(" Its tools: {}.", tools.join(", ")));
    }
    text
}
