//! One writer per session: an OS lock on a file per session beside the database.
//!
//! Why a file lock and not a row in the database:
//! - a lease row outlives a `kill -9`, so it needs expiry (a heartbeat thread and a timeout to
//!   tune) or a liveness check of the holder's pid (wrong once the pid is reused, e.g. after a
//!   reboot), and a stale row would lock a session out until someone breaks it by hand. The
//!   kernel releases a file lock when its process dies, however it dies;
//! - holding `BEGIN IMMEDIATE` for the session's life would lock the whole database, so a
//!   second session (another chat, a `sessions delete`) could not write at all, and a reader
//!   could not take the WAL checkpoint.
//!
//! The lock is `flock`-style (`std::fs::File::try_lock`): it belongs to the open file, so a
//! second lease in the same process conflicts too. The file holds who took it ("process 1234
//! since ...") for the error message; it is left in place on release (deleting a lock file
//! others may be opening races with them), except when its session is deleted. Session ids are
//! never reused, so a stale file of a deleted session locks nothing that exists.
//!
//! The lock files live in `<database>-locks/`, so they need a local file system, as SQLite's
//! WAL does. An in-memory store keeps its leases in the process.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::Utc;

use crate::{SessionId, StoreError};

/// Where a store's leases are kept.
pub(super) enum Leases {
    Files { dir: PathBuf },
    InProcess(Arc<Mutex<HashSet<SessionId>>>),
}

/// A held lease; released on drop.
pub(super) enum LeaseGuard {
    File {
        // Kept open: closing it releases the lock.
        _file: File,
        path: PathBuf,
    },
    InProcess {
        held: Arc<Mutex<HashSet<SessionId>>>,
        id: SessionId,
    },
}

impl Leases {
    pub(super) fn files(db: &Path) -> Self {
        let mut name = db.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push("-locks");
        Leases::Files {
            dir: db.with_file_name(name),
        }
    }

    pub(super) fn in_process() -> Self {
        Leases::InProcess(Arc::default())
    }

    /// Takes the lease of `id`, or says who holds it.
    pub(super) fn try_lock(&self, id: &SessionId) -> Result<LeaseGuard, StoreError> {
        // The id names a file: anything but our id alphabet could leave the directory.
        if id.as_str().is_empty()
            || !id
                .as_str()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(StoreError::SessionNotFound(id.to_string()));
        }
        match self {
            Leases::InProcess(held) => {
                let mut set = held.lock().unwrap_or_else(PoisonError::into_inner);
                if !set.insert(id.clone()) {
                    return Err(StoreError::SessionBusy {
                        session: id.clone(),
                        holder: Some("this process".into()),
                    });
                }
                Ok(LeaseGuard::InProcess {
                    held: Arc::clone(held),
                    id: id.clone(),
                })
            }
            Leases::Files { dir } => {
                let io = |path: &Path| {
                    let path = path.to_owned();
                    move |source| StoreError::Io { path, source }
                };
                std::fs::create_dir_all(dir).map_err(io(dir))?;
                let path = dir.join(format!("{id}.lock"));
                let mut file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(io(&path))?;
                match file.try_lock() {
                    Ok(()) => {}
                    Err(TryLockError::WouldBlock) => {
                        let mut holder = String::new();
                        let holder = file
                            .read_to_string(&mut holder)
                            .ok()
                            .map(|_| holder.trim().to_owned());
                        return Err(StoreError::SessionBusy {
                            session: id.clone(),
                            holder: holder.filter(|h| !h.is_empty()),
                        });
                    }
                    Err(TryLockError::Error(source)) => return Err(StoreError::Io { path, source }),
                }
                // Who holds it, for the next one's error message; best effort.
                let note = format!(
                    "process {} since {}",
                    std::process::id(),
                    Utc::now().format("%Y-%m-%d %H:%M:%S UTC")
                );
                let written = file
                    .set_len(0)
                    .and_then(|()| file.rewind())
                    .and_then(|()| file.write_all(note.as_bytes()));
                if let Err(e) = written {
                    tracing::debug!(path = %path.display(), error = %e, "could not note the lease holder");
                }
                Ok(LeaseGuard::File { _file: file, path })
            }
        }
    }
}

impl LeaseGuard {
    /// Releases the lease of a deleted session, removing its lock file.
    pub(super) fn forget(self) {
        if let LeaseGuard::File { path, .. } = &self
            && let Err(e) = std::fs::remove_file(path)
        {
            tracing::debug!(path = %path.display(), error = %e, "could not remove a lock file");
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let LeaseGuard::InProcess { held, id } = self {
            held.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        }
    }
}
