//! One run of a script: a fresh QuickJS runtime and context (so that two calls never share
//! state, and each has its own memory limit), the tool's code, one registered function called,
//! and an event loop for its promises, timers and fetches until it settles.
//!
//! A run blocks its thread: calls run on Tokio's blocking pool, never on the async workers, so
//! that a script that never yields cannot hold the agent up. The runtime's interrupt handler
//! stops the script when its result is no longer wanted, when its time is up, or, briefly, to
//! answer a cancel (`onCancel`) while the script keeps the engine busy.

mod host;
mod signals;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentry::tool::ToolContext;
use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Function, Object, Persistent, Promise, Runtime, Value};
use serde_json::Value as Json;

use crate::error::ScriptError;
pub(crate) use host::Wake;
use host::{Host, Natives};
pub(crate) use signals::Signals;

/// The code a run evaluates.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    /// Where the code came from, for error messages.
    pub file: Arc<str>,
    /// The tool's JavaScript (TypeScript already stripped).
    pub code: Arc<str>,
    /// JavaScript evaluated before it (helpers shared by every tool).
    pub prelude: Option<Arc<str>>,
}

/// What a run may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes of memory the script's runtime may allocate.
    pub memory: usize,
    /// Whether `fetch` works.
    pub network: bool,
}

/// Which registered function a run calls.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// The execute function, with the user's action when the call was approved.
    Execute {
        action: Option<agentry::tool::UserAction>,
    },
    /// The approval request function.
    ApprovalRequest,
    /// The declined-message function, with the user's reason.
    DeclinedMessage { reason: Option<String> },
    /// Nothing: the names of the functions the code registers.
    Probe,
}

impl Entry {
    fn kind(&self) -> &'static str {
        match self {
            Entry::Execute { .. } => "execute",
            Entry::ApprovalRequest => "approvalRequest",
            Entry::DeclinedMessage { .. } => "declinedMessage",
            Entry::Probe => "probe",
        }
    }
}

/// One run.
pub(crate) struct Run {
    pub program: Program,
    pub limits: Limits,
    pub entry: Entry,
    pub params: Json,
    /// The call's context (execute runs only): `isCancelled`, `report`, `onCancel`.
    pub ctx: Option<ToolContext>,
    pub signals: Arc<Signals>,
    /// Where cancels and finished fetches come in; its sender goes to the `onCancel` hook.
    pub wake: (mpsc::Sender<Wake>, mpsc::Receiver<Wake>),
    /// For `fetch`.
    pub tokio: Option<tokio::runtime::Handle>,
}

/// Native stack the script may use (the blocking pool's threads have 2 MiB).
const STACK: usize = 1 << 20;

/// Runs to the end: the registered function's result as JSON (`None` for `undefined`).
pub(crate) fn run(run: Run) -> Result<Option<Json>, ScriptError> {
    let Run {
        program,
        limits,
        entry,
        params,
        ctx,
        signals,
        wake: (wake_tx, wake_rx),
        tokio,
    } = run;
    let runtime = Runtime::new()?;
    runtime.set_memory_limit(limits.memory);
    runtime.set_max_stack_size(STACK);
    let interrupt = Arc::clone(&signals);
    runtime.set_interrupt_handler(Some(Box::new(move || interrupt.should_interrupt())));
    let context = Context::full(&runtime)?;
    let natives = Natives {
        ctx: ctx.clone(),
        signals: Arc::clone(&signals),
        wake: wake_tx,
        tokio: if limits.network { tokio } else { None },
    };
    let host = Host::new();
    let out_of_memory = || ScriptError::OutOfMemory {
        limit_mib: limits.memory >> 20,
    };

    // Set up, evaluate the code and start the registered function.
    let started: Result<(Persistent<Object<'static>>, Persistent<Promise<'static>>), ScriptError> = context
        .with(|js| {
            let handle = start(&js, &host, natives, &program).map_err(|e| thrown(&js, None, e))?;
            let params_value = js
                .json_parse(params.to_string())
                .map_err(|e| thrown(&js, None, e))?;
            let extra: Value = match &entry {
                Entry::Execute { action: Some(action) } => {
                    let object = Object::new(js.clone())?;
                    object.set("primaryConfirmed", action.primary_confirmed)?;
                    object.set("secondaryConfirmed", action.secondary_confirmed)?;
                    object.into_value()
                }
                Entry::DeclinedMessage { reason: Some(reason) } => {
                    rquickjs::String::from_str(js.clone(), reason)?.into_value()
                }
                _ => Value::new_undefined(js.clone()),
            };
            let run_fn: Function = handle.get("run")?;
            let promise: Promise = run_fn
                .call((entry.kind(), params_value, extra))
                .map_err(|e| thrown(&js, Some(&handle), e))?;
            Ok((Persistent::save(&js, handle), Persistent::save(&js, promise)))
        });
    let (handle, promise) = match started {
        Ok(started) => started,
        Err(e) => return Err(signals.stopped_or(e, out_of_memory)),
    };
    let result = event_loop(
        &runtime,
        &context,
        &host,
        &handle,
        &promise,
        &wake_rx,
        &signals,
        &out_of_memory,
    );
    if ctx.as_ref().is_some_and(ToolContext::is_cancelled) && signals.on_cancel_pending() {
        // Cancelled as the body ended: the agent asks `onCancel` for the result the model
        // reads, and the body's result is ignored. Stay to answer.
        await_cancel(&context, &handle, &host, &wake_rx, &signals);
    }
    result
}

