//! How a command ends: exit codes, and what a failed reply prints (with a hint when the cause is
//! likely a setting).

use agentry::agent::AgentError;
use agentry::model::{ModelError, TimeoutLimit};

use crate::terminal::sanitize;

/// Exit code for a configuration problem (the same as clap's usage errors).
pub const EXIT_CONFIG: u8 = 2;
/// Exit code after Ctrl-C (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit code after SIGTERM (128 + SIGTERM).
pub const EXIT_TERMINATED: u8 = 143;

/// Prints a failed reply's error (with the setup hint when the server is unreachable).
pub fn report_error(e: &AgentError) {
    // The error may quote the model server's answer.
    eprintln!("error: {}", sanitize::multiline(&e.to_string()));
    match e {
        AgentError::Model(
            ModelError::Connect { .. }
            | ModelError::Timeout {
                limit: TimeoutLimit::Connect,
                ..
            },
        ) => eprintln!("{SETUP_HINT}"),
        AgentError::Model(ModelError::Timeout { .. }) => eprintln!("{TIMEOUT_HINT}"),
        AgentError::Model(ModelError::Replay(_)) => eprintln!("{REPLAY_HINT}"),
        _ => {}
    }
}

const REPLAY_HINT: &str = "hint: --replay serves only the requests of the recorded run: the same prompt, \
     options, tools and working directory. Record the new run with --record FILE.";

const TIMEOUT_HINT: &str = "hint: the server took too long. A server still working may need more time: \
     --read-timeout (silence while streaming), --request-timeout (the whole answer, and the wait for one \
     with --no-stream), or the same keys in the config file. A timeout is not retried.";

/// Printed when the model server cannot be reached or configured.
pub const SETUP_HINT: &str = "hint: agentry talks to any OpenAI-compatible chat-completions API. Point it at one with \
     --base-url/OPENAI_BASE_URL (e.g. http://127.0.0.1:8080/v1 for llama.cpp's llama-server, \
     http://127.0.0.1:11434/v1 for Ollama), name the model with --model/AGENTRY_MODEL, and set OPENAI_API_KEY if \
     the server needs one.";

/// Success, or the error printed and exit code 2 (a configuration problem): the end of a
/// command that serves until stopped.
pub fn config_exit(outcome: anyhow::Result<()>) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
            std::process::ExitCode::from(EXIT_CONFIG)
        }
    }
}
