//! A controllable tool and a reply driver for the cancellation and approval tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agentry::agent::{AgentError, AgentEvent, AgentHandle, ReActAgent, ReplyRun};
use agentry::message::Msg;
use agentry::tool::{FunctionTool, ToolContext, ToolResponse, ToolStream};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Semaphore, watch};

/// How one probe call behaves, chosen by the model's arguments.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProbeArgs {
    /// Partial chunks streamed before anything else.
    pub chunks: Vec<String>,
    /// Wait for `Probe::release` before returning (otherwise return at once).
    pub wait: bool,
    /// The final text (default "FINAL").
    pub result: Option<String>,
    /// Register `on_cancel` returning `Some(text)`.
    pub partial: Option<String>,
    /// Register `on_cancel` returning `None`.
    pub none_on_cancel: bool,
    /// Register an `on_cancel` that blocks until `Probe::unblock_on_cancel`, then returns "late".
    pub block_on_cancel: bool,
    /// Register an `on_cancel` that panics.
    pub panic_on_cancel: bool,
    /// Register twice: first "first", then `partial` (X3).
    pub register_twice: bool,
    /// Register then clear (X3).
    pub clear: bool,
    /// Send this many progress reports with id "p", then one without id.
    pub reports: usize,
    /// Fail with this error instead of returning.
    pub fail: Option<String>,
    /// Wait for the cancel, then produce this anyway (X11): "chunk" (a chunk, then the final
    /// result), "report", "err" or "panic". `ProbeState::late_done` counts those that did.
    pub late: Option<String>,
}

/// Counters and gates shared by every call of a probe.
pub struct ProbeState {
    pub runs: AtomicUsize,
    pub on_cancel_runs: AtomicUsize,
    pub on_cancel_saw_cancelled: AtomicBool,
    pub user_actions: Mutex<Vec<Option<agentry::tool::UserAction>>>,
    /// The call ids whose `on_cancel` ran, in order.
    pub on_cancel_calls: Mutex<Vec<String>>,
    /// The call ids whose registered callbacks were dropped (run, replaced, or cleared away).
    pub callbacks_released: Mutex<Vec<String>>,
    /// Whether `is_cancelled()` was false when each body started (X1), by call id.
    pub cancelled_at_start: Mutex<Vec<(String, bool)>>,
    started: Mutex<Option<watch::Sender<usize>>>,
    on_cancel_entered: watch::Sender<usize>,
    late_done: watch::Sender<usize>,
    release: Semaphore,
    unblock: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    unblock_rx: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

/// The probe: `probe.tool("name")` makes a tool, the test drives it through the state.
#[derive(Clone)]
pub struct Probe {
    pub state: Arc<ProbeState>,
    started_rx: watch::Receiver<usize>,
}

/// Notes, when dropped, that the callback holding it is gone.
struct Released(Arc<ProbeState>, String);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.callbacks_released.lock().unwrap().push(self.1.clone());
    }
}

impl Default for Probe {
    fn default() -> Self {
        Probe::new()
    }
}

