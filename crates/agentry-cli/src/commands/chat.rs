//! `agentry chat`: one prompt after the other, with the same memory.

use std::process::ExitCode;

use agentry::agent::ReActAgent;
use agentry::message::Msg;
use agentry::model::ChatUsage;
use clap::Args;

use crate::exit::{EXIT_INTERRUPTED, EXIT_TERMINATED, report_error};
use crate::setup::args::AgentArgs;
use crate::setup::{Setup, agent_or_exit};
use crate::terminal::input::{History, Prompted};
use crate::terminal::ledger::ledger_detail;
use crate::terminal::sanitize;
use crate::terminal::{Outcome, Terminal, received};
use agentry_store::SessionMemory;

/// One reply, its token use added to this chat's (the session's ledger is kept by the
/// session's hook).
async fn drive_counted(
    agent: &ReActAgent,
    terminal: &mut Terminal,
    prompt: &str,
    used: &mut ChatUsage,
) -> Outcome {
    let outcome = terminal.drive(agent.start_reply(Msg::user(prompt))).await;
    if let Some((_, usage)) = &terminal.last_usage {
        used.add(usage);
    }
    outcome
}

const COMMANDS: &str = "/tools     the tools the agent can use ([asks]: needs your approval)
/usage     tokens used in this chat (and in the whole session with --session)
/sessions  the stored sessions (with --session)
/help      this list
/quit      leave (also /exit, Ctrl-D, Ctrl-C twice)
During a reply, Ctrl-C cancels the running tools (pressed again: the reply), /cancel the reply.";

/// A chat command: answered here, never sent to the model.
async fn run_command(command: &str, agent: &ReActAgent, session: Option<&SessionMemory>, used: &ChatUsage) {
    match command {
        "/help" => eprintln!("{COMMANDS}"),
        "/tools" => {
            let toolkit = agent.toolkit();
            for name in toolkit.tool_names() {
                let asks = if toolkit.policy(&name).require_approval {
                    "  [asks]"
                } else {
                    ""
                };
                eprintln!("  {}{asks}", sanitize::line(&name));
            }
        }
        "/usage" => {
            eprintln!(
                "this chat: {} tokens in, {} out, {:.1} s with the model",
                used.input_tokens,
                used.output_tokens,
                used.time.as_secs_f64()
            );
            if let Some(memory) = session {
                match memory.store().usage(&memory.session().id).await {
                    Ok(total) => eprintln!(
                        "session {}: {} replies, {} tokens in, {} out{}",
                        sanitize::line(&memory.session().name),
                        total.calls,
                        total.input_tokens,
                        total.output_tokens,
                        ledger_detail(&total)
                    ),
                    Err(e) => eprintln!("error: {}", sanitize::line(&e.to_string())),
                }
            }
        }
        "/sessions" => match session {
            None => eprintln!("no session: start the chat with --session NAME to keep it"),
            Some(memory) => match memory.store().sessions().await {
                Ok(sessions) => {
                    for s in sessions {
                        let this = if s.id == memory.session().id {
                            "  (this one)"
                        } else {
                            ""
                        };
                        eprintln!(
                            "  {}  {} messages{this}",
                            sanitize::line(&s.name),
                            s.message_count
                        );
                    }
                }
                Err(e) => eprintln!("error: {}", sanitize::line(&e.to_string())),
            },
        },
        "/cancel" => eprintln!("nothing runs now: Ctrl-C cancels a reply while it runs"),
        other => eprintln!("unknown command {}: /help lists them", sanitize::line(other)),
    }
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
    terminal
        .input
        .use_history(prompt_history(session.as_deref()).await);
    let code = match terminal.resume_waiting_calls(session.as_deref(), &agent).await {
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
        crate::setup::model::print_local_figures(&local);
    }
    code
}

/// Earlier prompts for the up arrow: the session's own (it keeps them), or a file shared by
/// the chats without a session.
async fn prompt_history(session: Option<&SessionMemory>) -> History {
    use agentry::memory::Memory;
    use agentry::message::Role;
    match session {
        Some(memory) => {
            let prompts = match memory.messages().await {
                Ok(messages) => messages
                    .into_iter()
                    .filter(|m| m.role == Role::User)
                    .filter_map(|m| m.text())
                    .filter(|text| !text.trim().is_empty() && !text.contains('\n'))
                    .collect(),
                Err(_) => Vec::new(),
            };
            History::Entries(prompts)
        }
        None => match agentry_store::SqliteStore::default_path() {
            Ok(db) => History::File(db.with_file_name("chat_history.txt")),
            Err(_) => History::Entries(Vec::new()),
        },
    }
}

/// Prompts and replies until the user leaves.
async fn converse(agent: &ReActAgent, session: Option<&SessionMemory>, terminal: &mut Terminal) -> ExitCode {
    terminal.take_interrupts();
    eprintln!(
        "agentry chat: Ctrl-C cancels the running tools or reply; Ctrl-C twice, Ctrl-D or /quit quits; /help lists the commands."
    );
    let mut used = ChatUsage::default();
    let prompt = if terminal.input.edits_prompts() {
        // The editor measures the prompt's width itself: no colour codes in it.
        "you> ".to_owned()
    } else {
        terminal.style.cyan("you> ")
    };
    loop {
        let line = tokio::select! {
            line = terminal.input.prompt(&prompt) => line,
            () = received(&mut terminal.interrupt) => Prompted::Interrupted,
            () = received(&mut terminal.terminate) => {
                eprintln!();
                return ExitCode::from(EXIT_TERMINATED);
            }
        };
        let line = match line {
            Prompted::Line(line) => line,
            Prompted::Interrupted => {
                if terminal.interrupts.press() {
                    eprintln!();
                    return ExitCode::from(EXIT_INTERRUPTED);
                }
                eprintln!("\n(Ctrl-C again to quit)");
                continue;
            }
            Prompted::Closed => {
                eprintln!();
                return ExitCode::SUCCESS;
            }
        };
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => return ExitCode::SUCCESS,
            command if command.starts_with('/') => run_command(command, agent, session, &used).await,
            prompt => match drive_counted(agent, terminal, prompt, &mut used).await {
                Outcome::Quit => return ExitCode::from(EXIT_INTERRUPTED),
                Outcome::Terminated => return ExitCode::from(EXIT_TERMINATED),
                Outcome::Finished { result: Err(e), .. } => report_error(&e),
                Outcome::Finished { .. } => {}
            },
        }
    }
}
