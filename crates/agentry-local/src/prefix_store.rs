//! The keys and values of a prompt's system block (the system prompt and the tool
//! descriptions, the same in every run of one configuration), saved on disk so that a new
//! process starts where the last one was instead of running a thousand prompt tokens again.
//! Only the system block is saved: no user text ever reaches the disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use candle_core::{Device, Tensor};

/// Saved prefixes kept per directory; the oldest go first.
const MAX_FILES: usize = 16;

/// A directory of saved prefixes for one model file.
#[derive(Debug, Clone)]
pub(crate) struct PrefixStore {
    dir: PathBuf,
    /// Identifies the model file (path, size, modification time): a changed file never reads
    /// another's caches.
    model_key: u64,
}

impl PrefixStore {
    pub(crate) fn new(dir: &Path, model: &Path) -> Option<PrefixStore> {
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
        Some(PrefixStore {
            dir: dir.to_path_buf(),
            model_key: key.finish(),
        })
    }

    fn file(&self, tokens: &[u32]) -> PathBuf {
        let mut hash = Fnv::new();
        for token in tokens {
            hash.write(&token.to_le_bytes());
        }
        self.dir.join(format!(
            "{:016x}-{:016x}-{}.safetensors",
            self.model_key,
            hash.finish(),
            tokens.len()
        ))
    }

    /// The saved keys and values for exactly these tokens, if any.
    pub(crate) fn load(&self, tokens: &[u32]) -> Option<HashMap<String, Tensor>> {
        let file = self.file(tokens);
        if !file.is_file() {
            return None;
        }
        match candle_core::safetensors::load(&file, &Device::Cpu) {
            Ok(tensors) => Some(tensors),
            Err(e) => {
                tracing::debug!("ignoring the unreadable prefix cache {}: {e}", file.display());
                let _ = std::fs::remove_file(&file);
                None
            }
        }
    }

    /// Saves the keys and values for these tokens (best effort: a full disk only costs time).
    pub(crate) fn save(&self, tokens: &[u32], tensors: Vec<(String, Tensor)>) {
        if let Err(e) = self.try_save(tokens, tensors) {
            tracing::debug!("cannot save the prompt prefix cache: {e}");
        }
    }

    fn try_save(&self, tokens: &[u32], tensors: Vec<(String, Tensor)>) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let file = self.file(tokens);
        let partial = file.with_extension(format!("partial-{}", std::process::id()));
        let map: HashMap<String, Tensor> = tensors.into_iter().collect();
        candle_core::safetensors::save(&map, &partial).map_err(std::io::Error::other)?;
        std::fs::rename(&partial, &file)?;
        self.prune();
        Ok(())
    }

    /// Keeps the newest [`MAX_FILES`] saved prefixes.
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if files.len() <= MAX_FILES {
            return;
        }
        files.sort();
        for (_, path) in &files[..files.len() - MAX_FILES] {
            let _ = std::fs::remove_file(path);
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
