//! What goes wrong loading or running a script tool.

use std::path::PathBuf;

/// A script tool that could not be loaded: the others in its directory still are.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The directory or a file in it could not be read.
    #[error("{path}: {detail}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// `assistant_tool.json` is not a manifest.
    #[error("{file}: {detail}")]
    Manifest {
        /// The manifest's path.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// The parameters do not make a valid JSON schema.
    #[error("{file}: bad parameters: {detail}")]
    Schema {
        /// The manifest's path.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// No `assistant_tool.tsx`, `.ts` or `.js` beside the manifest.
    #[error("{dir}: no assistant_tool.tsx, assistant_tool.ts or assistant_tool.js beside the manifest")]
    NoCode {
        /// The tool's folder.
        dir: PathBuf,
    },
    /// The code does not parse, or registers nothing the manifest needs.
    #[error("{file}: {detail}")]
    Code {
        /// The code's path.
        file: String,
        /// What is wrong, with its line when known.
        detail: String,
    },
    /// Two tools have the same id.
    #[error("{file}: the id {id:?} is taken by {other}")]
    DuplicateId {
        /// The manifest of the tool not loaded.
        file: String,
        /// The id.
        id: String,
        /// The folder of the tool that has it.
        other: String,
    },
}

/// A script call that failed: the model reads the message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The script threw, or its promise was rejected.
    #[error("the script threw: {0}")]
    Threw(String),
    /// The script used more memory than it may.
    #[error("the script ran out of memory (its limit is {limit_mib} MiB)")]
    OutOfMemory {
        /// The limit, in MiB.
        limit_mib: usize,
    },
    /// The script was stopped (its call was cancelled or abandoned and it did not end).
    #[error("the script was stopped")]
    Stopped,
    /// The script's promise can never settle: nothing it waits for is pending.
    #[error("the script's promise never settled (it waits for nothing that can happen)")]
    NeverSettled,
    /// The script registered no function for this step.
    #[error("the script registered no {0}")]
    NotRegistered(String),
    /// The script returned something that is not a result.
    #[error("the script returned {0}, not {{ success, message }}")]
    BadResult(String),
    /// The engine could not start or failed.
    #[error("the script engine failed: {0}")]
    Engine(String),
}

impl From<rquickjs::Error> for ScriptError {
    fn from(e: rquickjs::Error) -> Self {
        ScriptError::Engine(e.to_string())
    }
}
