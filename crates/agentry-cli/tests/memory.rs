//! `--long-term-memory` and `agentry memory` end to end against the fake model: what one run
//! records, the next one's first request carries; memories are per user, listed, searched and
//! forgotten, and a memory recorded by a tool survives a `kill -9`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use crate::common;

use agentry_testkit::{Call, FakeLlm, Gate, Reply};
use common::program::Program;
use common::{agentry, run_args, text};
use serde_json::{Value, json};

fn memory_run(fake: &FakeLlm, home: &Path, mode: &str, user: &str, prompt: &str) -> Vec<String> {
    let db = home.join("s.db").display().to_string();
    run_args(
        &fake.base_url(),
        home,
        &[
            "--no-mcp",
            "--long-term-memory",
            mode,
            "--user",
            user,
            "--db",
            &db,
        ],
        prompt,
    )
}

async fn memory_cmd(home: &Path, args: &[&str]) -> (i32, String, String) {
    let db = home.join("s.db").display().to_string();
    let mut all: Vec<String> = vec!["memory".into()];
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend(["--db".into(), db]);
    let out = agentry(all, home).await;
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[tokio::test]
async fn what_one_run_records_the_next_recalls_and_people_can_see_and_forget_it() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Noted: your dog is Rex."));
    let first = agentry(
        memory_run(&fake, home, "static", "ada", "My dog is called Rex."),
        home,
    )
    .await;
    assert!(first.status.success(), "{}", text(&first.stderr));
    // The embedding model is not in this home's cache and cannot be fetched: words still serve.
    assert!(
        text(&first.stderr).contains("searched by their words only"),
        "{}",
        text(&first.stderr)
    );

    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Your dog is Rex."));
    let second = agentry(
        memory_run(&fake, home, "static", "ada", "What is my dog's name?"),
        home,
    )
    .await;
    assert!(second.status.success(), "{}", text(&second.stderr));
    let messages = fake.requests()[0].body["messages"].as_array().unwrap().clone();
    let last = messages.last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(last.starts_with("<long_term_memory>"), "{last}");
    assert!(
        last.contains("User: My dog is called Rex.\nAssistant: Noted: your dog is Rex."),
        "{last}"
    );
    assert_eq!(messages[messages.len() - 2]["content"], "What is my dog's name?");

    // Another user sees nothing of it.
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("I do not know."));
    let bob = agentry(
        memory_run(&fake, home, "static", "bob", "What is my dog's name?"),
        home,
    )
    .await;
    assert!(bob.status.success());
    let bobs = fake.requests()[0].body.to_string();
    assert!(!bobs.contains("long_term_memory"), "{bobs}");

    let (code, listed, _) = memory_cmd(home, &["list", "--user", "ada", "--json"]).await;
    assert_eq!(code, 0);
    let listed: Vec<Value> = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.len(), 2);
    let (_, found, _) = memory_cmd(home, &["search", "Rex", "--user", "ada", "--json"]).await;
    let found: Vec<Value> = serde_json::from_str(&found).unwrap();
    assert!(found[0]["content"].as_str().unwrap().contains("Rex"));
    let (_, table, _) = memory_cmd(home, &["list", "--user", "ada"]).await;
    assert!(
        table.contains("reply") && table.contains("My dog is called Rex."),
        "{table}"
    );

    let id = listed[1]["id"].as_i64().unwrap().to_string();
    let (code, _, err) = memory_cmd(home, &["forget", &id, "--user", "bob"]).await;
    assert_eq!(code, 1, "bob cannot forget ada's memory: {err}");
    let (code, _, err) = memory_cmd(home, &["forget", &id, "--user", "ada"]).await;
    assert_eq!(code, 0, "{err}");
    let (_, listed, _) = memory_cmd(home, &["list", "--user", "ada", "--json"]).await;
    assert_eq!(serde_json::from_str::<Vec<Value>>(&listed).unwrap().len(), 1);
}

#[tokio::test]
async fn a_memory_the_model_records_survives_a_kill() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "r1",
        "record_to_memory",
        json!({"thinking": "a preference", "content": ["Ada takes her coffee black."]}).to_string(),
    )]));
    let gate = Gate::new();
    fake.push(
        Reply::text("I will remember that.")
            .chunks(4)
            .pause_after(1, gate.clone()),
    );
    let program = Program::start(
        &memory_run(&fake, home, "agent", "ada", "I take my coffee black."),
        home,
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), gate.reached())
        .await
        .expect("the answer never started");
    program.kill();
    let (status, _, err) = program.finish().await;
    assert_eq!(status.code(), None, "killed: {err}");
    let tools: Vec<String> = fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(tools.contains(&"retrieve_from_memory".to_owned()), "{tools:?}");
    let (_, listed, _) = memory_cmd(home, &["list", "--user", "ada", "--json"]).await;
    let listed: Vec<Value> = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["content"], "Ada takes her coffee black.");
    assert_eq!(listed[0]["source"], "agent");
}

/// With the embedded model in the cache, what was recorded is found by its meaning: questions
/// that share no word with the memory, one of them in another language, rank it first.
#[tokio::test]
async fn the_embedded_model_finds_a_memory_by_its_meaning() {
    let Some(model) = std::env::var_os("AGENTRY_TEST_EMBED_MODEL") else {
        eprintln!("skipped: AGENTRY_TEST_EMBED_MODEL names no embedding model (scripts/test fetches it)");
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    std::fs::create_dir_all(home.join("models")).unwrap();
    std::os::unix::fs::symlink(&model, home.join("models/multilingual-e5-small.bin")).unwrap();
    for (prompt, reply) in [
        ("My dog is called Rex.", "Noted."),
        ("I work as a tax accountant in Lyon.", "Noted."),
        ("I am allergic to peanuts.", "Noted."),
    ] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::text(reply));
        let out = agentry(memory_run(&fake, home, "static", "ada", prompt), home).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(!text(&out.stderr).contains("words only"), "{}", text(&out.stderr));
    }
    for (question, expected) in [
        ("which pet do I own", "Rex"),
        ("what is my job", "accountant"),
        ("我对什么食物过敏", "peanuts"),
    ] {
        let (code, found, err) = memory_cmd(home, &["search", question, "--user", "ada", "--json"]).await;
        assert_eq!(code, 0, "{err}");
        let found: Vec<Value> = serde_json::from_str(&found).unwrap();
        let first = found
            .first()
            .map(|m| m["content"].as_str().unwrap())
            .unwrap_or("");
        assert!(first.contains(expected), "{question:?} found {found:#?}");
    }
}
