//! Where the model settings come from: flags, then environment, then the config file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentry::model::{AnthropicConfig, HttpSettings, OpenAiConfig, RetryPolicy};
use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Model options shared by the commands that talk to a model.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model name [env: AGENTRY_MODEL, or OPENAI_MODEL / ANTHROPIC_MODEL]
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Base URL of the model's API, e.g. http://127.0.0.1:8080/v1 for an OpenAI-compatible
    /// server [env: OPENAI_BASE_URL, or ANTHROPIC_BASE_URL with --provider anthropic]
    #[arg(long)]
    pub base_url: Option<String>,
    /// Anthropic: extended thinking with this budget of tokens (at least 1024)
    #[arg(long, value_name = "TOKENS")]
    pub thinking_budget: Option<u32>,
    /// Anthropic: the most tokens one answer may generate [default: 8192]
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens: Option<u32>,
    /// Ask for the whole answer at once instead of streaming it
    #[arg(long)]
    pub no_stream: bool,
    /// Take a tool call the model wrote as text (a JSON block, `<tool_call>` tags) as text,
    /// instead of running it as a call (the tool shim; config file: "tool_shim": false)
    #[arg(long)]
    pub no_tool_shim: bool,
    /// Retries on rate limits (429), server errors (5xx), connection errors and streams that
    /// break before their first event [default: 4]
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// Longest wait for a connection to the server, e.g. 10, 2.5s, 500ms, 1m [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub connect_timeout: Option<Duration>,
    /// Longest silence from a server that streams (before its first byte, or between two)
    /// [default: 120s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub read_timeout: Option<Duration>,
    /// Longest a whole model request may take, and so how long an answer without streaming
    /// may take to arrive [default: 600s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Config file (JSON) [default: $XDG_CONFIG_HOME/agentry/config.json or ~/.config/agentry/config.json]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where the model runs: `openai` (an OpenAI-compatible server), `anthropic` (Anthropic's
    /// Messages API) or `local` (a GGUF model inside this process) [env: AGENTRY_PROVIDER]
    /// [default: local, or the server whose address or key is set]
    #[arg(long, value_name = "NAME")]
    pub provider: Option<ProviderName>,
    /// Local model: do not constrain the tool calls it writes to the offered tools and their
    /// schemas (to measure what the constraint brings)
    #[arg(long)]
    pub no_call_constraint: bool,
    /// Local model: do not plan a question's tools before answering (by default the model
    /// first chooses which offered tools the question needs, then calls each before it answers;
    /// to measure what the plan brings)
    #[arg(long)]
    pub no_tool_plan: bool,
    /// Local model: the most disk space its saved prompt prefixes (system prompt and tool
    /// descriptions, read once and reused by later runs) may take, e.g. 400MB, 2GB, 0 to save
    /// none; the least recently used go first [default: 400MB]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub cache_size: Option<u64>,
    /// The GGUF file of the local model (with `--provider local`) [env: AGENTRY_MODEL_PATH]
    #[arg(long, value_name = "FILE")]
    pub model_path: Option<PathBuf>,
    /// Record every model request and its streamed answer, with timings, to FILE (a cassette,
    /// JSON Lines; created or emptied) for --replay
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Answer from a cassette written by --record instead of a model: no server is contacted
    /// and no provider setting is needed; a request that differs from the recorded one fails
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderName {
    /// An OpenAI-compatible server.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// A GGUF model in this process.
    Local,
}

/// The model to build, from flags, environment and file.
#[derive(Debug, Clone)]
// Without the local provider its settings are parsed, then refused when the model is built.
#[cfg_attr(not(feature = "local"), allow(dead_code))]
pub enum ProviderConfig {
    /// An OpenAI-compatible server.
    OpenAi(OpenAiConfig),
    /// Anthropic's Messages API.
    Anthropic(AnthropicConfig),
    /// A GGUF model run in this process.
    Local {
        /// Which model.
        model: LocalModelChoice,
        /// True when nothing asked for a provider and the local model was chosen because no
        /// server is configured: the user is told, once, how to use a remote one.
        implicit: bool,
        /// Keep the calls it writes valid (`--no-call-constraint` turns this off).
        constrain_calls: bool,
        /// Plan each question's tools (`--no-tool-plan` turns this off).
        plan_calls: bool,
        /// The most bytes of saved prompt prefixes (`--cache-size`).
        cache_size: u64,
    },
    /// The calls of a cassette, served without a model (`--replay`).
    Replay(PathBuf),
    /// Another provider, its calls recorded to a cassette (`--record`).
    Record {
        /// The cassette written.
        path: PathBuf,
        /// The provider recorded.
        inner: Box<ProviderConfig>,
    },
}

