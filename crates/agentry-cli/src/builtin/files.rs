//! `list_files` and `read_file`: read-only access confined to the working directory.

use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

/// Directories a recursive listing shows but does not enter.
const SKIPPED_DIRS: [&str; 3] = [".git", "target", "node_modules"];
/// Entries a listing shows at most.
pub const MAX_ENTRIES: usize = 1000;
/// Largest file `read_file` reads.
pub const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;
/// Lines `read_file` returns when no limit is given.
pub const DEFAULT_LINES: usize = 400;

/// The working directory the file tools are confined to.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    /// A sandbox rooted at `root` (canonicalized).
    pub fn new(root: &Path) -> std::io::Result<Self> {
        Ok(Sandbox {
            root: root.canonicalize()?,
        })
    }

    /// The canonical path of `requested` if it exists inside the root.
    fn resolve(&self, requested: &str) -> Result<PathBuf, String> {
        let requested = if requested.trim().is_empty() {
            "."
        } else {
            requested
        };
        let path = Path::new(requested);
        let joined = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        // Refuse a lexical escape before touching the file system, so that the answer does not
        // tell whether something exists outside.
        if !lexically_normal(&joined).starts_with(&self.root) {
            return Err(format!("path {requested:?} is outside the working directory"));
        }
        let canonical = joined.canonicalize().map_err(|e| match e.kind() {
            ErrorKind::NotFound => format!("path {requested:?} does not exist"),
            _ => format!("path {requested:?} cannot be opened: {e}"),
        })?;
        if !canonical.starts_with(&self.root) {
            return Err(format!("path {requested:?} is outside the working directory"));
        }
        Ok(canonical)
    }

    fn relative<'a>(&self, path: &'a Path) -> &'a Path {
        path.strip_prefix(&self.root).unwrap_or(path)
    }

    /// Lists a directory (sorted; `name/` for directories, sizes for files, `link -> target`
    /// for symbolic links, which are never followed).
    pub fn list(&self, requested: &str, recursive: bool) -> Result<String, String> {
        let dir = self.resolve(requested)?;
        if !dir.is_dir() {
            return Err(format!(
                "path {requested:?} is a file, not a directory; use read_file to read it"
            ));
        }
        let mut lines = Vec::new();
        let mut truncated = false;
        self.walk(&dir, &dir, recursive, &mut lines, &mut truncated)?;
        if lines.is_empty() {
            return Ok(format!("{} is empty", display_dir(self.relative(&dir))));
        }
        if truncated {
            lines.push(format!(
                "[listing cut at {MAX_ENTRIES} entries; list a subdirectory to see the rest]"
            ));
        }
        Ok(lines.join("\n"))
    }

    fn walk(
        &self,
        base: &Path,
        dir: &Path,
        recursive: bool,
        lines: &mut Vec<String>,
        truncated: &mut bool,
    ) -> Result<(), String> {
        let mut entries: Vec<fs::DirEntry> = fs::read_dir(dir)
            .map_err(|e| format!("cannot list {}: {e}", display_dir(self.relative(dir))))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(fs::DirEntry::file_name);
        for entry in entries {
            if lines.len() >= MAX_ENTRIES {
                *truncated = true;
                return Ok(());
            }
            let path = entry.path();
            let name = path.strip_prefix(base).unwrap_or(&path).display().to_string();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                lines.push(format!("{name} -> {target}"));
            } else if meta.is_dir() {
                let skipped = SKIPPED_DIRS.contains(&entry.file_name().to_string_lossy().as_ref());
                if recursive && skipped {
                    lines.push(format!("{name}/ (not listed)"));
                } else {
                    lines.push(format!("{name}/"));
                    if recursive {
                        self.walk(base, &path, true, lines, truncated)?;
                    }
                }
            } else {
                lines.push(format!("{name} ({} bytes)", meta.len()));
            }
        }
        Ok(())
    }

    /// Reads lines `offset..offset+limit` (1-based) of a text file.
    pub fn read(
        &self,
        requested: &str,
        offset: usize,
        limit: usize,
        max_bytes: u64,
    ) -> Result<String, String> {
        let path = self.resolve(requested)?;
        let meta = fs::metadata(&path).map_err(|e| format!("cannot read {requested:?}: {e}"))?;
        if meta.is_dir() {
            return Err(format!(
                "{requested:?} is a directory; use list_files to see what it holds"
            ));
        }
        if meta.len() > max_bytes {
            return Err(format!(
                "{requested:?} is {} bytes, more than the {max_bytes} bytes read_file accepts",
                meta.len()
            ));
        }
        let bytes = fs::read(&path).map_err(|e| format!("cannot read {requested:?}: {e}"))?;
        if bytes.contains(&0) {
            return Err(format!("{requested:?} is a binary file, {} bytes", bytes.len()));
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| format!("{requested:?} is a binary file, {} bytes", e.as_bytes().len()))?;
        let offset = offset.max(1);
        let limit = limit.max(1);
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return Ok(format!("[{requested} is empty]"));
        }
        if offset > lines.len() {
            return Err(format!(
                "offset {offset} is past the end of {requested:?}, which has {} lines",
                lines.len()
            ));
        }
        let end = (offset - 1 + limit).min(lines.len());
        let mut out = lines[offset - 1..end].join("\n");
        if offset > 1 || end < lines.len() {
            out.push_str(&format!("\n[lines {offset}-{end} of {}", lines.len()));
            if end < lines.len() {
                out.push_str(&format!("; call read_file with offset={} to read more", end + 1));
            }
            out.push(']');
        }
        Ok(out)
    }
}

