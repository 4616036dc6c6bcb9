//! Several `agentry serve` nodes on one PostgreSQL database: a client streams a session on one
//! node while its replies run on others, and a node killed in the middle of a reply is taken
//! over by another. Needs `AGENTRY_TEST_POSTGRES` (a server URL; `scripts/test` starts one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use crate::common;

use agentry_testkit::{FakeLlm, Reply};
use common::program::Program;
use common::{http_client, post_json, serve_args, server_base};
use futures::StreamExt;
use serde_json::{Value, json};

/// A database of its own for one test: a fresh schema on the test server, named in the URL.
async fn database() -> Option<String> {
    let Ok(url) = std::env::var("AGENTRY_TEST_POSTGRES") else {
        assert!(
            std::env::var("AGENTRY_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "AGENTRY_REQUIRE_POSTGRES=1 but AGENTRY_TEST_POSTGRES is not set"
        );
        eprintln!("skipped: AGENTRY_TEST_POSTGRES is not set");
        return None;
    };
    let schema = format!("t_{}", uuid_like());
    let store = agentry_store::PostgresStore::connect_with(
        agentry_store::PostgresOptions::new(url.clone()).schema(schema.clone()),
    )
    .await
    .unwrap();
    drop(store);
    let separator = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{separator}options=-c%20search_path%3D{schema}"))
}

fn uuid_like() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().elapsed().map_or(0, |d| d.as_nanos()));
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

/// A node: `agentry serve` on the shared database.
fn node(fake: &FakeLlm, home: &std::path::Path, db: &str) -> Program {
    let mut args = serve_args(fake, home, &["--addr", "127.0.0.1:0"]);
    let at = args.iter().position(|a| a == "--db").unwrap();
    args[at + 1] = db.to_owned();
    Program::start(&args, home)
}

/// The events of an SSE stream as they come: (id, JSON).
struct Events {
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    text: String,
    seen: Vec<(u64, Value)>,
}