impl Probe {
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(0);
        let (unblock_tx, unblock_rx) = std::sync::mpsc::channel();
        let state = Arc::new(ProbeState {
            runs: AtomicUsize::new(0),
            on_cancel_runs: AtomicUsize::new(0),
            on_cancel_saw_cancelled: AtomicBool::new(false),
            user_actions: Mutex::new(Vec::new()),
            on_cancel_calls: Mutex::new(Vec::new()),
            callbacks_released: Mutex::new(Vec::new()),
            cancelled_at_start: Mutex::new(Vec::new()),
            started: Mutex::new(Some(tx)),
            on_cancel_entered: watch::channel(0).0,
            late_done: watch::channel(0).0,
            release: Semaphore::new(0),
            unblock: Mutex::new(Some(unblock_tx)),
            unblock_rx: Mutex::new(Some(unblock_rx)),
        });
        Probe {
            state,
            started_rx: rx,
        }
    }

    /// Waits until `n` bodies started (and registered their `on_cancel`).
    pub async fn started(&self, n: usize) {
        let mut rx = self.started_rx.clone();
        super::within(&format!("{n} probe bodies started"), rx.wait_for(|s| *s >= n))
            .await
            .unwrap();
    }

    /// Waits until `n` `on_cancel` callbacks were entered (they may still be running).
    pub async fn on_cancel_entered(&self, n: usize) {
        let mut rx = self.state.on_cancel_entered.subscribe();
        super::within(&format!("{n} on_cancel entered"), rx.wait_for(|s| *s >= n))
            .await
            .unwrap();
    }

    /// Waits until `n` bodies produced their `late` output after the cancel.
    pub async fn late_done(&self, n: usize) {
        let mut rx = self.state.late_done.subscribe();
        super::within(&format!("{n} late outputs produced"), rx.wait_for(|s| *s >= n))
            .await
            .unwrap();
    }

    pub fn on_cancel_calls(&self) -> Vec<String> {
        self.state.on_cancel_calls.lock().unwrap().clone()
    }

    pub fn callbacks_released(&self) -> Vec<String> {
        self.state.callbacks_released.lock().unwrap().clone()
    }

    /// Lets one waiting body return.
    pub fn release(&self) {
        self.state.release.add_permits(1);
    }

    /// Lets a blocked `on_cancel` return.
    pub fn unblock_on_cancel(&self) {
        if let Some(tx) = self.state.unblock.lock().unwrap().as_ref() {
            let _ = tx.send(());
        }
    }

    pub fn runs(&self) -> usize {
        self.state.runs.load(Ordering::SeqCst)
    }

    pub fn on_cancel_runs(&self) -> usize {
        self.state.on_cancel_runs.load(Ordering::SeqCst)
    }

    pub fn tool(&self, name: &str) -> FunctionTool {
        let state = Arc::clone(&self.state);
        FunctionTool::new(
            name,
            "A test tool whose behaviour the arguments choose.",
            json!({"type": "object"}),
            move |args, ctx| {
                let args = serde_json::from_value(serde_json::Value::Object(args)).unwrap_or_default();
                body(Arc::clone(&state), args, ctx)
            },
        )
    }
}

fn register(state: &Arc<ProbeState>, args: &ProbeArgs, ctx: &ToolContext) {
    let counting = |state: &Arc<ProbeState>, ctx: &ToolContext| {
        let released = Released(Arc::clone(state), ctx.call_id().to_string());
        let state = Arc::clone(state);
        let ctx = ctx.clone();
        move || {
            let _released = released;
            state.on_cancel_runs.fetch_add(1, Ordering::SeqCst);
            state
                .on_cancel_calls
                .lock()
                .unwrap()
                .push(ctx.call_id().to_string());
            state
                .on_cancel_saw_cancelled
                .store(ctx.is_cancelled(), Ordering::SeqCst);
            state.on_cancel_entered.send_modify(|n| *n += 1);
        }
    };
    if args.register_twice {
        let count = counting(state, ctx);
        ctx.set_on_cancel(move || {
            count();
            Some("first".into())
        });
    }
    if let Some(text) = args.partial.clone() {
        let count = counting(state, ctx);
        ctx.set_on_cancel(move || {
            count();
            Some(text)
        });
    }
    if args.none_on_cancel {
        let count = counting(state, ctx);
        ctx.set_on_cancel(move || {
            count();
            None
        });
    }
    if args.block_on_cancel {
        let count = counting(state, ctx);
        let rx = state.unblock_rx.lock().unwrap().take();
        ctx.set_on_cancel(move || {
            count();
            if let Some(rx) = rx {
                let _ = rx.recv();
            }
            Some("late".into())
        });
    }
    if args.panic_on_cancel {
        let count = counting(state, ctx);
        ctx.set_on_cancel(move || {
            count();
            panic!("on_cancel exploded")
        });
    }
    if args.clear {
        ctx.clear_on_cancel();
    }
}