fn display_dir(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        path.display().to_string()
    }
}

/// `path` with `.` and `..` resolved without the file system.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> (tempfile::TempDir, Sandbox) {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        fs::create_dir_all(dir.path().join("target/debug")).unwrap();
        fs::write(dir.path().join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
        fs::write(dir.path().join(".hidden"), "h").unwrap();
        fs::write(dir.path().join("src/main.rs"), "fn main() {}\n").unwrap();
        fs::write(dir.path().join("src/deep/a.txt"), "a").unwrap();
        let sandbox = Sandbox::new(dir.path()).unwrap();
        (dir, sandbox)
    }

    #[test]
    fn lists_plain_and_recursive() {
        let (_dir, s) = sandbox();
        assert_eq!(
            s.list(".", false).unwrap(),
            ".hidden (1 bytes)\nCargo.toml (21 bytes)\nsrc/\ntarget/"
        );
        let all = s.list("", true).unwrap();
        assert_eq!(
            all,
            ".hidden (1 bytes)\nCargo.toml (21 bytes)\nsrc/\nsrc/deep/\nsrc/deep/a.txt (1 bytes)\nsrc/main.rs (13 bytes)\n\
             target/ (not listed)"
        );
        assert_eq!(s.list("src", false).unwrap(), "deep/\nmain.rs (13 bytes)");
        assert!(
            s.list("Cargo.toml", false)
                .unwrap_err()
                .contains("not a directory")
        );
    }

    #[test]
    fn listing_is_cut_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..(MAX_ENTRIES + 5) {
            fs::write(dir.path().join(format!("f{i:05}")), "").unwrap();
        }
        let listing = Sandbox::new(dir.path()).unwrap().list(".", false).unwrap();
        assert_eq!(listing.lines().count(), MAX_ENTRIES + 1);
        assert!(listing.ends_with("[listing cut at 1000 entries; list a subdirectory to see the rest]"));
    }

    #[test]
    fn reads_windows_with_notes() {
        let (dir, s) = sandbox();
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        fs::write(dir.path().join("ten.txt"), text).unwrap();
        assert_eq!(
            s.read("Cargo.toml", 1, 400, MAX_FILE_BYTES).unwrap(),
            "[package]\nname = \"x\""
        );
        assert_eq!(
            s.read("ten.txt", 1, 3, MAX_FILE_BYTES).unwrap(),
            "line 1\nline 2\nline 3\n[lines 1-3 of 10; call read_file with offset=4 to read more]"
        );
        assert_eq!(
            s.read("ten.txt", 9, 5, MAX_FILE_BYTES).unwrap(),
            "line 9\nline 10\n[lines 9-10 of 10]"
        );
        assert!(
            s.read("ten.txt", 11, 5, MAX_FILE_BYTES)
                .unwrap_err()
                .contains("past the end")
        );
    }

    #[test]
    fn refuses_binary_large_missing_and_directories() {
        let (dir, s) = sandbox();
        fs::write(dir.path().join("bin"), [0u8, 1, 2]).unwrap();
        fs::write(dir.path().join("latin1"), [0xe9u8, 0x41]).unwrap();
        assert_eq!(
            s.read("bin", 1, 10, MAX_FILE_BYTES).unwrap_err(),
            "\"bin\" is a binary file, 3 bytes"
        );
        assert!(
            s.read("latin1", 1, 10, MAX_FILE_BYTES)
                .unwrap_err()
                .contains("binary file")
        );
        assert!(
            s.read("Cargo.toml", 1, 10, 5)
                .unwrap_err()
                .contains("more than the 5 bytes")
        );
        assert_eq!(
            s.read("nope.txt", 1, 10, MAX_FILE_BYTES).unwrap_err(),
            "path \"nope.txt\" does not exist"
        );
        assert!(
            s.read("src", 1, 10, MAX_FILE_BYTES)
                .unwrap_err()
                .contains("is a directory")
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (dir, s) = sandbox();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s3cret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("linkdir")).unwrap();
        for path in [
            "../secret",
            "/etc/passwd",
            "src/../../x",
            "link",
            "linkdir/secret",
        ] {
            let err = s.read(path, 1, 10, MAX_FILE_BYTES).unwrap_err();
            assert!(err.contains("outside the working directory"), "{path}: {err}");
        }
        assert!(s.list("linkdir", false).unwrap_err().contains("outside"));
        let listing = s.list(".", true).unwrap();
        assert!(
            listing.contains("link -> ") && !listing.contains("secret ("),
            "{listing}"
        );
        let inside = dir.path().join("src/main.rs").display().to_string();
        assert_eq!(
            s.read(&inside, 1, 10, MAX_FILE_BYTES).unwrap(),
            "fn main() {}",
            "absolute inside is fine"
        );
    }
}