/// The local model: a file, or a model known by name (fetched into the cache on first use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalModelChoice {
    /// A GGUF file.
    File(PathBuf),
    /// A name from `agentry model list`.
    Named(String),
}

/// The default bound of the local model's saved prompt prefixes.
#[cfg(feature = "local")]
const DEFAULT_CACHE_SIZE: u64 = agentry_local::DEFAULT_PREFIX_CACHE_SIZE;
#[cfg(not(feature = "local"))]
const DEFAULT_CACHE_SIZE: u64 = 400_000_000;

/// The model used by the local provider when none is named.
#[cfg(feature = "local")]
pub const DEFAULT_LOCAL_MODEL: &str = agentry_local::DEFAULT_MODEL;
/// The model the local provider would use (it is not built in: naming it is an error later).
#[cfg(not(feature = "local"))]
pub const DEFAULT_LOCAL_MODEL: &str = "qwen2.5-coder-1.5b";

/// Which provider the flags, the environment and the file ask for. With none asked for, the
/// local model runs unless an OpenAI-compatible server is configured (a base URL or an API key).
/// `--replay` replaces the provider (nothing else is read); `--record` wraps it.
pub fn provider_config(args: &ModelArgs, file: &ConfigFile) -> anyhow::Result<ProviderConfig> {
    if let Some(path) = &args.replay {
        return Ok(ProviderConfig::Replay(path.clone()));
    }
    let config = model_provider_config(args, file)?;
    Ok(match &args.record {
        Some(path) => ProviderConfig::Record {
            path: path.clone(),
            inner: Box::new(config),
        },
        None => config,
    })
}

fn model_provider_config(args: &ModelArgs, file: &ConfigFile) -> anyhow::Result<ProviderConfig> {
    let from_env = match env("AGENTRY_PROVIDER") {
        Some(name) => Some(match name.to_ascii_lowercase().as_str() {
            "openai" => ProviderName::Openai,
            "anthropic" => ProviderName::Anthropic,
            "local" => ProviderName::Local,
            other => anyhow::bail!("AGENTRY_PROVIDER={other:?}: use openai, anthropic or local"),
        }),
        None => None,
    };
    let model_path = args
        .model_path
        .clone()
        .or_else(|| env("AGENTRY_MODEL_PATH").map(PathBuf::from))
        .or_else(|| file.model_path.clone());
    let named = args
        .model
        .clone()
        .or_else(|| env("AGENTRY_MODEL"))
        .or_else(|| file.model.clone());
    let chosen = args.provider.or(from_env).or(file.provider);
    let server_configured = args.base_url.is_some()
        || env("OPENAI_BASE_URL").is_some()
        || env("OPENAI_API_KEY").is_some()
        || file.base_url.is_some()
        || file.api_key.is_some();
    let anthropic_configured = env("ANTHROPIC_BASE_URL").is_some() || env("ANTHROPIC_API_KEY").is_some();
    let (provider, implicit) = match chosen {
        Some(provider) => (provider, false),
        None if model_path.is_some() => (ProviderName::Local, false),
        None if server_configured => (ProviderName::Openai, false),
        None if anthropic_configured => (ProviderName::Anthropic, false),
        None => (ProviderName::Local, true),
    };
    match provider {
        ProviderName::Openai => Ok(ProviderConfig::OpenAi(model_config(args, file))),
        ProviderName::Anthropic => Ok(ProviderConfig::Anthropic(anthropic_config(args, file))),
        ProviderName::Local => {
            let model = match (model_path, named) {
                (Some(path), _) => LocalModelChoice::File(path),
                (None, Some(name)) => {
                    if !known_local_model(&name) {
                        anyhow::bail!(
                            "{name:?} is not a model the local provider knows (see `agentry model list`).{}",
                            if implicit {
                                " To use it on a server, give its address: --base-url URL or OPENAI_BASE_URL \
                                 (and OPENAI_API_KEY if it needs one)."
                            } else {
                                " Give a GGUF file with --model-path FILE."
                            }
                        );
                    }
                    LocalModelChoice::Named(name)
                }
                (None, None) => LocalModelChoice::Named(DEFAULT_LOCAL_MODEL.into()),
            };
            Ok(ProviderConfig::Local {
                model,
                implicit,
                constrain_calls: !args.no_call_constraint,
                plan_calls: !args.no_tool_plan,
                cache_size: args.cache_size.or(file.cache_size).unwrap_or(DEFAULT_CACHE_SIZE),
            })
        }
    }
}

