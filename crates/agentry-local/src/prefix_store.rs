//! The keys and values of prompts' system blocks (the system prompt, then the tool
//! descriptions), saved on disk so that a new process starts where an earlier one was instead
//! of running a thousand prompt tokens again. Only system blocks are saved: no user text ever
//! reaches the disk.
//!
//! A block is saved in chunks of [`CHUNK`] positions (its last chunk may be shorter). A chunk's
//! file is named by the hash of every token up to its end and by the hash of every token before
//! its start, so two blocks that begin alike (the same system prompt, the same first tools)
//! share their first chunks, and a prompt reuses the longest saved prefix whatever follows it:
//! every saved chunk that matches, then as many positions of a saved next chunk as agree.
//!
//! The directory is kept within a budget of bytes. The chunks used longest ago go first, and
//! of chunks last used together, the later positions first: a prefix is cut from its end, so
//! what stays is still reachable from the start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use candle_core::{DType, Device, Tensor};

/// Positions per saved chunk.
pub(crate) const CHUNK: usize = 128;

/// The tensor of a chunk's file that holds its tokens (the others are the model's keys and values).
const TOKENS: &str = "tokens";

/// A chunk file being written by a process that died is removed after this long.
const STALE_PARTIAL: Duration = Duration::from_secs(3600);

/// A directory of saved prefixes, for one model file.
#[derive(Debug, Clone)]
pub(crate) struct PrefixStore {
    dir: PathBuf,
    /// Identifies the model file (path, size, modification time): a changed file never reads
    /// another's caches.
    model_key: u64,
    /// The most bytes the directory's saved chunks may take, every model's together.
    budget: u64,
}

/// The saved keys and values found for a block.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Positions, from the start, the saved chunks hold for the block.
    pub(crate) len: usize,
    /// The chunks to read in, in order: those that end after the positions the caller holds.
    pub(crate) chunks: Vec<FoundChunk>,
    /// Positions covered by whole saved chunks: what is saved already.
    pub(crate) saved: usize,
}

/// One saved chunk, read.
#[derive(Debug)]
pub(crate) struct FoundChunk {
    /// Its first position.
    pub(crate) start: usize,
    /// The positions of it that serve the block (from `start`).
    pub(crate) len: usize,
    /// Keys and values per layer, of all its positions.
    pub(crate) tensors: HashMap<String, Tensor>,
}

/// A chunk's place: `start..end` of a block whose tokens hash to `parent` before `start` and
/// to `hash` before `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChunkName {
    model: u64,
    parent: u64,
    hash: u64,
    start: usize,
    end: usize,
}

impl ChunkName {
    fn file_name(&self) -> String {
        format!(
            "{:016x}-{:016x}-{:016x}-{}-{}.safetensors",
            self.model, self.parent, self.hash, self.start, self.end
        )
    }

    fn parse(name: &str) -> Option<ChunkName> {
        let stem = name.strip_suffix(".safetensors")?;
        let mut parts = stem.split('-');
        let mut hex = || u64::from_str_radix(parts.next()?, 16).ok();
        let (model, parent, hash) = (hex()?, hex()?, hex()?);
        let start = parts.next()?.parse().ok()?;
        let end = parts.next()?.parse().ok()?;
        (parts.next().is_none() && start < end).then_some(ChunkName {
            model,
            parent,
            hash,
            start,
            end,
        })
    }
}

impl PrefixStore {
    /// A store in `dir` for the model file `model`, holding at most `budget` bytes; `None`
    /// when the budget is 0 or the model file cannot be read.
    pub(crate) fn new(dir: &Path, model: &Path, budget: u64) -> Option<PrefixStore> {
        if budget == 0 {
            return None;
        }
        let meta = std::fs::metadata(model).ok()?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = model.canonicalize().unwrap_or_else(|_| model.to_path_buf());
        let mut key = Fnv::new();
        key.write(path.to_string_lossy().as_bytes());
        key.write(&meta.len().to_le_bytes());
        key.write(&modified.to_le_bytes());
        let store = PrefixStore {
            dir: dir.to_path_buf(),
            model_key: key.finish(),
            budget,
        };
        // A smaller budget than last time applies at once.
        store.prune();
        Some(store)
    }

