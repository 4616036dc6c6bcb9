//! The tool shim end to end: the `agentry` binary against a fake server whose model writes its
//! tool calls as text, as Qwen2.5-Coder does behind llama-server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use agentry_testkit::{FakeLlm, Reply};
use common::{agentry, run_args, text};

const NOTE: &str = "note: the model wrote its tool call as text; agentry recovered it (tool shim). --no-tool-shim turns this off.";

fn fenced_call(expression: &str) -> String {
    format!("```json\n{{\"name\": \"calculate\", \"arguments\": {{\"expression\": \"{expression}\"}}}}\n```")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_written_as_text_run_and_the_note_is_printed_once() {
    for extra in [&[][..], &["--no-stream"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeLlm::start().await;
        fake.push(Reply::text(fenced_call("6*7")).chunks(9));
        fake.push(
            Reply::text("<tool_call>\n{\"name\": \"calculate\", \"arguments\": {\"expression\": \"42+1\"}}\n</tool_call>")
                .chunks(9),
        );
        fake.push(Reply::text("6*7 is 42, and one more is 43."));
        let out = agentry(
            run_args(&fake.base_url(), dir.path(), extra, "What is 6*7, plus 1?"),
            dir.path(),
        )
        .await;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{extra:?}: exit {:?}\n{stderr}", out.status);
        assert_eq!(
            stdout, "6*7 is 42, and one more is 43.\n",
            "{extra:?}: the calls never show as answer text"
        );
        assert_eq!(stderr.matches(NOTE).count(), 1, "{extra:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with('⚙')).collect();
        assert_eq!(lines.len(), 2, "{stderr}");
        assert!(
            lines[0].starts_with("⚙ calculate({\"expression\":\"6*7\"}) → 42 ["),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("⚙ calculate({\"expression\":\"42+1\"}) → 43 ["),
            "{}",
            lines[1]
        );
        assert_eq!(fake.request_count(), 3);
        fake.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tool_shim_by_flag_or_config_file_leaves_the_json_as_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"tool_shim": false}"#).unwrap();
    let config = config.display().to_string();
    for extra in [&["--no-tool-shim"][..], &["--config", config.as_str()][..]] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::text(fenced_call("6*7")));
        let out = agentry(
            run_args(&fake.base_url(), dir.path(), extra, "What is 6*7?"),
            dir.path(),
        )
        .await;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{extra:?}: exit {:?}\n{stderr}", out.status);
        assert_eq!(stdout, format!("{}\n", fenced_call("6*7")), "{extra:?}");
        assert!(!stderr.contains("tool shim"), "{extra:?}: {stderr}");
        assert!(!stderr.contains('⚙'), "{extra:?}: {stderr}");
        assert_eq!(fake.request_count(), 1);
        fake.assert_no_violations();
    }
}
