//! Embeddings per second for 256-token texts, one at a time and eight at once, and the time of
//! one short query (11 tokens, the median of 20):
//! `cargo run --release -p agentry-embed --example speed -- MODEL.bin [ROUNDS]` (the model is
//! `agentry model pull multilingual-e5-small`'s file). Threads: `RAYON_NUM_THREADS` (default: one
//! per core). The same texts as `ort_speed.py` beside this file, which runs onnxruntime on the same
//! weights. Prints one JSON line.
#![allow(clippy::print_stdout)]

use std::time::Instant;

use agentry::embedding::EmbedPurpose;
use agentry_embed::{LocalEmbedder, PASSAGE_PREFIX};

/// The text the inputs are cut from (English and Chinese, as in the research's runs).
const BASE: &str = "The user mentioned that their dog Rex likes long walks in the park, and that they moved to \
Berlin last spring. 用户提到他们的狗雷克斯喜欢在公园里散步，并且他们去年春天搬到了柏林。 ";

/// Eight texts of exactly `tokens` ids each (prefix and specials included): a number, then the
/// longest run of the base text's words that fits.
fn texts(embedder: &LocalEmbedder, tokens: usize) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let base = BASE.repeat(20);
    let words: Vec<&str> = base.split(' ').collect();
    let mut texts = Vec::new();
    for salt in 0..8 {
        let text = |n: usize| format!("{salt} {}", words[..n].join(" "));
        let fits = |n: usize| -> Result<bool, Box<dyn std::error::Error>> {
            Ok(embedder.tokenize(&format!("{PASSAGE_PREFIX}{}", text(n)))?.len() <= tokens)
        };
        let (mut lo, mut hi) = (1, words.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if fits(mid)? {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        texts.push(text(lo));
    }
    Ok(texts)
}

/// A memory figure of this process from `/proc/self/status` (`VmRSS`, `VmHWM`), in MB.
fn memory_mb(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: speed MODEL.bin [ROUNDS]")?;
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(5);
    let started = Instant::now();
    let embedder = LocalEmbedder::load(&path)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let (rss_after_load, peak_after_load) = (memory_mb("VmRSS:"), memory_mb("VmHWM:"));
    let texts = texts(&embedder, 256)?;
    let lengths: Vec<usize> = texts
        .iter()
        .map(|t| {
            embedder
                .tokenize(&format!("{PASSAGE_PREFIX}{t}"))
                .map(|ids| ids.len())
        })
        .collect::<Result<_, _>>()?;
    // Warm up: the first run pays for page faults and rayon's threads.
    embedder.embed_blocking(&texts[..1], EmbedPurpose::Document)?;
    let mut rates = Vec::new();
    for batch in [1, 8] {
        let started = Instant::now();
        for _ in 0..rounds {
            for chunk in texts.chunks(batch) {
                embedder.embed_blocking(chunk, EmbedPurpose::Document)?;
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        rates.push((batch, (rounds * texts.len()) as f64 / seconds));
    }
    let mut query_ms = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        embedder.embed_blocking(&["what is my pet called?"], EmbedPurpose::Query)?;
        query_ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    query_ms.sort_by(f64::total_cmp);
    println!(
        "{}",
        serde_json::json!({
            "engine": "agentry-embed (gemm 0.19, Q4_0 weights expanded to f32, f32 arithmetic)",
            "threads": rayon::current_num_threads(),
            "load_seconds": load_seconds,
            "tokens_per_text": lengths,
            "embeddings_per_second": rates
                .iter()
                .map(|(b, r)| (format!("batch_{b}"), serde_json::json!(r)))
                .collect::<serde_json::Map<_, _>>(),
            "short_query_ms": query_ms[query_ms.len() / 2],
            "rss_after_load_mb": rss_after_load,
            "peak_rss_during_load_mb": peak_after_load,
            "peak_rss_mb": memory_mb("VmHWM:"),
        })
    );
    Ok(())
}