#[cfg(feature = "local")]
fn known_local_model(name: &str) -> bool {
    agentry_local::find_known_model(name).is_some()
}

#[cfg(not(feature = "local"))]
fn known_local_model(_: &str) -> bool {
    // Without the catalog any name passes here; building the model then says the local
    // provider is not built in.
    true
}

/// The config file: every field optional.
///
/// ```json
/// {"base_url": "http://127.0.0.1:8080/v1", "model": "qwen2.5", "api_key": "...",
///  "stream": true, "max_retries": 4, "connect_timeout": 10, "read_timeout": "2m",
///  "request_timeout": 900, "headers": {"x-org": "me"}, "extra_body": {"temperature": 0},
///  "tool_shim": false}
/// ```
///
/// Timeouts are seconds, or strings with a unit as the flags take them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    stream: Option<bool>,
    max_retries: Option<u32>,
    #[serde(default, deserialize_with = "duration_field")]
    connect_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_field")]
    read_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_field")]
    request_timeout: Option<Duration>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    extra_body: Map<String, Value>,
    provider: Option<ProviderName>,
    model_path: Option<PathBuf>,
    /// Anthropic: the most tokens one answer may generate.
    max_tokens: Option<u32>,
    /// Anthropic: extended thinking with this budget of tokens.
    thinking_budget: Option<u32>,
    /// Anthropic: cache the system prompt and tools (default true).
    prompt_caching: Option<bool>,
    /// Prices per model name or `prefix*`, in US dollars per million tokens:
    /// `{"claude-sonnet-*": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}`.
    #[serde(default)]
    pub prices: agentry::usage::PriceTable,
    /// Most tokens one reply may use (`--max-tokens-per-reply`).
    pub max_tokens_per_reply: Option<u64>,
    /// Most US dollars one reply may cost (`--max-cost-per-reply`; needs the model's price).
    pub max_cost_per_reply: Option<f64>,
    /// Settings the agent uses (read by the commands).
    pub system_prompt: Option<String>,
    /// The agent's name: the name of its tool for an MCP host (`agentry mcp serve`), and how
    /// approval questions name it [default: "agentry"].
    pub name: Option<String>,
    /// What the agent does, for whoever calls it as a tool (the MCP host's model).
    pub description: Option<String>,
    /// Sub-agents the agent calls as tools, by name: `{"researcher": {"description": "...",
    /// "system_prompt": "...", "model": "...", "base_url": "...", "provider": "...",
    /// "tools": [...]}}`.
    #[serde(default)]
    pub agents: BTreeMap<String, SubAgentConfig>,
    /// Remote A2A agents the agent calls as tools, by name: `{"archive": "http://host:port"}`,
    /// or `{"archive": {"url": "...", "headers": {"Authorization": "Bearer ..."}}}`.
    #[serde(default)]
    pub a2a: BTreeMap<String, RemoteAgentConfig>,
    /// Default `max_iters`.
    pub max_iters: Option<usize>,
    /// Whether tool calls written as text run as calls (default true; `--no-tool-shim`).
    pub tool_shim: Option<bool>,
    /// Folders of script tools (`assistant_tool.json` + code), besides `--tools-dir`.
    #[serde(default)]
    pub tools_dirs: Vec<PathBuf>,
    /// Script tools whose manifest asks for the network may use it (`--allow-script-network`).
    pub allow_script_network: Option<bool>,
    /// Calls run or declined without asking (`--allow`, `--deny`).
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// The only tools offered to the model (`--tools`).
    pub tools: Option<Vec<String>>,
    /// Give the agent a plan notebook (`--plan`).
    pub plan: Option<bool>,
    /// Knowledge bases retrieved from (`--knowledge`).
    #[serde(default)]
    pub knowledge: Vec<String>,
    /// Whether the model rewrites the question for the knowledge bases (`--no-rewrite-query`).
    pub rewrite_query: Option<bool>,
    /// The session database, a file or a `postgres://` URL (`--db`, `AGENTRY_DB`).
    pub db: Option<String>,
    /// Long-term memory: `agent`, `static` or `both` (`--long-term-memory`).
    pub long_term_memory: Option<agentry::memory::long_term::LongTermMemoryMode>,
    /// Whose memories (`--user`).
    pub user: Option<String>,
    /// An OpenAI-compatible embeddings endpoint (`--embedding-base-url`).
    pub embedding_base_url: Option<String>,
    /// Its model (`--embedding-model`).
    pub embedding_model: Option<String>,
    /// The context window in tokens, for compaction (`--context-window`).
    pub context_window: Option<u64>,
    /// Compact when a request passes this share of the window (`--compact-at`).
    pub compact_at: Option<f64>,
    /// Local model: the most bytes of saved prompt prefixes (`--cache-size`): a number of
    /// bytes or a size with a unit, like the flag.
    #[serde(default, deserialize_with = "size_field")]
    cache_size: Option<u64>,
}

