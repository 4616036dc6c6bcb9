//! Approval without a terminal, by policy: `--allow` / `--deny` and the config's
//! "permissions" decide calls nobody is there to answer (spec A20), deny wins, and the rest is
//! still declined (fail closed).

use crate::common;

use agentry_testkit::{Call, FakeLlm, Reply};
use common::{command, output, run_args, text, tool_message};

fn writes() -> Reply {
    Reply::tool_calls([
        Call::new("in", "write_file", r#"{"path": "notes/a.md", "content": "kept"}"#),
        Call::new("out", "write_file", r#"{"path": "b.md", "content": "not kept"}"#),
        Call::new(
            "climb",
            "write_file",
            r#"{"path": "notes/../c.md", "content": "not kept"}"#,
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_rules_write_without_a_terminal_and_everything_else_is_declined() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    let fake = FakeLlm::start().await;
    fake.push(writes());
    fake.push(Reply::text("written"));
    let out = output(command(
        &run_args(
            &fake.base_url(),
            dir.path(),
            &["--no-mcp", "--allow", "write_file:notes/*.md"],
            "write notes",
        ),
        dir.path(),
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes/a.md")).unwrap(),
        "kept"
    );
    assert!(!dir.path().join("b.md").exists());
    assert!(
        !dir.path().join("c.md").exists(),
        "climbing out of notes/ is not allowed"
    );
    assert!(tool_message(&fake, 1, "out").contains("no decision"));
    assert!(tool_message(&fake, 1, "climb").contains("no decision"));
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_rules_in_the_config_win_over_allow_flags_and_stop_tools_that_never_ask() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    std::fs::write(dir.path().join("secret.env"), "KEY=1").unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"permissions": {"deny": ["write_file:notes/a.md", "read_file:*.env"]}}"#,
    )
    .unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([
        Call::new("w", "write_file", r#"{"path": "notes/a.md", "content": "x"}"#),
        Call::new("r", "read_file", r#"{"path": "secret.env"}"#),
    ]));
    fake.push(Reply::text("refused"));
    let config = config.display().to_string();
    let out = output(command(
        &run_args(
            &fake.base_url(),
            dir.path(),
            &["--no-mcp", "--config", &config, "--allow", "write_file:notes/**"],
            "go",
        ),
        dir.path(),
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.path().join("notes/a.md").exists());
    for id in ["w", "r"] {
        let result = tool_message(&fake, 1, id);
        assert!(
            result.contains("a permission rule forbids it (deny "),
            "{id}: {result}"
        );
    }
    assert!(!tool_message(&fake, 1, "r").contains("KEY=1"));
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_cannot_work_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    for (rule, says) in [
        (vec!["--allow", "write_file:["], "is not valid"),
        (vec!["--deny", "current_time:x*"], "names no argument for it"),
    ] {
        let mut extra = vec!["--no-mcp"];
        extra.extend(rule);
        let out = output(command(
            &run_args(&fake.base_url(), dir.path(), &extra, "go"),
            dir.path(),
        ))
        .await;
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
    assert!(fake.requests().is_empty(), "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_applies_the_rules_to_every_session() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    std::fs::create_dir(home.join("notes")).unwrap();
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new(
        "in",
        "write_file",
        r#"{"path": "notes/a.md", "content": "from the server"}"#,
    )]));
    fake.push(Reply::text("written"));
    let server = common::program::Program::start(
        &common::serve_args(
            &fake,
            home,
            &["--addr", "127.0.0.1:0", "--allow", "write_file:notes/*.md"],
        ),
        home,
    );
    let base = common::server_base(&server).await;
    let (_, seen) = common::served_reply(&common::http_client(), &base, "web", "write a note").await;
    server.terminate();
    let (status, _, err) = server.finish().await;
    assert!(status.success(), "{err}");
    assert!(
        seen.contains(r#""source":"rule""#),
        "decided by the rule, nobody asked: {seen}"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("notes/a.md")).unwrap(),
        "from the server"
    );
    fake.assert_no_violations();
}
