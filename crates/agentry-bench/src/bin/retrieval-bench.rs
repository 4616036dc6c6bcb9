//! Retrieval over many memories and knowledge chunks: the time of one `retrieve` (full-text
//! search, a scan of every vector, the two rankings fused, the rows read) on one core, with the
//! query's vector given (the embedding model's own time is measured apart, by agentry-embed's
//! benchmark).
//!
//!     cargo run --release -p agentry-bench --bin retrieval-bench -- [COUNT] [QUERIES] [--narrow]
//!
//! Prints the median, p99 and maximum of QUERIES retrievals (default 300) over COUNT memories
//! (default 100,000) of 384 dimensions, then the same over as many knowledge chunks.
//!
//! The texts are twelve words each drawn from 20,000 with the frequencies of content words in
//! prose (Zipf's law, from the 100th most common word on: the commoner ones are function words,
//! which queries leave out), and a query is three such words. `--narrow` draws every text from
//! 24 words instead, so that each query word is in an eighth of all texts: the worst case of
//! the full-text search, which ranks every text that has a query word.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::embedding::{EmbedError, EmbedPurpose, Embedder};
use agentry::knowledge::KnowledgeBase;
use agentry::memory::long_term::LongTermMemory;
use agentry_store::{NewChunk, NewMemory, SqliteStore, StoredKnowledgeBase, StoredLongTermMemory};
use async_trait::async_trait;

const DIMENSIONS: usize = 384;

/// Hands back a fixed pseudo-random vector per text, so that only retrieval is timed.
struct Fixed;

#[async_trait]
impl Embedder for Fixed {
    fn model_id(&self) -> &str {
        "fixed"
    }

    fn dimensions(&self) -> usize {
        DIMENSIONS
    }

    async fn embed(&self, texts: Vec<String>, _purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| vector(seed(t))).collect())
    }
}

fn seed(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A unit vector from a seed (xorshift).
fn vector(mut state: u64) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIMENSIONS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2000) as f32 / 1000.0 - 1.0
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

const WORDS: [&str; 24] = [
    "garden", "invoice", "meeting", "dog", "holiday", "train", "recipe", "budget", "doctor", "office",
    "python", "rust", "tomato", "coffee", "school", "birthday", "piano", "bicycle", "museum", "river",
    "contract", "server", "lunch", "library",
];

/// How the texts and queries are made.
#[derive(Clone, Copy)]
enum Vocabulary {
    /// Words with the frequencies of prose.
    Prose,
    /// 24 words.
    Narrow,
}

/// A made-up word for a rank (letters from its digits in base 26).
fn word(mut rank: u64) -> String {
    let mut w = String::from("w");
    loop {
        w.push((b'a' + (rank % 26) as u8) as char);
        rank /= 26;
        if rank == 0 {
            return w;
        }
    }
}

/// A word of rank 100 to 20,100 with probability ∝ 1/rank, from a pseudo-random number.
fn zipf_word(state: &mut u64) -> String {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let u = (*state % 1_000_000) as f64 / 1_000_000.0;
    // The inverse of the continuous 1/r distribution over [100, 20100].
    word((100.0 * (201.0f64).powf(u)) as u64)
}