/// A remote agent of the config's `"a2a"`: its URL (the base, or its card's), and the headers
/// its requests carry.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RemoteAgentConfig {
    /// Just the URL.
    Url(String),
    /// The URL and headers.
    Full {
        /// The agent's base URL, or its card's.
        url: String,
        /// Sent with every request.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

/// A sub-agent of the config's `"agents"`: every key optional but the description. What it
/// leaves out it takes from the agent: the model and its server, and every tool (not the
/// other sub-agents).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubAgentConfig {
    /// What it does: what the agent's model reads to choose it.
    pub description: String,
    /// Its system prompt [default: one saying it works for another agent].
    pub system_prompt: Option<String>,
    /// Its model's name.
    pub model: Option<String>,
    /// Its model's server (OpenAI-compatible, or Anthropic's with `"provider": "anthropic"`).
    pub base_url: Option<String>,
    /// Where its model runs.
    pub provider: Option<ProviderName>,
    /// The only tools it may use, by the names the agent has them by.
    pub tools: Option<Vec<String>>,
}

/// `"permissions": {"allow": ["write_file:notes/**"], "deny": ["read_file:.env"]}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionsConfig {
    /// Rules `TOOL[:PATTERN]` whose calls run without asking.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules `TOOL[:PATTERN]` whose calls are declined without asking; deny wins.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// Whether the tool shim is on: `--no-tool-shim` turns it off, else the file's `tool_shim`.
pub fn tool_shim(args: &ModelArgs, file: &ConfigFile) -> bool {
    !args.no_tool_shim && file.tool_shim != Some(false)
}

/// A duration as flags and the config file take it: seconds (`30`, `2.5`), or a number with
/// a unit (`500ms`, `30s`, `2m`), at most a week.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_span(text, false, 7.0 * 24.0 * 3600.0, "30, 2.5s, 500ms or 2m")
}

/// A retention: a number with a unit, `ms`, `s`, `m`, `h` or `d` (`30d`), at most 100 years.
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    parse_span(text, true, 100.0 * 365.0 * 86_400.0, "30d, 12h or 90m")
}

