//! Running the built `agentry` binary in the end-to-end tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary with a clean environment: `home` is HOME and holds XDG_CONFIG_HOME, so the
/// user's own config files and API settings are never read.
pub async fn agentry(args: Vec<String>, home: &Path) -> Output {
    let home = home.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(args)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_MODEL")
            .env_remove("AGENTRY_MODEL")
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("HOME", &home)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    })
    .await
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
