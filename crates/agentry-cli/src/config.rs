//! Where the model settings come from: flags, then environment, then the config file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentry::model::{OpenAiConfig, RetryPolicy};
use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Model options shared by the commands that talk to a model.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model name [env: AGENTRY_MODEL or OPENAI_MODEL]
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8080/v1 [env: OPENAI_BASE_URL]
    #[arg(long)]
    pub base_url: Option<String>,
    /// Ask for the whole answer at once instead of streaming it
    #[arg(long)]
    pub no_stream: bool,
    /// Retries on rate limits (429), server errors (5xx) and connection errors
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// Config file (JSON) [default: $XDG_CONFIG_HOME/agentry/config.json or ~/.config/agentry/config.json]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The config file: every field optional.
///
/// ```json
/// {"base_url": "http://127.0.0.1:8080/v1", "model": "qwen2.5", "api_key": "...",
///  "stream": true, "max_retries": 4, "headers": {"x-org": "me"}, "extra_body": {"temperature": 0}}
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    stream: Option<bool>,
    max_retries: Option<u32>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    extra_body: Map<String, Value>,
    /// Settings the agent uses (read by the commands).
    pub system_prompt: Option<String>,
    /// Default `max_iters`.
    pub max_iters: Option<usize>,
}

/// `$XDG_CONFIG_HOME/agentry` or `~/.config/agentry`: where the default config files live.
pub fn config_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("agentry"))
}

fn default_config_path() -> Option<PathBuf> {
    Some(config_dir()?.join("config.json"))
}

/// Reads the config file named by `--config`, or the default one when it exists.
pub fn load_config_file(explicit: Option<&Path>) -> anyhow::Result<ConfigFile> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match default_config_path() {
            Some(p) if p.is_file() => p,
            _ => return Ok(ConfigFile::default()),
        },
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The provider config: flags win over the environment, which wins over the file.
pub fn model_config(args: &ModelArgs, file: &ConfigFile) -> OpenAiConfig {
    let model = args
        .model
        .clone()
        .or_else(|| env("AGENTRY_MODEL"))
        .or_else(|| env("OPENAI_MODEL"))
        .or_else(|| file.model.clone())
        .unwrap_or_default();
    let mut config = OpenAiConfig::new(model);
    if let Some(url) = args
        .base_url
        .clone()
        .or_else(|| env("OPENAI_BASE_URL"))
        .or_else(|| file.base_url.clone())
    {
        config.base_url = url;
    }
    config.api_key = env("OPENAI_API_KEY").or_else(|| file.api_key.clone());
    config.stream = !args.no_stream && file.stream.unwrap_or(true);
    let retries = args.max_retries.or(file.max_retries);
    if let Some(max_retries) = retries {
        config.retry = RetryPolicy {
            max_retries,
            ..RetryPolicy::default()
        };
    }
    config.headers = file.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    config.extra_body = file.extra_body.clone();
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_fields_parse_and_unknown_fields_are_refused() {
        let file: ConfigFile = serde_json::from_str(
            r#"{"base_url": "http://h/v1", "model": "m", "stream": false, "headers": {"a": "b"},
                "extra_body": {"temperature": 0}, "max_iters": 3}"#,
        )
        .unwrap();
        assert_eq!(file.max_iters, Some(3));
        let args = ModelArgs {
            model: Some("flag-model".into()),
            base_url: None,
            no_stream: false,
            max_retries: Some(0),
            config: None,
        };
        let config = model_config(&args, &file);
        assert_eq!(config.model, "flag-model");
        assert!(!config.stream);
        assert_eq!(config.retry.max_retries, 0);
        assert_eq!(config.headers, vec![("a".to_owned(), "b".to_owned())]);
        assert!(serde_json::from_str::<ConfigFile>(r#"{"modle": "typo"}"#).is_err());
    }
}