/// A positive span of time of at most `max` seconds. A retention (`long`) needs a unit and may
/// be in hours or days; otherwise a bare number is seconds.
fn parse_span(text: &str, long: bool, max: f64, examples: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = text.strip_suffix('h').filter(|_| long) {
        (n, 3_600.0)
    } else if let Some(n) = text.strip_suffix('d').filter(|_| long) {
        (n, 86_400.0)
    } else if long {
        return Err(format!("{text:?} needs a unit (try {examples})"));
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try {examples})"))?;
    let seconds = value * scale;
    if !seconds.is_finite() || seconds <= 0.0 || seconds > max {
        return Err(match long {
            true => format!("{text:?} must be more than 0 and at most 100 years"),
            false => format!("{text:?} must be more than 0 and at most a week"),
        });
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A size in bytes as `--cache-size` and the config file take it: bytes (`1000000`), or a
/// number with a unit: `KB`, `MB`, `GB` (powers of 1000) or `KiB`, `MiB`, `GiB` (of 1024);
/// `K`, `M`, `G` alone are read as the first.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("{text:?} is not a size (try 400MB, 2GB or 0)")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (try 400MB, 2GB or 0)"))?;
    let bytes = value * scale;
    if !bytes.is_finite() || bytes > 1e15 {
        return Err(format!("{text:?} is too large"));
    }
    Ok(bytes as u64)
}

fn size_field<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }
    match Raw::deserialize(de)? {
        Raw::Bytes(bytes) => Ok(Some(bytes)),
        Raw::Text(text) => parse_size(&text).map(Some).map_err(serde::de::Error::custom),
    }
}

fn duration_field<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(f64),
        Text(String),
    }
    let text = match Raw::deserialize(de)? {
        Raw::Seconds(s) => s.to_string(),
        Raw::Text(t) => t,
    };
    parse_duration(&text).map(Some).map_err(serde::de::Error::custom)
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

/// The settings every server provider takes, from flags, environment and file (flags win over
/// the environment, which wins over the file).
struct ServerSettings {
    model: String,
    base_url: Option<String>,
    api_key: Option<String>,
    stream: bool,
    retry: Option<RetryPolicy>,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    headers: Vec<(String, String)>,
    extra_body: Map<String, Value>,
}

/// Sets the HTTP settings every server provider shares from [`ServerSettings`] (what is not
/// given keeps the provider's default).
fn apply_server_settings(settings: ServerSettings, http: &mut HttpSettings) {
    if let Some(url) = settings.base_url {
        http.base_url = url;
    }
    http.api_key = settings.api_key;
    if let Some(retry) = settings.retry {
        http.retry = retry;
    }
    http.connect_timeout = settings.connect_timeout.unwrap_or(http.connect_timeout);
    http.read_timeout = settings.read_timeout.unwrap_or(http.read_timeout);
    http.request_timeout = settings.request_timeout.unwrap_or(http.request_timeout);
    http.headers = settings.headers;
    http.extra_body = settings.extra_body;
}

/// The environment variables of one provider.
struct ProviderEnv {
    model: &'static str,
    base_url: &'static str,
    api_key: &'static str,
}

fn server_settings(args: &ModelArgs, file: &ConfigFile, names: &ProviderEnv) -> ServerSettings {
    ServerSettings {
        model: args
            .model
            .clone()
            .or_else(|| env("AGENTRY_MODEL"))
            .or_else(|| env(names.model))
            .or_else(|| file.model.clone())
            .unwrap_or_default(),
        base_url: args
            .base_url
            .clone()
            .or_else(|| env(names.base_url))
            .or_else(|| file.base_url.clone()),
        api_key: env(names.api_key).or_else(|| file.api_key.clone()),
        stream: !args.no_stream && file.stream.unwrap_or(true),
        retry: args
            .max_retries
            .or(file.max_retries)
            .map(|max_retries| RetryPolicy {
                max_retries,
                ..RetryPolicy::default()
            }),
        connect_timeout: args.connect_timeout.or(file.connect_timeout),
        read_timeout: args.read_timeout.or(file.read_timeout),
        request_timeout: args.request_timeout.or(file.request_timeout),
        headers: file.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        extra_body: file.extra_body.clone(),
    }
}

