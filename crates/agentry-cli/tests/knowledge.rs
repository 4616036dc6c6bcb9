//! `agentry kb` and `--knowledge` end to end against the fake model: files of each format go
//! in, a file that cannot be read is named and the others still go in, an unchanged file is
//! skipped, and the loop's first request carries the retrieved chunks with their files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use crate::common;

use agentry_testkit::{FakeLlm, Reply};
use common::{agentry, run_args, text};
use serde_json::Value;

async fn kb(home: &Path, args: &[&str]) -> (i32, String, String) {
    let db = home.join("s.db").display().to_string();
    let mut all: Vec<String> = vec!["kb".into()];
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend(["--db".into(), db]);
    let out = agentry(all, home).await;
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn documents(home: &Path) -> std::path::PathBuf {
    let docs = home.join("docs");
    std::fs::create_dir_all(docs.join("more")).unwrap();
    std::fs::write(
        docs.join("garden.md"),
        "# Garden\n\nThe tomatoes are watered at dawn.\n",
    )
    .unwrap();
    std::fs::write(
        docs.join("more/lab.html"),
        "<html><head><title>Lab</title><script>var x = 'hidden';</script></head>\
         <body><p>The lab key is in drawer 7.</p></body></html>",
    )
    .unwrap();
    std::fs::write(docs.join("notes.txt"), "Invoices are paid on the 5th.\n").unwrap();
    std::fs::write(docs.join("broken.pdf"), b"%PDF-1.4 this is not really a pdf").unwrap();
    docs
}

#[tokio::test]
async fn files_go_in_bad_ones_are_named_and_a_run_retrieves_from_them() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let docs = documents(home).display().to_string();
    let (code, _, err) = kb(home, &["add", "notes", &docs]).await;
    assert_eq!(code, 1, "a file could not be read: {err}");
    assert!(err.contains("broken.pdf"), "{err}");
    assert!(err.contains("notes: 3 added"), "{err}");

    let (_, listed, _) = kb(home, &["list", "--json"]).await;
    let listed: Vec<Value> = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["name"], "notes");
    assert_eq!(listed[0]["documents"], 3);

    // Again: the unchanged files are skipped.
    let (_, _, err) = kb(home, &["add", "notes", &docs]).await;
    assert!(err.contains("0 added (0 chunks), 3 unchanged"), "{err}");

    let (code, found, err) = kb(home, &["search", "notes", "lab key drawer", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let found: Vec<Value> = serde_json::from_str(&found).unwrap();
    assert!(
        found[0]["source"].as_str().unwrap().ends_with("more/lab.html"),
        "{found:?}"
    );
    assert!(found[0]["content"].as_str().unwrap().contains("drawer 7"));
    assert!(
        !found[0]["content"].as_str().unwrap().contains("hidden"),
        "no script text"
    );

    // A run: the question rewritten first, then the loop's first request has the chunks.
    let db = home.join("s.db").display().to_string();
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("lab key location"));
    fake.push(Reply::text("In drawer 7."));
    let out = agentry(
        run_args(
            &fake.base_url(),
            home,
            &["--no-mcp", "--knowledge", "notes", "--db", &db],
            "Where is the key of the lab?",
        ),
        home,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "In drawer 7.\n");
    let requests = fake.requests();
    let rewrite = requests[0].body["messages"].as_array().unwrap();
    assert_eq!(rewrite.last().unwrap()["content"], "Where is the key of the lab?");
    let loop_first = requests[1].body["messages"].as_array().unwrap();
    let block = loop_first.last().unwrap()["content"].as_str().unwrap();
    assert!(block.starts_with("<retrieved_knowledge>"), "{block}");
    assert!(
        block.contains("lab.html (notes)") && block.contains("drawer 7"),
        "{block}"
    );
    let tools: Vec<&str> = requests[1].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(tools.contains(&"retrieve_knowledge"), "{tools:?}");

    // Without the rewrite, the loop's first request is the first request.
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("On the 5th."));
    let out = agentry(
        run_args(
            &fake.base_url(),
            home,
            &[
                "--no-mcp",
                "--knowledge",
                "notes",
                "--no-rewrite-query",
                "--db",
                &db,
            ],
            "When are invoices paid?",
        ),
        home,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = fake.requests()[0].body["messages"].as_array().unwrap().clone();
    assert!(
        first.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("paid on the 5th")
    );

    // An unknown base stops the command before anything runs.
    let fake = FakeLlm::start().await;
    let out = agentry(
        run_args(
            &fake.base_url(),
            home,
            &["--no-mcp", "--knowledge", "nope", "--db", &db],
            "hi",
        ),
        home,
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("agentry kb add nope"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fake.requests().len(), 0);

    let (code, _, _) = kb(home, &["delete", "notes"]).await;
    assert_eq!(code, 0);
    let (code, _, _) = kb(home, &["delete", "notes"]).await;
    assert_eq!(code, 1);
}
