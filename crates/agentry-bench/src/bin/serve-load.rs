//! Load on `agentry serve`: many sessions at once, each with its own event-stream client,
//! against `shared/bench/mockllm` (which answers with tool calls, then text).
//!
//! ```text
//! serve-load --agentry PATH --mock-url URL [--sessions N] [--replies R] [--mock-pid PID]
//!            [--db postgres://… --nodes K] [--cancel-probe] [--spread-ms MS] [--idle-wait-ms MS]
//!            [--unload-idle DURATION] [--think-ms MS]
//! ```
//!
//! It starts `agentry serve` on a fresh SQLite file (or `--nodes K` servers on the PostgreSQL
//! database `--db`, which should be empty), creates N sessions, opens one server-sent-events
//! client per session, and has every session run R replies one after the other, all sessions at
//! once. With several nodes, session `i` is created on and sent its messages to node `i % K`,
//! and its client streams from node `(i + 1) % K`: every event crosses nodes through the
//! database. It prints one `RESULT {json}` line:
//!
//! - `events_lost`: gaps in a client's event ids, plus streams told to resume (0 expected);
//! - `delivery_ms_p50` / `p99`: from the moment the server recorded an event (the `at_us`
//!   comment it sends before each event) to its arrival at the client, over every event;
//! - `server_cpu_ms_per_step`: the servers' CPU (utime + stime, all nodes) over the model calls
//!   made (one per final assistant message); `mock_cpu_ms_per_step` the same for the mock when
//!   `--mock-pid` is given;
//! - `server_peak_rss_mb` and `rss_kb_per_session` (the nodes' peaks summed, over N);
//! - `idle_rss_kb_per_session`: what the nodes hold per session once every reply ended and
//!   `--idle-wait-ms` (default 1,000) passed, each client still streaming: their resident
//!   memory then, less theirs before the first session was made, over N (`--unload-idle`
//!   is passed to the nodes: a session unused that long is unloaded).
//!
//! With `--cancel-probe`, the mock's tool `add` is a script tool that asks for approval, and
//! every client cancels each call as soon as its stream shows the question, through the node
//! it streams from (with several nodes, not the node running the reply: the cancel crosses
//! nodes through the database, and so does the event telling it). It also prints
//! `cancel_ms_p50` / `p99` (from sending the cancel to the client seeing the call
//! finished as cancelled) and `cancels`.
//!
//! With `--spread-ms MS`, session `i` sends its first message `i × MS / N` ms after the start
//! instead of all at once (by default every session starts at the same moment, and with a mock
//! answering in a fixed time they stay in step: each call, cancel and event comes in bursts
//! of N).
//!
//! With `--think-ms MS`, a session waits MS after each reply before it sends the next message,
//! as a user reading the answer would: with `--spread-ms` as long, the messages come at a
//! steady rate of N per MS, and the latencies measure the servers, not a queue for the CPU.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Mutex;

struct Args {
    agentry: String,
    mock_url: String,
    sessions: usize,
    replies: usize,
    mock_pid: Option<String>,
    db: Option<String>,
    nodes: usize,
    cancel_probe: bool,
    spread: Duration,
    think: Duration,
    idle_wait: Duration,
    unload_idle: Option<String>,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        agentry: "target/release/agentry".into(),
        mock_url: String::new(),
        sessions: 1000,
        replies: 2,
        mock_pid: None,
        db: None,
        nodes: 1,
        cancel_probe: false,
        spread: Duration::ZERO,
        think: Duration::ZERO,
        idle_wait: Duration::from_secs(1),
        unload_idle: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--agentry" => args.agentry = value()?,
            "--mock-url" => args.mock_url = value()?,
            "--sessions" => args.sessions = value()?.parse()?,
            "--replies" => args.replies = value()?.parse()?,
            "--mock-pid" => args.mock_pid = Some(value()?),
            "--db" => args.db = Some(value()?),
            "--nodes" => args.nodes = value()?.parse::<usize>()?.max(1),
            "--cancel-probe" => args.cancel_probe = true,
            "--spread-ms" => args.spread = Duration::from_millis(value()?.parse()?),
            "--think-ms" => args.think = Duration::from_millis(value()?.parse()?),
            "--idle-wait-ms" => args.idle_wait = Duration::from_millis(value()?.parse()?),
            "--unload-idle" => args.unload_idle = Some(value()?),
            other => bail!("unknown option {other}"),
        }
    }
    if args.mock_url.is_empty() {
        bail!("--mock-url URL (the mock's /v1) is required");
    }
    if args.nodes > 1 && !args.db.as_deref().is_some_and(|db| db.starts_with("postgres")) {
        bail!("--nodes needs a PostgreSQL --db");
    }
    Ok(args)
}

