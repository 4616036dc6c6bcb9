//! `list_files` and `read_file`: read-only access confined to the working directory.

use std::ffi::OsString;
use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path, PathBuf};

/// Directories a recursive listing shows but does not enter.
pub(super) const SKIPPED_DIRS: [&str; 3] = [".git", "target", "node_modules"];
/// Entries a listing shows at most.
pub const MAX_ENTRIES: usize = 1000;
/// Largest file `read_file` reads.
pub const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;
/// Lines `read_file` returns when no limit is given.
pub const DEFAULT_LINES: usize = 400;
/// Bytes `read_file` returns at most in one call, whatever `limit` asks: a model's context is
/// not the place for a 5 MiB file in one piece.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// Symbolic links followed at most while resolving one path (as Linux's limit).
const MAX_LINK_HOPS: usize = 40;

/// The working directory the file tools are confined to.
///
/// Paths are resolved one component at a time from the canonical root: `..` may not climb
/// above the root, and a symbolic link is followed by resolving its target the same way, so
/// an absolute target must lie under the root. The file system is never consulted about
/// anything outside the root, so refusals do not tell whether an outside path exists.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Canonical root.
    root: PathBuf,
    /// The root as given (made absolute) when that differs from `root`, e.g. through a
    /// symbolic link; absolute paths spelled with it are accepted too.
    alias: Option<PathBuf>,
}

enum Part {
    Parent,
    Name(OsString),
}

