//! The streamable HTTP transport: the MCP endpoint at `/mcp`, guarded against DNS rebinding
//! and foreign web pages, and by a bearer token when one is given.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::AgentMcpServer;

/// The path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// Who may reach the HTTP endpoint.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Every request must carry `Authorization: Bearer TOKEN`. Without a token, only requests
    /// addressed to a loopback name or to `allowed_hosts` are answered (DNS rebinding).
    pub token: Option<String>,
    /// More host names (or `name:port`) to answer without a token.
    pub allowed_hosts: Vec<String>,
    /// Web page origins (`http://name:port`) whose requests are accepted; a request with any
    /// other `Origin` gets 403, as the MCP spec requires.
    pub allowed_origins: Vec<String>,
    /// Cancelled to end every MCP session (the server is stopping).
    pub shutdown: CancellationToken,
}

impl AgentMcpServer {
    /// The MCP endpoint at [`MCP_PATH`] as an axum router, to serve with `axum::serve`.
    pub fn http_router(self, options: HttpOptions) -> Router {
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(options.shutdown.clone())
            .with_allowed_origins(options.allowed_origins.clone())
            .enforce_origin_validation();
        if options.token.is_some() {
            // A token stops a rebinding page, which cannot know it: any host name may be used.
            config = config.disable_allowed_hosts();
        } else {
            let mut hosts = config.allowed_hosts.clone();
            hosts.extend(options.allowed_hosts.iter().cloned());
            config = config.with_allowed_hosts(hosts);
        }
        let server = self;
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = Router::new().route_service(MCP_PATH, service);
        match options.token {
            Some(token) => {
                let expected: Arc<str> = format!("Bearer {token}").into();
                router.layer(middleware::from_fn(move |request: Request, next: Next| {
                    let expected = Arc::clone(&expected);
                    async move { authorized(&expected, request, next).await }
                }))
            }
            None => router,
        }
    }
}

async fn authorized(expected: &str, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    if given.is_some_and(|given| constant_time_eq(given.as_bytes(), expected.as_bytes())) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "a bearer token is required",
    )
        .into_response()
}

/// Compares without stopping at the first difference, so that the time taken says nothing of
/// how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
