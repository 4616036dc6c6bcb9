//! `write_file`: the one built-in tool that changes something, so it asks first.

use std::fs;
use std::path::{Component, Path, PathBuf};

use agentry::tool::ApprovalRequest;

use super::files::Sandbox;

/// Largest content `write_file` accepts.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Lines of the new content shown in the approval request.
const PREVIEW_LINES: usize = 30;

impl Sandbox {
    /// Where `requested` would be written: an existing directory inside the root, and a plain
    /// file name in it (an existing file, or a link resolving to a file inside the root).
    pub(super) fn write_target(&self, requested: &str) -> Result<PathBuf, String> {
        let path = Path::new(requested);
        let Some(Component::Normal(name)) = path.components().next_back() else {
            return Err(format!("path {requested:?} does not name a file"));
        };
        let parent = path
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = self.resolve(&parent).map_err(|e| {
            if e.contains("does not exist") {
                format!("cannot write {requested:?}: its directory does not exist (create no directories; use an existing one)")
            } else {
                e
            }
        })?;
        if !dir.is_dir() {
            return Err(format!(
                "cannot write {requested:?}: {parent:?} is not a directory"
            ));
        }
        let target = dir.join(name);
        match fs::symlink_metadata(&target) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let resolved = self.resolve(requested)?;
                if resolved.is_dir() {
                    return Err(format!("cannot write {requested:?}: it is a directory"));
                }
                Ok(resolved)
            }
            Ok(meta) if meta.is_dir() => Err(format!("cannot write {requested:?}: it is a directory")),
            Ok(meta) if !meta.is_file() => {
                Err(format!("cannot write {requested:?}: it is not a regular file"))
            }
            _ => Ok(target),
        }
    }

    /// What the user is asked before a write; reads metadata only (spec A19).
    pub fn describe_write(&self, requested: &str, content: &str) -> Result<ApprovalRequest, String> {
        let target = self.write_target(requested)?;
        let shown = self.relative(&target).display().to_string();
        let what = match fs::metadata(&target) {
            Ok(meta) => format!("overwrite {shown} ({} bytes now)", meta.len()),
            Err(_) => format!("create {shown}"),
        };
        let lines: Vec<&str> = content.lines().collect();
        let mut preview = lines
            .iter()
            .take(PREVIEW_LINES)
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        if lines.len() > PREVIEW_LINES {
            preview.push_str(&format!("\n… ({} more lines)", lines.len() - PREVIEW_LINES));
        }
        Ok(ApprovalRequest {
            title: Some(format!("Write {shown}?")),
            message: format!("The assistant wants to {what} with {} bytes.", content.len()),
            preview: Some(preview),
            primary_label: Some("Write".into()),
            secondary_label: Some("Don't write".into()),
        })
    }

    /// Writes `content` to `requested`.
    pub fn write(&self, requested: &str, content: &str) -> Result<String, String> {
        if content.len() > MAX_WRITE_BYTES {
            return Err(format!(
                "the content is {} bytes, more than the {MAX_WRITE_BYTES} bytes write_file accepts",
                content.len()
            ));
        }
        let target = self.write_target(requested)?;
        fs::write(&target, content).map_err(|e| format!("cannot write {requested:?}: {e}"))?;
        Ok(format!(
            "Wrote {} bytes to {}.",
            content.len(),
            self.relative(&target).display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a19_describing_a_write_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::new(dir.path()).unwrap();
        let request = sandbox.describe_write("notes.txt", "hello\nworld\n").unwrap();
        assert_eq!(request.title.as_deref(), Some("Write notes.txt?"));
        assert!(
            request.message.contains("create notes.txt with 12 bytes"),
            "{}",
            request.message
        );
        assert_eq!(request.preview.as_deref(), Some("hello\nworld"));
        assert!(
            !dir.path().join("notes.txt").exists(),
            "the request has no side effect"
        );
        assert_eq!(
            sandbox.write("notes.txt", "hi").unwrap(),
            "Wrote 2 bytes to notes.txt."
        );
        let request = sandbox.describe_write("notes.txt", "x").unwrap();
        assert!(
            request.message.contains("overwrite notes.txt (2 bytes now)"),
            "{}",
            request.message
        );
        assert_eq!(fs::read_to_string(dir.path().join("notes.txt")).unwrap(), "hi");
    }

    #[test]
    fn writes_stay_inside_existing_directories_of_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("x"), dir.path().join("escape")).unwrap();
        let sandbox = Sandbox::new(dir.path()).unwrap();
        assert!(sandbox.write("sub/a.txt", "a").is_ok());
        for (path, error) in [
            ("../x.txt", "outside"),
            ("/tmp/x.txt", "outside"),
            ("escape", "outside"),
            ("missing/a.txt", "directory does not exist"),
            ("sub", "is a directory"),
            ("sub/..", "does not name a file"),
        ] {
            let err = sandbox.write(path, "a").unwrap_err();
            assert!(err.contains(error), "{path}: {err}");
        }
        assert!(!outside.path().join("x").exists());
        let big = "x".repeat(MAX_WRITE_BYTES + 1);
        assert!(sandbox.write("big.txt", &big).unwrap_err().contains("more than"));
    }
}