/// The parts of a relative path, last first (a stack: the next part is at the end).
fn parts_reversed(path: &Path) -> Vec<Part> {
    path.components()
        .rev()
        .filter_map(|c| match c {
            Component::ParentDir => Some(Part::Parent),
            Component::Normal(name) => Some(Part::Name(name.to_owned())),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

impl Sandbox {
    /// A sandbox rooted at `root`, which must exist.
    pub fn new(root: &Path) -> std::io::Result<Self> {
        let canonical = root.canonicalize()?;
        let alias = std::path::absolute(root).ok().filter(|alias| *alias != canonical);
        Ok(Sandbox {
            root: canonical,
            alias,
        })
    }

    /// `path` relative to the root, if it is relative or an absolute path under the root.
    fn under_root<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        if !path.is_absolute() {
            return Some(path);
        }
        path.strip_prefix(&self.root).ok().or_else(|| {
            self.alias
                .as_ref()
                .and_then(|alias| path.strip_prefix(alias).ok())
        })
    }

    /// The canonical path of `requested`, which must exist inside the root.
    pub(super) fn resolve(&self, requested: &str) -> Result<PathBuf, String> {
        let requested = if requested.trim().is_empty() {
            "."
        } else {
            requested
        };
        let outside = || format!("path {requested:?} is outside the working directory");
        let cannot_open = |e: std::io::Error| match e.kind() {
            ErrorKind::NotFound => format!("path {requested:?} does not exist"),
            _ => format!("path {requested:?} cannot be opened: {e}"),
        };
        let start = self.under_root(Path::new(requested)).ok_or_else(outside)?;
        let mut pending = parts_reversed(start);
        let mut current = self.root.clone();
        let mut current_is_dir = true;
        let mut hops = 0;
        while let Some(part) = pending.pop() {
            if !current_is_dir {
                return Err(format!(
                    "path {requested:?} does not exist: {} is a file, not a directory",
                    self.relative(&current).display()
                ));
            }
            match part {
                Part::Parent => {
                    if current == self.root {
                        return Err(outside());
                    }
                    current.pop();
                }
                Part::Name(name) => {
                    let next = current.join(&name);
                    let meta = fs::symlink_metadata(&next).map_err(cannot_open)?;
                    if !meta.file_type().is_symlink() {
                        current_is_dir = meta.is_dir();
                        current = next;
                        continue;
                    }
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(format!(
                            "path {requested:?} cannot be opened: too many levels of symbolic links"
                        ));
                    }
                    let target = fs::read_link(&next).map_err(cannot_open)?;
                    let target = if target.is_absolute() {
                        current = self.root.clone();
                        self.under_root(&target).ok_or_else(outside)?
                    } else {
                        &target
                    };
                    // The target's parts come next, then the rest of the requested path.
                    pending.extend(parts_reversed(target));
                }
            }
        }
        Ok(current)
    }

    pub(super) fn relative<'a>(&self, path: &'a Path) -> &'a Path {
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
        let entries = read_sorted(&dir)
            .map_err(|e| format!("cannot list {}: {e}", display_dir(self.relative(&dir))))?;
        let mut lines = Vec::new();
        let mut truncated = false;
        walk(&dir, entries, recursive, &mut lines, &mut truncated);
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

    /// Reads lines `offset..offset+limit` (1-based) of a text file.
    pub fn read(
        &self,
        requested: &str,
        offset: usize,
        limit: usize,
        max_bytes: u64,
    ) -> Result<String, String> {
        let path = self.resolve(requested)?;
        // Checked before opening: opening a FIFO blocks until someone writes to it.
        let meta = fs::metadata(&path).map_err(|e| format!("cannot read {requested:?}: {e}"))?;
        if meta.is_dir() {
            return Err(format!(
                "{requested:?} is a directory; use list_files to see what it holds"
            ));
        }
        if !meta.is_file() {
            // A FIFO or a device could block forever or never end.
            return Err(format!(
                "{requested:?} is not a regular file (a pipe, socket or device); only files can be read"
            ));
        }
        if meta.len() > max_bytes {
            return Err(format!(
                "{requested:?} is {} bytes, more than the {max_bytes} bytes read_file accepts",
                meta.len()
            ));
        }
        let file = fs::File::open(&path).map_err(|e| format!("cannot read {requested:?}: {e}"))?;
        // Bounded even if the file grows after the size check.
        let mut bytes = Vec::new();
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {requested:?}: {e}"))?;
        if bytes.len() as u64 > max_bytes {
            return Err(format!(
                "{requested:?} grew past the {max_bytes} bytes read_file accepts while it was read"
            ));
        }
        if bytes.contains(&0) {
            return Err(format!(
                "{requested:?} is a binary file, {} bytes; read_file only reads text",
                bytes.len()
            ));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            format!(
                "{requested:?} is a binary file, {} bytes (not valid UTF-8); read_file only reads text",
                e.as_bytes().len()
            )
        })?;
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
        let asked_end = (offset - 1).saturating_add(limit).min(lines.len());
        let mut out = String::new();
        let mut end = offset - 1;
        let mut capped = None;
        for line in &lines[offset - 1..asked_end] {
            let needed = line.len() + usize::from(!out.is_empty());
            if out.len() + needed > MAX_OUTPUT_BYTES {
                capped = Some(format!("at most {MAX_OUTPUT_BYTES} bytes are returned at once"));
                if out.is_empty() {
                    // One line longer than the cap: its start, so that the call still helps.
                    let cut = (0..=MAX_OUTPUT_BYTES)
                        .rev()
                        .find(|&i| line.is_char_boundary(i))
                        .unwrap_or(0);
                    out.push_str(&line[..cut]);
                    end += 1;
                    capped = Some(format!(
                        "line {end} is {} bytes; only its first {cut} are shown",
                        line.len()
                    ));
                }
                break;
            }
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(line);
            end += 1;
        }
        if offset > 1 || end < lines.len() {
            out.push_str("\n[");
            if let Some(capped) = capped {
                out.push_str(&format!("{capped}; "));
            }
            out.push_str(&format!("lines {offset}-{end} of {}", lines.len()));
            if end < lines.len() {
                out.push_str(&format!("; call read_file with offset={} to read more", end + 1));
            }
            out.push(']');
        }
        Ok(out)
    }
}

/// The entries of `dir`, sorted by name.
pub(super) fn read_sorted(dir: &Path) -> std::io::Result<Vec<fs::DirEntry>> {
    let mut entries: Vec<fs::DirEntry> = fs::read_dir(dir)?.filter_map(Result::ok).collect();
    entries.sort_by_key(fs::DirEntry::file_name);
    Ok(entries)
}

