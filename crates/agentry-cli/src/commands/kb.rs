//! `agentry kb add | list | search | delete`: knowledge bases in the session database, made of
//! text, Markdown, HTML and PDF files, that `--knowledge NAME` retrieves from.
//!
//! `add` reads, chunks, embeds and stores each file in turn, committing each document whole, so
//! an interrupted `add` is resumed by running it again: files stored unchanged (same SHA-256)
//! are skipped. A file that cannot be read is reported with its path; the others still go in.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agentry::embedding::{EmbedPurpose, Embedder};
use agentry::knowledge::KnowledgeBase;
use agentry_knowledge::{
    DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, chunk_text, collect_files, content_hash, document_from_bytes,
};
use agentry_store::{NewChunk, SqliteStore, StoredKnowledgeBase};
use clap::{Args, Subcommand};

use crate::config::load_config_file;
use crate::setup::memory::{EmbeddingArgs, embedder, embedding_plan};
use crate::setup::session::StoreArgs;
use crate::terminal::output::outln;
use crate::terminal::sanitize;

/// Chunks embedded in one call.
const EMBED_BATCH: usize = 16;

#[derive(Debug, Args)]
pub struct KbArgs {
    #[command(subcommand)]
    command: KbCommand,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    embedding: EmbeddingArgs,
    /// The config file [default: ~/.config/agentry/config.json]
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum KbCommand {
    /// Adds files and folders (walked recursively) to the base NAME, made if new; a file
    /// added again replaces its earlier version, or is skipped when unchanged.
    Add {
        /// The base.
        name: String,
        /// Files and folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// The bases, with their documents and chunks.
    List {
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// The chunks of base NAME closest to QUERY, best first, each with its file.
    Search {
        /// The base.
        name: String,
        /// What to look for.
        query: String,
        /// At most this many.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Deletes the base NAME and everything in it.
    Delete {
        /// The base.
        name: String,
    },
}

/// Runs `agentry kb`.
pub async fn kb(args: KbArgs) -> ExitCode {
    match run_command(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", sanitize::multiline(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

async fn run_command(args: KbArgs) -> anyhow::Result<ExitCode> {
    let file = load_config_file(args.config.as_deref())?;
    let store = args.store.open()?;
    match args.command {
        KbCommand::Add { name, paths } => {
            let embedder = embedder(&embedding_plan(&args.embedding, &file)).await;
            add(&store, &name, &paths, embedder).await
        }
        KbCommand::List { json } => {
            let bases = store.knowledge_bases().await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&bases)?);
            } else if bases.is_empty() {
                eprintln!("no knowledge bases yet: `agentry kb add NAME PATH…` makes one");
            }
            if !json {
                for base in bases {
                    outln!(
                        "{}  {} documents  {} chunks  since {}",
                        sanitize::line(&base.name),
                        base.documents,
                        base.chunks,
                        base.created_at.get(..10).unwrap_or(&base.created_at)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        KbCommand::Search {
            name,
            query,
            limit,
            json,
        } => {
            let embedder = embedder(&embedding_plan(&args.embedding, &file)).await;
            let Some(base) = StoredKnowledgeBase::open((*store).clone(), &name, embedder).await? else {
                anyhow::bail!("there is no knowledge base {}", sanitize::line(&name));
            };
            let chunks = base.retrieve(&query, limit, None).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&chunks)?);
            } else {
                for chunk in chunks {
                    outln!(
                        "{:.3}  {}\n      {}",
                        chunk.score,
                        sanitize::line(&chunk.source),
                        sanitize::summary(&chunk.content, 300)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        KbCommand::Delete { name } => {
            if store.delete_knowledge_base(&name).await? {
                eprintln!("deleted the knowledge base {}", sanitize::line(&name));
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("error: there is no knowledge base {}", sanitize::line(&name));
                Ok(ExitCode::FAILURE)
            }
        }
    }
}

/// Reads, chunks, embeds and stores each file; exit 1 when some file could not be added.
async fn add(
    store: &Arc<SqliteStore>,
    name: &str,
    paths: &[PathBuf],
    embedder: Option<Arc<dyn Embedder>>,
) -> anyhow::Result<ExitCode> {
    let base = store.open_knowledge_base(name).await?;
    let (files, mut failures) = tokio::task::spawn_blocking({
        let paths = paths.to_vec();
        move || collect_files(&paths)
    })
    .await?;
    if embedder.is_none() {
        eprintln!("warning: no embedding model: the chunks are found by their words only");
    }
    let progress = Progress::new(files.len() as u64);
    let (mut added, mut skipped, mut chunks_added) = (0, 0, 0);
    for path in &files {
        let shown = path.display().to_string();
        progress.at(&shown);
        let key = std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .display()
            .to_string();
        let read = tokio::task::spawn_blocking({
            let path = path.clone();
            move || -> Result<_, agentry_knowledge::ReadError> {
                let bytes = std::fs::read(&path).map_err(|e| agentry_knowledge::ReadError::Io {
                    path: path.clone(),
                    source: e,
                })?;
                let hash = content_hash(&bytes);
                Ok((hash, bytes))
            }
        })
        .await?;
        let (hash, bytes) = match read {
            Ok(read) => read,
            Err(e) => {
                progress.say(&format!("skipped: {}", sanitize::line(&e.to_string())));
                failures.push(e);
                progress.done();
                continue;
            }
        };
        if store.document_hash(base.id, &key).await?.as_deref() == Some(hash.as_str()) {
            skipped += 1;
            progress.done();
            continue;
        }
        // Parsed from the bytes the hash was taken of: the file is read once.
        let document = match tokio::task::spawn_blocking({
            let path = path.clone();
            move || document_from_bytes(&path, &bytes)
        })
        .await?
        {
            Ok(document) => document,
            Err(e) => {
                progress.say(&format!("skipped: {}", sanitize::line(&e.to_string())));
                failures.push(e);
                progress.done();
                continue;
            }
        };
        let texts: Vec<String> = chunk_text(&document.text, DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS)
            .into_iter()
            .map(|c| c.text)
            .collect();
        let vectors = embed_all(embedder.as_deref(), &texts, &progress).await;
        let chunks: Vec<NewChunk> = texts
            .into_iter()
            .enumerate()
            .map(|(i, content)| NewChunk {
                content,
                embedding: vectors
                    .as_ref()
                    .and_then(|(model, v)| Some((model.clone(), v.get(i)?.clone()))),
            })
            .collect();
        chunks_added += chunks.len();
        store
            .replace_document(base.id, &key, &hash, document.title.as_deref(), chunks)
            .await?;
        added += 1;
        progress.done();
    }
    progress.finish();
    eprintln!(
        "{}: {added} added ({chunks_added} chunks), {skipped} unchanged, {} could not be read",
        sanitize::line(name),
        failures.len()
    );
    for failure in &failures {
        eprintln!("  {}", sanitize::line(&failure.to_string()));
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The vectors of `texts`, in batches; `None` when there is no embedder or it failed (the
/// chunks are then kept without vectors, found by their words).
async fn embed_all(
    embedder: Option<&dyn Embedder>,
    texts: &[String],
    progress: &Progress,
) -> Option<(String, Vec<Vec<f32>>)> {
    let embedder = embedder?;
    let mut vectors = Vec::with_capacity(texts.len());
    for batch in texts.chunks(EMBED_BATCH) {
        match embedder.embed(batch.to_vec(), EmbedPurpose::Document).await {
            Ok(v) => vectors.extend(v),
            Err(e) => {
                progress.say(&format!(
                    "warning: {}; these chunks are kept without vectors",
                    sanitize::line(&e.to_string())
                ));
                return None;
            }
        }
    }
    Some((embedder.model_id().to_owned(), vectors))
}

/// Files done of all, on stderr: a bar on a terminal, a line per file otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(files: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(files);
            let style =
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} files, eta {eta}  {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        Progress { bar }
    }

    fn at(&self, file: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(sanitize::short(file, 60)),
            None => eprintln!("adding {}", sanitize::line(file)),
        }
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
