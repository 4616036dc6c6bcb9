//! `agentry sessions list | show | export | import | revoke | delete`: the conversations kept by
//! `--session`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentry::message::{Msg, Role};
use agentry_store::{SessionExport, SessionInfo, SessionStore, StoreError};
use anyhow::Context;
use clap::{Args, Subcommand};

use crate::setup::session::StoreArgs;
use crate::terminal::ledger::ledger_detail;
use crate::terminal::output::outln;
use crate::terminal::sanitize;

#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    command: SessionsCommand,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// The sessions, most recently used first.
    List {
        /// One JSON array of sessions.
        #[arg(long)]
        json: bool,
    },
    /// A session's conversation, tool calls, pending approvals and grants.
    Show {
        /// The session's name (or id).
        name: String,
        /// The whole session as the JSON document `export` writes.
        #[arg(long)]
        json: bool,
    },
    /// The whole session as one JSON document (for `import`).
    Export {
        /// The session's name (or id).
        name: String,
        /// Write to this file instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// A session from an `export` document, under a new id.
    Import {
        /// The document (`-` for stdin).
        file: PathBuf,
        /// Name it this instead of the exported name.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Print the new session as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the session's approval grants for a tool ("always" / "never" answers), so its
    /// calls are asked about again.
    Revoke {
        /// The session's name (or id).
        name: String,
        /// The tool whose grants go (all of them when `--all`).
        #[arg(required_unless_present = "all")]
        tool: Option<String>,
        /// Every grant of the session.
        #[arg(long, conflicts_with = "tool")]
        all: bool,
    },
    /// Remove a session and everything in it.
    Delete {
        /// The session's name (or id).
        name: String,
        /// Print `{"deleted": ...}`.
        #[arg(long)]
        json: bool,
    },
}

pub async fn sessions(args: SessionsArgs) -> ExitCode {
    match run_command(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

async fn run_command(args: SessionsArgs) -> anyhow::Result<()> {
    let file = crate::config::load_config_file(None)?;
    let store = args.store.with_config(file.db.as_deref()).open_sessions().await?;
    match args.command {
        SessionsCommand::List { json } => {
            // The store lists the most recently used first.
            let sessions = store.sessions().await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&sessions)?);
            } else if sessions.is_empty() {
                eprintln!("no sessions yet: `agentry run --session NAME \"...\"` starts one");
            } else {
                for s in &sessions {
                    outln!(
                        "{}  {} messages  last used {}",
                        sanitize::line(&s.name),
                        s.message_count,
                        s.updated_at.format("%Y-%m-%d %H:%M:%S UTC")
                    );
                }
            }
        }
        SessionsCommand::Show { name, json } => {
            let info = find(store.as_ref(), &name).await?;
            let export = SessionExport::read(store.as_ref(), &info.id).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&export)?);
            } else {
                print_session(&export);
            }
        }
        SessionsCommand::Export { name, output } => {
            let info = find(store.as_ref(), &name).await?;
            let export = SessionExport::read(store.as_ref(), &info.id).await?;
            let text = serde_json::to_string_pretty(&export)?;
            match output {
                Some(path) => write_new(&path, &text)?,
                None => outln!("{text}"),
            }
        }
        SessionsCommand::Import { file, name, json } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the export from stdin")?
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?
            };
            let export = SessionExport::from_json(&text)?;
            let info = export.import(store.as_ref(), name.as_deref()).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                outln!(
                    "imported {} ({} messages)",
                    sanitize::line(&info.name),
                    info.message_count
                );
            }
        }
        SessionsCommand::Revoke { name, tool, all } => {
            let info = find(store.as_ref(), &name).await?;
            let lease = writable(store.as_ref(), &info, "nothing was revoked").await?;
            let mut revoked = 0;
            for grant in store.grants(&info.id).await? {
                if (all || tool.as_deref() == Some(grant.tool_name.as_str()))
                    && store.revoke_grant(&lease, &grant.key).await?
                {
                    revoked += 1;
                }
            }
            outln!("revoked {revoked} grant(s)");
        }
        SessionsCommand::Delete { name, json } => {
            let info = find(store.as_ref(), &name).await?;
            // Refused while another agentry uses the session, rather than pulling it away.
            let lease = writable(store.as_ref(), &info, "it was not deleted").await?;
            drop(lease);
            let deleted = store.delete_session(&info.id).await?;
            if json {
                outln!(
                    "{}",
                    serde_json::json!({"deleted": deleted, "name": info.name, "id": info.id})
                );
            } else {
                outln!("deleted {}", sanitize::line(&info.name));
            }
        }
    }
    Ok(())
}

