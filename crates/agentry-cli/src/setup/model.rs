//! The model a command runs: a server's, a cassette's, or the local one (fetched with a
//! progress display on first use, then loaded here).

use std::sync::Arc;

use agentry::model::{AnthropicChatModel, ChatModel, OpenAiChatModel, RecordingModel, ReplayModel};
use anyhow::Context;

use crate::config::ProviderConfig;

/// The model the configuration names; a local one is fetched if needed and loaded here
/// (seconds for a 1 GB file).
pub(crate) async fn build_model(config: ProviderConfig) -> anyhow::Result<Arc<dyn ChatModel>> {
    Ok(build_model_with_figures(config).await?.0)
}

/// A local model, kept to read its figures (`--verbose`).
#[cfg(feature = "local")]
pub(crate) type LocalFigures = Option<agentry_local::LocalModel>;
/// Nothing to read without the local provider.
#[cfg(not(feature = "local"))]
pub(crate) type LocalFigures = Option<std::convert::Infallible>;

/// [`build_model`], and the local model itself when it is one.
pub(crate) async fn build_model_with_figures(
    config: ProviderConfig,
) -> anyhow::Result<(Arc<dyn ChatModel>, LocalFigures)> {
    match config {
        ProviderConfig::Replay(path) => Ok((Arc::new(ReplayModel::open(path)?), None)),
        ProviderConfig::Record { path, inner } => {
            let (model, local) = Box::pin(build_model_with_figures(*inner)).await?;
            let recording = RecordingModel::create(model, &path)
                .with_context(|| format!("cannot create the cassette {}", path.display()))?;
            Ok((Arc::new(recording), local))
        }
        ProviderConfig::OpenAi(config) => Ok((Arc::new(OpenAiChatModel::new(config)?), None)),
        ProviderConfig::Anthropic(config) => Ok((Arc::new(AnthropicChatModel::new(config)?), None)),
        #[cfg(feature = "local")]
        ProviderConfig::Local {
            model,
            implicit,
            constrain_calls,
            plan_calls,
            cache_size,
        } => {
            let config = agentry_local::LocalModelConfig::default()
                .constrain_calls(constrain_calls)
                .plan_calls(plan_calls)
                .prefix_cache_size(cache_size);
            let local = load_local_model(model, implicit, config).await?;
            Ok((Arc::new(local.clone()), Some(local)))
        }
        #[cfg(not(feature = "local"))]
        ProviderConfig::Local { .. } => anyhow::bail!(
            "this agentry was built without the local provider (cargo feature `local`): \
             give an OpenAI-compatible server with --base-url or OPENAI_BASE_URL"
        ),
    }
}

#[cfg(feature = "local")]
async fn load_local_model(
    model: crate::config::LocalModelChoice,
    implicit: bool,
    config: agentry_local::LocalModelConfig,
) -> anyhow::Result<agentry_local::LocalModel> {
    use crate::config::LocalModelChoice;
    let model_label = match &model {
        LocalModelChoice::File(path) => path.display().to_string(),
        LocalModelChoice::Named(name) => name.clone(),
    };
    if implicit {
        eprintln!(
            "agentry: no model server is configured, so the answer comes from the local model {} \
             (on this CPU). For a remote model: --provider openai with --base-url/OPENAI_BASE_URL \
             and OPENAI_API_KEY; see `agentry model list` for local ones.",
            model_label
        );
    }
    let cache = agentry_local::ModelCache::from_env()?;
    let (path, name) = match model {
        LocalModelChoice::File(path) => (path, None),
        LocalModelChoice::Named(name) => {
            let path = pull(&cache, &name)
                .await
                .with_context(|| format!("the local model {name} is not available"))?;
            (path, Some(name))
        }
    };
    let mut config = config.prefix_cache_dir(cache.root().join("prefixes"));
    if let Some(name) = name {
        config = config.name(name);
    }
    let loaded = tokio::task::spawn_blocking(move || agentry_local::LocalModel::load(&path, config))
        .await
        .context("loading the local model stopped")??;
    Ok(loaded)
}

/// `--verbose`: what the local model did, on stderr.
#[cfg(feature = "local")]
pub(crate) fn print_local_figures(local: &LocalFigures) {
    let Some(model) = local else { return };
    let stats = model.stats();
    let t = &stats.totals;
    eprintln!(
        "local model: loaded in {:.1} s; {} generations; prompt {} tokens, {} of them run at {:.1} tok/s; \
         prompt cache: {} tokens hit ({:.0} %, {} of them from disk), about {:.1} s of reading saved; \
         generated {} tokens at {:.1} tok/s ({} chosen by the call constraint)",
        stats.load_time.as_secs_f64(),
        t.calls,
        t.prompt_tokens,
        t.prompt_tokens.saturating_sub(t.reused_tokens),
        t.prompt_tokens_per_second(),
        t.reused_tokens,
        100.0 * t.cache_hit_rate(),
        t.stored_tokens,
        t.prompt_time_saved().as_secs_f64(),
        t.generated_tokens,
        t.generation_tokens_per_second(),
        t.corrected_tokens
    );
}

/// Nothing to print without the local provider.
#[cfg(not(feature = "local"))]
pub(crate) fn print_local_figures(_: &LocalFigures) {}

#[cfg(feature = "local")]
mod fetch {
    use std::io::IsTerminal;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use agentry_local::{ModelCache, PullEvent};

    use crate::terminal::sanitize;

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
}
#[cfg(feature = "local")]
pub(crate) use fetch::pull;
