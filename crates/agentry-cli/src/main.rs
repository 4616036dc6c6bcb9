//! `agentry`: run a tool-using agent from the terminal.

mod commands;
mod config;
mod exit;
mod setup;
mod terminal;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use commands::{chat, eval, mcp, run, serve, sessions, tools};
use terminal::sanitize;
use tracing_subscriber::field::MakeExt;

#[derive(Debug, Parser)]
#[command(
    name = "agentry",
    version,
    about = "Run a tool-using LLM agent from the terminal."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Threads the local model computes with [env: AGENTRY_THREADS] [default: the CPU cores].
    /// Fewer than the cores is faster when other programs keep some of them busy.
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
}

/// Sets the local model's thread count. candle sizes its thread pool from
/// `RAYON_NUM_THREADS` when first used, and has no other setting.
fn set_model_threads(threads: Option<u16>) {
    let threads = threads.map(|n| n.to_string()).or_else(|| {
        std::env::var("AGENTRY_THREADS")
            .ok()
            .filter(|n| n.parse::<u16>().is_ok_and(|n| n > 0))
    });
    if let Some(threads) = threads {
        // SAFETY: called first thing in `main`, before the async runtime or any other thread
        // exists, so nothing can read the environment concurrently.
        #[allow(unsafe_code)]
        unsafe {
            std::env::set_var("RAYON_NUM_THREADS", threads);
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer one prompt, using tools, and stream the answer. Ctrl-C cancels the reply; SIGTERM
    /// cancels it and quits.
    Run(run::RunArgs),
    /// Talk with the agent, one prompt after the other. Ctrl-C cancels the current reply;
    /// twice quits, as do Ctrl-D, /exit and SIGTERM.
    Chat(chat::ChatArgs),
    /// Inspect the configured MCP servers.
    Mcp(mcp::McpArgs),
    /// Knowledge bases for --knowledge: add files, list, search, delete
    Kb(commands::kb::KbArgs),
    /// What long-term memory keeps about a user: list, search, forget
    Memory(commands::memory::MemoryCommandArgs),
    /// The models the local provider fetches by name: list, pull, path.
    #[cfg(feature = "local")]
    Model(commands::model::ModelArgs),
    /// The conversations kept by `--session`: list, show, export, import, delete.
    Sessions(sessions::SessionsArgs),
    /// The script tools (`--tools-dir`): list them, with the ones that do not load.
    Tools(tools::ToolsArgs),
    /// Serve the agent over HTTP: sessions, replies with a live event stream, cancel and
    /// approval (loopback only unless given a token).
    Serve(serve::ServeArgs),
    /// Measure how well a model calls tools: run a set of prompts (eval/tool-calls.json) and
    /// score the calls made and the answers.
    Eval(eval::EvalArgs),
}

/// Logs to stderr, and the GenAI trace spans to OpenTelemetry when `OTEL_EXPORTER_OTLP_ENDPOINT`
/// is set: the guard returned exports the last spans when dropped.
fn init_tracing() -> Option<agentry_otel::OtelGuard> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    // `AGENTRY_LOG=agentry=debug` for details; warnings (such as retries) are shown by default.
    // rmcp's own logs dump transport internals for failures agentry reports in plain words.
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTRY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp=off"));
    // Colour codes only for a terminal: in a log file or a pipe they are noise.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // Field values quote servers (an error body, a server's stderr): escaped like any other
    // text that reaches the terminal.
    let fields = tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = sanitize::line(&format!("{value:?}"));
        if field.name() == "message" {
            write!(writer, "{text}")
        } else {
            write!(writer, "{field}={text}")
        }
    })
    .delimited(" ");
    let log = tracing_subscriber::fmt::layer()
        .fmt_fields(fields)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false)
        .with_filter(filter);
    tracing_subscriber::registry().with(log).init();
    // The spans go to OpenTelemetry without `tracing`: the log level changes nothing of what
    // is exported.
    agentry_otel::init_from_env().unwrap_or_else(|e| {
        eprintln!(
            "warning: {}; traces are not exported",
            sanitize::line(&e.to_string())
        );
        None
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    set_model_threads(cli.threads);
    let traces = init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Chat(args) => chat::chat(args).await,
            Command::Mcp(args) => mcp::mcp(args).await,
            Command::Memory(args) => commands::memory::memory(args).await,
            Command::Kb(args) => commands::kb::kb(args).await,
            #[cfg(feature = "local")]
            Command::Model(args) => commands::model::model(args).await,
            Command::Eval(args) => eval::eval(args).await,
            Command::Sessions(args) => sessions::sessions(args).await,
            Command::Serve(args) => serve::serve(args).await,
            Command::Tools(args) => tools::tools(args),
        }
    });
    // A cancelled tool may still be unwinding on a blocking thread; do not wait long for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // Backstop: stdio MCP servers a path did not close (their process groups) do not outlive us.
    agentry::mcp::kill_all_servers();
    // Every reply has ended: its spans go out before the process does.
    if let Some(traces) = traces
        && let Err(e) = traces.shutdown()
    {
        eprintln!("warning: {}", sanitize::line(&e.to_string()));
    }
    code
}