/// The session's lease, or, while another agentry uses it, an error saying so and that
/// `not_done`.
async fn writable(
    store: &dyn SessionStore,
    info: &SessionInfo,
    not_done: &str,
) -> anyhow::Result<agentry_store::Lease> {
    store.acquire(&info.id).await.map_err(|e| match e {
        StoreError::SessionBusy { .. } => {
            anyhow::anyhow!("{e}: another agentry is using the session; {not_done}")
        }
        e => e.into(),
    })
}

/// The session named `name`, or with that id.
async fn find(store: &dyn SessionStore, name: &str) -> anyhow::Result<SessionInfo> {
    if let Some(info) = store.session_named(name).await? {
        return Ok(info);
    }
    if let Some(info) = store.session(&agentry_store::SessionId::new(name)).await? {
        return Ok(info);
    }
    anyhow::bail!(
        "no session named {} (see `agentry sessions list`)",
        sanitize::line(name)
    )
}

/// Writes `text` to a file that must not exist yet: an export never overwrites anything.
fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

/// Characters shown of one message, call or result line.
const SHOW_CHARS: usize = 300;

fn print_session(export: &SessionExport) {
    let s = &export.session;
    outln!("session {} ({})", sanitize::line(&s.name), s.id);
    outln!(
        "created {}, last used {}, {} messages",
        s.created_at.format("%Y-%m-%d %H:%M:%S UTC"),
        s.updated_at.format("%Y-%m-%d %H:%M:%S UTC"),
        s.message_count
    );
    outln!();
    for msg in &export.messages {
        print_message(msg);
    }
    let live: Vec<_> = export.calls.iter().filter(|c| !c.status.is_terminal()).collect();
    if !live.is_empty() {
        outln!();
        outln!("unfinished calls (closed as interrupted when the session is next opened):");
        for call in live {
            outln!(
                "  {} {} ({})",
                call.call_id,
                sanitize::line(&call.tool_name),
                call.status.name()
            );
        }
    }
    if !export.pending_approvals.is_empty() {
        outln!();
        outln!("waiting for approval:");
        for a in &export.pending_approvals {
            outln!(
                "  {} {}: {}",
                a.call_id,
                sanitize::line(&a.tool_name),
                sanitize::short(&a.request.message, SHOW_CHARS)
            );
        }
    }
    if !export.grants.is_empty() {
        outln!();
        outln!("session grants:");
        for g in &export.grants {
            let kind = match g.kind {
                agentry_store::GrantKind::Allow => "allow",
                _ => "deny",
            };
            outln!("  {kind} {}", sanitize::short(&g.key, SHOW_CHARS));
        }
    }
    let u = &export.usage;
    if u.calls > 0 {
        outln!();
        outln!(
            "replies: {}, tokens in {} / out {}{}",
            u.calls,
            u.input_tokens,
            u.output_tokens,
            ledger_detail(u)
        );
    }
}

fn print_message(msg: &Msg) {
    let who = match msg.role {
        Role::User => "you",
        Role::Assistant => "agent",
        Role::System => "system",
        _ => "tool",
    };
    if let Some(text) = msg.text() {
        outln!("{who}: {}", sanitize::short(&text, SHOW_CHARS));
    }
    for call in msg.tool_uses() {
        outln!(
            "{who} -> {}({})",
            sanitize::line(&call.name),
            sanitize::short(&call.input.to_string(), SHOW_CHARS)
        );
    }
    for result in msg.tool_results() {
        let state = msg
            .metadata
            .get("tool_call")
            .and_then(|r| r.get("state"))
            .and_then(|s| s.as_str())
            .unwrap_or(if result.is_error { "failed" } else { "completed" });
        outln!(
            "  <- {} [{state}]: {}",
            sanitize::line(&result.name),
            sanitize::short(&result.text(), SHOW_CHARS)
        );
    }
}
