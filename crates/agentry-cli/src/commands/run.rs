//! `agentry run "<prompt>"`: one reply, streamed to the terminal.

use std::process::ExitCode;

use agentry::message::Msg;
use clap::Args;

use crate::exit::{EXIT_INTERRUPTED, EXIT_TERMINATED, report_error};
use crate::setup::args::AgentArgs;
use crate::setup::model::print_local_figures;
use crate::setup::{Setup, agent_or_exit};
use crate::terminal::ledger::ledger_line;
use crate::terminal::{Outcome, Terminal};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// What to ask the agent
    pub prompt: String,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Runs `agentry run`.
pub async fn run(args: RunArgs) -> ExitCode {
    // First, so that SIGTERM is handled from now on.
    let mut terminal = Terminal::new(false);
    let Setup {
        agent,
        mcp,
        local,
        session,
    } = match agent_or_exit(&args.agent).await {
        Ok(setup) => setup,
        Err(code) => return code,
    };
    let resumed = terminal.resume_waiting_calls(session.as_deref(), &agent).await;
    let outcome = match resumed {
        Some(outcome @ (Outcome::Quit | Outcome::Terminated | Outcome::Finished { result: Err(_), .. })) => {
            outcome
        }
        _ => terminal.drive(agent.start_reply(Msg::user(args.prompt))).await,
    };
    mcp.close().await;
    if args.agent.verbose {
        if let Some((_, usage)) = &terminal.last_usage {
            eprintln!("{}", ledger_line(usage, terminal.last_cost));
        }
        print_local_figures(&local);
    }
    match outcome {
        Outcome::Quit => ExitCode::from(EXIT_INTERRUPTED),
        Outcome::Terminated => ExitCode::from(EXIT_TERMINATED),
        Outcome::Finished {
            result: Ok(_),
            cancelled,
        } => {
            if cancelled {
                ExitCode::from(EXIT_INTERRUPTED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Outcome::Finished { result: Err(e), .. } => {
            report_error(&e);
            ExitCode::FAILURE
        }
    }
}
