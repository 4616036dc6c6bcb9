//! Running the built `agentry` binary in the end-to-end tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod program;

use std::path::Path;
use std::process::{Command, Output};

/// The binary with a clean environment: `home` is HOME and holds XDG_CONFIG_HOME, so the user's
/// own config files and API settings are never read. Colours off (`NO_COLOR`).
pub fn command(args: &[String], home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
    command
        .args(args)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .env_remove("AGENTRY_MODEL")
        .env_remove("AGENTRY_LOG")
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("HOME", home)
        .env("NO_COLOR", "1");
    command
}

/// Runs the binary (see [`command`]) to its end, stdin closed.
pub async fn agentry(args: Vec<String>, home: &Path) -> Output {
    output(command(&args, home)).await
}

/// Runs a prepared command to its end, stdin closed, within a deadline.
pub async fn output(mut command: Command) -> Output {
    let run =
        tokio::task::spawn_blocking(move || command.stdin(std::process::Stdio::null()).output().unwrap());
    tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .expect("agentry did not finish within 60 s")
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `agentry run` against the fake model at `fake_url`, no retries, then `extra` and the prompt.
pub fn run_args(fake_url: &str, workdir: &Path, extra: &[&str], prompt: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "run".into(),
        "--base-url".into(),
        fake_url.into(),
        "--model".into(),
        "test-model".into(),
        "--workdir".into(),
        workdir.display().to_string(),
        "--max-retries".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args.push(prompt.into());
    args
}

/// `agentry chat` against the fake model at `fake_url`, no retries, no MCP config.
pub fn chat_args(fake_url: &str, workdir: &Path) -> Vec<String> {
    let mut args = run_args(fake_url, workdir, &["--no-mcp"], "");
    args[0] = "chat".into();
    args.pop();
    args
}
