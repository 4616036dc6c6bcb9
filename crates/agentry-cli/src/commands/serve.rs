//! `agentry serve`: the agent over HTTP (see the `agentry-server` crate), on the session store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agentry_server::{AgentIdentity, Security, Server, TokenFile};
use agentry_store::SessionStore;
use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use crate::setup::args::AgentArgs;
use crate::setup::plan::AgentPlan;
use crate::setup::{Recipe, recipe};

/// The environment variable holding the bearer token, when no --token-file is given.
const TOKEN_ENV: &str = "AGENTRY_SERVER_TOKEN";

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Address to listen on; anything but loopback needs a token
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// File holding the bearer token every request must carry (`Authorization: Bearer TOKEN`),
    /// or one `user:token` per line for a server of several users: each user's sessions and
    /// long-term memory are their own, and another's sessions answer 404 [env:
    /// AGENTRY_SERVER_TOKEN, a single token]
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Without a token, also answer requests addressed to this host name (or `name:port`);
    /// loopback names always are, others are refused against DNS rebinding (repeatable)
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Without a token, also accept changes sent by web pages of this origin
    /// (`http://name:port`); the server's own page always may (repeatable)
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Delete events older than this, and sessions unused for this long whose calls all ended
    /// (long-term memories stay): `30d`, `12h`, `90m`, `45s` [default: keep everything]
    #[arg(long, value_name = "DURATION", value_parser = crate::config::parse_retention)]
    pub retain: Option<std::time::Duration>,
    /// Unload a session unused for this long (its clients' streams stay open; the next
    /// request loads it again): `60s`, `10m`
    #[arg(long, value_name = "DURATION", value_parser = crate::config::parse_retention, default_value = "60s")]
    pub unload_idle: std::time::Duration,
}

/// Who may use a server at `addr`: the token file's single token or `user:token` lines, else
/// the token in `AGENTRY_SERVER_TOKEN`, else nobody but loopback clients (refused off
/// loopback). `agentry serve` and `agentry mcp serve` read their tokens the same way.
pub(crate) fn security(token_file: Option<&std::path::Path>, addr: SocketAddr) -> anyhow::Result<Security> {
    if let Some(path) = token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("the token file {}: {e}", path.display()))?;
        // One line without a colon is today's single token.
        let single = text.trim();
        if single.is_empty() {
            anyhow::bail!("the token is empty: {} holds no token", path.display());
        }
        if !single.contains([':', '\n']) {
            return Ok(Security::Token(single.to_owned()));
        }
        let tokens = TokenFile::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        return Ok(Security::Users(tokens));
    }
    match std::env::var(TOKEN_ENV).ok().map(|t| t.trim().to_owned()) {
        Some(token) if token.is_empty() => anyhow::bail!("the token is empty"),
        Some(token) => Ok(Security::Token(token)),
        None if addr.ip().is_loopback() => Ok(Security::Loopback),
        None => anyhow::bail!(
            "{addr} is not a loopback address: anyone who reaches it could drive the agent; give a token with \
             --token-file FILE or {TOKEN_ENV}"
        ),
    }
}

/// Waits for SIGTERM or SIGINT.
pub async fn stop_signal() {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    eprintln!("agentry serve: stopping (running replies are cancelled and saved)");
}

pub async fn serve(args: ServeArgs) -> ExitCode {
    crate::exit::config_exit(serve_until_stopped(args).await)
}

async fn serve_until_stopped(args: ServeArgs) -> anyhow::Result<()> {
    // Everything that can be wrong with the options is found before a model loads.
    anyhow::ensure!(
        args.agent.session.is_none(),
        "serve serves every session of the database; --session is for run and chat"
    );
    let security = security(args.token_file.as_deref(), args.addr)?;
    let plan = AgentPlan::resolve(&args.agent)?;
    let mut identity = AgentIdentity::default();
    if let Some(name) = &plan.file.name {
        identity.name = name.clone();
    }
    if let Some(description) = &plan.file.description {
        identity.description = description.clone();
    }
    let store: Arc<dyn SessionStore> = plan.store.open_sessions().await?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.addr))?;
    let Recipe {
        builder,
        toolkit,
        mcp,
        local: _,
    } = recipe(plan).await?;
    let mut server = Server::new(store, toolkit, builder).identity(identity);
    for host in &args.allowed_hosts {
        server = server.allow_host(host);
    }
    for origin in &args.allowed_origins {
        server = server.allow_origin(origin);
    }
    if let Some(retain) = args.retain {
        server = server.retain(retain);
    }
    server = server.unload_idle_after(Some(args.unload_idle));
    let addr = listener.local_addr()?;
    eprintln!("agentry serve: listening on http://{addr} (Ctrl-C or SIGTERM stops)");
    let served = server.serve(listener, security, stop_signal()).await;
    mcp.close().await;
    Ok(served?)
}