/// Appends one line per entry (and, when `recursive`, per entry of each subdirectory), named
/// relative to `base`. Symbolic links are shown, never followed.
fn walk(
    base: &Path,
    entries: Vec<fs::DirEntry>,
    recursive: bool,
    lines: &mut Vec<String>,
    truncated: &mut bool,
) {
    for entry in entries {
        if lines.len() >= MAX_ENTRIES {
            *truncated = true;
            return;
        }
        let path = entry.path();
        let name = path.strip_prefix(base).unwrap_or(&path).display().to_string();
        // `DirEntry::metadata` does not follow symbolic links.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".to_owned());
            lines.push(format!("{name} -> {target}"));
        } else if meta.is_dir() {
            let skipped = SKIPPED_DIRS.contains(&entry.file_name().to_string_lossy().as_ref());
            if !recursive {
                lines.push(format!("{name}/"));
            } else if skipped {
                lines.push(format!("{name}/ (contents skipped)"));
            } else {
                match read_sorted(&path) {
                    Ok(children) => {
                        lines.push(format!("{name}/"));
                        walk(base, children, true, lines, truncated);
                    }
                    Err(e) => lines.push(format!("{name}/ (cannot be listed: {e})")),
                }
            }
        } else if meta.is_file() {
            lines.push(format!("{name} ({} bytes)", meta.len()));
        } else {
            lines.push(format!("{name} (special file)"));
        }
    }
}

