//! Finding the documents among files and folders.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use walkdir::{DirEntry, WalkDir};

use crate::ReadError;
use crate::read::{Format, SNIFF_BYTES, sniff_text};

/// The documents among `paths`: a file is taken as given, a folder is walked recursively in
/// name order, following symbolic links but not round a loop, and leaving out hidden files
/// and folders (names starting with `.`; a path given itself is never left out for that).
///
/// A file is taken when its extension is one [`Format::from_path`] knows, or when its first
/// bytes are text (see [`read_document`](crate::read_document)). Each file comes once, in the
/// order found.
///
/// The second list says what was left out and why: paths that do not exist or cannot be
/// read ([`ReadError::Io`], a broken symbolic link among them), and files that are not
/// documents ([`ReadError::Unsupported`], such as images in a walked folder), so that a caller
/// can tell users what was skipped.
pub fn collect_files(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<ReadError>) {
    let mut found = Found::default();
    for root in paths {
        let meta = match std::fs::metadata(root) {
            Ok(meta) => meta,
            Err(e) => {
                found.errors.push(ReadError::io(root, e));
                continue;
            }
        };
        if !meta.is_dir() {
            // A file given by name (or a device, a pipe: not documents).
            if meta.is_file() {
                found.consider(root);
            } else {
                found.errors.push(ReadError::unsupported(root));
            }
            continue;
        }
        let walk = WalkDir::new(root)
            .follow_links(true)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|entry| entry.depth() == 0 || !is_hidden(entry));
        for entry in walk {
            match entry {
                Ok(entry) if entry.file_type().is_file() => found.consider(entry.path()),
                // Folders are walked into; pipes, sockets and devices are not documents.
                Ok(_) => {}
                // A link back to a folder being walked: it has been (or is being) walked.
                Err(e) if e.loop_ancestor().is_some() => {}
                Err(e) => {
                    let path = e.path().unwrap_or(root).to_path_buf();
                    let source = match e.into_io_error() {
                        Some(source) => source,
                        None => std::io::Error::other("cannot walk this folder"),
                    };
                    found.errors.push(ReadError::Io { path, source });
                }
            }
        }
    }
    (found.files, found.errors)
}

#[derive(Default)]
struct Found {
    files: Vec<PathBuf>,
    errors: Vec<ReadError>,
    /// Canonical paths already taken.
    seen: HashSet<PathBuf>,
}

impl Found {
    fn consider(&mut self, path: &Path) {
        match is_document(path) {
            Ok(true) => {
                let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
                if self.seen.insert(key) {
                    self.files.push(path.to_path_buf());
                }
            }
            Ok(false) => self.errors.push(ReadError::unsupported(path)),
            Err(e) => self.errors.push(e),
        }
    }
}

fn is_hidden(entry: &DirEntry) -> bool {
    entry.file_name().to_string_lossy().starts_with('.')
}

/// Whether the file has a known extension or starts with text.
fn is_document(path: &Path) -> Result<bool, ReadError> {
    if Format::from_path(path).is_some() {
        return Ok(true);
    }
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    File::open(path)
        .and_then(|f| f.take(SNIFF_BYTES as u64).read_to_end(&mut head))
        .map_err(|e| ReadError::io(path, e))?;
    Ok(sniff_text(&head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn names(files: &[PathBuf], root: &Path) -> Vec<String> {
        files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"))
            .collect()
    }

    #[test]
    fn folders_are_walked_in_order_without_hidden_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("b/sub")).unwrap();
        fs::create_dir_all(root.join(".git")).unwrap();
        fs::write(root.join("z.md"), "# z").unwrap();
        fs::write(root.join("a.txt"), "a").unwrap();
        fs::write(root.join("b/sub/c.html"), "<p>c</p>").unwrap();
        fs::write(root.join("b/notes"), "plain text without an extension").unwrap();
        fs::write(root.join("b/.hidden.md"), "no").unwrap();
        fs::write(root.join(".git/config"), "no").unwrap();
        fs::write(root.join("b/image.png"), b"\x89PNG\r\n\x1a\n\0\0").unwrap();

        let (files, errors) = collect_files(&[root.to_path_buf()]);
        assert_eq!(names(&files, root), ["a.txt", "b/notes", "b/sub/c.html", "z.md"]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(matches!(&errors[0], ReadError::Unsupported { path } if path.ends_with("image.png")));
    }

    #[test]
    fn files_are_taken_as_given_once_and_missing_ones_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join(".env.md"), "hidden but named").unwrap();
        fs::write(root.join("b.txt"), "b").unwrap();
        let paths = [
            root.join(".env.md"),
            root.join("missing.txt"),
            root.to_path_buf(),
            root.join("b.txt"),
        ];
        let (files, errors) = collect_files(&paths);
        assert_eq!(names(&files, root), [".env.md", "b.txt"]);
        assert_eq!(errors.len(), 1);
        assert!(matches!(&errors[0], ReadError::Io { path, .. } if path.ends_with("missing.txt")));
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loops_are_skipped_and_broken_links_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join("d")).unwrap();
        fs::write(root.join("d/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(root, root.join("d/loop")).unwrap();
        std::os::unix::fs::symlink(root.join("gone.txt"), root.join("d/broken.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("d/a.txt"), root.join("link.txt")).unwrap();

        let (files, errors) = collect_files(&[root.to_path_buf()]);
        // link.txt is a.txt again.
        assert_eq!(names(&files, root), ["d/a.txt"]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(matches!(&errors[0], ReadError::Io { path, .. } if path.ends_with("broken.txt")));
        let message = errors[0].to_string();
        assert!(message.starts_with("cannot read "), "{message}");
        assert!(
            message.ends_with("broken.txt: No such file or directory (os error 2)"),
            "{message}"
        );
    }
}