    /// The chunks of `block`: `CHUNK` positions each, the last one shorter.
    fn chunks(&self, block: &[u32]) -> Vec<ChunkName> {
        let mut names = Vec::with_capacity(block.len().div_ceil(CHUNK));
        let mut hash = Fnv::new();
        let mut start = 0;
        while start < block.len() {
            let end = (start + CHUNK).min(block.len());
            let parent = hash.finish();
            for token in &block[start..end] {
                hash.write(&token.to_le_bytes());
            }
            names.push(ChunkName {
                model: self.model_key,
                parent,
                hash: hash.finish(),
                start,
                end,
            });
            start = end;
        }
        names
    }

    /// The longest saved prefix of `block`. Chunks that end within the first `held`
    /// positions (which the caller holds already) are found but not read. Every chunk found
    /// counts as used now.
    pub(crate) fn find(&self, block: &[u32], held: usize) -> Found {
        let mut found = Found::default();
        let mut used = Vec::new();
        let mut next = None;
        for name in self.chunks(block) {
            let path = self.dir.join(name.file_name());
            if !path.is_file() {
                next = Some(name);
                break;
            }
            if name.end > held {
                match read_chunk(&path, &block[name.start..name.end]) {
                    Some(tensors) => found.chunks.push(FoundChunk {
                        start: name.start,
                        len: name.end - name.start,
                        tensors,
                    }),
                    None => {
                        next = Some(name);
                        break;
                    }
                }
            }
            found.len = name.end;
            used.push(path);
        }
        found.saved = found.len;
        // Past the last whole chunk, a saved chunk that follows the same positions may agree
        // with the block for a while (another tool list after the same first tools).
        if let Some(next) = next
            && let Some((path, chunk)) = self.best_sibling(&next, block)
        {
            let end = chunk.start + chunk.len;
            if end > held {
                found.chunks.push(chunk);
            }
            found.len = end;
            used.push(path);
        }
        touch(&used);
        found
    }

    /// Of the saved chunks that begin where `next` begins, after the same tokens, the one that
    /// agrees longest with `block` from there; with the positions that agree.
    fn best_sibling(&self, next: &ChunkName, block: &[u32]) -> Option<(PathBuf, FoundChunk)> {
        let wanted = &block[next.start..];
        let mut best: Option<(PathBuf, FoundChunk)> = None;
        for entry in std::fs::read_dir(&self.dir).ok()?.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some(chunk) = name.to_str().and_then(ChunkName::parse) else {
                continue;
            };
            if chunk.model != next.model || chunk.parent != next.parent || chunk.start != next.start {
                continue;
            }
            let path = entry.path();
            let Some(tensors) = load(&path) else { continue };
            let Some(tokens) = chunk_tokens(&tensors) else {
                continue;
            };
            let agree = tokens.iter().zip(wanted).take_while(|(a, b)| a == b).count();
            if agree > 0 && best.as_ref().is_none_or(|(_, b)| agree > b.len) {
                best = Some((
                    path,
                    FoundChunk {
                        start: chunk.start,
                        len: agree,
                        tensors,
                    },
                ));
            }
        }
        best
    }

    /// Saves the chunks of `block` that begin at or after `from` (the earlier ones are saved
    /// already), their keys and values given by `keys_and_values(start, end)`; then keeps the
    /// directory within its budget. Best effort: a full disk only costs time.
    pub(crate) fn save<E: std::fmt::Display>(
        &self,
        block: &[u32],
        from: usize,
        mut keys_and_values: impl FnMut(usize, usize) -> Result<Vec<(String, Tensor)>, E>,
    ) {
        let chunks = self.chunks(block);
        for name in chunks.iter().filter(|c| c.start >= from) {
            let tensors = match keys_and_values(name.start, name.end) {
                Ok(tensors) => tensors,
                Err(e) => {
                    tracing::debug!("cannot save the prompt prefix cache: {e}");
                    return;
                }
            };
            if let Err(e) = self.write_chunk(name, &block[name.start..name.end], tensors) {
                tracing::debug!("cannot save the prompt prefix cache: {e}");
                return;
            }
        }
        // The whole block counts as used at one instant, its earlier chunks with it.
        let paths: Vec<PathBuf> = chunks.iter().map(|c| self.dir.join(c.file_name())).collect();
        touch(&paths);
        self.prune();
    }

    fn write_chunk(
        &self,
        name: &ChunkName,
        tokens: &[u32],
        tensors: Vec<(String, Tensor)>,
    ) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let file = self.dir.join(name.file_name());
        let partial = file.with_extension(format!("partial-{}", std::process::id()));
        let mut map: HashMap<String, Tensor> = tensors.into_iter().collect();
        let tokens = Tensor::from_slice(tokens, tokens.len(), &Device::Cpu).map_err(std::io::Error::other)?;
        map.insert(TOKENS.into(), tokens);
        candle_core::safetensors::save(&map, &partial).map_err(std::io::Error::other)?;
        std::fs::rename(&partial, &file)
    }

    /// Removes chunks until the directory's chunks fit the budget: least recently used first,
    /// and of those used together, the later positions first. Files that are not chunks of
    /// this format (an older version's) go before any chunk.
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut files = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(UNIX_EPOCH);
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".partial-") {
                if now.duration_since(modified).is_ok_and(|age| age > STALE_PARTIAL) {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            if !name.ends_with(".safetensors") {
                continue;
            }
            // Sorted ascending: what goes first comes first.
            let order = match ChunkName::parse(&name) {
                Some(chunk) => (1, modified, usize::MAX - chunk.start),
                None => (0, modified, 0),
            };
            files.push((order, meta.len(), entry.path()));
        }
        let mut total: u64 = files.iter().map(|(_, size, _)| size).sum();
        if total <= self.budget {
            return;
        }
        files.sort();
        for (_, size, path) in files {
            if total <= self.budget {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(size);
            }
        }
    }
}

