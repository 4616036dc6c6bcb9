//! Tool directories: each folder with an `assistant_tool.json` is one tool.

use std::path::{Path, PathBuf};

use agentry::tool::{Tool, Toolkit};

use crate::error::LoadError;
use crate::tool::{MANIFEST_FILE, ScriptSettings, ScriptTool};

/// The tools found in some directories, and what could not be loaded.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ScriptTools {
    /// The tools that loaded, in directory and name order.
    pub tools: Vec<ScriptTool>,
    /// One error per tool that did not load (the others still did).
    pub errors: Vec<LoadError>,
}

impl ScriptTools {
    /// Loads the tools in `dirs`: a directory holding `assistant_tool.json` is one tool;
    /// otherwise each of its subfolders that holds one is.
    pub fn load(dirs: &[PathBuf], settings: &ScriptSettings) -> ScriptTools {
        let mut loaded = ScriptTools::default();
        for dir in dirs {
            match tool_dirs(dir) {
                Ok(found) => {
                    for tool_dir in found {
                        loaded.add(ScriptTool::load(&tool_dir, settings));
                    }
                }
                Err(e) => loaded.errors.push(e),
            }
        }
        loaded
    }

    fn add(&mut self, tool: Result<ScriptTool, LoadError>) {
        let tool = match tool {
            Ok(tool) => tool,
            Err(e) => {
                self.errors.push(e);
                return;
            }
        };
        if let Some(other) = self.tools.iter().find(|t| t.name() == tool.name()) {
            self.errors.push(LoadError::DuplicateId {
                file: tool.dir().join(MANIFEST_FILE).display().to_string(),
                id: tool.name().to_owned(),
                other: other.dir().display().to_string(),
            });
            return;
        }
        self.tools.push(tool);
    }

    /// Registers every tool in `toolkit`, with its options; a tool the toolkit refuses (a
    /// name taken by another tool) becomes an error and the others still register.
    pub fn register(&mut self, toolkit: &Toolkit) {
        let mut kept = Vec::with_capacity(self.tools.len());
        for tool in self.tools.drain(..) {
            match toolkit.register_with(tool.clone(), tool.options()) {
                Ok(_registered_as) => kept.push(tool),
                Err(e) => self.errors.push(LoadError::Manifest {
                    file: tool.dir().join(MANIFEST_FILE).display().to_string(),
                    detail: e.to_string(),
                }),
            }
        }
        self.tools = kept;
    }
}

/// The tool folders in `dir`, sorted.
fn tool_dirs(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let io = |e: std::io::Error| LoadError::Io {
        path: dir.to_owned(),
        detail: e.to_string(),
    };
    if dir.join(MANIFEST_FILE).is_file() {
        return Ok(vec![dir.to_owned()]);
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.join(MANIFEST_FILE).is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}
