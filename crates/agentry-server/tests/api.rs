//! The HTTP API end to end: a real server on a SQLite file, the fake model server speaking the
//! OpenAI wire format, and a client reading the server-sent events.

use crate::common::{Harness, SseEvent};
use agentry::tool::CANCELLED_RUNNING;
use agentry_server::{Security, ServeError, Server};
use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use serde_json::json;

fn ids(events: &[SseEvent]) -> Vec<u64> {
    events.iter().filter_map(|e| e.id).collect()
}

fn answer(events: &[SseEvent]) -> String {
    events
        .iter()
        .rev()
        .find(|e| {
            e.agent_type() == "message" && e.data["last"] == true && e.data["msg"]["role"] == "assistant"
        })
        .and_then(|e| e.data["msg"]["content"][0]["text"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_streams_as_numbered_events_and_a_dropped_client_resumes_without_loss_or_duplicates() {
    let server = Harness::start().await;
    let id = server.session("talk").await;
    server.fake.push(Reply::text("Hello there."));
    server.fake.push(Reply::text("Second answer."));

    let mut events = server.events(&id, None).await;
    let (status, started) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "hi"}))
        .await;
    assert_eq!(status, 202, "{started}");
    let first = events.reply().await;
    assert_eq!(answer(&first), "Hello there.");
    let first_ids = ids(&first);
    assert_eq!(first_ids, (1..=first_ids.len() as u64).collect::<Vec<_>>());
    assert!(first.iter().all(|e| e.kind == "agent"));
    events.close();

    // The second reply runs while nobody listens; the client comes back with its last id.
    let (status, _) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "more"}))
        .await;
    assert_eq!(status, 202);
    let last = *first_ids.last().unwrap();
    let mut resumed = server.events(&id, Some(last)).await;
    let second = resumed.reply().await;
    assert_eq!(answer(&second), "Second answer.");
    assert_eq!(
        ids(&second)[0],
        last + 1,
        "the first event after the last one seen, none twice"
    );

    // Two clients on one session see the same events.
    server.fake.push(Reply::text("Third."));
    let mut a = server.events(&id, Some(*ids(&second).last().unwrap())).await;
    let mut b = server.events(&id, Some(*ids(&second).last().unwrap())).await;
    server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "again"}))
        .await;
    let (seen_a, seen_b) = (a.reply().await, b.reply().await);
    assert_eq!(ids(&seen_a), ids(&seen_b));
    assert_eq!(answer(&seen_b), "Third.");

    let (status, shown) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(shown["messages"].as_array().unwrap().len(), 6);
    server.fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_with_its_last_event_id_after_the_server_restarts_without_loss_or_duplicates() {
    let server = Harness::start().await;
    let id = server.session("restart").await;
    server
        .fake
        .push(Reply::text("Before the restart, in pieces.").chunks(4));
    // One client drops in the middle of the reply, the other sees all of it.
    let mut dropped = server.events(&id, None).await;
    let mut whole = server.events(&id, None).await;
    server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "hi"}))
        .await;
    let dropped_at = dropped.next().await.id.unwrap();
    dropped.close();
    let first = whole.reply().await;
    whole.close();
    let last = *ids(&first).last().unwrap();
    let (fake, dir) = server.stop().await;

    let server = Harness::start_with(fake, dir, Security::Loopback).await;
    let (status, shown) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert!(shown["last_event_id"].as_u64().unwrap() >= last, "{shown}");
    server.fake.push(Reply::text("After the restart."));
    let mut whole = server.events(&id, Some(last)).await;
    let mut dropped = server.events(&id, Some(dropped_at)).await;
    let (status, _) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "again"}))
        .await;
    assert_eq!(status, 202);

    let second = whole.reply().await;
    assert_eq!(answer(&second), "After the restart.");
    let second_ids = ids(&second);
    assert!(
        second_ids[0] > last,
        "ids go on above the ones handed out: {second_ids:?}"
    );
    assert!(second_ids.windows(2).all(|w| w[0] < w[1]), "{second_ids:?}");

    // The client that dropped gets what it missed of the first reply from the store (the
    // message's streamed states are superseded by its final one), then the second reply.
    let missed = dropped.reply().await;
    let kept: Vec<&SseEvent> = first
        .iter()
        .filter(|e| e.id.unwrap() > dropped_at && !(e.agent_type() == "message" && e.data["last"] == false))
        .collect();
    assert_eq!(
        missed.iter().map(|e| (e.id, &e.data)).collect::<Vec<_>>(),
        kept.iter().map(|e| (e.id, &e.data)).collect::<Vec<_>>()
    );
    assert_eq!(answer(&missed), "Before the restart, in pieces.");
    assert_eq!(ids(&dropped.reply().await), second_ids);
    server.fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_decided_and_running_calls_cancelled_over_http() {
    let server = Harness::start().await;
    let id = server.session("work").await;
    server.fake.push(Reply::tool_calls([
        Call::new("w", "write_note", r#"{"text": "hello"}"#),
        Call::new("p", "pages", r#"{"text": "book"}"#),
    ]));
    server.fake.push(Reply::text("Noted, and stopped reading."));
    let mut events = server.events(&id, None).await;
    server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "go"}))
        .await;
    events
        .until(|e| e.agent_type() == "approval_requested" && e.data["call_id"] == "w")
        .await;
    let (status, refused) = server
        .post(
            &format!("/v1/sessions/{id}/calls/p/decision"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((status, &refused["error"]["code"]), (409, &json!("not_pending")));
    let (status, _) = server
        .post(
            &format!("/v1/sessions/{id}/calls/w/decision"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 200);
    events
        .until(|e| e.agent_type() == "tool_progress" && e.data["call_id"] == "p")
        .await;
    let (status, cancelled) = server
        .post(&format!("/v1/sessions/{id}/calls/p/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{cancelled}");
    let rest = events.reply().await;
    let finished: Vec<_> = rest
        .iter()
        .filter(|e| e.agent_type() == "tool_finished")
        .map(|e| (e.data["call_id"].clone(), e.data["state"]["state"].clone()))
        .collect();
    assert!(
        finished.contains(&(json!("p"), json!("cancelled"))),
        "{finished:?}"
    );
    assert_eq!(answer(&rest), "Noted, and stopped reading.");

    // The model read the partial result; a cancel of the finished call changes nothing.
    let told = server.fake.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == "p")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap();
    assert_eq!(told, "read 1 page before the cancel");
    assert_ne!(told, CANCELLED_RUNNING);
    let (status, refused) = server
        .post(&format!("/v1/sessions/{id}/calls/p/cancel"), json!({}))
        .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (409, &json!("call_finished")),
        "{refused}"
    );
    server.fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_clear_4xx_and_change_nothing() {
    let server = Harness::start().await;
    let id = server.session("one").await;
    for (path, body) in [
        ("/v1/sessions/nope/messages", Some(r#"{"text": "hi"}"#)),
        ("/v1/sessions/nope/cancel", Some("{}")),
        ("/v1/sessions/nope/calls/c/cancel", Some("{}")),
        (
            "/v1/sessions/nope/calls/c/decision",
            Some(r#"{"decision": "approve"}"#),
        ),
    ] {
        let (status, error) = server.send(reqwest::Method::POST, path, body).await;
        assert_eq!(
            (status, &error["error"]["code"]),
            (404, &json!("session_not_found")),
            "{path}"
        );
    }
    let (status, _) = server.get("/v1/sessions/nope").await;
    assert_eq!(status, 404);
    let (status, _) = server
        .send(reqwest::Method::DELETE, "/v1/sessions/nope", None)
        .await;
    assert_eq!(status, 404);
    for (path, body) in [
        ("/v1/sessions", "{not json"),
        ("/v1/sessions", r#"{"name": ""}"#),
        ("/v1/sessions", r#"{"name": "x", "extra": 1}"#),
        (&*format!("/v1/sessions/{id}/messages"), r#"{"text": 5}"#),
        (&*format!("/v1/sessions/{id}/messages"), r#"{"text": "  "}"#),
        (
            &*format!("/v1/sessions/{id}/calls/c/decision"),
            r#"{"decision": "maybe"}"#,
        ),
    ] {
        let (status, error) = server.send(reqwest::Method::POST, path, Some(body)).await;
        assert_eq!(status, 400, "{path} {body}: {error}");
        assert!(error["error"]["message"].is_string());
    }
    let (status, error) = server.post("/v1/sessions", json!({"name": "one"})).await;
    assert_eq!((status, &error["error"]["code"]), (409, &json!("name_taken")));

    // A message while a reply runs.
    let gate = Gate::new();
    server
        .fake
        .push(Reply::text("slow answer").pause_after(0, gate.clone()));
    let (status, _) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "first"}))
        .await;
    assert_eq!(status, 202);
    let (status, error) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "second"}))
        .await;
    assert_eq!((status, &error["error"]["code"]), (409, &json!("reply_running")));
    let (status, error) = server
        .send(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!((status, &error["error"]["code"]), (409, &json!("reply_running")));
    gate.reached().await;
    gate.open();
    let mut events = server.events(&id, Some(0)).await;
    events.reply().await;

    let (status, shown) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        shown["messages"].as_array().unwrap().len(),
        2,
        "only the first message and its answer"
    );
    assert_eq!(server.fake.request_count(), 1);
    let (status, _) = server
        .send(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_off_loopback_and_checked_on_every_route() {
    let store = std::sync::Arc::new(
        agentry_store::SqliteStore::open(tempfile::tempdir().unwrap().path().join("s.db")).unwrap(),
    );
    let server = Server::new(
        store,
        crate::common::toolkit(),
        std::sync::Arc::new(|_: Option<&str>| agentry::ReActAgent::builder()),
    );
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let refused = server
        .serve(listener, Security::Loopback, std::future::pending())
        .await;
    assert!(matches!(refused, Err(ServeError::NoToken(_))), "{refused:?}");

    let guarded = Harness::start_with(
        FakeLlm::start().await,
        tempfile::tempdir().unwrap(),
        Security::Token("s3cret-token".into()),
    )
    .await;
    for path in ["/healthz", "/v1/sessions", "/v1/tools", "/v1/sessions/x/events"] {
        let url = format!("{}{path}", guarded.base);
        let none = guarded.client.get(&url).send().await.unwrap();
        assert_eq!(none.status().as_u16(), 401, "{path}");
        let wrong = guarded
            .client
            .get(&url)
            .bearer_auth("s3cret-tokem")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 401, "{path}");
    }
    // A2A: the JSON-RPC endpoint needs the token; the agent card, which holds no data, not.
    let a2a = guarded
        .client
        .post(format!("{}/a2a", guarded.base))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(a2a.status().as_u16(), 401);
    let card = guarded
        .client
        .get(format!("{}/.well-known/agent-card.json", guarded.base))
        .send()
        .await
        .unwrap();
    assert_eq!(card.status().as_u16(), 200);
    let right = guarded
        .client
        .get(format!("{}/v1/tools", guarded.base))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(right.status().as_u16(), 200);
    let tools: serde_json::Value = serde_json::from_str(&right.text().await.unwrap()).unwrap();
    let names: Vec<_> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(
        names,
        [
            json!("write_note"),
            json!("sign_up"),
            json!("pages"),
            json!("helper")
        ]
    );
    assert_eq!(tools["tools"][0]["requires_approval"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_cancels_the_running_reply_and_commits_it_and_the_next_server_shows_it() {
    let server = Harness::start().await;
    let id = server.session("long").await;
    server.fake.push(Reply::tool_calls([Call::new(
        "p",
        "pages",
        r#"{"text": "book"}"#,
    )]));
    let mut events = server.events(&id, None).await;
    server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "read"}))
        .await;
    events.until(|e| e.agent_type() == "tool_progress").await;
    let (fake, dir) = server.stop().await;
    // The stream saw the reply end before it closed.
    let rest = events.until(|e| e.agent_type() == "reply_finished").await;
    assert_eq!(
        rest.last().unwrap().data["stop_reason"]["reason"],
        "cancelled",
        "{:?}",
        rest.last()
    );
    assert_eq!(fake.request_count(), 1, "no model request after the stop");

    let again = Harness::start_with(fake, dir, Security::Loopback).await;
    let (status, shown) = again.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    let messages = shown["messages"].as_array().unwrap();
    let result = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .unwrap();
    assert_eq!(result["output"][0]["text"], "read 1 page before the cancel");
    assert_eq!(shown["calls"][0]["status"]["outcome"]["state"], "cancelled");
    again.fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_route() {
    let server = Harness::start().await;
    let (status, doc) = server.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    for path in [
        "/healthz",
        "/v1/tools",
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/messages",
        "/v1/sessions/{id}/events",
        "/v1/sessions/{id}/cancel",
        "/v1/sessions/{id}/calls/{call_id}/cancel",
        "/v1/sessions/{id}/calls/{call_id}/decision",
    ] {
        assert!(paths.iter().any(|p| *p == path), "{path} in {paths:?}");
    }
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_name_with_a_control_character_at_its_end_is_refused() {
    // Found by schemathesis: trimming took the vertical tab away before the check.
    let server = Harness::start().await;
    for name in ["work\u{b}", "\tplan", "a\u{85}b"] {
        let (status, error) = server.post("/v1/sessions", json!({ "name": name })).await;
        assert_eq!(
            (status, &error["error"]["code"]),
            (400, &json!("bad_name")),
            "{name:?}"
        );
    }
    let (_, listed) = server.get("/v1/sessions").await;
    assert_eq!(listed["sessions"], json!([]));
    // What counts as white space is what the document's patterns spell out.
    let (status, _) = server.post("/v1/sessions", json!({ "name": "\u{3000}" })).await;
    assert_eq!(status, 400);
    let id = server.session("s").await;
    let (status, error) = server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({ "text": " \u{a0}\u{2029}" }),
        )
        .await;
    assert_eq!((status, &error["error"]["code"]), (400, &json!("empty_message")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_streams_as_plan_changed_events_and_is_part_of_the_session() {
    let server = Harness::start_planned().await;
    let id = server.session("planned").await;
    let create = json!({
        "name": "move", "description": "move house", "expected_outcome": "moved",
        "subtasks": [
            {"name": "pack", "description": "pack boxes", "expected_outcome": "boxes"},
            {"name": "drive", "description": "drive the van", "expected_outcome": "arrived"}
        ]
    });
    server.fake.push(Reply::tool_calls([Call::new(
        "c1",
        "create_plan",
        create.to_string(),
    )]));
    server.fake.push(Reply::tool_calls([Call::new(
        "c2",
        "update_subtask_state",
        r#"{"subtask_idx": 0, "state": "in_progress"}"#,
    )]));
    server.fake.push(Reply::text("Packing."));
    let mut events = server.events(&id, None).await;
    server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"text": "help me move"}),
        )
        .await;
    let seen = events.reply().await;
    let plans: Vec<&serde_json::Value> = seen
        .iter()
        .filter(|e| e.agent_type() == "plan_changed")
        .map(|e| &e.data["plan"])
        .collect();
    assert_eq!(plans.len(), 2, "{seen:?}");
    assert_eq!(plans[0]["subtasks"][0]["state"], "todo");
    assert_eq!(plans[1]["subtasks"][0]["state"], "in_progress");
    let (_, shown) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(shown["plan"]["name"], "move");
    assert_eq!(shown["plan"]["subtasks"][0]["state"], "in_progress");
    // The hint went to the model and is not part of the session.
    let last = server.fake.requests()[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    assert!(
        last["content"].as_str().unwrap().contains("working on subtask 0"),
        "{last}"
    );
    assert!(!shown["messages"].to_string().contains("system-hint"));
    server.fake.assert_no_violations();
}

/// A session unused for the idle time is unloaded (its writer lease given back: another
/// process may open it) while its client keeps streaming; the next message loads it again, and
/// the open stream gets that reply, its ids following on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_unloaded_and_its_open_stream_gets_the_next_reply() {
    use agentry_store::{SessionId, SessionStore, SqliteStore, StoreError};
    let server = Harness::start_configured(
        FakeLlm::start().await,
        tempfile::tempdir().unwrap(),
        Security::Loopback,
        |server| server.unload_idle_after(Some(std::time::Duration::from_millis(200))),
    )
    .await;
    let id = server.session("idle").await;
    server.fake.push(Reply::text("First."));
    server.fake.push(Reply::text("Second."));
    let mut events = server.events(&id, None).await;
    let (status, _) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "hi"}))
        .await;
    assert_eq!(status, 202);
    let first = events.reply().await;
    assert_eq!(answer(&first), "First.");

    let other = SqliteStore::open(server.dir.path().join("s.db")).unwrap();
    let session = SessionId::new(id.as_str());
    let lease = crate::common::within("the idle session's unload", async {
        loop {
            match other.acquire(&session).await {
                Ok(lease) => return lease,
                Err(StoreError::SessionBusy { .. }) => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    drop(lease);
    drop(other);

    let (status, started) = server
        .post(&format!("/v1/sessions/{id}/messages"), json!({"text": "again"}))
        .await;
    assert_eq!(status, 202, "{started}");
    let second = events.reply().await;
    assert_eq!(answer(&second), "Second.");
    assert_eq!(
        ids(&second)[0],
        ids(&first).last().unwrap() + 1,
        "the stream goes on with the next id"
    );
    server.fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_message_joins_the_running_reply_or_starts_one_when_none_runs() {
    let server = Harness::start().await;
    let gate = agentry_testkit::Gate::new();
    server.fake.push(
        Reply::text("A long answer about everything.")
            .chunks(4)
            .pause_after(2, gate.clone()),
    );
    server.fake.push(Reply::text("Short: fine."));
    server.fake.push(Reply::text("A new reply."));
    let id = server.session("steer").await;
    let mut events = server.events(&id, None).await;
    let (status, started) = server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"text": "tell me everything"}),
        )
        .await;
    assert_eq!((status, &started["steered"]), (202, &json!(false)));
    gate.reached().await;
    let (status, steered) = server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"text": "keep it short", "steer": true}),
        )
        .await;
    assert_eq!((status, &steered["steered"]), (202, &json!(true)), "{steered}");
    gate.open();
    let reply = events.reply().await;
    assert!(
        reply.iter().any(
            |e| e.data["msg"]["role"] == "user" && e.data["msg"]["content"][0]["text"] == "keep it short"
        ),
        "the steering message is evented"
    );
    assert!(
        reply
            .iter()
            .any(|e| e.data["msg"]["content"][0]["text"] == "Short: fine.")
    );
    let last = server.fake.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "keep it short");

    // With no reply running, a steering message starts one.
    let (status, started) = server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"text": "and now?", "steer": true}),
        )
        .await;
    assert_eq!((status, &started["steered"]), (202, &json!(false)));
    let reply = events.reply().await;
    assert!(
        reply
            .iter()
            .any(|e| e.data["msg"]["content"][0]["text"] == "A new reply.")
    );
    server.fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_request_is_answered_over_the_api_and_an_answer_that_does_not_fit_is_refused() {
    let server = Harness::start().await;
    server
        .fake
        .push(Reply::tool_calls([Call::new("s", "sign_up", "{}")]));
    server.fake.push(Reply::text("Signed up."));
    let id = server.session("form").await;
    let mut events = server.events(&id, None).await;
    server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"text": "sign me up"}),
        )
        .await;
    let asked = events.until(|e| e.agent_type() == "input_requested").await;
    let request = &asked.last().unwrap().data;
    assert_eq!(request["call_id"], "s.form");
    assert_eq!(request["schema"]["required"], json!(["name"]));
    let path = format!("/v1/sessions/{id}/inputs/s.form");
    let (status, error) = server
        .post(&path, json!({"action": "accept", "content": {"news": true}}))
        .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (400, &json!("invalid_answer")),
        "{error}"
    );
    let (status, answered) = server
        .post(
            &path,
            json!({"action": "accept", "content": {"name": "Ada", "news": true}}),
        )
        .await;
    assert_eq!((status, &answered["outcome"]), (200, &json!("answered")));
    let (status, _) = server.post(&path, json!({"action": "decline"})).await;
    assert_eq!(status, 409, "the first answer wins");
    events.reply().await;
    let result = server.fake.requests()[1].body["messages"].to_string();
    assert!(
        result.contains(r#"signed up: {\"name\":\"Ada\",\"news\":true}"#),
        "{result}"
    );
    server.fake.assert_no_violations();
}
