//! `agentry chat`: one prompt after the other, with the same memory.

use std::io::Write;
use std::process::ExitCode;

use agentry::agent::ReActAgent;
use agentry::message::Msg;
use clap::Args;

use crate::run::{AgentArgs, EXIT_INTERRUPTED, EXIT_TERMINATED, Setup, agent_or_exit, report_error};
use crate::session::{Outcome, Terminal, received};
use crate::sessions::{after_reply, resume_waiting_calls};
use agentry_store::SessionMemory;

/// One reply, its token use added to the session's ledger.
async fn drive_recorded(
    agent: &ReActAgent,
    session: Option<&SessionMemory>,
    terminal: &mut Terminal,
    prompt: &str,
) -> Outcome {
    let outcome = terminal.drive(agent.start_reply(Msg::user(prompt))).await;
    after_reply(session, agent, terminal).await;
    outcome
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub async fn chat(args: ChatArgs) -> ExitCode {
    // First, so that SIGTERM is handled from now on.
    let mut terminal = Terminal::new(true);
    let Setup {
        agent,
        mcp,
        local,
        session,
    } = match agent_or_exit(&args.agent).await {
        Ok(setup) => setup,
        Err(code) => return code,
    };
    let code = match resume_waiting_calls(session.as_deref(), &agent, &mut terminal).await {
        Some(Outcome::Quit) => ExitCode::from(EXIT_INTERRUPTED),
        Some(Outcome::Terminated) => ExitCode::from(EXIT_TERMINATED),
        resumed => {
            if let Some(Outcome::Finished { result: Err(e), .. }) = &resumed {
                report_error(e);
            }
            converse(&agent, session.as_deref(), &mut terminal).await
        }
    };
    mcp.close().await;
    if args.agent.verbose {
        crate::run::print_local_figures(&local);
    }
    code
}

/// Prompts and replies until the user leaves.
async fn converse(agent: &ReActAgent, session: Option<&SessionMemory>, terminal: &mut Terminal) -> ExitCode {
    terminal.take_interrupts();
    eprintln!("agentry chat: Ctrl-C cancels a reply, Ctrl-C twice, Ctrl-D or /exit quits.");
    loop {
        eprint!("{}", terminal.style.cyan("you> "));
        let _ = std::io::stderr().flush();
        let line = tokio::select! {
            line = terminal.input.next() => line,
            () = received(&mut terminal.interrupt) => {
                if terminal.interrupts.press() {
                    eprintln!();
                    return ExitCode::from(EXIT_INTERRUPTED);
                }
                eprintln!("\n(Ctrl-C again to quit)");
                continue;
            }
            () = received(&mut terminal.terminate) => {
                eprintln!();
                return ExitCode::from(EXIT_TERMINATED);
            }
        };
        let Some(line) = line else {
            eprintln!();
            return ExitCode::SUCCESS;
        };
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => return ExitCode::SUCCESS,
            prompt => match drive_recorded(agent, session, terminal, prompt).await {
                Outcome::Quit => return ExitCode::from(EXIT_INTERRUPTED),
                Outcome::Terminated => return ExitCode::from(EXIT_TERMINATED),
                Outcome::Finished { result: Err(e), .. } => report_error(&e),
                Outcome::Finished { .. } => {}
            },
        }
    }
}