/// Runs jobs, timers and fetches until the promise settles or the run is stopped.
#[allow(clippy::too_many_arguments)]
fn event_loop(
    runtime: &Runtime,
    context: &Context,
    host: &Host,
    handle: &Persistent<Object<'static>>,
    promise: &Persistent<Promise<'static>>,
    wake_rx: &mpsc::Receiver<Wake>,
    signals: &Signals,
    out_of_memory: &dyn Fn() -> ScriptError,
) -> Result<Option<Json>, ScriptError> {
    loop {
        run_jobs(runtime);
        // Cancels first: an `onCancel` must answer even when the body has just ended.
        let mut received = false;
        while let Ok(message) = wake_rx.try_recv() {
            host.receive(context, handle, message, signals);
            received = true;
        }
        if signals.body_stopped() {
            return Err(ScriptError::Stopped);
        }
        if received {
            // What came in (a fetch's response) queued jobs: run them first.
            continue;
        }
        let settled = context.with(|js| settle(&js, handle, promise));
        match settled {
            Ok(Some(result)) => return result.map_err(|e| signals.stopped_or(e, out_of_memory)),
            Ok(None) => {}
            Err(e) => return Err(signals.stopped_or(e, out_of_memory)),
        }
        if host.fire_due_timers(context) {
            continue;
        }
        if !host.waits_for_something() {
            return Err(signals.stopped_or(ScriptError::NeverSettled, out_of_memory));
        }
        let timeout = host
            .next_timer()
            .map(|at| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600));
        let timeout = signals.until_deadline().map_or(timeout, |left| timeout.min(left));
        match wake_rx.recv_timeout(timeout) {
            Ok(message) => host.receive(context, handle, message, signals),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Unreachable while `natives` holds a sender; end rather than spin.
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(ScriptError::Stopped),
        }
        if signals.past_deadline() {
            return Err(ScriptError::Stopped);
        }
    }
}

/// How long a run whose call was cancelled waits for the agent to ask its `onCancel`.
const AWAIT_CANCEL: Duration = Duration::from_millis(500);

/// Answers the cancel request the agent is about to send, if it comes in time.
fn await_cancel(
    context: &Context,
    handle: &Persistent<Object<'static>>,
    host: &Host,
    wake: &mpsc::Receiver<Wake>,
    signals: &Signals,
) {
    let until = Instant::now() + AWAIT_CANCEL;
    while let Ok(message) = wake.recv_timeout(until.saturating_duration_since(Instant::now())) {
        let answered = matches!(message, Wake::Cancel(_) | Wake::Stop);
        host.receive(context, handle, message, signals);
        if answered {
            return;
        }
    }
}

/// Installs the globals, evaluates the prelude and the code; the bootstrap's handle.
fn start<'js>(
    js: &Ctx<'js>,
    host: &Host,
    natives: Natives,
    program: &Program,
) -> rquickjs::Result<Object<'js>> {
    let native = host.install(js, natives)?;
    let bootstrap: Function = js.eval(include_str!("bootstrap.js"))?;
    let handle: Object = bootstrap.call((native,))?;
    if let Some(prelude) = &program.prelude {
        evaluate(js, prelude, "prelude.js")?;
    }
    evaluate(js, &program.code, &program.file)?;
    Ok(handle)
}

