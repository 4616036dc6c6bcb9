//! Why a document could not be read.

use std::path::{Path, PathBuf};

/// Why a file could not be read as a document, or left out of a collection. Every variant names
/// the file, and its `Display` is a sentence for users.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file or folder could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but its content could not be understood (a damaged PDF, text that is
    /// not UTF-8, ...).
    #[error("cannot read {}: {reason}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why, for users.
        reason: String,
    },
    /// The file is not a document this crate reads: not text, Markdown, HTML or PDF.
    #[error(
        "{} is not a supported document (text, Markdown, HTML or PDF)",
        path.display()
    )]
    Unsupported {
        /// The file.
        path: PathBuf,
    },
}

impl ReadError {
    /// The file or folder the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. } | Self::Unreadable { path, .. } | Self::Unsupported { path } => path,
        }
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn unreadable(path: &Path, reason: impl Into<String>) -> Self {
        Self::Unreadable {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    pub(crate) fn unsupported(path: &Path) -> Self {
        Self::Unsupported {
            path: path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_file_and_the_reason() {
        let path = Path::new("docs/a.pdf");
        let err = ReadError::unreadable(path, "not a PDF file");
        assert_eq!(err.to_string(), "cannot read docs/a.pdf: not a PDF file");
        assert_eq!(err.path(), path);

        let err = ReadError::unsupported(Path::new("x.bin"));
        assert_eq!(
            err.to_string(),
            "x.bin is not a supported document (text, Markdown, HTML or PDF)"
        );

        let err = ReadError::io(
            Path::new("gone.txt"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert!(err.to_string().starts_with("cannot read gone.txt: "));
        assert!(std::error::Error::source(&err).is_some());
    }
}
