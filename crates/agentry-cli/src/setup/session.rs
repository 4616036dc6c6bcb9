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
    /// The session database (SQLite) [env: AGENTRY_DB] [default: sessions.db under the user's
    /// data directory, ~/.local/share/agentry on Linux]
    #[arg(long, value_name = "FILE", global = true)]
    pub db: Option<PathBuf>,
}

impl StoreArgs {
    /// The database file this command uses.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        match self
            .db
            .clone()
            .or_else(|| std::env::var_os("AGENTRY_DB").map(PathBuf::from))
        {
            Some(path) => Ok(path),
            None => Ok(SqliteStore::default_path()?),
        }
    }

    /// Opens (creating it if needed) the database.
    pub fn open(&self) -> anyhow::Result<Arc<SqliteStore>> {
        let path = self.path()?;
        let store =
            SqliteStore::open(&path).with_context(|| format!("the session database {}", path.display()))?;
        Ok(Arc::new(store))
    }
}

/// The session a command continues, opened for writing (recovered if the last process using it
/// stopped in the middle), with what recovery did said on stderr.
pub async fn open_session(
    store: &StoreArgs,
    name: &str,
    config: &serde_json::Value,
    pending: PendingApprovals,
) -> anyhow::Result<Arc<SessionMemory>> {
    let opened = store.open()?;
    let store: Arc<dyn SessionStore> = opened;
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
