//! Benchmark driver: agentry's ReAct loop against `shared/bench/mockllm`.
//!
//! The driver contract of `shared/bench/README.md` ("Adding a peer"): run R requests per agent
//! (C agents as tasks on one thread, like one asyncio loop), each a ReAct loop with the one tool
//! `add(a, b)` over the OpenAI-compatible provider; check every answer, the tool count and the
//! mock's completion counter; print one `RESULT {json}` line with Python `json.dumps` separators.
//!
//! ```text
//! agentry-bench --base-url URL -k K -p P -r R -c C --stream|--no-stream
//!               [--provider openai|anthropic] [--keep-history] [--warmup N] [--threads N]
//!               [--label NAME] [--db FILE|postgres://… [--synchronous full|normal]] [--otel-noop]
//!               [--plan] [--knowledge]
//! ```
//!
//! `--plan` gives each agent a plan notebook (its eight tools and a plan hint made for every
//! model request); `--knowledge` an empty knowledge base (a retrieval before every reply, with
//! nothing found). Both measure what the parts cost a step when they retrieve nothing. The
//! mock reads the request's last user message as the start of the task, so the plan hint (a
//! user message last in the request) is taken off after the agent made it, in every run alike.
//!
//! `--provider anthropic` runs the loop over the Anthropic Messages provider
//! (`AnthropicChatModel`, prompt caching on) instead of the OpenAI-compatible one, everything
//! else the same; `--base-url` is then an Anthropic endpoint, e.g. the `anthropic-adapter`
//! (this crate) in front of the mock.
//!
//! With `--db`, each agent keeps its conversation in a durable session of that SQLite file, or
//! of the PostgreSQL database at a `postgres://` URL (`agentry-store`: every message committed
//! before the loop goes on, a call record per tool call), to measure what durability costs per
//! step.
//!
//! In stream mode the driver reads the reply's event stream (every cumulative message chunk),
//! as a terminal or a web page would; in non-stream mode it awaits the reply.
//!
//! With `--otel-noop`, the GenAI trace spans are on: the OpenTelemetry pipeline of
//! `agentry-otel` with its batch processor and an exporter that drops every batch, so the CPU
//! per step of tracing (spans, attributes, the processor's thread; not the network) shows
//! against a run without the flag, where the agents have no tracer and make no spans. The result's `"tracing"` says which (`off` or `otel-noop`). With the mock of
//! `shared/bench` at `$MOCK_URL`:
//!
//! ```text
//! cargo build --release -p agentry-bench
//! B=target/release/agentry-bench; A="--base-url $MOCK_URL -k 5 -r 200 --no-stream --warmup 5"
//! $B $A --label off; $B $A --label otel --otel-noop   # compare cpu_ms_per_iter (≤ +10 %)
//! ```

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agentry::agent::ReActAgent;
use agentry::message::Msg;
use agentry::model::{
    AnthropicChatModel, AnthropicConfig, ChatModel, ChatRequest, ChatStream, OpenAiChatModel, OpenAiConfig,
    RetryPolicy,
};
use agentry::plan::PlanNotebook;
use agentry::tool::{Toolkit, tool};
use agentry_store::{
    CallRecorder, PostgresStore, SessionMemory, SessionStore, SqliteOptions, SqliteStore,
    StoredKnowledgeBase, Synchronous,
};
use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::{Value, json};

const SYS_PROMPT: &str = "You are a helpful assistant. Use the add tool when asked to add numbers.";

/// Tool executions, counted inside the tool body.
static TOOL_CALLS: AtomicU64 = AtomicU64::new(0);

/// Add two integers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    TOOL_CALLS.fetch_add(1, Ordering::Relaxed);
    a + b
}

#[derive(Debug)]
struct Args {
    base_url: String,
    k: u64,
    p: u64,
    r: u64,
    c: u64,
    stream: bool,
    anthropic: bool,
    keep_history: bool,
    warmup: u64,
    threads: usize,
    label: String,
    db: Option<String>,
    synchronous: Synchronous,
    otel_noop: bool,
    plan: bool,
    knowledge: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        base_url: String::new(),
        k: 5,
        p: 1,
        r: 20,
        c: 1,
        stream: true,
        anthropic: false,
        keep_history: false,
        warmup: 1,
        threads: 1,
        label: "agentry".into(),
        db: None,
        synchronous: Synchronous::Full,
        otel_noop: false,
        plan: false,
        knowledge: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--base-url" => args.base_url = value()?,
            "--steps" | "-k" => args.k = value()?.parse()?,
            "--parallel" | "-p" => args.p = value()?.parse()?,
            "--requests" | "-r" => args.r = value()?.parse()?,
            "--concurrency" | "-c" => args.c = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--threads" => args.threads = value()?.parse()?,
            "--label" => args.label = value()?,
            "--stream" => args.stream = true,
            "--no-stream" => args.stream = false,
            "--provider" => {
                args.anthropic = match value()?.as_str() {
                    "openai" => false,
                    "anthropic" => true,
                    other => bail!("--provider openai|anthropic, not {other}"),
                }
            }
            "--keep-history" => args.keep_history = true,
            "--otel-noop" => args.otel_noop = true,
            "--plan" => args.plan = true,
            "--knowledge" => args.knowledge = true,
            "--db" => args.db = Some(value()?),
            "--synchronous" => {
                args.synchronous = match value()?.as_str() {
                    "full" => Synchronous::Full,
                    "normal" => Synchronous::Normal,
                    other => bail!("--synchronous full|normal, not {other}"),
                }
            }
            "-h" | "--help" => {
                println!(
                    "agentry-bench --base-url URL -k K -p P -r R -c C --stream|--no-stream \
                     [--provider openai|anthropic] [--keep-history] [--warmup N] [--threads N] [--label NAME] \
                     [--db FILE [--synchronous full|normal]] [--otel-noop] [--plan] [--knowledge]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if args.base_url.is_empty() {
        bail!("--base-url is required");
    }
    args.c = args.c.max(1);
    Ok(args)
}

/// The model with the plan hint taken off the end of each request (see the module's doc).
struct WithoutHint<M>(M);

impl<M: ChatModel> ChatModel for WithoutHint<M> {
    fn model_name(&self) -> &str {
        self.0.model_name()
    }

