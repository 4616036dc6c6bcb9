//! `agentry serve` from the built binary: a reply over HTTP with its events, a stop by SIGTERM
//! that cancels and saves the running reply, and the refusals of an unsafe address.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry_testkit::{FakeLlm, Reply};
use common::program::Program;
use common::{agentry, http_client, http_client_with_token, serve_args, served_reply, server_base, text};

use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_over_http_and_stops_cleanly_on_sigterm() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Hello from the server."));
    let server = Program::start(&serve_args(&fake, home, &["--addr", "127.0.0.1:0"]), home);
    let base = server_base(&server).await;
    let client = http_client();
    let (_, seen) = served_reply(&client, &base, "web", "hi").await;
    assert!(seen.contains("Hello from the server."), "{seen}");
    assert!(seen.contains("id: 1\n"), "{seen}");

    server.terminate();
    let (status, _, err) = server.finish().await;
    assert!(status.success(), "{err}");
    assert!(err.contains("stopping"), "{err}");
    // The session is in the database, for `agentry sessions` as for the next server.
    let shown = agentry(
        vec![
            "sessions".into(),
            "show".into(),
            "web".into(),
            "--json".into(),
            "--db".into(),
            home.join("s.db").display().to_string(),
        ],
        home,
    )
    .await;
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["messages"].as_array().unwrap().len(), 2);
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_public_address_without_a_token_and_an_empty_token() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    let out = agentry(serve_args(&fake, home, &["--addr", "0.0.0.0:0"]), home).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a loopback address") && text(&out.stderr).contains("--token-file"),
        "{}",
        text(&out.stderr)
    );
    // A token file that holds no token, or a bad line, stops the server before it starts.
    let token = home.join("token");
    for (content, said) in [
        ("  \n", "the token is empty"),
        (
            "ada:token-of-ada\nbob:\n",
            "line 2 of the token file: the token is empty",
        ),
    ] {
        std::fs::write(&token, content).unwrap();
        let path = token.display().to_string();
        let out = agentry(
            serve_args(&fake, home, &["--addr", "0.0.0.0:0", "--token-file", &path]),
            home,
        )
        .await;
        assert_eq!(out.status.code(), Some(2));
        assert!(text(&out.stderr).contains(said), "{}", text(&out.stderr));
    }
    assert_eq!(fake.request_count(), 0);
}

/// With a token file of users, each user's sessions have that user's long-term memory: what
/// Ada told one session, her next session recalls, and Bob's never sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_users_each_have_their_own_long_term_memory() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let tokens = home.join("tokens");
    std::fs::write(&tokens, "ada:token-of-ada\nbob:token-of-bob\n").unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Noted."));
    fake.push(Reply::text("I do not know your dog."));
    fake.push(Reply::text("Your dog is Rex."));
    let tokens = tokens.display().to_string();
    let server = Program::start(
        &serve_args(
            &fake,
            home,
            &[
                "--addr",
                "127.0.0.1:0",
                "--token-file",
                &tokens,
                "--long-term-memory",
                "static",
            ],
        ),
        home,
    );
    let base = server_base(&server).await;
    let (ada, bob) = (
        http_client_with_token("token-of-ada"),
        http_client_with_token("token-of-bob"),
    );
    served_reply(&ada, &base, "ada one", "My dog is called Rex.").await;
    served_reply(&bob, &base, "bob one", "What is my dog called?").await;
    served_reply(&ada, &base, "ada two", "What is my dog called?").await;
    server.terminate();
    let (status, _, err) = server.finish().await;
    assert!(status.success(), "{err}");
    let requests = fake.requests();
    let recalled = |request: usize| {
        requests[request].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"].as_str())
            .any(|text| text.starts_with("<long_term_memory>") && text.contains("Rex"))
    };
    assert!(!recalled(1), "Bob's session was given Ada's memory");
    assert!(recalled(2), "Ada's second session did not recall her memory");
    fake.assert_no_violations();
}

/// `serve` gives every session the long-term memory of its user and the knowledge bases: what
/// one session was told, the next one's first request recalls, beside the retrieved chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_sessions_share_the_users_memory_and_retrieve_knowledge() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let docs = home.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("billing.txt"), "Invoices are paid on the 5th.\n").unwrap();
    let db = home.join("s.db").display().to_string();
    let added = agentry(
        vec![
            "kb".into(),
            "add".into(),
            "notes".into(),
            docs.display().to_string(),
            "--db".into(),
            db,
        ],
        home,
    )
    .await;
    assert!(added.status.success(), "{}", text(&added.stderr));

    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Noted."));
    fake.push(Reply::text("On the 5th; your dog is Rex."));
    let server = Program::start(
        &serve_args(
            &fake,
            home,
            &[
                "--addr",
                "127.0.0.1:0",
                "--long-term-memory",
                "static",
                "--user",
                "ada",
                "--knowledge",
                "notes",
                "--no-rewrite-query",
            ],
        ),
        home,
    );
    let base = server_base(&server).await;
    let client = http_client();
    served_reply(&client, &base, "one", "My dog is called Rex.").await;
    let (_, seen) = served_reply(
        &client,
        &base,
        "two",
        "When are invoices paid, and my dog's name?",
    )
    .await;
    assert!(seen.contains("your dog is Rex"), "{seen}");
    server.terminate();
    let (status, _, err) = server.finish().await;
    assert!(status.success(), "{err}");

    let requests = fake.requests();
    let messages = requests[1].body["messages"].as_array().unwrap();
    let blocks: Vec<&str> = messages.iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(
        blocks
            .iter()
            .any(|b| b.starts_with("<long_term_memory>") && b.contains("My dog is called Rex.")),
        "{blocks:#?}"
    );
    assert!(
        blocks
            .iter()
            .any(|b| b.starts_with("<retrieved_knowledge>") && b.contains("billing.txt (notes)")),
        "{blocks:#?}"
    );
    // Session "two" holds none of session "one"'s messages: the memory carried it.
    assert!(!blocks.contains(&"My dog is called Rex."), "{blocks:#?}");
    fake.assert_no_violations();
}

/// `serve --retain` deletes the sessions unused for longer than the retention, with their
/// events: the store of a long-running server stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_deletes_sessions_older_than_the_retention() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Noted."));
    let db = home.join("s.db").display().to_string();
    let ran = agentry(
        common::run_args(
            &fake.base_url(),
            home,
            &["--no-mcp", "--db", &db, "--session", "old"],
            "hi",
        ),
        home,
    )
    .await;
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    let server = Program::start(
        &serve_args(&fake, home, &["--addr", "127.0.0.1:0", "--retain", "1ms"]),
        home,
    );
    let base = server_base(&server).await;
    let client = http_client();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            let list: Value = client
                .get(format!("{base}/v1/sessions"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if list["sessions"].as_array().unwrap().is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the old session was not deleted");
    server.terminate();
    let (status, _, err) = server.finish().await;
    assert!(status.success(), "{err}");
}
