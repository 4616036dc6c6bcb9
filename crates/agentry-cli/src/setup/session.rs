//! The durable session a command continues (`--session NAME`, `--db FILE`).

use std::path::PathBuf;
use std::sync::Arc;

use agentry_store::{PendingApprovals, SessionMemory, SessionStore, SqliteStore, StoreError};
use anyhow::Context;
use clap::Args;

use crate::terminal::sanitize;

/// Where sessions are kept.
#[derive(Debug, Args, Clone)]
pub struct StoreArgs {
    /// The session database: an SQLite file, or a PostgreSQL server
    /// (postgres://USER[:PASSWORD]@HOST:PORT/DB) that several `agentry serve` nodes share
    /// [env: AGENTRY_DB] [config: "db"] [default: sessions.db under the user's data directory,
    /// ~/.local/share/agentry on Linux]
    #[arg(long, value_name = "FILE|URL", global = true)]
    pub db: Option<String>,
    /// The config file's `"db"`, below the flag and the environment.
    #[arg(skip)]
    pub config_db: Option<String>,
}

/// A session database, as `--db` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An SQLite file.
    File(PathBuf),
    /// A PostgreSQL server.
    Postgres(String),
}

impl StoreLocation {
    fn parse(text: &str) -> Self {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            StoreLocation::Postgres(text.to_owned())
        } else {
            StoreLocation::File(PathBuf::from(text))
        }
    }
}

impl StoreArgs {
    /// These arguments with the config file's `"db"` as the fallback.
    pub fn with_config(mut self, db: Option<&str>) -> Self {
        self.config_db = db.map(str::to_owned);
        self
    }

    /// The database this command uses: `--db`, else `AGENTRY_DB`, else the config file's
    /// `"db"`, else the default file.
    pub fn location(&self) -> anyhow::Result<StoreLocation> {
        let named = self
            .db
            .clone()
            .or_else(|| std::env::var("AGENTRY_DB").ok().filter(|v| !v.is_empty()))
            .or_else(|| self.config_db.clone());
        match named {
            Some(text) => Ok(StoreLocation::parse(&text)),
            None => Ok(StoreLocation::File(SqliteStore::default_path()?)),
        }
    }

    /// The SQLite file this command uses; long-term memory and knowledge bases live there.
    /// A PostgreSQL `--db` is refused with what to do instead.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        match self.location()? {
            StoreLocation::File(path) => Ok(path),
            StoreLocation::Postgres(_) => anyhow::bail!(
                "long-term memory and knowledge bases are kept in an SQLite file, and --db names a PostgreSQL \
                 server (it keeps sessions only): give these commands --db FILE"
            ),
        }
    }

    /// Opens (creating it if needed) the SQLite database (see [`path`](Self::path)).
    pub fn open(&self) -> anyhow::Result<Arc<SqliteStore>> {
        let path = self.path()?;
        let store =
            SqliteStore::open(&path).with_context(|| format!("the session database {}", path.display()))?;
        Ok(Arc::new(store))
    }

    /// Opens the session store, SQLite or PostgreSQL (creating or migrating its schema).
    pub async fn open_sessions(&self) -> anyhow::Result<Arc<dyn SessionStore>> {
        match self.location()? {
            StoreLocation::File(_) => Ok(self.open()?),
            StoreLocation::Postgres(url) => open_postgres(&url).await,
        }
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str) -> anyhow::Result<Arc<dyn SessionStore>> {
    let store = agentry_store::PostgresStore::connect(url)
        .await
        .context("the PostgreSQL session database")?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_url: &str) -> anyhow::Result<Arc<dyn SessionStore>> {
    anyhow::bail!("this agentry was built without PostgreSQL support (cargo feature `postgres`)")
}

/// The session a command continues, opened for writing (recovered if the last process using it
/// stopped in the middle), with what recovery did said on stderr.
pub async fn open_session(
    store: &StoreArgs,
    name: &str,
    config: &serde_json::Value,
    pending: PendingApprovals,
) -> anyhow::Result<Arc<SessionMemory>> {
    let store = store.open_sessions().await?;
    let memory = match SessionMemory::open_or_create_with(store, name, config, pending).await {
        Ok(memory) => memory,
        Err(e @ StoreError::SessionBusy { .. }) => {
            anyhow::bail!(
                "{e}: another agentry is using the session {}; wait for it to finish",
                sanitize::line(name)
            )
        }
        Err(e) => return Err(e).with_context(|| format!("the session {}", sanitize::line(name))),
    };
    let recovery = memory.recovery();
    if recovery.reply_noted || !recovery.interrupted.is_empty() {
        eprintln!(
            "agentry: the session {} was left in the middle of a reply; {} tool call(s) that had not finished \
             are closed as interrupted (not re-run), and the model is told.",
            sanitize::line(name),
            recovery.interrupted.len()
        );
    }
    Ok(Arc::new(memory))
}
