//! A server without a token against a web page of another site: DNS rebinding (a foreign
//! `Host`) and cross-site requests (a foreign `Origin`) are refused and change nothing; the
//! server's own page and plain programs still work.

use agentry_server::Security;
use agentry_testkit::FakeLlm;
use serde_json::{Value, json};

use crate::common::Harness;

/// `method path` with these headers: the status and the body.
async fn request(
    server: &Harness,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = server
        .client
        .request(method.clone(), format!("{}{path}", server.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if method == reqwest::Method::POST {
        let body = match path {
            "/v1/sessions" => json!({"name": "from a page"}),
            _ => json!({"text": "hi"}),
        };
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = crate::common::within("a response", request.send()).await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn port(server: &Harness) -> &str {
    server.base.rsplit(':').next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_host_name_is_refused_on_every_route_and_the_page() {
    let server = Harness::start().await;
    let id = server.session("private").await;
    let evil = format!("evil.example:{}", port(&server));
    for (method, path) in [
        (reqwest::Method::GET, "/v1/sessions".to_owned()),
        (reqwest::Method::GET, format!("/v1/sessions/{id}")),
        (reqwest::Method::GET, format!("/v1/sessions/{id}/events")),
        (reqwest::Method::POST, "/v1/sessions".to_owned()),
        (
            reqwest::Method::POST,
            format!("/v1/sessions/{id}/calls/c1/decision"),
        ),
        (reqwest::Method::GET, "/".to_owned()),
        (reqwest::Method::GET, "/app.js".to_owned()),
    ] {
        let (status, body) = request(&server, method.clone(), &path, &[("host", &evil)]).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        if !path.starts_with("/v1") {
            continue;
        }
        assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    }
    // Nothing was created, and the loopback names are answered as before.
    for host in [
        format!("localhost:{}", port(&server)),
        format!("127.0.0.1:{}", port(&server)),
    ] {
        let (status, listed) =
            request(&server, reqwest::Method::GET, "/v1/sessions", &[("host", &host)]).await;
        assert_eq!(status, 200, "{host}: {listed}");
        assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
    }
    let (status, _) = request(&server, reqwest::Method::GET, "/", &[]).await;
    assert_eq!(status, 200, "the page itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_cannot_create_decide_or_stream_but_the_pages_own_can() {
    let server = Harness::start().await;
    let id = server.session("private").await;
    let foreign = [("origin", "http://evil.example")];
    for path in [
        "/v1/sessions".to_owned(),
        format!("/v1/sessions/{id}/messages"),
        format!("/v1/sessions/{id}/cancel"),
        format!("/v1/sessions/{id}/calls/c1/cancel"),
        format!("/v1/sessions/{id}/calls/c1/decision"),
    ] {
        let (status, body) = request(&server, reqwest::Method::POST, &path, &foreign).await;
        assert_eq!(status, 403, "POST {path}: {body}");
        assert_eq!(body["error"]["code"], "origin_not_allowed", "{body}");
    }
    let (status, _) = request(
        &server,
        reqwest::Method::DELETE,
        &format!("/v1/sessions/{id}"),
        &foreign,
    )
    .await;
    assert_eq!(status, 403, "DELETE");
    let (status, _) = request(
        &server,
        reqwest::Method::GET,
        &format!("/v1/sessions/{id}/events"),
        &foreign,
    )
    .await;
    assert_eq!(status, 403, "the event stream");
    let (status, _) = request(
        &server,
        reqwest::Method::GET,
        &format!("/v1/sessions/{id}/events"),
        &[("origin", "null")],
    )
    .await;
    assert_eq!(status, 403, "a sandboxed page's null origin");
    // No session was created, none deleted, no reply started.
    let (_, listed) = server.get("/v1/sessions").await;
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["replying"], false, "{listed}");
    assert!(server.fake.requests().is_empty(), "no reply reached the model");

    // The server's own page (its origin is the Host it was loaded from).
    let own = server.base.clone();
    let (status, created) = request(
        &server,
        reqwest::Method::POST,
        "/v1/sessions",
        &[("origin", &own)],
    )
    .await;
    assert_eq!(status, 201, "{created}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_and_origins_are_answered_and_a_token_server_does_not_check() {
    let server = Harness::start_configured(
        FakeLlm::start().await,
        tempfile::tempdir().unwrap(),
        Security::Loopback,
        |server| {
            server
                .allow_host("agentry.lan")
                .allow_origin("http://tools.lan:3000")
        },
    )
    .await;
    let host = format!("agentry.lan:{}", port(&server));
    let (status, body) = request(&server, reqwest::Method::GET, "/v1/sessions", &[("host", &host)]).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = request(
        &server,
        reqwest::Method::POST,
        "/v1/sessions",
        &[("host", &host), ("origin", "http://tools.lan:3000")],
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = request(
        &server,
        reqwest::Method::GET,
        "/v1/sessions",
        &[("host", "other.lan")],
    )
    .await;
    assert_eq!(status, 403);

    // A page cannot send a token it does not know: with one, the token is the check.
    let guarded = Harness::start_with(
        FakeLlm::start().await,
        tempfile::tempdir().unwrap(),
        Security::Token("t0ken".into()),
    )
    .await;
    let response = guarded
        .client
        .get(format!("{}/v1/sessions", guarded.base))
        .header("host", "agentry.example.com")
        .header("origin", "https://agentry.example.com")
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
}
