//! Long-term memory for the commands that run an agent (`--long-term-memory MODE`, `--user`),
//! and the embedder it searches by meaning with: the configured OpenAI-compatible
//! `/v1/embeddings` endpoint, or else the embedded multilingual model.

use std::sync::Arc;

use agentry::embedding::Embedder;
use agentry::memory::long_term::LongTermMemoryMode;
use agentry_store::{SqliteStore, StoredLongTermMemory};
use clap::Args;

use super::session::StoreArgs;
use crate::config::ConfigFile;
use crate::terminal::sanitize;

/// The memory flags every agent command shares (and `agentry memory`'s `--user`).
#[derive(Debug, Args, Clone, Default)]
pub struct MemoryArgs {
    /// Keep a long-term memory of the user across sessions, in the session database: `agent`
    /// (the model records and retrieves with tools), `static` (retrieved before each reply,
    /// recorded after it) or `both` (config: long_term_memory)
    #[arg(long, value_name = "MODE")]
    pub long_term_memory: Option<LongTermMemoryMode>,
    /// Whose memories these are [default: the OS user] (config: user)
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    #[command(flatten)]
    pub embedding: EmbeddingArgs,
}

/// Where vectors come from, as flags: every command that embeds (agents, `memory`, `kb`) has
/// these.
#[derive(Debug, Args, Clone, Default)]
pub struct EmbeddingArgs {
    /// Embed with this OpenAI-compatible endpoint (`…/v1`) instead of the embedded model
    /// (config: embedding_base_url)
    #[arg(long, value_name = "URL", global = true)]
    pub embedding_base_url: Option<String>,
    /// The endpoint's embedding model [default: text-embedding-3-small] (config:
    /// embedding_model)
    #[arg(long, value_name = "NAME", global = true)]
    pub embedding_model: Option<String>,
}

/// How an agent's long-term memory is made, resolved.
#[derive(Debug, Clone)]
pub struct MemoryPlan {
    /// How the agent uses it.
    pub mode: LongTermMemoryMode,
    /// Whose memories.
    pub user: String,
    /// The database.
    pub store: StoreArgs,
}

/// Where vectors come from.
#[derive(Debug, Clone)]
pub enum EmbeddingPlan {
    /// An OpenAI-compatible endpoint.
    Endpoint {
        /// `…/v1`.
        base_url: String,
        /// The model name.
        model: String,
        /// `OPENAI_API_KEY`, when set.
        api_key: Option<String>,
    },
    /// The embedded model, fetched into the model cache if needed.
    Local,
}

/// The user a command acts for: `--user`, the config's `user`, else the OS user.
pub fn user_name(user: Option<&str>, file: &ConfigFile) -> String {
    user.map(str::to_owned)
        .or_else(|| file.user.clone())
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("USERNAME").ok())
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// Where vectors come from, by the flags and the config file.
pub fn embedding_plan(args: &EmbeddingArgs, file: &ConfigFile) -> EmbeddingPlan {
    match args
        .embedding_base_url
        .clone()
        .or_else(|| file.embedding_base_url.clone())
    {
        Some(base_url) => EmbeddingPlan::Endpoint {
            base_url,
            model: args
                .embedding_model
                .clone()
                .or_else(|| file.embedding_model.clone())
                .unwrap_or_else(|| "text-embedding-3-small".to_owned()),
            api_key: std::env::var("OPENAI_API_KEY").ok().filter(|k| !k.is_empty()),
        },
        None => EmbeddingPlan::Local,
    }
}

/// The memory plan of an agent command, when it asks for long-term memory.
pub fn memory_plan(args: &MemoryArgs, store: &StoreArgs, file: &ConfigFile) -> Option<MemoryPlan> {
    let mode = args.long_term_memory.or(file.long_term_memory)?;
    Some(MemoryPlan {
        mode,
        user: user_name(args.user.as_deref(), file),
        store: store.clone(),
    })
}