impl Events {
    async fn open(client: &reqwest::Client, base: &str, id: &str) -> Events {
        let response = client
            .get(format!("{base}/v1/sessions/{id}/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        Events {
            body: response.bytes_stream().map(|c| c.map(|b| b.to_vec())).boxed(),
            text: String::new(),
            seen: Vec::new(),
        }
    }

    /// Reads until an event of `kind` arrived after the `n`-th event seen.
    async fn until(&mut self, kind: &str, from: usize) {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if self.seen[from..].iter().any(|(_, e)| e["type"] == kind) {
                    return;
                }
                let chunk = self.body.next().await.unwrap().unwrap();
                self.text.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = self.text.find("\n\n") {
                    let frame: String = self.text.drain(..end + 2).collect();
                    let id = frame.lines().find_map(|l| l.strip_prefix("id: "));
                    let data = frame.lines().find_map(|l| l.strip_prefix("data: "));
                    if let (Some(id), Some(data)) = (id, data) {
                        self.seen
                            .push((id.parse().unwrap(), serde_json::from_str(data).unwrap()));
                    }
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {kind} event; seen: {:?}", self.seen));
    }
}

/// Three nodes, one session: the client streams from node B while the replies run on A, B and
/// then C, numbered one after the other; C is killed with `kill -9` in the middle of its
/// reply, another node takes the session over (recovery closes the reply), and the next
/// message is answered. The stream never shows an event twice or out of order, and every tool
/// call has exactly one result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_serve_one_session_and_a_killed_node_is_taken_over() {
    let Some(db) = database().await else { return };
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Hello from node A."));
    fake.push(Reply::text("Hello from node B."));
    // Node C's reply stops in the middle of its stream, and C is killed there.
    fake.push(Reply::text("This answer never ends").hang_after(2));
    fake.push(Reply::text("Answered after the takeover."));
    let nodes = [
        node(&fake, home, &db),
        node(&fake, home, &db),
        node(&fake, home, &db),
    ];
    let mut bases = Vec::new();
    for node in &nodes {
        bases.push(server_base(node).await);
    }
    let client = http_client();
    let (status, created) =
        post_json(&client, format!("{}/v1/sessions", bases[0]), json!({"name": "c"})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let mut stream = Events::open(&client, &bases[1], &id).await;

    let message = |base: &str, text: &str| {
        let (client, url, text) = (
            client.clone(),
            format!("{base}/v1/sessions/{id}/messages"),
            text.to_owned(),
        );
        async move { post_json(&client, url, json!({ "text": text })).await }
    };
    let (status, body) = message(&bases[0], "hi").await;
    assert_eq!(status, 202, "{body}");
    stream.until("reply_finished", 0).await;
    assert!(
        stream
            .seen
            .iter()
            .any(|(_, e)| e.to_string().contains("Hello from node A.")),
        "{:?}",
        stream.seen
    );

    // The next message goes to another node: A gave the session back when its reply ended,
    // and B numbers its events right after A's.
    let (status, body) = message(&bases[1], "and you?").await;
    assert_eq!(status, 202, "{body}");
    let after_a = stream.seen.len();
    stream.until("reply_finished", after_a).await;
    let ids: Vec<u64> = stream.seen.iter().map(|(id, _)| *id).collect();
    let one_after_another: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, one_after_another, "an id is missing or repeated");

    let (status, body) = message(&bases[2], "and now?").await;
    assert_eq!(status, 202, "{body}");
    fake.wait_for_requests(3).await;
    let before_kill = stream.seen.len();
    nodes[2].kill();

    // Node A or B takes the session over once C's lease expired; until then a message is
    // refused as the session being busy, never lost or run twice.
    let killed = std::time::Instant::now();
    let accepted_on = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            for base in &bases[..2] {
                let (status, body) = message(base, "still there?").await;
                match status {
                    202 => return base.clone(),
                    409 => {}
                    other => panic!("{other}: {body}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("no node took the session over");
    eprintln!(
        "taken over {:?} after the kill, on {accepted_on}",
        killed.elapsed()
    );
    stream.until("reply_finished", before_kill).await;
    assert!(
        stream
            .seen
            .iter()
            .any(|(_, e)| e.to_string().contains("Answered after the takeover.")),
        "{:?}",
        stream.seen
    );
    let ids: Vec<u64> = stream.seen.iter().map(|(id, _)| *id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids out of order or twice: {ids:?}"
    );
    // After a kill, the ids the dead node reserved are skipped (a client may have seen some).

    // The session as any node shows it: the interrupted reply is closed and said so.
    let shown: Value = client
        .get(format!("{}/v1/sessions/{id}", bases[1]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let texts: Vec<String> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("Answered after the takeover.")),
        "{texts:?}"
    );
    for node in &nodes[..2] {
        node.terminate();
    }
    fake.assert_no_violations();
}

/// An approval decision and a cancel sent to the node that does not run the reply reach it:
/// the call waits on node A, is approved on node B and runs once; the next reply is cancelled
/// from node B while node A streams it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_and_a_cancel_sent_to_another_node_reach_the_reply() {
    let Some(db) = database().await else { return };
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(common::write_call());
    fake.push(Reply::text("Written."));
    fake.push(Reply::text("This answer is cancelled").hang_after(2));
    let nodes = [node(&fake, home, &db), node(&fake, home, &db)];
    let (a, b) = (server_base(&nodes[0]).await, server_base(&nodes[1]).await);
    let client = http_client();
    let (status, created) = post_json(&client, format!("{a}/v1/sessions"), json!({"name": "d"})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let mut stream = Events::open(&client, &b, &id).await;

    let (status, body) = post_json(
        &client,
        format!("{a}/v1/sessions/{id}/messages"),
        json!({"text": "write it"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    stream.until("approval_requested", 0).await;
    let (status, body) = post_json(
        &client,
        format!("{b}/v1/sessions/{id}/calls/w/decision"),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (200, Some("decided")),
        "{body}"
    );
    stream.until("reply_finished", 0).await;
    assert_eq!(std::fs::read_to_string(home.join("notes.txt")).unwrap(), "hello");
    // A second decision for the same call is refused, wherever it is sent.
    let (status, body) = post_json(
        &client,
        format!("{b}/v1/sessions/{id}/calls/w/decision"),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("not_pending")),
        "{body}"
    );

    let from = stream.seen.len();
    let (status, body) = post_json(
        &client,
        format!("{a}/v1/sessions/{id}/messages"),
        json!({"text": "go on"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    fake.wait_for_requests(3).await;
    let (status, body) = post_json(&client, format!("{b}/v1/sessions/{id}/cancel"), json!({})).await;
    assert_eq!(
        (status, body["outcome"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    stream.until("reply_finished", from).await;
    for node in &nodes {
        node.terminate();
    }
    fake.assert_no_violations();
}
