//! What can go wrong with a session store.

use std::path::PathBuf;
use std::time::Duration;

use crate::SessionId;

/// Why a store operation failed. Each case says what happened to the data: an operation that
/// fails changes nothing (every write is one transaction).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database was written by a newer Agentry (a newer schema). Nothing was changed;
    /// upgrade Agentry to use it.
    #[error(
        "{path}: the session database has schema version {found}, newer than the {supported} this Agentry \
         understands; it was left unchanged (upgrade Agentry to open it)"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The schema version found in the file.
        found: i64,
        /// The newest version this build can read.
        supported: i64,
    },
    /// The file is not an SQLite database, or its pages are damaged.
    #[error("{path}: not a readable session database ({detail}); it was left unchanged")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        detail: String,
    },
    /// The file is an SQLite database of another program (it has tables but is not ours).
    #[error(
        "{path}: this SQLite database belongs to another program, not an Agentry session store; it was left unchanged"
    )]
    Foreign {
        /// The database file.
        path: PathBuf,
    },
    /// Another connection held the database lock for longer than the busy timeout.
    #[error(
        "{path}: the session database stayed locked by another process for {waited:?}; nothing was written"
    )]
    Locked {
        /// The database file.
        path: PathBuf,
        /// How long we waited (the busy timeout).
        waited: Duration,
    },
    /// The disk (or the database's size limit) is full; the transaction was rolled back.
    #[error("{path}: the disk is full; the last write was rolled back, earlier data is intact")]
    DiskFull {
        /// The database file.
        path: PathBuf,
    },
    /// Another writer (this process or another) holds the session (see
    /// [`SessionStore::acquire`](crate::SessionStore::acquire)).
    #[error("session {session} is already open for writing{}", holder.as_deref().map(|h| format!(" by {h}")).unwrap_or_default())]
    SessionBusy {
        /// The session.
        session: SessionId,
        /// Who holds it, as the holder wrote it (process id and since when), when known.
        holder: Option<String>,
    },
    /// The lease was taken over by another node after it expired (its holder stopped renewing
    /// it: a pause, a lost network): this write was refused, and so will every later one with
    /// this lease. Open the session again to go on from what the new holder wrote.
    #[error(
        "session {session} was taken over by another node after its lease expired; this write was refused"
    )]
    LeaseLost {
        /// The session.
        session: SessionId,
    },
    /// The database server could not be reached, or the connection broke.
    #[error("{target}: the session database cannot be reached ({detail}); nothing was written")]
    Unreachable {
        /// The server, as the URL names it (without its password).
        target: String,
        /// What the client said.
        detail: String,
    },
    /// No session has this id or name.
    #[error("no session {0:?}")]
    SessionNotFound(String),
    /// Another session already has this name.
    #[error("a session named {0:?} already exists")]
    NameTaken(String),
    /// A write was given a lease from another store (or an invalid one).
    #[error("this lease does not belong to this store")]
    ForeignLease,
    /// A decision for a call that is not waiting for approval (spec A16): nothing changed.
    #[error("call {0} is not waiting for approval")]
    NotPending(String),
    /// The call was approved for other arguments (or another tool) than it starts with: it
    /// needs a new approval. Nothing changed.
    #[error("call {0} was approved for other arguments: it needs a new approval")]
    ApprovalMismatch(String),
    /// The call's approval was used already (the call started once), or it was never given:
    /// the call must not start. Nothing changed.
    #[error("call {call} may not start: its approval is {state}")]
    NotApproved {
        /// The call.
        call: String,
        /// Where its approval is (`pending`, `declined`, `expired`, `consumed`).
        state: String,
    },
    /// No call with this id is recorded in the session.
    #[error("no call {0} in this session")]
    CallNotFound(String),
    /// A stored value could not be read back (written by a buggy or newer program).
    #[error("stored {what} could not be decoded: {detail}")]
    Decode {
        /// What was being read.
        what: &'static str,
        /// Why it failed.
        detail: String,
    },
    /// A value could not be encoded for storage.
    #[error("could not encode {what}: {detail}")]
    Encode {
        /// What was being written.
        what: &'static str,
        /// Why it failed.
        detail: String,
    },
    /// The user's data directory is unknown (no `$HOME` / `$XDG_DATA_HOME`); pass a path.
    #[error("no user data directory is known on this system; choose a database file explicitly")]
    NoDataDir,
    /// A file operation beside the database failed (its directory, a lease file).
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Any other database error.
    #[error("session database error: {0}")]
    Database(String),
    /// The blocking task running the database operation failed.
    #[error("the database task failed: {0}")]
    Task(String),
}

impl StoreError {
    pub(crate) fn decode(what: &'static str, error: impl std::fmt::Display) -> Self {
        StoreError::Decode {
            what,
            detail: error.to_string(),
        }
    }

    pub(crate) fn encode(what: &'static str, error: impl std::fmt::Display) -> Self {
        StoreError::Encode {
            what,
            detail: error.to_string(),
        }
    }
}

impl From<StoreError> for agentry::memory::MemoryError {
    fn from(error: StoreError) -> Self {
        agentry::memory::MemoryError::Storage(error.to_string())
    }
}