/// The OpenAI-compatible provider's config.
pub fn model_config(args: &ModelArgs, file: &ConfigFile) -> OpenAiConfig {
    let names = ProviderEnv {
        model: "OPENAI_MODEL",
        base_url: "OPENAI_BASE_URL",
        api_key: "OPENAI_API_KEY",
    };
    let settings = server_settings(args, file, &names);
    let mut config = OpenAiConfig::new(settings.model.clone()).stream(settings.stream);
    apply_server_settings(settings, &mut config.http);
    config
}

/// The Anthropic provider's config.
pub fn anthropic_config(args: &ModelArgs, file: &ConfigFile) -> AnthropicConfig {
    let names = ProviderEnv {
        model: "ANTHROPIC_MODEL",
        base_url: "ANTHROPIC_BASE_URL",
        api_key: "ANTHROPIC_API_KEY",
    };
    let settings = server_settings(args, file, &names);
    let mut config = AnthropicConfig::new(settings.model.clone()).stream(settings.stream);
    apply_server_settings(settings, &mut config.http);
    if let Some(max_tokens) = args.max_tokens.or(file.max_tokens) {
        config.max_tokens = max_tokens;
    }
    config.thinking_budget = args.thinking_budget.or(file.thinking_budget);
    if let Some(caching) = file.prompt_caching {
        config.prompt_caching = caching;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_fields_parse_and_unknown_fields_are_refused() {
        let file: ConfigFile = serde_json::from_str(
            r#"{"base_url": "http://h/v1", "model": "m", "stream": false, "headers": {"a": "b"},
                "extra_body": {"temperature": 0}, "max_iters": 3, "read_timeout": 5,
                "request_timeout": "15m", "connect_timeout": "250ms"}"#,
        )
        .unwrap();
        assert_eq!(file.max_iters, Some(3));
        let args = ModelArgs {
            model: Some("flag-model".into()),
            base_url: None,
            thinking_budget: None,
            max_tokens: None,
            no_stream: false,
            no_tool_shim: false,
            max_retries: Some(0),
            connect_timeout: None,
            read_timeout: Some(Duration::from_millis(1500)),
            request_timeout: None,
            config: None,
            provider: None,
            model_path: None,
            no_call_constraint: false,
            no_tool_plan: false,
            cache_size: None,
            record: None,
            replay: None,
        };
        let config = model_config(&args, &file);
        assert_eq!(config.model, "flag-model");
        assert!(!config.stream);
        assert_eq!(config.http.retry.max_retries, 0);
        assert_eq!(config.http.headers, vec![("a".to_owned(), "b".to_owned())]);
        assert_eq!(
            config.http.read_timeout,
            Duration::from_millis(1500),
            "the flag wins"
        );
        assert_eq!(config.http.request_timeout, Duration::from_secs(900));
        assert_eq!(config.http.connect_timeout, Duration::from_millis(250));
        // The Anthropic provider takes the same settings, the connect limit included.
        let anthropic = anthropic_config(&args, &file);
        assert_eq!(anthropic.http.connect_timeout, Duration::from_millis(250));
        assert_eq!(anthropic.http.read_timeout, Duration::from_millis(1500));
        assert!(!anthropic.stream);
        assert!(serde_json::from_str::<ConfigFile>(r#"{"read_timeout": "soon"}"#).is_err());
        assert!(serde_json::from_str::<ConfigFile>(r#"{"read_timeout": 0}"#).is_err());
        assert!(serde_json::from_str::<ConfigFile>(r#"{"modle": "typo"}"#).is_err());
        assert!(tool_shim(&args, &file), "on by default");
        let off: ConfigFile = serde_json::from_str(r#"{"tool_shim": false}"#).unwrap();
        assert!(!tool_shim(&args, &off));
        let flag = ModelArgs {
            no_tool_shim: true,
            ..args
        };
        assert!(!tool_shim(&flag, &file));
    }

    fn no_flags() -> ModelArgs {
        ModelArgs {
            model: None,
            base_url: None,
            thinking_budget: None,
            max_tokens: None,
            no_stream: false,
            no_tool_shim: false,
            max_retries: None,
            connect_timeout: None,
            read_timeout: None,
            request_timeout: None,
            config: None,
            provider: None,
            model_path: None,
            no_call_constraint: false,
            no_tool_plan: false,
            cache_size: None,
            record: None,
            replay: None,
        }
    }

    #[test]
    fn a_cache_size_reads_with_or_without_a_unit() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("123456"), Ok(123_456));
        assert_eq!(parse_size("400MB"), Ok(400_000_000));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("2g"), Ok(2_000_000_000));
        assert_eq!(parse_size("64MiB"), Ok(64 * 1024 * 1024));
        for bad in ["", "lots", "10 parsecs", "-1MB", "1e30"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        let local = |file: &str, flag: Option<u64>| {
            let file: ConfigFile = serde_json::from_str(file).unwrap();
            let args = ModelArgs {
                provider: Some(ProviderName::Local),
                cache_size: flag,
                ..no_flags()
            };
            match provider_config(&args, &file).unwrap() {
                ProviderConfig::Local { cache_size, .. } => cache_size,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(local("{}", None), DEFAULT_CACHE_SIZE);
        assert_eq!(local(r#"{"cache_size": "1GB"}"#, None), 1_000_000_000);
        assert_eq!(local(r#"{"cache_size": 5000}"#, None), 5000);
        assert_eq!(local(r#"{"cache_size": 5000}"#, Some(0)), 0, "the flag wins");
        assert!(serde_json::from_str::<ConfigFile>(r#"{"cache_size": "big"}"#).is_err());
    }

    #[test]
    fn a_configured_server_or_model_file_decides_the_provider() {
        let server: ConfigFile =
            serde_json::from_str(r#"{"base_url": "http://h/v1", "model": "m"}"#).unwrap();
        assert!(matches!(
            provider_config(&no_flags(), &server).unwrap(),
            ProviderConfig::OpenAi(_)
        ));
        let file: ConfigFile = serde_json::from_str(r#"{"model_path": "/m.gguf"}"#).unwrap();
        match provider_config(&no_flags(), &file).unwrap() {
            ProviderConfig::Local { model, implicit, .. } => {
                assert_eq!(model, LocalModelChoice::File("/m.gguf".into()));
                assert!(!implicit);
            }
            other => panic!("expected the local provider, got {other:?}"),
        }
        let named = ModelArgs {
            provider: Some(ProviderName::Local),
            model: Some("qwen2.5-coder-0.5b".into()),
            ..no_flags()
        };
        match provider_config(&named, &server).unwrap() {
            ProviderConfig::Local { model, implicit, .. } => {
                assert_eq!(model, LocalModelChoice::Named("qwen2.5-coder-0.5b".into()));
                assert!(!implicit, "asked for");
            }
            other => panic!("expected the local provider, got {other:?}"),
        }
        let unknown = ModelArgs {
            provider: Some(ProviderName::Local),
            model: Some("gpt-4o".into()),
            ..no_flags()
        };
        let err = provider_config(&unknown, &ConfigFile::default()).unwrap_err();
        assert!(err.to_string().contains("--model-path"), "{err}");
    }

    #[test]
    fn replay_needs_no_provider_and_record_wraps_one() {
        let replay = ModelArgs {
            provider: Some(ProviderName::Local),
            model: Some("not-a-known-model".into()),
            replay: Some("c.jsonl".into()),
            ..no_flags()
        };
        assert!(matches!(
            provider_config(&replay, &ConfigFile::default()).unwrap(),
            ProviderConfig::Replay(path) if path == Path::new("c.jsonl")
        ));
        let record = ModelArgs {
            base_url: Some("http://h/v1".into()),
            record: Some("c.jsonl".into()),
            ..no_flags()
        };
        match provider_config(&record, &ConfigFile::default()).unwrap() {
            ProviderConfig::Record { path, inner } => {
                assert_eq!(path, Path::new("c.jsonl"));
                assert!(matches!(*inner, ProviderConfig::OpenAi(_)));
            }
            other => panic!("expected a recording, got {other:?}"),
        }
    }

    #[test]
    fn durations_take_seconds_or_a_unit() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_retention("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_retention("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_retention("500ms"), Ok(Duration::from_millis(500)));
        for bad in ["30", "-1d", "soon", "200000d"] {
            assert!(parse_retention(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "ms", "-1", "0", "nan", "1h", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
