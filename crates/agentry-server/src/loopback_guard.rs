//! What a server without a token answers: requests addressed to a loopback name, from its own
//! page or no page at all.
//!
//! Without a token, "who can reach the port" is the only access control, and a web page the user
//! visits can reach it too: through DNS rebinding (a name of the attacker's that first resolves
//! to their server, then to 127.0.0.1) its script reads the API as a same-origin page would, and
//! a cross-site `fetch` can `POST` without reading the answer. Either could read conversations or
//! approve pending tool calls. So the `Host` must be a loopback name (a rebound name is not), and
//! a request sent by another site's page (its `Origin`) is refused.
//!
//! With a token these checks are off: a page cannot send a bearer token it does not know.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The hosts and origins a loopback server answers besides its own.
#[derive(Debug, Clone, Default)]
pub struct LoopbackGuard {
    /// Host names (`name` or `name:port`, lower case) allowed besides the loopback ones.
    hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, lower case) allowed besides the page's own.
    origins: Vec<String>,
}

impl LoopbackGuard {
    /// Also answers requests for `host` (a name, or `name:port` for that port only).
    pub fn allow_host(mut self, host: &str) -> Self {
        self.hosts
            .push(host.trim().trim_end_matches('.').to_ascii_lowercase());
        self
    }

    /// Also answers state-changing requests from pages of `origin` (`http://name:port`).
    pub fn allow_origin(mut self, origin: &str) -> Self {
        self.origins
            .push(origin.trim().trim_end_matches('/').to_ascii_lowercase());
        self
    }

    /// The request's `Host`, when it is one this server answers.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let host = host.trim().to_ascii_lowercase();
        let Some((name, _port)) = split_host(&host) else {
            return false;
        };
        is_loopback_name(name)
            || self
                .hosts
                .iter()
                .any(|allowed| *allowed == host || *allowed == name)
    }

    /// Whether the request's `Origin`, if any, is the page's own or an allowed one. A request
    /// without one comes from a program, not from a page.
    fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        let own = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(|host| format!("http://{}", host.trim().to_ascii_lowercase()));
        own.as_deref() == Some(origin.as_str()) || self.origins.contains(&origin)
    }

    /// Refuses a request whose `Host` is not answered here.
    pub(crate) fn check_host(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.host_allowed(headers) {
            return Ok(());
        }
        let host = headers
            .get(header::HOST)
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            .unwrap_or_default();
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!(
                "this server has no token, so it answers requests for localhost, 127.0.0.1 or [::1] only \
                 (a name that is not one of these could be a DNS-rebinding attack); Host {host:?} is refused. \
                 Allow it with --allowed-host, or give the server a token"
            ),
        ))
    }

    /// Refuses a request another site's page sent.
    pub(crate) fn check_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.origin_allowed(headers) {
            return Ok(());
        }
        let origin = headers
            .get(header::ORIGIN)
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            .unwrap_or_default();
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!(
                "a page of another site ({origin:?}) may not use this server: only its own page may. \
                 Allow that origin with --allowed-origin, or give the server a token"
            ),
        ))
    }

    /// The middleware of the API routes: the `Host` always, the `Origin` of every request but
    /// a plain read (the event stream counts as a change: it loads the session and resumes its
    /// reply).
    pub(crate) async fn api(self: std::sync::Arc<Self>, request: Request, next: Next) -> Response {
        if let Err(refused) = self.check_host(request.headers()) {
            return refused.into_response();
        }
        let reads = matches!(*request.method(), Method::GET | Method::HEAD)
            && !request.uri().path().ends_with("/events");
        if !reads && let Err(refused) = self.check_origin(request.headers()) {
            return refused.into_response();
        }
        next.run(request).await
    }

    /// The middleware of the page's static files: the `Host` only (they hold no data).
    pub(crate) async fn page(self: std::sync::Arc<Self>, request: Request, next: Next) -> Response {
        if let Err(refused) = self.check_host(request.headers()) {
            return refused.into_response();
        }
        next.run(request).await
    }
}

/// `host` split into its name and port (`[::1]:8080` → `[::1]`, `8080`); `None` when it is
/// not a host.
fn split_host(host: &str) -> Option<(&str, Option<&str>)> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        let (name, rest) = host.split_at(end + 1);
        match rest.strip_prefix(':') {
            Some(port) => (name, Some(port)),
            None if rest.is_empty() => (name, None),
            None => return None,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() || port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    Some((name.strip_suffix('.').unwrap_or(name), port))
}

/// `localhost`, or an address literal of a loopback interface (literals cannot be rebound).
fn is_loopback_name(name: &str) -> bool {
    if name == "localhost" {
        return true;
    }
    let literal = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    literal
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(host: Option<&str>, origin: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        headers
    }

    #[test]
    fn loopback_names_and_literals_are_answered_other_names_are_not() {
        let guard = LoopbackGuard::default();
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "localhost.:80",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(guard.host_allowed(&headers(Some(host), None)), "{host}");
        }
        for host in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1:8080",
            "[::2]:80",
            "localhost:80x",
            ":8080",
            "[::1]x",
        ] {
            assert!(!guard.host_allowed(&headers(Some(host), None)), "{host}");
        }
        assert!(!guard.host_allowed(&headers(None, None)), "no Host at all");
    }

    #[test]
    fn an_allowed_host_is_answered_by_name_or_with_its_port_only() {
        let guard = LoopbackGuard::default()
            .allow_host("Agentry.Internal")
            .allow_host("box.lan:9000");
        assert!(guard.host_allowed(&headers(Some("agentry.internal:8080"), None)));
        assert!(guard.host_allowed(&headers(Some("box.lan:9000"), None)));
        assert!(!guard.host_allowed(&headers(Some("box.lan:9001"), None)));
    }

    #[test]
    fn only_the_pages_own_origin_an_allowed_one_or_none_passes() {
        let guard = LoopbackGuard::default().allow_origin("http://localhost:3000/");
        let own = headers(Some("127.0.0.1:8080"), Some("http://127.0.0.1:8080"));
        assert!(guard.origin_allowed(&own));
        assert!(guard.origin_allowed(&headers(Some("127.0.0.1:8080"), None)));
        assert!(guard.origin_allowed(&headers(Some("127.0.0.1:8080"), Some("http://localhost:3000"))));
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:8081",
            "https://127.0.0.1:8080",
        ] {
            assert!(
                !guard.origin_allowed(&headers(Some("127.0.0.1:8080"), Some(origin))),
                "{origin}"
            );
        }
    }
}