fn body(state: Arc<ProbeState>, args: ProbeArgs, ctx: ToolContext) -> ToolStream {
    state.runs.fetch_add(1, Ordering::SeqCst);
    state
        .cancelled_at_start
        .lock()
        .unwrap()
        .push((ctx.call_id().to_string(), ctx.is_cancelled()));
    state.user_actions.lock().unwrap().push(ctx.user_action());
    register(&state, &args, &ctx);
    for _ in 0..args.reports {
        ctx.report("working", Some("p"));
    }
    if args.reports > 0 {
        ctx.report("almost done", None);
    }
    if let Some(tx) = state.started.lock().unwrap().as_ref() {
        tx.send_modify(|n| *n += 1);
    }
    if let Some(late) = args.late {
        return late_output(state, ctx, late);
    }
    let chunks: Vec<_> = args
        .chunks
        .iter()
        .map(|c| Ok(ToolResponse::partial(c.clone())))
        .collect();
    let result = args.result.unwrap_or_else(|| "FINAL".into());
    let fail = args.fail;
    let wait = args.wait;
    futures::stream::iter(chunks)
        .chain(futures::stream::once(async move {
            if wait {
                state.release.acquire().await.unwrap().forget();
            }
            match fail {
                Some(error) => Err(agentry::tool::ToolError::msg(error)),
                None => Ok(ToolResponse::text(result)),
            }
        }))
        .boxed()
}

/// Waits for the cancel, then produces `late` anyway; counts it in `late_done` just before the
/// last thing it produces.
fn late_output(state: Arc<ProbeState>, ctx: ToolContext, late: String) -> ToolStream {
    let done = move || state.late_done.send_modify(|n| *n += 1);
    futures::stream::once(async move {
        ctx.cancelled().await;
        ctx.report("LATE REPORT", Some("late"));
        ctx.report("LATE REPORT", None);
        (ctx, late)
    })
    .flat_map(move |(ctx, late)| {
        let done = done.clone();
        let last = futures::stream::once(async move {
            done();
            drop(ctx);
            match late.as_str() {
                "err" => Err(agentry::tool::ToolError::msg("LATE ERROR")),
                "panic" => panic!("LATE PANIC"),
                _ => Ok(ToolResponse::text("LATE RESULT")),
            }
        });
        futures::stream::iter([Ok(ToolResponse::partial("LATE CHUNK"))]).chain(last)
    })
    .boxed()
}

/// A reply on its own task, read event by event while the test acts.
pub struct Driver {
    pub run: ReplyRun,
    pub seen: Vec<AgentEvent>,
}

impl Driver {
    pub fn new(run: ReplyRun) -> Self {
        Driver {
            run,
            seen: Vec::new(),
        }
    }

    /// The agent's handle, and a driver of its reply to the user message "go".
    pub fn go(agent: &ReActAgent) -> (AgentHandle, Driver) {
        (agent.handle(), Driver::new(agent.start_reply(Msg::user("go"))))
    }

    /// Reads events until one matches.
    pub async fn wait_for(&mut self, what: &str, matches: impl Fn(&AgentEvent) -> bool) -> AgentEvent {
        loop {
            let event = tokio::time::timeout(super::DEADLINE, self.run.next_event())
                .await
                .unwrap_or_else(|_| panic!("no event {what} in time; seen: {:#?}", self.seen))
                .unwrap_or_else(|| panic!("the reply ended before {what}; seen: {:#?}", self.seen));
            self.seen.push(event.clone());
            if matches(&event) {
                return event;
            }
        }
    }

    /// Reads the remaining events, then the result.
    pub async fn finish(mut self) -> (Result<Msg, AgentError>, Vec<AgentEvent>) {
        while let Some(event) = super::within("the reply's events end", self.run.next_event()).await {
            self.seen.push(event);
        }
        let seen = std::mem::take(&mut self.seen);
        (super::within("the reply ends", self.run.finish()).await, seen)
    }
}

/// Whether an event is `ToolFinished` for `call_id`.
pub fn finished(call_id: &str) -> impl Fn(&AgentEvent) -> bool + '_ {
    move |e| matches!(e, AgentEvent::ToolFinished { call_id: id, .. } if id == call_id)
}

/// Whether an event is `ApprovalRequested` (asking) for `call_id`.
pub fn asked(call_id: &str) -> impl Fn(&AgentEvent) -> bool + '_ {
    move |e| matches!(e, AgentEvent::ApprovalRequested { call_id: id, automatic: false, .. } if id == call_id)
}
