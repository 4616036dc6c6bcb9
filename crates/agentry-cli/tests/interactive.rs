//! The built `agentry` binary in a conversation: approval prompts answered on stdin, Ctrl-C
//! (a real SIGINT) during a streamed answer and during a prompt. Each step waits for what the
//! program printed, never for a fixed time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry::tool::{CANCELLED_BEFORE_START, declined_text};
use agentry_testkit::{Call, FakeLlm, Reply};

/// A running `agentry` with its output collected as it comes.
struct Program {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

fn collect(mut from: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let into = Arc::clone(&text);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

impl Program {
    fn start(base_url: &str, workdir: &std::path::Path, prompt: &str) -> Program {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args([
                "run",
                "--base-url",
                base_url,
                "--model",
                "m",
                "--max-retries",
                "0",
                "--workdir",
            ])
            .arg(workdir)
            .arg(prompt)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("AGENTRY_MODEL")
            .env_remove("OPENAI_MODEL")
            .env("HOME", workdir)
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        let stdin = child.stdin.take();
        Program {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    async fn wait_for(&self, stream: &Arc<Mutex<String>>, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stream.lock().unwrap().contains(what) {
            assert!(
                Instant::now() < deadline,
                "{what:?} never appeared.\nstdout: {}\nstderr: {}",
                self.stdout.lock().unwrap(),
                self.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stderr_has(&self, what: &str) {
        self.wait_for(&self.stderr, what).await;
    }

    async fn stdout_has(&self, what: &str) {
        self.wait_for(&self.stdout, what).await;
    }

    fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends SIGINT, as Ctrl-C in a terminal does.
    fn interrupt(&self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    }

    async fn finish(mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "agentry did not exit: {}",
                self.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Let the reader threads take the last bytes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        (status, out, err)
    }
}

fn write_call() -> Reply {
    Reply::tool_calls([Call::new(
        "w",
        "write_file",
        r#"{"path": "notes.txt", "content": "hello"}"#,
    )])
}

fn tool_message(fake: &FakeLlm, n: usize, call_id: &str) -> String {
    fake.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a10_a_declined_write_is_not_done_and_the_model_reads_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("Understood, I left it."));
    let mut program = Program::start(&fake.base_url(), dir.path(), "write hello to notes.txt");
    program.stderr_has("? Write notes.txt?").await;
    program.stderr_has("│ hello").await;
    program.type_line("n");
    program.stderr_has("reason for the model").await;
    program.type_line("not today");
    let (status, out, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "Understood, I left it.\n");
    assert!(!dir.path().join("notes.txt").exists());
    assert_eq!(tool_message(&fake, 1, "w"), declined_text(Some("not today")));
    assert!(
        err.contains("⚙ write_file(") && err.contains("✗ The user declined"),
        "{err}"
    );
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_write_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("Done."));
    let mut program = Program::start(&fake.base_url(), dir.path(), "write hello to notes.txt");
    program.stderr_has("? Write notes.txt?").await;
    program.type_line("y");
    let (status, _, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "hello"
    );
    assert!(err.contains("→ Wrote 5 bytes to notes.txt."), "{err}");
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_closed_input_declines_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("OK."));
    let mut program = Program::start(&fake.base_url(), dir.path(), "write");
    program.stderr_has("? Write notes.txt?").await;
    program.close_stdin();
    let (status, _, err) = program.finish().await;
    assert!(status.success(), "{err}");
    assert!(!dir.path().join("notes.txt").exists());
    assert!(tool_message(&fake, 1, "w").contains("no answer"));
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_ctrl_c_while_the_answer_streams_cancels_and_keeps_what_was_said() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    // role chunk, then "Hello " and "there" arrive; the rest never comes.
    fake.push(
        Reply::text("Hello there, and more to come")
            .chunks(5)
            .hang_after(3),
    );
    let program = Program::start(&fake.base_url(), dir.path(), "say hello");
    program.stdout_has("Hello there").await;
    program.interrupt();
    let (status, out, err) = program.finish().await;
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(out.starts_with("Hello there"), "{out}");
    assert!(!out.contains("more to come"));
    assert!(err.contains("Cancelling the reply"), "{err}");
    assert!(err.contains("reply cancelled"), "{err}");
    assert_eq!(fake.request_count(), 1);
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_ctrl_c_at_an_approval_prompt_withdraws_it_and_says_what_the_model_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeLlm::start().await;
    fake.push(write_call());
    fake.push(Reply::text("never asked for"));
    let program = Program::start(&fake.base_url(), dir.path(), "write");
    program.stderr_has("? Write notes.txt?").await;
    program.interrupt();
    let (status, _, err) = program.finish().await;
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(!dir.path().join("notes.txt").exists());
    let told = &CANCELLED_BEFORE_START[..60];
    assert!(
        err.contains(told),
        "the tool line shows what the model is told: {err}"
    );
    assert_eq!(fake.request_count(), 1, "no model request after the cancel");
    fake.assert_no_violations();
}
