//! How long a long session takes to open for writing (lease, recovery check, all messages
//! loaded): `cargo run --release -p agentry-store --example open_session [MESSAGES]`.
//! Writes a session of MESSAGES messages (default 10 000; a tool call and its result every
//! fourth pair, the last one a plain answer) to a fresh database in a temporary directory, then opens it five times.

use std::sync::Arc;
use std::time::Instant;

use agentry::message::{ContentBlock, Msg, Role, ToolResultBlock, ToolUseBlock};
use agentry_store::{SessionMemory, SessionStore, SqliteStore};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let count: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(10_000);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("sessions.db");
    let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&path)?);
    let session = store.create_session("long", &json!({})).await?;
    let lease = store.acquire(&session.id).await?;
    let mut batch = Vec::new();
    for i in 0..count / 2 {
        if i % 4 == 1 {
            let id = format!("call_{i}");
            batch.push(Msg::new(
                "bot",
                Role::Assistant,
                vec![ContentBlock::ToolUse(ToolUseBlock {
                    id: id.clone().into(),
                    name: "read_file".into(),
                    input: json!({"path": format!("notes/{i}.txt")}),
                    raw_input: None,
                })],
            ));
            batch.push(Msg::tool_result(ToolResultBlock {
                id: id.into(),
                name: "read_file".into(),
                output: vec![ContentBlock::text("a line of the file, and another one after it")],
                is_error: false,
            }));
        } else {
            batch.push(Msg::user(format!(
                "question {i}: what does the note say about this?"
            )));
            batch.push(Msg::new(
                "bot",
                Role::Assistant,
                vec![ContentBlock::text("It says what it says, in a sentence or two.")],
            ));
        }
        if batch.len() >= 500 {
            store.append_messages(&lease, &batch).await?;
            batch.clear();
        }
    }
    store.append_messages(&lease, &batch).await?;
    drop(lease);
    drop(store);

    let mut times = Vec::new();
    for _ in 0..5 {
        let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&path)?);
        let started = Instant::now();
        let memory = SessionMemory::open(store, &session.id).await?;
        let elapsed = started.elapsed();
        let loaded = agentry::memory::Memory::size(&memory).await?;
        assert_eq!(loaded, count / 2 * 2);
        times.push(elapsed.as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{{\"messages\": {}, \"open_ms_min\": {:.1}, \"open_ms_median\": {:.1}, \"open_ms_max\": {:.1}}}",
        count / 2 * 2,
        times[0],
        times[2],
        times[4]
    );
    Ok(())
}