    fn is_streaming(&self) -> bool {
        self.0.is_streaming()
    }

    fn chat(&self, mut request: ChatRequest) -> ChatStream {
        if request
            .messages
            .last()
            .and_then(Msg::text)
            .is_some_and(|t| t.starts_with("<system-hint>"))
        {
            request.messages.pop();
        }
        self.0.chat(request)
    }
}

async fn make_agent(
    args: &Args,
    index: u64,
    store: Option<&Arc<dyn SessionStore>>,
    knowledge: Option<&SqliteStore>,
) -> anyhow::Result<ReActAgent> {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool)?;
    let mut builder = ReActAgent::builder();
    builder = if args.anthropic {
        let config = AnthropicConfig::new("mock-model")
            .base_url(&args.base_url)
            .api_key("bench")
            .prompt_caching(true)
            .stream(args.stream)
            .retry(RetryPolicy::none());
        builder.model(WithoutHint(AnthropicChatModel::new(config)?))
    } else {
        let config = OpenAiConfig::new("mock-model")
            .base_url(&args.base_url)
            .stream(args.stream)
            .retry(RetryPolicy::none());
        builder.model(WithoutHint(OpenAiChatModel::new(config)?))
    };
    if args.plan {
        builder = builder.plan_notebook(PlanNotebook::new());
    }
    if let Some(store) = knowledge {
        let base = StoredKnowledgeBase::open(store.clone(), "bench", None)
            .await?
            .context("the bench's knowledge base")?;
        builder = builder.knowledge(base).rewrite_query(false);
    }
    if let Some(store) = store {
        let store = Arc::clone(store);
        let memory =
            Arc::new(SessionMemory::open_or_create(store, &format!("bench-{index}"), &json!({})).await?);
        builder = builder
            .memory(Arc::clone(&memory))
            .hook("session-calls", CallRecorder::new(memory));
    }
    Ok(builder
        .name("bench")
        .sys_prompt(SYS_PROMPT)
        .toolkit(toolkit)
        .max_iters(args.k as usize + 5)
        .parallel_tool_calls(args.p > 1)
        .build()?)
}

/// One user request through the loop; returns the answer text.
async fn run_one(agent: &ReActAgent, text: String, stream: bool) -> anyhow::Result<String> {
    let reply = if stream {
        let mut run = agent.start_reply(Msg::user(text));
        let mut chunks = 0u64;
        while run.next().await.is_some() {
            chunks += 1;
        }
        std::hint::black_box(chunks);
        run.finish().await?
    } else {
        agent.reply(Msg::user(text)).await?
    };
    Ok(reply.text().unwrap_or_default())
}

/// CPU time (s) of every thread of a process, from `/proc/<pid>/task/*/schedstat` (ns).
fn process_cpu_s(pid: &str) -> Option<f64> {
    let mut total: u64 = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("schedstat");
        let text = std::fs::read_to_string(path).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total as f64 / 1e9)
}

