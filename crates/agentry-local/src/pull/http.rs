//! Downloads that survive a dropped connection: a file grows in place and a new request asks
//! only for what is missing.

use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_RANGE, RANGE};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::PullError;

/// Attempts per file: the first, and resumptions after a broken connection.
const ATTEMPTS: u32 = 4;

/// An HTTP client for model files.
#[derive(Clone)]
pub(crate) struct Fetcher {
    client: reqwest::Client,
}

impl Fetcher {
    pub(crate) fn new() -> Result<Self, PullError> {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            // An error means a provider is already installed, which is just as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A silent server is a broken download: resume it rather than wait forever.
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("agentry/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PullError::Network {
                url: String::new(),
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Fetcher { client })
    }

    /// The body of a small document (an index page).
    pub(crate) async fn text(&self, url: &str) -> Result<String, PullError> {
        let response = self.client.get(url).send().await.map_err(|e| network(url, &e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(PullError::Http {
                url: url.into(),
                status: status.as_u16(),
            });
        }
        response.text().await.map_err(|e| network(url, &e))
    }

    /// Fetches `url` into `dest`, continuing a partial file left there by an earlier attempt
    /// (this process or another). `on_size` gets the size of the file as it grows.
    pub(crate) async fn download(
        &self,
        url: &str,
        dest: &Path,
        on_size: &mut (dyn FnMut(u64) + Send),
    ) -> Result<(), PullError> {
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            match self.attempt(url, dest, on_size).await {
                Ok(()) => return Ok(()),
                Err(Broken::Final(e)) => return Err(e),
                Err(Broken::Resumable(e)) => {
                    tracing::debug!("download broke off ({e}); resuming");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| PullError::Network {
            url: url.into(),
            reason: "no attempt was made".into(),
        }))
    }

    async fn attempt(
        &self,
        url: &str,
        dest: &Path,
        on_size: &mut (dyn FnMut(u64) + Send),
    ) -> Result<(), Broken> {
        let have = match tokio::fs::metadata(dest).await {
            Ok(meta) => meta.len(),
            Err(_) => 0,
        };
        let mut request = self.client.get(url);
        if have > 0 {
            request = request.header(RANGE, format!("bytes={have}-"));
        }
        // A server that cannot be reached, or that says no, will do so again.
        let response = request
            .send()
            .await
            .map_err(|e| Broken::Final(network(url, &e)))?;
        let status = response.status();
        let append = match status {
            StatusCode::PARTIAL_CONTENT if resumes_at(&response, have) => true,
            // The file is already whole.
            StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => return Ok(()),
            // The server ignored the range (or sent another one): start again.
            s if s.is_success() => false,
            _ => {
                return Err(Broken::Final(PullError::Http {
                    url: url.into(),
                    status: status.as_u16(),
                }));
            }
        };
        let final_io = |e: std::io::Error| Broken::Final(PullError::io(dest, &e));
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(dest)
            .await
            .map_err(final_io)?;
        let mut size = if append { have } else { 0 };
        on_size(size);
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    // tokio's file writes in the background: without this flush the next
                    // attempt could measure the file before the last write lands, ask for
                    // bytes it already has, and append them twice.
                    file.flush().await.map_err(final_io)?;
                    return Err(Broken::Resumable(network(url, &e)));
                }
            };
            file.write_all(&chunk).await.map_err(final_io)?;
            size += chunk.len() as u64;
            on_size(size);
        }
        file.flush().await.map_err(final_io)?;
        file.sync_all().await.map_err(final_io)?;
        Ok(())
    }
}

/// How an attempt failed: for good, or mid-body (worth resuming).
enum Broken {
    Final(PullError),
    Resumable(PullError),
}

/// Whether a 206 answer starts where our partial file ends.
fn resumes_at(response: &reqwest::Response, have: u64) -> bool {
    response
        .headers()
        .get(CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes "))
        .and_then(|v| v.split('-').next())
        .and_then(|start| start.parse::<u64>().ok())
        == Some(have)
}

fn network(url: &str, e: &reqwest::Error) -> PullError {
    // The innermost cause says what happened ("failed to lookup address information"); the
    // outer ones repeat the URL.
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        reason = cause.to_string();
        source = cause.source();
    }
    PullError::Network {
        url: url.into(),
        reason,
    }
}

/// The SHA-256 of a file, as lowercase hex (blocking: call from a blocking thread).
pub(crate) fn sha256_file(path: &Path) -> Result<String, PullError> {
    let mut file = std::fs::File::open(path).map_err(|e| PullError::io(path, &e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut buffer).map_err(|e| PullError::io(path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