fn display_dir(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

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

    fn read(s: &Sandbox, path: &str, offset: usize, limit: usize) -> Result<String, String> {
        s.read(path, offset, limit, MAX_FILE_BYTES)
    }

    #[test]
    fn lists_plain_and_recursive() {
        let (dir, s) = sandbox();
        assert_eq!(
            s.list(".", false).unwrap(),
            ".hidden (1 bytes)\nCargo.toml (21 bytes)\nsrc/\ntarget/"
        );
        assert_eq!(s.list("", false).unwrap(), s.list(".", false).unwrap());
        assert_eq!(
            s.list(".", true).unwrap(),
            ".hidden (1 bytes)\nCargo.toml (21 bytes)\nsrc/\nsrc/deep/\nsrc/deep/a.txt (1 bytes)\n\
             src/main.rs (13 bytes)\ntarget/ (contents skipped)"
        );
        assert_eq!(s.list("src", false).unwrap(), "deep/\nmain.rs (13 bytes)");
        assert_eq!(
            s.list("src/", true).unwrap(),
            "deep/\ndeep/a.txt (1 bytes)\nmain.rs (13 bytes)",
            "recursive paths are relative to the listed directory"
        );
        // A skipped directory can still be listed when asked for directly.
        assert_eq!(s.list("target", true).unwrap(), "debug/");
        fs::create_dir(dir.path().join("empty")).unwrap();
        assert_eq!(s.list("empty", true).unwrap(), "empty is empty");
        assert_eq!(
            s.list("Cargo.toml", false).unwrap_err(),
            "path \"Cargo.toml\" is a file, not a directory; use read_file to read it"
        );
        assert_eq!(s.list("nope", false).unwrap_err(), "path \"nope\" does not exist");
    }

    #[test]
    fn recursive_listing_skips_heavy_directories() {
        let (dir, s) = sandbox();
        for skipped in [".git/objects", "node_modules/left-pad", "src/target/x"] {
            fs::create_dir_all(dir.path().join(skipped)).unwrap();
        }
        fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
        let listing = s.list(".", true).unwrap();
        assert!(listing.contains(".git/ (contents skipped)"), "{listing}");
        assert!(listing.contains("node_modules/ (contents skipped)"), "{listing}");
        assert!(listing.contains("src/target/ (contents skipped)"), "{listing}");
        assert!(!listing.contains("HEAD") && !listing.contains("left-pad") && !listing.contains("debug"));
        assert!(!listing.contains("(contents skipped)\n[") && !listing.contains("cut"));
    }

    #[test]
    fn special_files_are_listed_and_not_read() {
        let (dir, s) = sandbox();
        let socket = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(s.list(".", false).unwrap().contains("sock (special file)"));
        assert!(
            read(&s, "sock", 1, 10)
                .unwrap_err()
                .contains("not a regular file")
        );
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("fifo"))
            .status()
            .is_ok_and(|st| st.success());
        if made {
            // Opening a FIFO would block; the tool must answer at once.
            assert!(
                read(&s, "fifo", 1, 10)
                    .unwrap_err()
                    .contains("not a regular file")
            );
        }
    }

    #[test]
    fn listing_is_cut_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_ENTRIES {
            fs::write(dir.path().join(format!("f{i:05}")), "").unwrap();
        }
        let s = Sandbox::new(dir.path()).unwrap();
        let exact = s.list(".", false).unwrap();
        assert_eq!(exact.lines().count(), MAX_ENTRIES);
        assert!(!exact.contains("listing cut"), "exactly the limit is not cut");

        fs::write(dir.path().join("g"), "").unwrap();
        let listing = s.list(".", false).unwrap();
        assert_eq!(listing.lines().count(), MAX_ENTRIES + 1);
        assert!(listing.ends_with(
            "f00999 (0 bytes)\n[listing cut at 1000 entries; list a subdirectory to see the rest]"
        ));

        // Recursive: the cut happens inside a subdirectory and is still reported.
        let nested = tempfile::tempdir().unwrap();
        fs::create_dir(nested.path().join("a")).unwrap();
        for i in 0..MAX_ENTRIES {
            fs::write(nested.path().join(format!("a/{i:05}")), "").unwrap();
        }
        fs::write(nested.path().join("b"), "").unwrap();
        let listing = Sandbox::new(nested.path()).unwrap().list(".", true).unwrap();
        assert_eq!(listing.lines().count(), MAX_ENTRIES + 1);
        assert!(listing.starts_with("a/\na/00000 (0 bytes)"));
        assert!(listing.ends_with(
            "a/00998 (0 bytes)\n[listing cut at 1000 entries; list a subdirectory to see the rest]"
        ));
    }

    #[test]
    fn reads_windows_with_notes() {
        let (dir, s) = sandbox();
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        fs::write(dir.path().join("ten.txt"), text).unwrap();
        assert_eq!(read(&s, "Cargo.toml", 1, 400).unwrap(), "[package]\nname = \"x\"");
        let all = read(&s, "ten.txt", 1, DEFAULT_LINES).unwrap();
        assert_eq!(all.lines().count(), 10);
        assert!(!all.contains('['), "no note when everything was returned");
        assert_eq!(
            read(&s, "ten.txt", 1, 3).unwrap(),
            "line 1\nline 2\nline 3\n[lines 1-3 of 10; call read_file with offset=4 to read more]"
        );
        assert_eq!(
            read(&s, "ten.txt", 4, 3).unwrap(),
            "line 4\nline 5\nline 6\n[lines 4-6 of 10; call read_file with offset=7 to read more]"
        );
        assert_eq!(
            read(&s, "ten.txt", 9, 5).unwrap(),
            "line 9\nline 10\n[lines 9-10 of 10]"
        );
        assert_eq!(
            read(&s, "ten.txt", 10, 1).unwrap(),
            "line 10\n[lines 10-10 of 10]"
        );
        assert_eq!(
            read(&s, "ten.txt", 0, 1).unwrap(),
            read(&s, "ten.txt", 1, 1).unwrap()
        );
        assert_eq!(
            read(&s, "ten.txt", 2, 0).unwrap(),
            read(&s, "ten.txt", 2, 1).unwrap()
        );
        assert_eq!(
            read(&s, "ten.txt", 3, usize::MAX).unwrap().lines().next(),
            Some("line 3"),
            "a huge limit does not overflow"
        );
        assert_eq!(
            read(&s, "ten.txt", 11, 5).unwrap_err(),
            "offset 11 is past the end of \"ten.txt\", which has 10 lines"
        );
        fs::write(dir.path().join("crlf.txt"), "a\r\nb\r\n").unwrap();
        assert_eq!(read(&s, "crlf.txt", 1, 10).unwrap(), "a\nb");
        fs::write(dir.path().join("empty.txt"), "").unwrap();
        assert_eq!(read(&s, "empty.txt", 1, 10).unwrap(), "[empty.txt is empty]");
        assert_eq!(read(&s, "src/deep/../main.rs", 1, 10).unwrap(), "fn main() {}");
    }

    #[test]
    fn output_is_capped_in_bytes_and_says_how_to_go_on() {
        let (dir, s) = sandbox();
        let wide = "y".repeat(10 * 1024);
        let text: String = (0..400).map(|_| format!("{wide}\n")).collect();
        fs::write(dir.path().join("wide.txt"), &text).unwrap();
        let out = read(&s, "wide.txt", 1, 400).unwrap();
        assert!(out.len() <= MAX_OUTPUT_BYTES + 200, "{} bytes", out.len());
        assert_eq!(out.lines().filter(|l| l.starts_with('y')).count(), 25);
        assert!(
            out.ends_with(
                "\n[at most 262144 bytes are returned at once; lines 1-25 of 400; call read_file with \
                 offset=26 to read more]"
            ),
            "{}",
            &out[out.len() - 200..]
        );
        let next = read(&s, "wide.txt", 26, 400).unwrap();
        assert!(
            next.contains("; lines 26-50 of 400;"),
            "{}",
            &next[next.len() - 200..]
        );

        let huge = format!("{}\nsecond\n", "z".repeat(1024 * 1024));
        fs::write(dir.path().join("one.txt"), huge).unwrap();
        let out = read(&s, "one.txt", 1, 10).unwrap();
        assert!(out.len() <= MAX_OUTPUT_BYTES + 200, "{} bytes", out.len());
        assert!(
            out.ends_with(
                "\n[line 1 is 1048576 bytes; only its first 262144 are shown; lines 1-1 of 2; call \
                 read_file with offset=2 to read more]"
            ),
            "{}",
            &out[out.len() - 200..]
        );
        assert_eq!(read(&s, "one.txt", 2, 10).unwrap(), "second\n[lines 2-2 of 2]");
    }

    #[test]
    fn refuses_binary_large_missing_and_directories() {
        let (dir, s) = sandbox();
        fs::write(dir.path().join("bin"), [0u8, 1, 2]).unwrap();
        fs::write(dir.path().join("latin1"), [0xe9u8, 0x41]).unwrap();
        assert_eq!(
            read(&s, "bin", 1, 10).unwrap_err(),
            "\"bin\" is a binary file, 3 bytes; read_file only reads text"
        );
        assert_eq!(
            read(&s, "latin1", 1, 10).unwrap_err(),
            "\"latin1\" is a binary file, 2 bytes (not valid UTF-8); read_file only reads text"
        );
        assert_eq!(
            s.read("Cargo.toml", 1, 10, 5).unwrap_err(),
            "\"Cargo.toml\" is 21 bytes, more than the 5 bytes read_file accepts"
        );
        assert!(
            s.read("Cargo.toml", 1, 10, 21).is_ok(),
            "exactly the limit is fine"
        );
        assert_eq!(MAX_FILE_BYTES, 5 * 1024 * 1024);
        assert_eq!(
            read(&s, "nope.txt", 1, 10).unwrap_err(),
            "path \"nope.txt\" does not exist"
        );
        assert_eq!(
            read(&s, "src", 1, 10).unwrap_err(),
            "\"src\" is a directory; use list_files to see what it holds"
        );
        assert_eq!(
            read(&s, "Cargo.toml/x", 1, 10).unwrap_err(),
            "path \"Cargo.toml/x\" does not exist: Cargo.toml is a file, not a directory"
        );
        assert_eq!(
            read(&s, "src/nope/x", 1, 10).unwrap_err(),
            "path \"src/nope/x\" does not exist"
        );
        assert!(read(&s, "a\0b", 1, 10).is_err());
    }

    #[test]
    fn escapes_are_refused() {
        let (dir, s) = sandbox();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s3cret").unwrap();
        symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        symlink(outside.path(), dir.path().join("linkdir")).unwrap();
        symlink("/", dir.path().join("src/root")).unwrap();
        let secret = outside.path().join("secret").display().to_string();
        let sibling = format!(
            "../{}/secret",
            outside.path().file_name().unwrap().to_string_lossy()
        );
        for path in [
            "..",
            "../secret",
            "/etc/passwd",
            "/",
            secret.as_str(),
            sibling.as_str(),
            "src/../../x",
            "./src/deep/../../../etc/passwd",
            "link",
            "linkdir/secret",
            "linkdir/../secret",
            "src/root/etc/passwd",
        ] {
            let err = read(&s, path, 1, 10).unwrap_err();
            assert_eq!(
                err,
                format!("path {path:?} is outside the working directory"),
                "{path}"
            );
            let err = s.list(path, true).unwrap_err();
            assert!(err.contains("outside the working directory"), "{path}: {err}");
        }
        // Refused before looking, so a refusal does not tell whether the path exists outside.
        assert!(
            read(&s, "../does-not-exist", 1, 10)
                .unwrap_err()
                .contains("outside")
        );
        let listing = s.list(".", true).unwrap();
        assert!(listing.contains(&format!("link -> {secret}")), "{listing}");
        assert!(listing.contains("linkdir -> "), "{listing}");
        assert!(listing.contains("src/root -> /"), "{listing}");
        assert!(
            !listing.contains("secret (") && !listing.contains("etc"),
            "{listing}"
        );
    }

    #[test]
    fn paths_inside_are_fine_however_spelled() {
        let (dir, s) = sandbox();
        symlink("src/main.rs", dir.path().join("main-link")).unwrap();
        symlink(dir.path().join("src"), dir.path().join("src-link")).unwrap();
        let absolute = dir.path().join("src/main.rs").display().to_string();
        for path in [
            "src/main.rs",
            "./src/main.rs",
            "src//main.rs",
            "src/deep/../main.rs",
            absolute.as_str(),
            "main-link",
            "src-link/main.rs",
        ] {
            assert_eq!(read(&s, path, 1, 10).unwrap(), "fn main() {}", "{path}");
        }
        assert_eq!(s.list("src-link", false).unwrap(), "deep/\nmain.rs (13 bytes)");
        assert_eq!(
            s.list(&dir.path().display().to_string(), false).unwrap(),
            s.list(".", false).unwrap()
        );
        // The listing itself never descends into symbolic links, even inside.
        assert!(s.list(".", true).unwrap().contains("src-link -> "));
        assert!(!s.list(".", true).unwrap().contains("src-link/"));
    }

    #[test]
    fn symbolic_links_are_resolved_inside_the_root() {
        let (dir, s) = sandbox();
        let root = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        // Inside: absolute target, relative target with `..`, a chain.
        symlink(root.join("src/main.rs"), dir.path().join("abs-inside")).unwrap();
        symlink("../main.rs", dir.path().join("src/deep/up")).unwrap();
        symlink("abs-inside", dir.path().join("chain")).unwrap();
        symlink("src/deep", dir.path().join("deep-link")).unwrap();
        for path in [
            "abs-inside",
            "src/deep/up",
            "chain",
            "deep-link/up",
            "deep-link/../main.rs",
        ] {
            assert_eq!(read(&s, path, 1, 10).unwrap(), "fn main() {}", "{path}");
        }
        // Broken links: inside they do not exist; pointing outside they are refused without
        // telling whether the target exists.
        symlink("missing", dir.path().join("dangling")).unwrap();
        symlink(outside.path().join("missing"), dir.path().join("out-missing")).unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        symlink("../../..", dir.path().join("src/deep/climb")).unwrap();
        assert_eq!(
            read(&s, "dangling", 1, 10).unwrap_err(),
            "path \"dangling\" does not exist"
        );
        for path in [
            "out-missing",
            "out/missing",
            "out/../x",
            "src/deep/climb",
            "src/deep/climb/x",
        ] {
            assert_eq!(
                read(&s, path, 1, 10).unwrap_err(),
                format!("path {path:?} is outside the working directory"),
                "{path}"
            );
        }
        // Loops end.
        symlink("loop-b", dir.path().join("loop-a")).unwrap();
        symlink("loop-a", dir.path().join("loop-b")).unwrap();
        assert!(
            read(&s, "loop-a", 1, 10)
                .unwrap_err()
                .contains("too many levels of symbolic links")
        );
        assert!(s.list(".", true).unwrap().contains("loop-a -> loop-b"));
    }

    #[test]
    fn a_root_given_through_a_link_accepts_both_spellings() {
        let (dir, _) = sandbox();
        let holder = tempfile::tempdir().unwrap();
        let alias = holder.path().join("project");
        symlink(dir.path(), &alias).unwrap();
        let s = Sandbox::new(&alias).unwrap();
        for path in [
            alias.join("src/main.rs"),
            dir.path().canonicalize().unwrap().join("src/main.rs"),
        ] {
            let path = path.display().to_string();
            assert_eq!(read(&s, &path, 1, 10).unwrap(), "fn main() {}", "{path}");
        }
        let beside = holder.path().join("other").display().to_string();
        assert!(read(&s, &beside, 1, 10).unwrap_err().contains("outside"));
        assert!(Sandbox::new(&holder.path().join("nope")).is_err());
    }
}