fn server_cpu_s() -> Option<f64> {
    process_cpu_s(&std::env::var("MOCK_PID").ok()?)
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The mock's `/stats`, read with a plain blocking socket rather than the client under test.
fn server_completions(base_url: &str) -> Option<u64> {
    let hostport = base_url.strip_prefix("http://")?.split('/').next()?.to_owned();
    let mut socket = std::net::TcpStream::connect(&hostport).ok()?;
    write!(
        socket,
        "GET /stats HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    socket.read_to_string(&mut response).ok()?;
    let body = response.split("\r\n\r\n").nth(1)?;
    let stats: Value = serde_json::from_str(body.trim()).ok()?;
    stats.get("completions")?.as_u64()
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// `json.dumps` layout: `", "` between items and `": "` after keys.
fn python_json(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), python_json(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

async fn bench(args: Args) -> anyhow::Result<Value> {
    let expected = format!("done after {} steps", args.k);
    let t0 = Instant::now();
    let store: Option<Arc<dyn SessionStore>> = match &args.db {
        Some(url) if url.starts_with("postgres") => Some(Arc::new(PostgresStore::connect(url).await?)),
        Some(path) => Some(Arc::new(SqliteStore::open_with(
            path,
            SqliteOptions::default().synchronous(args.synchronous),
        )?)),
        None => None,
    };
    let knowledge_dir = tempfile::tempdir()?;
    let knowledge = match args.knowledge {
        true => {
            let store = SqliteStore::open(knowledge_dir.path().join("knowledge.db"))?;
            store.open_knowledge_base("bench").await?;
            Some(store)
        }
        false => None,
    };
    let mut agents = Vec::with_capacity(args.c as usize);
    for index in 0..args.c {
        agents.push(make_agent(&args, index, store.as_ref(), knowledge.as_ref()).await?);
    }
    let setup_s = t0.elapsed().as_secs_f64();

    for _ in 0..args.warmup {
        agents[0].memory().clear().await?;
        let out = run_one(&agents[0], "Please add numbers (warm-up).".into(), args.stream).await?;
        if out.trim() != expected {
            bail!("warm-up answer {out:?}, expected {expected:?}");
        }
    }

    let tools0 = TOOL_CALLS.load(Ordering::Relaxed);
    let completions0 = server_completions(&args.base_url);
    let srv0 = server_cpu_s();
    let cpu0 = process_cpu_s("self").context("cannot read /proc/self/task/*/schedstat")?;
    let t1 = Instant::now();
    let workers = agents.iter().enumerate().map(|(idx, agent)| {
        let (r, stream, keep) = (args.r, args.stream, args.keep_history);
        async move {
            let mut answers = Vec::with_capacity(r as usize);
            for j in 0..r {
                if !keep {
                    agent.memory().clear().await?;
                }
                let text = format!("Request {j} from agent {idx}: please add numbers.");
                answers.push(run_one(agent, text, stream).await?);
            }
            anyhow::Ok(answers)
        }
    });
    let results = futures::future::join_all(workers).await;
    let wall = t1.elapsed().as_secs_f64();
    let cpu = process_cpu_s("self").unwrap_or(cpu0) - cpu0;
    let srv = match (srv0, server_cpu_s()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let completions = match (completions0, server_completions(&args.base_url)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };

    let mut answers = Vec::new();
    for r in results {
        answers.extend(r?);
    }
    if let Some(bad) = answers.iter().find(|a| a.trim() != expected) {
        bail!("wrong answer {bad:?}, expected {expected:?}");
    }
    let n_req = args.r * args.c;
    let tools = TOOL_CALLS.load(Ordering::Relaxed) - tools0;
    if tools != n_req * args.k * args.p {
        bail!("{tools} tool executions, expected {}", n_req * args.k * args.p);
    }
    let iters = n_req * (args.k + 1);
    if let Some(calls) = completions
        && calls != iters
    {
        bail!("the mock counted {calls} completions, expected {iters}");
    }
    let it = iters as f64;
    Ok(json!({
        "framework": args.label,
        "store": match (&args.db, args.synchronous) {
            (None, _) => "none",
            (Some(url), _) if url.starts_with("postgres") => "postgres",
            (Some(_), Synchronous::Full) => "sqlite-full",
            (Some(_), _) => "sqlite-normal",
        },
        "version": env!("CARGO_PKG_VERSION"),
        "mode": if args.stream { "stream" } else { "non-stream" },
        "history": if args.keep_history { "keep" } else { "reset" },
        "tracing": if args.otel_noop { "otel-noop" } else { "off" },
        "plan": args.plan,
        "knowledge": args.knowledge,
        "concurrency": args.c,
        "requests": n_req,
        "k": args.k,
        "p": args.p,
        "iters": iters,
        "llm_calls": completions,
        "tool_calls": tools,
        "wall_s": round(wall, 4),
        "ms_per_iter": round(wall * 1000.0 / it, 4),
        "iters_per_s": round(it / wall, 2),
        "cpu_ms_per_iter": round(cpu * 1000.0 / it, 4),
        "srv_cpu_ms_per_iter": srv.map(|s| round(s * 1000.0 / it, 4)),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "import_s": 0.0,
        "setup_s": round(setup_s, 4),
        "runtime": if args.threads > 1 { format!("multi_thread({})", args.threads) } else { "current_thread".into() },
    }))
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    // Installed before the agents are built: each takes the default tracer then.
    let traces = args.otel_noop.then(|| {
        let guard = agentry_otel::init_noop();
        guard.install();
        guard
    });
    let runtime = if args.threads > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    };
    let result = runtime.block_on(bench(args))?;
    eprintln!(
        "{} mode={} C={} iters={} ms/iter={} cpu_ms/iter={} srv_cpu_ms/iter={}",
        result["framework"],
        result["mode"],
        result["concurrency"],
        result["iters"],
        result["ms_per_iter"],
        result["cpu_ms_per_iter"],
        result["srv_cpu_ms_per_iter"]
    );
    println!("RESULT {}", python_json(&result));
    if let Some(traces) = traces {
        traces.shutdown()?;
    }
    Ok(())
}