fn evaluate(js: &Ctx<'_>, code: &str, file: &str) -> rquickjs::Result<()> {
    let mut options = rquickjs::context::EvalOptions::default();
    options.global = true;
    options.strict = false;
    options.filename = Some(file.to_owned());
    js.eval_with_options::<(), _>(code, options)
}

/// Runs the engine's pending jobs (promise reactions).
fn run_jobs(runtime: &Runtime) {
    loop {
        match runtime.execute_pending_job() {
            Ok(true) => {}
            Ok(false) => return,
            // A job that threw (a rejection nobody handles, or the interrupt): the promises
            // that depend on it say so; go on with the others.
            Err(_) => {}
        }
    }
}

/// The result once the promise settled.
fn settle<'js>(
    js: &Ctx<'js>,
    handle: &Persistent<Object<'static>>,
    promise: &Persistent<Promise<'static>>,
) -> Result<Option<Result<Option<Json>, ScriptError>>, ScriptError> {
    let handle = handle.clone().restore(js)?;
    let promise = promise.clone().restore(js)?;
    match promise.state() {
        PromiseState::Pending => Ok(None),
        PromiseState::Resolved => {
            let value: Value = match promise.result::<Value>() {
                Some(Ok(value)) => value,
                Some(Err(e)) => return Ok(Some(Err(thrown(js, Some(&handle), e)))),
                None => return Ok(None),
            };
            let json: Function = handle.get("json")?;
            let text: Option<String> = json.call((value,)).map_err(|e| thrown(js, Some(&handle), e))?;
            match text {
                None => Ok(Some(Ok(None))),
                Some(text) => match serde_json::from_str(&text) {
                    Ok(value) => Ok(Some(Ok(Some(value)))),
                    Err(e) => Ok(Some(Err(ScriptError::BadResult(e.to_string())))),
                },
            }
        }
        PromiseState::Rejected => {
            let reason: Value = match promise.result::<Value>() {
                Some(Err(rquickjs::Error::Exception)) => js.catch(),
                Some(Ok(value)) => value,
                Some(Err(e)) => return Ok(Some(Err(ScriptError::Engine(e.to_string())))),
                None => return Ok(None),
            };
            Ok(Some(Err(rejection(js, &handle, reason))))
        }
    }
}

/// What a rejection's reason says.
fn rejection<'js>(js: &Ctx<'js>, handle: &Object<'js>, reason: Value<'js>) -> ScriptError {
    if let Some(object) = reason.as_object()
        && let Ok(Some(what)) = object.get::<_, Option<String>>("notRegistered")
    {
        return ScriptError::NotRegistered(what);
    }
    describe(js, handle, reason)
}

/// An engine error as a script error: a thrown exception is described by the script's own
/// `describe` (name, message, stack) when the bootstrap is there.
fn thrown<'js>(js: &Ctx<'js>, handle: Option<&Object<'js>>, error: rquickjs::Error) -> ScriptError {
    match error {
        rquickjs::Error::Exception => {
            let value = js.catch();
            match handle {
                Some(handle) => rejection(js, handle, value),
                None => ScriptError::Threw(plain(&value)),
            }
        }
        rquickjs::Error::Allocation => ScriptError::Threw("out of memory".into()),
        other => ScriptError::Engine(other.to_string()),
    }
}

fn describe<'js>(js: &Ctx<'js>, handle: &Object<'js>, value: Value<'js>) -> ScriptError {
    let described = handle
        .get::<_, Function>("describe")
        .and_then(|describe| describe.call::<_, String>((value.clone(),)));
    match described {
        Ok(text) => ScriptError::Threw(text),
        Err(_) => {
            let _ = js.catch();
            ScriptError::Threw(plain(&value))
        }
    }
}

/// A value as text without running any of its code.
fn plain(value: &Value<'_>) -> String {
    if let Some(exception) = value.as_exception() {
        let message = exception.message().unwrap_or_default();
        return match exception.stack() {
            Some(stack) if !stack.trim().is_empty() => format!("{message}\n{}", stack.trim_end()),
            _ => message,
        };
    }
    if let Some(text) = value.as_string().and_then(|s| s.to_string().ok()) {
        return text;
    }
    format!("a thrown {}", value.type_name())
}
