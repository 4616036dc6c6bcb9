//! Reads files and folders as a knowledge base would and prints what it found:
//! `cargo run -p agentry-knowledge --example read -- PATH...`

use std::path::PathBuf;

use agentry_knowledge::{
    DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, chunk_text, collect_files, content_hash, read_document,
};

fn main() {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let (files, errors) = collect_files(&paths);
    for error in errors {
        eprintln!("skipped: {error}");
    }
    for file in files {
        let doc = match read_document(&file) {
            Ok(doc) => doc,
            Err(error) => {
                eprintln!("failed: {error}");
                continue;
            }
        };
        let bytes = std::fs::read(&file).unwrap_or_default();
        let chunks = chunk_text(&doc.text, DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS);
        println!(
            "{} [{}] title={:?} chars={} chunks={} sha256={}",
            file.display(),
            doc.format,
            doc.title,
            doc.text.chars().count(),
            chunks.len(),
            &content_hash(&bytes)[..12],
        );
        if let Some(first) = chunks.first() {
            let preview: String = first.text.chars().take(300).collect();
            println!("  first chunk: {preview:?}");
        }
    }
}