/// A chunk's tensors, if its file reads and holds exactly `tokens`. A file that does not
/// read is removed.
fn read_chunk(path: &Path, tokens: &[u32]) -> Option<HashMap<String, Tensor>> {
    let tensors = load(path)?;
    (chunk_tokens(&tensors)? == tokens).then_some(tensors)
}

fn load(path: &Path) -> Option<HashMap<String, Tensor>> {
    match candle_core::safetensors::load(path, &Device::Cpu) {
        Ok(tensors) => Some(tensors),
        Err(e) => {
            tracing::debug!("ignoring the unreadable prefix cache {}: {e}", path.display());
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

fn chunk_tokens(tensors: &HashMap<String, Tensor>) -> Option<Vec<u32>> {
    let tokens = tensors.get(TOKENS)?;
    if tokens.dtype() != DType::U32 {
        return None;
    }
    tokens.to_vec1().ok()
}

/// Marks files as used now (all at the same instant, so that eviction orders them by position).
fn touch(paths: &[PathBuf]) {
    let now = SystemTime::now();
    for path in paths {
        if let Ok(file) = std::fs::File::options().write(true).open(path) {
            let _ = file.set_modified(now);
        }
    }
}

/// FNV-1a, 64 bits: a stable hash for file names (the standard library's may change).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys and values whose every element is its position, for one layer of one head.
    fn positions(start: usize, end: usize) -> Result<Vec<(String, Tensor)>, candle_core::Error> {
        let values: Vec<f32> = (start..end).map(|p| p as f32).collect();
        let t = Tensor::from_vec(values, (1, 1, end - start, 1), &Device::Cpu)?;
        Ok(vec![("k0".into(), t.clone()), ("v0".into(), t)])
    }

    fn store(dir: &Path, budget: u64) -> PrefixStore {
        let model = dir.join("model.gguf");
        if !model.exists() {
            std::fs::write(&model, b"GGUF").unwrap();
        }
        PrefixStore::new(&dir.join("prefixes"), &model, budget).unwrap()
    }

    fn chunk_files(dir: &Path) -> Vec<ChunkName> {
        let mut names: Vec<ChunkName> = std::fs::read_dir(dir.join("prefixes"))
            .unwrap()
            .filter_map(|e| ChunkName::parse(e.unwrap().file_name().to_str().unwrap()))
            .collect();
        names.sort_by_key(|c| (c.start, c.hash));
        names
    }

    /// The positions the found chunks give, in order, read from their tensors.
    fn found_positions(found: &Found) -> Vec<usize> {
        found
            .chunks
            .iter()
            .flat_map(|c| {
                let values: Vec<f32> = c.tensors["k0"].flatten_all().unwrap().to_vec1().unwrap();
                values[..c.len].iter().map(|v| *v as usize).collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn a_block_is_saved_in_chunks_and_found_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), u64::MAX);
        let block: Vec<u32> = (0..300).collect();
        store.save(&block, 0, positions);
        let chunks: Vec<(usize, usize)> = chunk_files(dir.path()).iter().map(|c| (c.start, c.end)).collect();
        assert_eq!(chunks, [(0, 128), (128, 256), (256, 300)]);

        let found = store.find(&block, 0);
        assert_eq!((found.len, found.saved), (300, 300));
        assert_eq!(found_positions(&found), (0..300).collect::<Vec<_>>());

        // What the caller holds is not read again.
        let found = store.find(&block, 200);
        assert_eq!(found.len, 300);
        assert_eq!(
            found.chunks.iter().map(|c| c.start).collect::<Vec<_>>(),
            [128, 256]
        );
    }

    #[test]
    fn another_block_with_the_same_beginning_reuses_it_to_the_first_different_token() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), u64::MAX);
        let first: Vec<u32> = (0..400).collect();
        store.save(&first, 0, positions);
        // The same first 300 tokens, then others: another tool list after the same first tools.
        let second: Vec<u32> = (0..300).chain(1000..1200).collect();
        let found = store.find(&second, 0);
        assert_eq!(found.len, 300, "two whole chunks, then 44 positions of the third");
        assert_eq!(found.saved, 256);
        assert_eq!(found_positions(&found), (0..300).collect::<Vec<_>>());

        // Saving the second block adds its own chunks from the first that differs.
        store.save(&second, found.saved, positions);
        assert_eq!(
            chunk_files(dir.path()).len(),
            4 + 2,
            "{:?}",
            chunk_files(dir.path())
        );
        assert_eq!(store.find(&second, 0).len, 500);
        assert_eq!(store.find(&first, 0).len, 400);

        // Nothing in common: nothing found.
        let other: Vec<u32> = (5000..5300).collect();
        let found = store.find(&other, 0);
        assert_eq!((found.len, found.chunks.len()), (0, 0));
    }

    #[test]
    fn the_budget_evicts_the_least_recently_used_prefix_from_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let unbounded = store(dir.path(), u64::MAX);
        let old: Vec<u32> = (0..256).collect();
        let recent: Vec<u32> = (10_000..10_256).collect();
        unbounded.save(&old, 0, positions);
        unbounded.save(&recent, 0, positions);
        let one_chunk = std::fs::read_dir(dir.path().join("prefixes"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .max()
            .unwrap();
        // Both saved; the old one older by a clear margin than the recent one.
        let prefixes = dir.path().join("prefixes");
        let past = SystemTime::now() - Duration::from_secs(60);
        for chunk in chunk_files(dir.path()) {
            let path = prefixes.join(chunk.file_name());
            let tokens = chunk_tokens(&load(&path).unwrap()).unwrap();
            if tokens[0] < 10_000 {
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(past)
                    .unwrap();
            }
        }

        // Room for three chunks: the old prefix loses its last chunk, and keeps its first.
        let bounded = PrefixStore::new(&prefixes, &dir.path().join("model.gguf"), one_chunk * 3).unwrap();
        assert_eq!(bounded.find(&recent, 0).len, 256);
        assert_eq!(
            bounded.find(&old, 0).len,
            128,
            "cut from its end: the start is still reachable"
        );

        // Used just now, the old prefix's first chunk outlives the recent prefix's last one.
        let bounded = PrefixStore::new(&prefixes, &dir.path().join("model.gguf"), one_chunk * 2).unwrap();
        assert_eq!(bounded.find(&old, 0).len, 128);
        assert_eq!(bounded.find(&recent, 0).len, 128);
    }

    #[test]
    fn a_prefix_saved_in_one_go_is_cut_from_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let block: Vec<u32> = (0..384).collect();
        store(dir.path(), u64::MAX).save(&block, 0, positions);
        let sizes: u64 = std::fs::read_dir(dir.path().join("prefixes"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        // Its chunks were written one after the other; the first must not go first.
        let bounded = store(dir.path(), sizes * 2 / 3 + 1);
        assert_eq!(bounded.find(&block, 0).len, 256);
    }

    #[test]
    fn a_budget_of_zero_saves_nothing_and_a_broken_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        assert!(PrefixStore::new(dir.path(), &model, 0).is_none());

        let store = store(dir.path(), u64::MAX);
        let block: Vec<u32> = (0..200).collect();
        store.save(&block, 0, positions);
        let second = chunk_files(dir.path())[1];
        std::fs::write(
            dir.path().join("prefixes").join(second.file_name()),
            b"not tensors",
        )
        .unwrap();
        let found = store.find(&block, 0);
        assert_eq!(found.len, 128, "the broken chunk is not used");
        assert_eq!(chunk_files(dir.path()).len(), 1, "and it is removed");
    }
}
