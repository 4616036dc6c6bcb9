//! Retrieval quality: recall@5 of long-term memory on a small written set (`data/recall-set.json`:
//! facts in English and Chinese, questions phrased unlike them, some across the two languages),
//! among generated notes on other matters, by words alone and by words and meaning (the
//! embedded multilingual model).
//!
//!     cargo run --release -p agentry-bench --bin recall-bench -- [NOTES] [MODEL.bin]
//!
//! NOTES other memories around the facts (default 2,000); the model file, else the model cache's
//! (fetched if missing). Prints recall@5 per group of questions and overall, and the questions
//! each way misses.

use std::collections::HashMap;
use std::sync::Arc;

use agentry::embedding::Embedder;
use agentry::memory::long_term::{LongTermMemory, RecordSource};
use agentry_store::{SqliteStore, StoredLongTermMemory};
use serde_json::Value;

const SET: &str = include_str!("../../data/recall-set.json");

/// A fact of the set: its id and text.
type Fact = (i64, String);

struct Question {
    group: String,
    text: String,
    expected: Vec<i64>,
}

fn set() -> anyhow::Result<(Vec<Fact>, Vec<Question>)> {
    let set: Value = serde_json::from_str(SET)?;
    let field = |v: &Value, name: &str| v.get(name).cloned().ok_or_else(|| anyhow::anyhow!("no {name}"));
    let mut facts = Vec::new();
    for m in field(&set, "memories")?.as_array().into_iter().flatten() {
        let id = field(m, "id")?.as_i64().ok_or_else(|| anyhow::anyhow!("id"))?;
        facts.push((id, field(m, "text")?.as_str().unwrap_or_default().to_owned()));
    }
    let mut questions = Vec::new();
    for q in field(&set, "questions")?.as_array().into_iter().flatten() {
        questions.push(Question {
            group: field(q, "group")?.as_str().unwrap_or_default().to_owned(),
            text: field(q, "question")?.as_str().unwrap_or_default().to_owned(),
            expected: field(q, "expected")?
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64)
                .collect(),
        });
    }
    Ok((facts, questions))
}

/// Notes on matters none of the questions ask about, in both languages.
fn notes(count: usize) -> Vec<String> {
    const PARTS: [&str; 10] = [
        "billing",
        "search",
        "login",
        "upload",
        "report",
        "export",
        "queue",
        "cache",
        "scheduler",
        "gateway",
    ];
    const DAYS: [&str; 5] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"];
    const TEAMS: [&str; 5] = ["市场部", "研发部", "财务部", "运营部", "法务部"];
    const TOPICS: [&str; 8] = [
        "季度预算",
        "服务器迁移",
        "招聘计划",
        "产品发布",
        "客户反馈",
        "合同续签",
        "数据备份",
        "安全审计",
    ];
    (0..count)
        .map(|n| match n % 2 {
            0 => format!(
                "Ticket {n}: the {} service returned {} errors after the {} release of build {}.",
                PARTS[n % 10],
                400 + n % 100,
                DAYS[(n / 10) % 5],
                n * 7 % 1000
            ),
            _ => format!(
                "会议记录{n}：{}讨论了{}的进度，第{}版方案待审。",
                TEAMS[n % 5],
                TOPICS[(n / 5) % 8],
                n % 30 + 1
            ),
        })
        .collect()
}

/// Recall@5 of `questions` on a memory holding the facts and the notes: per group and overall,
/// with the questions that missed a fact.
async fn recall(
    embedder: Option<Arc<dyn Embedder>>,
    facts: &[(i64, String)],
    notes: &[String],
    questions: &[Question],
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("recall.db"))?;
    let memory = StoredLongTermMemory::new(store, "bench", embedder);
    let mut texts: Vec<String> = facts.iter().map(|(_, t)| t.clone()).collect();
    texts.extend(notes.iter().cloned());
    for batch in texts.chunks(256) {
        memory.record(batch.to_vec(), RecordSource::User).await?;
    }
    let id_of: HashMap<&str, i64> = facts.iter().map(|(id, t)| (t.as_str(), *id)).collect();
    let mut groups: Vec<(String, f64, usize)> = Vec::new();
    let mut missed = Vec::new();
    for question in questions {
        let found: Vec<i64> = memory
            .retrieve(&question.text, 5)
            .await?
            .iter()
            .filter_map(|r| id_of.get(r.content.as_str()).copied())
            .collect();
        let hits = question.expected.iter().filter(|id| found.contains(id)).count();
        let score = hits as f64 / question.expected.len().clamp(1, 5) as f64;
        if hits < question.expected.len() {
            missed.push(format!(
                "{} ({:?} found {:?})",
                question.text, question.expected, found
            ));
        }
        match groups.iter_mut().find(|(g, _, _)| *g == question.group) {
            Some((_, sum, n)) => {
                *sum += score;
                *n += 1;
            }
            None => groups.push((question.group.clone(), score, 1)),
        }
    }
    let (sum, n) = groups
        .iter()
        .fold((0.0, 0), |(s, c), (_, sum, n)| (s + sum, c + n));
    for (group, sum, n) in &groups {
        println!("  {group:6} recall@5 {:.2} ({n} questions)", sum / *n as f64);
    }
    println!("  all    recall@5 {:.2} ({n} questions)", sum / n as f64);
    for miss in missed {
        println!("  missed: {miss}");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2000);
    let model = args.next();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let (facts, questions) = set()?;
        let notes = notes(count);
        let embedder = match model {
            Some(path) => {
                tokio::task::spawn_blocking(move || agentry_embed::LocalEmbedder::load(path)).await??
            }
            None => agentry_embed::LocalEmbedder::pull_default().await?,
        };
        println!(
            "{} facts among {count} other notes, {} questions",
            facts.len(),
            questions.len()
        );
        println!("words (full-text search alone):");
        recall(None, &facts, &notes, &questions).await?;
        println!("words and meaning ({}):", embedder.model_id());
        recall(Some(Arc::new(embedder)), &facts, &notes, &questions).await?;
        Ok(())
    })
}