fn text(n: usize, vocabulary: Vocabulary) -> String {
    match vocabulary {
        Vocabulary::Narrow => format!(
            "note {n}: the {} and the {} near the {}",
            WORDS[n % 24],
            WORDS[(n / 24) % 24],
            WORDS[(n / 576) % 24]
        ),
        Vocabulary::Prose => {
            let mut state = seed(&n.to_string()) | 1;
            (0..12)
                .map(|_| zipf_word(&mut state))
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

fn query(q: usize, vocabulary: Vocabulary) -> String {
    match vocabulary {
        Vocabulary::Narrow => format!("where is the {} of the {}?", WORDS[q % 24], WORDS[(q * 7) % 24]),
        Vocabulary::Prose => {
            let mut state = seed(&format!("query {q}")) | 1;
            (0..3)
                .map(|_| zipf_word(&mut state))
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "{what}: median {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} queries)",
        at(0.5).as_secs_f64() * 1000.0,
        at(0.99).as_secs_f64() * 1000.0,
        times[times.len() - 1].as_secs_f64() * 1000.0,
        times.len()
    );
}

fn main() -> anyhow::Result<()> {
    let narrow = std::env::args().any(|a| a == "--narrow");
    let vocabulary = if narrow {
        Vocabulary::Narrow
    } else {
        Vocabulary::Prose
    };
    let mut args = std::env::args().skip(1).filter(|a| a != "--narrow");
    let count: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100_000);
    let queries: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    // One core: the runtime's own thread and the store's blocking thread take turns.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let dir = tempfile::tempdir()?;
        let store = SqliteStore::open(dir.path().join("bench.db"))?;
        let embedder: Arc<dyn Embedder> = Arc::new(Fixed);
        let started = Instant::now();
        for batch in (0..count).collect::<Vec<_>>().chunks(5000) {
            let memories = batch
                .iter()
                .map(|&n| NewMemory {
                    content: text(n, vocabulary),
                    source: agentry::memory::long_term::RecordSource::User,
                    session_id: None,
                    embedding: Some(("fixed".into(), vector(seed(&text(n, vocabulary))))),
                })
                .collect();
            store.record_memories("bench", memories).await?;
        }
        let base = store.open_knowledge_base("bench").await?;
        for (d, batch) in (0..count).collect::<Vec<_>>().chunks(100).enumerate() {
            let chunks = batch
                .iter()
                .map(|&n| NewChunk {
                    content: text(n, vocabulary),
                    embedding: Some(("fixed".into(), vector(seed(&text(n, vocabulary))))),
                })
                .collect();
            store
                .replace_document(base.id, &format!("doc{d}.md"), "h", None, chunks)
                .await?;
        }
        eprintln!(
            "filled {count} memories and {count} chunks in {:.1} s",
            started.elapsed().as_secs_f64()
        );

        let memory = StoredLongTermMemory::new(store.clone(), "bench", Some(Arc::clone(&embedder)));
        let knowledge = StoredKnowledgeBase::open(store.clone(), "bench", Some(embedder))
            .await?
            .ok_or_else(|| anyhow::anyhow!("no base"))?;
        // The first retrieval reads the vectors into memory; it is timed apart.
        let first = Instant::now();
        memory.retrieve("warm up", 5).await?;
        knowledge.retrieve("warm up", 5, None).await?;
        eprintln!(
            "first retrievals (vectors read from disk): {:.0} ms",
            first.elapsed().as_secs_f64() * 1000.0
        );
        let mut memory_times = Vec::with_capacity(queries);
        let mut chunk_times = Vec::with_capacity(queries);
        let mut lexical_times = Vec::with_capacity(queries);
        let mut state_times = Vec::with_capacity(queries);
        for q in 0..queries {
            let query = query(q, vocabulary);
            let t = Instant::now();
            let found = memory.retrieve(&query, 5).await?;
            memory_times.push(t.elapsed());
            anyhow::ensure!(found.len() == 5, "found {}", found.len());
            let t = Instant::now();
            store.memory_state("bench").await?;
            state_times.push(t.elapsed());
            let t = Instant::now();
            store.lexical_memories("bench", &query, 20).await?;
            lexical_times.push(t.elapsed());
            let t = Instant::now();
            let found = knowledge.retrieve(&query, 5, None).await?;
            chunk_times.push(t.elapsed());
            anyhow::ensure!(found.len() == 5, "found {}", found.len());
        }
        report(&format!("long-term memory, {count} memories"), memory_times);
        report(&format!("knowledge base, {count} chunks"), chunk_times);
        report("of which the full-text search of memories", lexical_times);
        report("of which reading whether the memories changed", state_times);
        Ok(())
    })
}
