//! # agentry-knowledge
//!
//! Documents for knowledge bases: finding them among files and folders
//! ([`collect_files`]), reading their text out of plain text, Markdown, HTML or PDF
//! ([`read_document`]), cutting it into overlapping chunks at paragraph and sentence
//! boundaries ([`chunk_text`]), and a content hash to skip a file added again unchanged
//! ([`content_hash`]). Pure and synchronous: no store, no model.
//!
//! ```
//! use agentry_knowledge::{DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, Format, chunk_text, read_document};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("notes.md");
//! std::fs::write(&path, "# Notes\n\nThe *first* point.\n\nThe second point.\n").unwrap();
//!
//! let doc = read_document(&path).unwrap();
//! assert_eq!(doc.format, Format::Markdown);
//! assert_eq!(doc.title.as_deref(), Some("Notes"));
//! assert_eq!(doc.text, "Notes\n\nThe first point.\n\nThe second point.");
//!
//! let chunks = chunk_text(&doc.text, DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS);
//! assert_eq!(chunks.len(), 1);
//! assert_eq!(chunks[0].start, 0);
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod chunk;
mod collect;
mod error;
mod html;
mod markdown;
mod pdf;
mod read;

pub use chunk::{Chunk, DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, chunk_text};
pub use collect::collect_files;
pub use error::ReadError;
pub use read::{Document, Format, document_from_bytes, read_document};

use sha2::{Digest, Sha256};

/// The SHA-256 of `bytes` in lowercase hexadecimal (64 characters): what a file's content is
/// known by, so that one added again unchanged can be skipped.
pub fn content_hash(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest.iter() {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// Runs a format library on a file's bytes, turning a panic inside it (such libraries can
/// panic on damaged files) into an error for users. The panic is still reported by the
/// process's panic hook.
pub(crate) fn without_panics<T>(format: &str, read: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown failure".to_owned());
            Err(format!(
                "damaged {format}: the {format} reader failed ({message})"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_hash_is_sha256_hex() {
        assert_eq!(
            content_hash(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            content_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn panics_become_errors() {
        let result: Result<(), String> = without_panics("PDF", || panic!("index out of bounds"));
        assert_eq!(
            result,
            Err("damaged PDF: the PDF reader failed (index out of bounds)".to_owned())
        );
        let result = without_panics("HTML", || Ok(1));
        assert_eq!(result, Ok(1));
    }
}