/// The embedder of `plan`; `None` (with a warning) when it cannot be had, so that memory works
/// by words alone rather than not at all.
pub async fn embedder(plan: &EmbeddingPlan) -> Option<Arc<dyn Embedder>> {
    match plan {
        EmbeddingPlan::Endpoint {
            base_url,
            model,
            api_key,
        } => match agentry::embedding::OpenAiEmbedder::new(base_url, model) {
            Ok(embedder) => Some(Arc::new(match api_key {
                Some(key) => embedder.api_key(key.clone()),
                None => embedder,
            })),
            Err(e) => {
                eprintln!(
                    "warning: the embedding endpoint cannot be used ({}); memories are searched by their words only",
                    sanitize::line(&e.to_string())
                );
                None
            }
        },
        EmbeddingPlan::Local => local_embedder().await,
    }
}

/// The embedded multilingual model, fetched into the model cache on first use; `None` with a
/// warning when it cannot be had (offline before the first fetch, a damaged file).
#[cfg(feature = "embed")]
async fn local_embedder() -> Option<Arc<dyn Embedder>> {
    let fallback = |reason: &str| {
        eprintln!(
            "warning: the embedding model cannot be used ({}); memories and knowledge are searched by their words only (`agentry model pull {}` fetches it, `--embedding-base-url` uses an endpoint instead)",
            sanitize::line(reason),
            agentry_embed::MODEL_NAME,
        );
        None
    };
    let cache = match agentry_embed::ModelCache::from_env() {
        Ok(cache) => cache,
        Err(e) => return fallback(&e.to_string()),
    };
    if cache.path(agentry_embed::MODEL_NAME).is_none() {
        eprintln!(
            "fetching the embedding model {} (72 MB, once) into {}",
            agentry_embed::MODEL_NAME,
            sanitize::line(&cache.root().display().to_string())
        );
    }
    match agentry_embed::LocalEmbedder::pull(&cache, &mut |_| {}).await {
        Ok(embedder) => Some(Arc::new(embedder)),
        Err(e) => fallback(&e.to_string()),
    }
}

/// Without the embedded model built in, memories and knowledge are searched by their words.
#[cfg(not(feature = "embed"))]
async fn local_embedder() -> Option<Arc<dyn Embedder>> {
    None
}

/// The long-term memories an agent command gives its agents: the plan's user's, and for a
/// server, each session owner's, made on first use and shared by that user's sessions (so
/// their vectors are read once).
pub struct UserMemories {
    own: Arc<StoredLongTermMemory>,
    others: std::sync::Mutex<std::collections::HashMap<String, Arc<StoredLongTermMemory>>>,
}

impl UserMemories {
    pub fn new(own: Arc<StoredLongTermMemory>) -> Self {
        UserMemories {
            own,
            others: Default::default(),
        }
    }

    /// `user`'s memory; `None` is the plan's user.
    pub fn of(&self, user: Option<&str>) -> Arc<StoredLongTermMemory> {
        let Some(user) = user else {
            return Arc::clone(&self.own);
        };
        let mut others = self
            .others
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            others
                .entry(user.to_owned())
                .or_insert_with(|| Arc::new(self.own.for_user(user))),
        )
    }
}

/// The long-term memory `plan` describes, on its database.
pub fn long_term_memory(
    plan: &MemoryPlan,
    embedder: Option<Arc<dyn Embedder>>,
) -> anyhow::Result<StoredLongTermMemory> {
    let store: Arc<SqliteStore> = plan.store.open()?;
    Ok(StoredLongTermMemory::new(
        (*store).clone(),
        plan.user.clone(),
        embedder,
    ))
}

/// The knowledge bases named by `--knowledge`, on the database of `store`; an unknown name is
/// an error that says how to make it.
pub async fn knowledge_bases(
    names: &[String],
    store: &StoreArgs,
    embedder: Option<Arc<dyn Embedder>>,
) -> anyhow::Result<Vec<agentry_store::StoredKnowledgeBase>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let opened: Arc<SqliteStore> = store.open()?;
    let mut bases = Vec::new();
    for name in names {
        match agentry_store::StoredKnowledgeBase::open((*opened).clone(), name, embedder.clone()).await? {
            Some(base) => bases.push(base),
            None => anyhow::bail!(
                "there is no knowledge base {}: make it with `agentry kb add {} PATH…`",
                sanitize::line(name),
                sanitize::line(name)
            ),
        }
    }
    Ok(bases)
}
