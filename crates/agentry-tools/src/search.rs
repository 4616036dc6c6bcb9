//! `search_files`: a slow, multi-step tool that can be cancelled and hands back what it found.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::files::{MAX_FILE_BYTES, SKIPPED_DIRS, Sandbox, read_sorted};

/// Matches kept at most (the count goes on).
pub const MAX_MATCHES: usize = 200;
/// Characters of a matching line shown.
const LINE_CHARS: usize = 200;

/// What a search has found so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Files searched.
    pub files: usize,
    /// Matches found (may exceed `lines.len()`).
    pub matches: usize,
    /// `path:line: text`, at most `MAX_MATCHES`.
    pub lines: Vec<String>,
}

impl Found {
    /// The text the model reads for these results.
    pub fn summary(&self, pattern: &str) -> String {
        if self.matches == 0 {
            return format!("No matches for {pattern:?} in {} files.", self.files);
        }
        let mut text = format!(
            "{} matches for {pattern:?} in {} files:\n",
            self.matches, self.files
        );
        text.push_str(&self.lines.join("\n"));
        if self.matches > self.lines.len() {
            text.push_str(&format!(
                "\n[{} more matches not shown]",
                self.matches - self.lines.len()
            ));
        }
        text
    }

    /// The text the model reads when the user cancelled the search.
    pub fn cancelled(&self, pattern: &str) -> String {
        format!(
            "The user cancelled the search after {} files. Partial results: {}",
            self.files,
            self.summary(pattern)
        )
    }
}

impl Sandbox {
    /// Searches the text files under `requested` for lines containing `pattern` (ignoring case),
    /// in name order, skipping .git, target and node_modules, links, binary and huge files.
    /// `stop` is checked before each file; `progress` sees the results after each file.
    pub fn search(
        &self,
        requested: &str,
        pattern: &str,
        stop: &dyn Fn() -> bool,
        progress: &mut dyn FnMut(&Found),
    ) -> Result<Found, String> {
        if pattern.trim().is_empty() {
            return Err("the pattern is empty".into());
        }
        let start = self.resolve(requested)?;
        let needle = pattern.to_lowercase();
        let mut found = Found::default();
        let mut pending: Vec<PathBuf> = vec![start];
        // Depth first, in name order: a directory's entries are pushed reversed.
        while let Some(path) = pending.pop() {
            if stop() {
                break;
            }
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                let Ok(entries) = read_sorted(&path) else { continue };
                for entry in entries.into_iter().rev() {
                    let name = entry.file_name();
                    let skip = SKIPPED_DIRS.contains(&name.to_string_lossy().as_ref())
                        && entry.file_type().is_ok_and(|t| t.is_dir());
                    if !skip {
                        pending.push(entry.path());
                    }
                }
                continue;
            }
            if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
                continue;
            }
            found.files += 1;
            search_file(&path, self.relative(&path), &needle, &mut found);
            progress(&found);
        }
        Ok(found)
    }
}

fn search_file(path: &Path, shown: &Path, needle: &str, found: &mut Found) {
    let mut bytes = Vec::new();
    if fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .is_err()
        || bytes.contains(&0)
    {
        return;
    }
    let text = String::from_utf8_lossy(&bytes);
    for (number, line) in text.lines().enumerate() {
        if line.to_lowercase().contains(needle) {
            found.matches += 1;
            if found.lines.len() < MAX_MATCHES {
                let line: String = line.trim().chars().take(LINE_CHARS).collect();
                found
                    .lines
                    .push(format!("{}:{}: {line}", shown.display(), number + 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn tree() -> (tempfile::TempDir, Sandbox) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("a.txt", "alpha\nneedle here\n"),
            ("b.txt", "nothing\n"),
            ("c/d.txt", "NEEDLE again\nand a needle\n"),
            ("target/e.txt", "needle in target\n"),
            ("z.txt", "needle last\n"),
        ] {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        fs::write(dir.path().join("bin.dat"), b"needle\0binary").unwrap();
        let sandbox = Sandbox::new(dir.path()).unwrap();
        (dir, sandbox)
    }

    #[test]
    fn finds_matches_in_order_ignoring_case_and_skipping() {
        let (_dir, sandbox) = tree();
        let mut steps = 0;
        let found = sandbox
            .search(".", "Needle", &|| false, &mut |_| steps += 1)
            .unwrap();
        assert_eq!(
            found.files, 5,
            "bin.dat is searched and skipped as binary; target is not entered"
        );
        assert_eq!(steps, 5);
        assert_eq!(
            found.lines,
            [
                "a.txt:2: needle here",
                "c/d.txt:1: NEEDLE again",
                "c/d.txt:2: and a needle",
                "z.txt:1: needle last"
            ]
        );
        assert!(
            found
                .summary("Needle")
                .starts_with("4 matches for \"Needle\" in 5 files:\n")
        );
    }

    #[test]
    fn stopping_keeps_what_was_found() {
        let (_dir, sandbox) = tree();
        let searched = Cell::new(0);
        let found = sandbox
            .search(".", "needle", &|| searched.get() >= 2, &mut |f| {
                searched.set(f.files)
            })
            .unwrap();
        assert_eq!(found.files, 2);
        assert_eq!(found.lines, ["a.txt:2: needle here"]);
        assert_eq!(
            found.cancelled("needle"),
            "The user cancelled the search after 2 files. Partial results: 1 matches for \"needle\" in 2 files:\na.txt:2: needle here"
        );
    }

    #[test]
    fn errors_and_limits() {
        let (_dir, sandbox) = tree();
        assert!(
            sandbox
                .search("..", "x", &|| false, &mut |_| {})
                .unwrap_err()
                .contains("outside")
        );
        assert!(
            sandbox
                .search(".", " ", &|| false, &mut |_| {})
                .unwrap_err()
                .contains("empty")
        );
        let found = sandbox.search(".", "nomatch", &|| false, &mut |_| {}).unwrap();
        assert_eq!(found.summary("nomatch"), "No matches for \"nomatch\" in 5 files.");
    }
}
