//! agentry's HTTP API: durable sessions driven over HTTP, with a live event stream.
//!
//! Ops in, events out, as in the terminal: `POST /v1/sessions/{id}/messages` starts a reply;
//! `GET /v1/sessions/{id}/events` streams every [`AgentEvent`](agentry::agent::AgentEvent) of
//! the session in its serialized shape, each with an id (`Last-Event-ID` resumes after a dropped
//! connection, or after the server restarted: events are also kept in the store); calls and replies are cancelled and approvals decided with `POST`s. Sessions
//! live in a [`SessionStore`](agentry_store::SessionStore): on SQLite, the server holds a
//! session's writer lease from its first message or event stream until it stops; on a store
//! shared by several nodes (PostgreSQL), any node answers for any session (see `cluster`).
//!
//! Binding anything but loopback requires a bearer token, checked in constant time on every
//! API route ([`Security`]). The web page at `/` (static files, no data) asks for it. Without a
//! token, the server answers only requests addressed to a loopback name (`localhost`,
//! `127.0.0.1`, `[::1]`) and refuses changes sent by another site's page (its `Origin`), so a
//! web page cannot drive it through DNS rebinding or a cross-site request
//! ([`Server::allow_host`], [`Server::allow_origin`] widen this).
//!
//! ```no_run
//! # async fn demo(model: std::sync::Arc<dyn agentry::model::ChatModel>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use agentry_server::{Security, Server};
//!
//! let store = Arc::new(agentry_store::SqliteStore::open_default()?);
//! let toolkit = agentry::tool::Toolkit::new();
//! let tools = toolkit.clone();
//! let server = Server::new(store, toolkit, Arc::new(move |_owner: Option<&str>| {
//!     agentry::ReActAgent::builder().name("agentry").model(Arc::clone(&model)).toolkit(tools.clone())
//! }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, Security::Loopback, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod a2a;
mod bodies;
mod cluster;
mod control;
mod error;
mod events;
mod idle;
mod log_tails;
mod loopback_guard;
mod openapi;
mod page;
mod retention;
mod routes;
mod state;
mod users;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use agentry::tool::Toolkit;
use agentry_store::SessionStore;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};

pub use a2a::AgentIdentity;
pub use error::ApiError;
pub use loopback_guard::LoopbackGuard;
pub use openapi::ApiDoc;
pub use state::AgentFactory;
pub use users::{Caller, TokenFile, TokenFileError};

use state::AppState;

/// How long running replies may take to wind down when the server stops (their tools'
/// `on_cancel`, the grace period of a cancel).
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Who may call the server.
#[derive(Clone)]
pub enum Security {
    /// Anyone who can reach it: only for a loopback address.
    Loopback,
    /// Requests carrying `Authorization: Bearer TOKEN`, from the server's own user.
    Token(String),
    /// Requests carrying one of the tokens of a token file, each from its user: a session
    /// belongs to the user who made it, and is not found by any other.
    Users(TokenFile),
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Security::Loopback => f.write_str("Loopback"),
            Security::Token(_) => f.write_str("Token(…)"),
            Security::Users(tokens) => write!(f, "Users({tokens:?})"),
        }
    }
}

/// Why the server does not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Binding anything but loopback without a token would let anyone drive the agent.
    #[error("{0} is not a loopback address: give a token (--token-file) to serve on it")]
    NoToken(SocketAddr),
    /// An empty token would accept an empty `Authorization` header.
    #[error("the token is empty")]
    EmptyToken,
    /// The listener failed.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The HTTP server of a store of sessions.
pub struct Server {
    state: Arc<AppState>,
    guard: LoopbackGuard,
    retain: Option<std::time::Duration>,
}

impl Server {
    /// A server of `store`'s sessions, their agents made by `factory`; `toolkit` is what
    /// `GET /v1/tools` lists (the factory's agents should have these tools).
    pub fn new(store: Arc<dyn SessionStore>, toolkit: Toolkit, factory: AgentFactory) -> Self {
        let mut state = AppState::new(store, factory, toolkit);
        state.idle_unload = Some(idle::DEFAULT_IDLE_UNLOAD);
        Server {
            state: Arc::new(state),
            guard: LoopbackGuard::default(),
            retain: None,
        }
    }

    /// Deletes, while serving, what is older than `retain`: events (a client can resume only
    /// from newer ones) and sessions unused for that long whose calls all ended (see
    /// [`SessionStore::purge`](agentry_store::SessionStore::purge)). At the start, then every
    /// quarter of `retain` (at most every hour).
    pub fn retain(mut self, retain: std::time::Duration) -> Self {
        self.retain = Some(retain);
        self
    }

