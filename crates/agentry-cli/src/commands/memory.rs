//! `agentry memory list | search | forget`: what long-term memory keeps about a user, to see
//! and to delete.

use std::process::ExitCode;

use agentry::memory::long_term::{LongTermMemory, MemoryRecord};
use clap::{Args, Subcommand};

use crate::config::load_config_file;
use crate::setup::memory::{EmbeddingArgs, embedder, embedding_plan, user_name};
use crate::setup::session::StoreArgs;
use crate::terminal::output::outln;
use crate::terminal::sanitize;

#[derive(Debug, Args)]
pub struct MemoryCommandArgs {
    #[command(subcommand)]
    command: MemoryCommand,
    #[command(flatten)]
    store: StoreArgs,
    /// Whose memories [default: the config's "user", else the OS user]
    #[arg(long, value_name = "NAME", global = true)]
    user: Option<String>,
    #[command(flatten)]
    embedding: EmbeddingArgs,
    /// The config file [default: ~/.config/agentry/config.json]
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// The user's memories, newest first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// The memories closest to QUERY, by meaning and by words, best first.
    Search {
        /// What to look for.
        query: String,
        /// At most this many.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Deletes memories by id (`list` shows them).
    Forget {
        /// The ids.
        #[arg(required = true)]
        ids: Vec<i64>,
    },
}

/// Runs `agentry memory`.
pub async fn memory(args: MemoryCommandArgs) -> ExitCode {
    match run_command(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

async fn run_command(args: MemoryCommandArgs) -> anyhow::Result<ExitCode> {
    let file = load_config_file(args.config.as_deref())?;
    let user = user_name(args.user.as_deref(), &file);
    let store = args.store.open()?;
    let embedder = match &args.command {
        MemoryCommand::Search { .. } => embedder(&embedding_plan(&args.embedding, &file)).await,
        _ => None,
    };
    let memory = agentry_store::StoredLongTermMemory::new((*store).clone(), user.clone(), embedder);
    match args.command {
        MemoryCommand::List { limit, json } => {
            show(&memory.list(limit).await?, json, &user)?;
        }
        MemoryCommand::Search { query, limit, json } => {
            show(&memory.retrieve(&query, limit).await?, json, &user)?;
        }
        MemoryCommand::Forget { ids } => {
            let mut missing = Vec::new();
            for id in ids {
                if memory.forget(id).await? {
                    eprintln!("forgot memory {id}");
                } else {
                    missing.push(id);
                }
            }
            if !missing.is_empty() {
                eprintln!(
                    "error: {} has no memory {}",
                    sanitize::line(&user),
                    missing.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
                );
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn show(records: &[MemoryRecord], json: bool, user: &str) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(records)?);
        return Ok(());
    }
    if records.is_empty() {
        eprintln!("no memories of {}", sanitize::line(user));
    }
    for record in records {
        let day = record.created_at.get(..10).unwrap_or(&record.created_at);
        outln!(
            "{:>6}  {day}  {:<5}  {}",
            record.id,
            record.source.as_str(),
            sanitize::summary(&record.content, 200)
        );
    }
    Ok(())
}