/// utime + stime of a process, in seconds (clock ticks of 10 ms).
fn cpu_s(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn peak_rss_kb(pid: &str) -> Option<f64> {
    status_kb(pid, "VmHWM:")
}

fn rss_kb(pid: &str) -> Option<f64> {
    status_kb(pid, "VmRSS:")
}

fn status_kb(pid: &str, field: &str) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[derive(Default)]
struct Tally {
    lost: AtomicU64,
    steps: AtomicU64,
    delivery_ms: Mutex<Vec<f64>>,
    cancel_ms: Mutex<Vec<f64>>,
}

/// Where a client sends its cancels (`--cancel-probe`).
#[derive(Clone)]
struct Canceller {
    client: reqwest::Client,
    /// `{base}/v1/sessions/{id}` on the node the client streams from.
    session_url: String,
}

/// The script tool of `--cancel-probe`: `add`, which asks for approval first (so a call waits,
/// holding nothing, until its client cancels it).
const ASKING_ADD: &str = "AssistantTool.registerApprovalRequest(async () => ({ title: \"Add\", message: \"Add the numbers?\", primaryButtonLabel: \"Add\", secondaryButtonLabel: \"Skip\" }));\nAssistantTool.registerExecuteToolWithApproval(async (p) => ({ success: true, message: String(p.a + p.b) }));\n";

/// Reads one session's events; tells `done` at each reply's end.
async fn follow(
    response: reqwest::Response,
    tally: Arc<Tally>,
    done: tokio::sync::mpsc::UnboundedSender<()>,
    canceller: Option<Canceller>,
) {
    let mut cancels_sent: std::collections::HashMap<String, Instant> = std::collections::HashMap::new();
    let mut body = response.bytes_stream();
    let mut pending = String::new();
    let mut last_id = 0u64;
    while let Some(Ok(chunk)) = body.next().await {
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let block: String = pending.drain(..end + 2).collect();
            let mut id = None;
            let mut kind = "";
            let mut data = "";
            let mut at_us = None;
            for line in block.lines() {
                if let Some(v) = line
                    .strip_prefix(":")
                    .map(str::trim_start)
                    .and_then(|c| c.strip_prefix("at_us="))
                {
                    at_us = v.parse::<u64>().ok();
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse::<u64>().ok();
                } else if let Some(v) = line.strip_prefix("event: ") {
                    kind = v;
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = v;
                }
            }
            if kind == "resume" {
                tally.lost.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let Some(id) = id else { continue };
            if id != last_id + 1 {
                tally
                    .lost
                    .fetch_add(id.saturating_sub(last_id + 1), Ordering::Relaxed);
            }
            last_id = id;
            let Ok(event) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if let Some(at_us) = at_us {
                let now_us = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as u64);
                tally
                    .delivery_ms
                    .lock()
                    .await
                    .push(now_us.saturating_sub(at_us) as f64 / 1000.0);
            }
            match event["type"].as_str() {
                Some("message") if event["last"] == true && event["msg"]["role"] == "assistant" => {
                    tally.steps.fetch_add(1, Ordering::Relaxed);
                }
                Some("reply_finished") => {
                    let _ = done.send(());
                }
                Some("approval_requested") => {
                    if let (Some(canceller), Some(call)) = (&canceller, event["call_id"].as_str()) {
                        cancels_sent.insert(call.to_owned(), Instant::now());
                        let url = format!("{}/calls/{call}/cancel", canceller.session_url);
                        let client = canceller.client.clone();
                        tokio::spawn(async move {
                            if let Err(e) = client.post(url).send().await {
                                eprintln!("a cancel was not sent: {e}");
                            }
                        });
                    }
                }
                Some("tool_finished") if event["state"]["state"] == "cancelled" => {
                    if let Some(sent) = event["call_id"].as_str().and_then(|c| cancels_sent.remove(c)) {
                        tally
                            .cancel_ms
                            .lock()
                            .await
                            .push(sent.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                _ => {}
            }
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("serve-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = match &args.db {
        Some(db) => db.clone(),
        None => dir.join("load.db").display().to_string(),
    };
    let tools = if args.cancel_probe {
        let add = dir.join("tools").join("add");
        std::fs::create_dir_all(&add)?;
        std::fs::write(
            add.join("assistant_tool.json"),
            json!({
                "id": "add",
                "description": "Adds two numbers, once approved.",
                "parameters": [{"name": "a", "type": "number"}, {"name": "b", "type": "number"}],
                "requireApproval": true
            })
            .to_string(),
        )?;
        std::fs::write(add.join("assistant_tool.js"), ASKING_ADD)?;
        Some(dir.join("tools").display().to_string())
    } else {
        None
    };
    let mut nodes = Vec::new();
    for _ in 0..args.nodes {
        nodes.push(start_node(&args, &db, tools.as_deref())?);
    }
    let pids: Vec<String> = nodes.iter().map(|(server, _)| server.id().to_string()).collect();
    let bases: Vec<String> = nodes.iter().map(|(_, base)| base.clone()).collect();
    let nodes_rss = || -> f64 { pids.iter().map(|pid| rss_kb(pid).unwrap_or(0.0)).sum() };
    let rss_before = nodes_rss();

    let client = reqwest::Client::builder().pool_max_idle_per_host(4096).build()?;
    let tally = Arc::new(Tally::default());
    let mut ids = Vec::with_capacity(args.sessions);
    for n in 0..args.sessions {
        let base = &bases[n % bases.len()];
        let created: Value = serde_json::from_str(
            &client
                .post(format!("{base}/v1/sessions"))
                .header("content-type", "application/json")
                .body(json!({"name": format!("load-{n}")}).to_string())
                .send()
                .await?
                .text()
                .await?,
        )?;
        ids.push(created["id"].as_str().context("no session id")?.to_owned());
    }
    let mut waits = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let base = &bases[(n + 1) % bases.len()];
        let response = client
            .get(format!("{base}/v1/sessions/{id}/events"))
            .send()
            .await?;
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
        let canceller = args.cancel_probe.then(|| Canceller {
            client: client.clone(),
            session_url: format!("{base}/v1/sessions/{id}"),
        });
        tokio::spawn(follow(response, Arc::clone(&tally), done_tx, canceller));
        waits.push(done_rx);
    }

    let servers_cpu = || -> anyhow::Result<f64> {
        pids.iter()
            .map(|pid| cpu_s(pid).context("cannot read a server's CPU time"))
            .sum()
    };
    let cpu0 = servers_cpu()?;
    let mock0 = args.mock_pid.as_deref().and_then(cpu_s);
    let started = Instant::now();
    let mut runs = Vec::new();
    for (n, (id, mut done)) in ids.iter().cloned().zip(waits).enumerate() {
        let client = client.clone();
        let base = bases[n % bases.len()].clone();
        let (replies, think) = (args.replies, args.think);
        let start_at =
            tokio::time::Instant::from_std(started) + args.spread * n as u32 / args.sessions.max(1) as u32;
        runs.push(tokio::spawn(async move {
            tokio::time::sleep_until(start_at).await;
            for r in 0..replies {
                if r > 0 {
                    tokio::time::sleep(think).await;
                }
                let sent = client
                    .post(format!("{base}/v1/sessions/{id}/messages"))
                    .header("content-type", "application/json")
                    .body(json!({"text": format!("add 2 and {r}")}).to_string())
                    .send()
                    .await?;
                if sent.status().as_u16() != 202 {
                    let status = sent.status();
                    bail!(
                        "message refused: {status}: {}",
                        sent.text().await.unwrap_or_default()
                    );
                }
                tokio::time::timeout(Duration::from_secs(600), done.recv())
                    .await
                    .context("a reply did not finish within 600 s")?
                    .context("the event stream ended")?;
            }
            Ok(())
        }));
    }
    for run in runs {
        run.await??;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = servers_cpu()? - cpu0;
    let mock = match (args.mock_pid.as_deref().and_then(cpu_s), mock0) {
        (Some(after), Some(before)) => Some(after - before),
        _ => None,
    };
    let rss_kb: f64 = pids.iter().map(|pid| peak_rss_kb(pid).unwrap_or(0.0)).sum();
    // Every session idle, its client still streaming: what the nodes keep for it.
    tokio::time::sleep(args.idle_wait).await;
    let rss_idle = nodes_rss();
    for (mut server, _) in nodes {
        let _ = Command::new("kill")
            .args(["-TERM", &server.id().to_string()])
            .status();
        let _ = server.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);

    let steps = tally.steps.load(Ordering::Relaxed).max(1) as f64;
    let mut delivery = tally.delivery_ms.lock().await.clone();
    delivery.sort_by(f64::total_cmp);
    let mut cancels = tally.cancel_ms.lock().await.clone();
    cancels.sort_by(f64::total_cmp);
    let mut result = json!({
        "nodes": args.nodes,
        "sessions": args.sessions,
        "replies_per_session": args.replies,
        "spread_ms": args.spread.as_millis() as u64,
        "think_ms": args.think.as_millis() as u64,
        "steps": steps,
        "wall_s": (wall * 100.0).round() / 100.0,
        "events_lost": tally.lost.load(Ordering::Relaxed),
        "delivery_ms_p50": (percentile(&delivery, 0.5) * 100.0).round() / 100.0,
        "delivery_ms_p99": (percentile(&delivery, 0.99) * 100.0).round() / 100.0,
        "server_cpu_ms_per_step": (cpu * 1000.0 / steps * 1000.0).round() / 1000.0,
        "mock_cpu_ms_per_step": mock.map(|m| (m * 1000.0 / steps * 1000.0).round() / 1000.0),
        "server_peak_rss_mb": (rss_kb / 1024.0 * 10.0).round() / 10.0,
        "rss_kb_per_session": (rss_kb / args.sessions as f64).round(),
        "idle_rss_kb_per_session": ((rss_idle - rss_before) / args.sessions as f64).round(),
    });
    if args.cancel_probe {
        result["cancels"] = json!(cancels.len());
        result["cancel_ms_p50"] = json!((percentile(&cancels, 0.5) * 100.0).round() / 100.0);
        result["cancel_ms_p99"] = json!((percentile(&cancels, 0.99) * 100.0).round() / 100.0);
    }
    println!("RESULT {result}");
    Ok(())
}

/// Starts one `agentry serve` on `db` (with the script tools of `tools`); the process and the
/// base URL it listens on.
fn start_node(args: &Args, db: &str, tools: Option<&str>) -> anyhow::Result<(std::process::Child, String)> {
    let mut server = Command::new(&args.agentry);
    server.args([
        "serve",
        "--base-url",
        &args.mock_url,
        "--model",
        "mock",
        "--no-mcp",
        "--max-retries",
        "0",
        "--max-iters",
        "20",
        "--addr",
        "127.0.0.1:0",
        "--db",
        db,
    ]);
    if let Some(tools) = tools {
        server.args(["--tools-dir", tools]);
    }
    if let Some(idle) = &args.unload_idle {
        server.args(["--unload-idle", idle]);
    }
    let mut server = server
        .env(
            "AGENTRY_LOG",
            std::env::var("AGENTRY_LOG").unwrap_or_else(|_| "error".into()),
        )
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", args.agentry))?;
    let stderr = server.stderr.take().context("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines.next().context("agentry serve ended before it listened")??;
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().context("no address")?.to_owned();
        }
    };
    // What the node logs (AGENTRY_LOG, errors only by default) goes to our stderr.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("node: {line}");
        }
    });
    Ok((server, base))
}