    /// Unloads a session unused for `idle` (no request, no reply; default 60 s, `None`:
    /// never): its memory and writer lease are given back, its clients' streams stay open, and
    /// the next request loads it again. On a store shared with other nodes a session is
    /// unloaded as soon as its reply ends, whatever this says.
    pub fn unload_idle_after(mut self, idle: Option<std::time::Duration>) -> Self {
        if let Some(state) = Arc::get_mut(&mut self.state) {
            state.idle_unload = idle;
        }
        self
    }

    /// Who the agent is: the name and description its A2A agent card gives.
    pub fn identity(mut self, identity: AgentIdentity) -> Self {
        if let Some(state) = Arc::get_mut(&mut self.state) {
            state.identity = identity;
        }
        self
    }

    /// Without a token, also answer requests addressed to `host` (a name, or `name:port`), as
    /// when the server is reached under a name of the machine's own. Loopback names always are.
    pub fn allow_host(mut self, host: &str) -> Self {
        self.guard = self.guard.allow_host(host);
        self
    }

    /// Without a token, also accept changes sent by pages of `origin` (`http://name:port`).
    /// The server's own page always may.
    pub fn allow_origin(mut self, origin: &str) -> Self {
        self.guard = self.guard.allow_origin(origin);
        self
    }

    /// The API behind `security`, and the web page at `/`.
    pub fn router(&self, security: Security) -> Router {
        // The page and the A2A agent card are open: they hold no data.
        let public = page::routes()
            .route(
                "/.well-known/agent-card.json",
                axum::routing::get(a2a::agent_card),
            )
            .with_state(Arc::clone(&self.state));
        let page = match security {
            Security::Loopback => {
                let guard = Arc::new(self.guard.clone());
                public.layer(middleware::from_fn(move |request: Request, next: Next| {
                    Arc::clone(&guard).page(request, next)
                }))
            }
            Security::Token(_) | Security::Users(_) => public,
        };
        page.merge(self.api(security))
    }

    fn api(&self, security: Security) -> Router {
        let router = routes::routes()
            .route("/openapi.json", axum::routing::get(openapi::document))
            .with_state(Arc::clone(&self.state));
        let tokens = match security {
            Security::Loopback => {
                let guard = Arc::new(self.guard.clone());
                return router
                    .layer(middleware::from_fn(move |request: Request, next: Next| {
                        Arc::clone(&guard).api(request, next)
                    }))
                    .layer(Extension(Caller::Operator));
            }
            Security::Token(token) => TokenFile::single(&token),
            Security::Users(tokens) => tokens,
        };
        let tokens = Arc::new(tokens);
        router.layer(middleware::from_fn(
            move |headers: HeaderMap, mut request: Request, next: Next| {
                let tokens = Arc::clone(&tokens);
                async move {
                    match caller(&headers, &tokens) {
                        Some(caller) => {
                            request.extensions_mut().insert(caller);
                            next.run(request).await
                        }
                        None => unauthorized(),
                    }
                }
            },
        ))
    }

    /// Serves on `listener` until `shutdown` resolves. Refuses a non-loopback address without
    /// a token. On shutdown, new requests are refused, event streams end, and running replies
    /// are cancelled with the reply reason and waited for (up to 10 s) so that what they did is
    /// committed.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        security: Security,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let addr = listener.local_addr()?;
        match &security {
            Security::Loopback if !addr.ip().is_loopback() => return Err(ServeError::NoToken(addr)),
            Security::Token(token) if token.is_empty() => return Err(ServeError::EmptyToken),
            Security::Users(tokens) if tokens.has_empty_token() => return Err(ServeError::EmptyToken),
            _ => {}
        }
        let app = self.router(security);
        let state = Arc::clone(&self.state);
        if state.is_clustered() {
            cluster::start_sweeping(&state);
            control::start_serving(&state);
        }
        if let Some(retain) = self.retain {
            retention::start(&state, retain);
        }
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                state.stop(STOP_GRACE).await;
            })
            .await?;
        Ok(())
    }
}

/// Who the request's bearer token is of, if anyone's.
fn caller(headers: &HeaderMap, tokens: &TokenFile) -> Option<Caller> {
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))?;
    tokens.caller(given)
}

fn unauthorized() -> Response {
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "a bearer token is required: Authorization: Bearer TOKEN",
    )
    .into_response();
    response.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    response
}
