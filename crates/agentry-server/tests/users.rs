//! A server of several users (a token file of `user:token` lines): each session is its
//! creator's, and to every other caller it does not exist.

use crate::common::Harness;
use agentry_server::{Security, TokenFile};
use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::json;

const TOKENS: &str = "ada:token-of-ada\nbob:token-of-bob\noperator-token\n";

/// Every route that names a session, as `(method, path, body)`.
fn session_routes(id: &str) -> Vec<(reqwest::Method, String, Option<&'static str>)> {
    use reqwest::Method;
    vec![
        (Method::GET, format!("/v1/sessions/{id}"), None),
        (Method::GET, format!("/v1/sessions/{id}/events"), None),
        (
            Method::POST,
            format!("/v1/sessions/{id}/messages"),
            Some(r#"{"text": "mine now"}"#),
        ),
        (
            Method::POST,
            format!("/v1/sessions/{id}/messages"),
            Some("not json"),
        ),
        (Method::POST, format!("/v1/sessions/{id}/cancel"), Some("{}")),
        (
            Method::POST,
            format!("/v1/sessions/{id}/calls/w/cancel"),
            Some("{}"),
        ),
        (
            Method::POST,
            format!("/v1/sessions/{id}/calls/w/decision"),
            Some(r#"{"decision": "approve"}"#),
        ),
        (Method::DELETE, format!("/v1/sessions/{id}"), None),
    ]
}

/// A server of the users of [`TOKENS`] on the database in `dir`.
async fn start(fake: FakeLlm, dir: tempfile::TempDir) -> Harness {
    Harness::start_with(fake, dir, Security::Users(TokenFile::parse(TOKENS).unwrap())).await
}

fn names(list: &serde_json::Value) -> Vec<String> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_session_answers_404_on_every_route_and_is_left_as_it_was() {
    let mut server = start(FakeLlm::start().await, tempfile::tempdir().unwrap()).await;
    server.bearer = Some("token-of-ada".into());
    let id = server.session("ada's").await;
    // Ada's reply waits for her approval: the session is loaded, with a call pending.
    server.fake.push(Reply::tool_calls([Call::new(
        "w",
        "write_note",
        r#"{"text": "hello"}"#,
    )]));
    server.fake.push(Reply::text("Noted."));
    let mut events = server.events(&id, None).await;
    let (status, _) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "note it"}))
        .await;
    assert_eq!(status, 202);
    events.until(|e| e.agent_type() == "approval_requested").await;

    for (who, token) in [("bob", "token-of-bob"), ("the operator", "operator-token")] {
        server.bearer = Some(token.into());
        for (method, path, body) in session_routes(&id) {
            let (status, answer) = server.send(method.clone(), &path, body).await;
            assert_eq!(status, 404, "{who}: {method} {path}: {answer}");
            assert_eq!(answer["error"]["code"], "session_not_found", "{who}: {path}");
        }
        let (_, list) = server.get("/v1/sessions").await;
        assert!(names(&list).is_empty(), "{who} sees {list}");
    }
    server.bearer = Some("token-of-bob".into());
    server.session("bob's").await;
    // A name is the user's own: Ada's session name is free for Bob, and tells him nothing.
    let bobs_own = server.session("ada's").await;
    assert_ne!(bobs_own, id);
    let (_, list) = server.get("/v1/sessions").await;
    let mut listed = names(&list);
    listed.sort();
    assert_eq!(listed, ["ada's", "bob's"]);

    // Nothing they sent reached Ada's session: her call still waits, and she decides it.
    server.bearer = Some("token-of-ada".into());
    let (status, shown) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(shown["pending_approvals"].as_array().unwrap().len(), 1, "{shown}");
    let (status, _) = server
        .post(
            &format!("/v1/sessions/{id}/calls/w/decision"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 200);
    events.reply().await;
    let (_, shown) = server.get(&format!("/v1/sessions/{id}")).await;
    let texts: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"][0]["text"].as_str())
        .collect();
    assert_eq!(texts.first(), Some(&"note it"), "{texts:?}");
    assert!(!texts.contains(&"mine now"), "{texts:?}");
    let (_, list) = server.get("/v1/sessions").await;
    assert_eq!(names(&list), ["ada's"]);
    server.fake.assert_no_violations();
}

/// After a restart the sessions are still their owners' (the owner is kept in the store),
/// including one that was never loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ownership_survives_a_restart() {
    let mut server = start(FakeLlm::start().await, tempfile::tempdir().unwrap()).await;
    server.bearer = Some("token-of-ada".into());
    let id = server.session("kept").await;
    let (fake, dir) = server.stop().await;
    let mut server = start(fake, dir).await;
    server.bearer = Some("token-of-bob".into());
    assert_eq!(server.get(&format!("/v1/sessions/{id}")).await.0, 404);
    server.bearer = Some("token-of-ada".into());
    assert_eq!(server.get(&format!("/v1/sessions/{id}")).await.0, 200);
}
