//! What the engine gives a script beyond the language: the natives behind `AssistantTool`,
//! timers, `fetch`, `console`; and how the event loop answers cancels and finished fetches.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentry::tool::ToolContext;
use rquickjs::function::Opt;
use rquickjs::{Context, Ctx, Function, Object, Persistent, Promise};
use serde::Serialize;

use super::Signals;

/// How long the `onCancel` hook waits for the script's answer. The agent stops waiting sooner
/// (its `on_cancel` budget); this only bounds the hook's thread.
const ON_CANCEL_WAIT: Duration = Duration::from_secs(2);
/// The largest response body `fetch` reads.
const FETCH_BODY_LIMIT: usize = 10 << 20;
/// How long a `fetch` may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// What wakes a run's event loop.
pub(crate) enum Wake {
    /// A cancel: answer with what `onCancel` returns.
    Cancel(mpsc::SyncSender<Option<String>>),
    /// A `fetch` ended.
    Fetched(u64, Result<Fetched, String>),
    /// The result is no longer wanted (see [`Signals::abandon`]).
    Stop,
}

/// A `fetch` response, read whole.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Fetched {
    status: u16,
    status_text: String,
    url: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// What the natives need from outside the engine.
pub(crate) struct Natives {
    pub ctx: Option<ToolContext>,
    pub signals: Arc<Signals>,
    pub wake: mpsc::Sender<Wake>,
    /// Present when the run may use the network.
    pub tokio: Option<tokio::runtime::Handle>,
}

struct Timer {
    id: u64,
    callback: Persistent<Function<'static>>,
    repeat: Option<Duration>,
}

type Resolvers = (Persistent<Function<'static>>, Persistent<Function<'static>>);

#[derive(Default)]
struct State {
    timers: BTreeMap<(Instant, u64), Timer>,
    /// When each live timer is due, by id.
    due: HashMap<u64, Instant>,
    next_id: u64,
    fetches: HashMap<u64, Resolvers>,
}

/// A run's timers and fetches in flight.
pub(crate) struct Host {
    state: Rc<RefCell<State>>,
}

impl Drop for Host {
    /// The natives hold the state too, and the engine holds the natives: the JS values in it
    /// must go before the runtime does, which refuses to end with values still held.
    fn drop(&mut self) {
        let mut state = self.state.borrow_mut();
        state.timers.clear();
        state.due.clear();
        state.fetches.clear();
    }
}

impl Host {
    pub(crate) fn new() -> Self {
        Host {
            state: Rc::new(RefCell::new(State::default())),
        }
    }

    /// The object of natives the bootstrap builds the globals on.
    pub(crate) fn install<'js>(&self, js: &Ctx<'js>, natives: Natives) -> rquickjs::Result<Object<'js>> {
        let native = Object::new(js.clone())?;
        let Natives {
            ctx,
            signals,
            wake,
            tokio,
        } = natives;

        let call = ctx.clone();
        native.set(
            "isCancelled",
            Function::new(js.clone(), move || {
                call.as_ref().is_some_and(ToolContext::is_cancelled)
            })?,
        )?;
        let call = ctx.clone();
        native.set(
            "report",
            Function::new(js.clone(), move |message: String, id: Opt<String>| {
                if let Some(call) = &call {
                    call.report(message, id.0.as_deref());
                }
            })?,
        )?;
        let call = ctx.clone();
        let cancel_wake = wake.clone();
        native.set(
            "onCancelSet",
            Function::new(js.clone(), move |registered: bool| {
                let Some(call) = &call else { return };
                signals.set_on_cancel_registered(registered);
                if !registered {
                    call.clear_on_cancel();
                    return;
                }
                let wake = cancel_wake.clone();
                let signals = Arc::clone(&signals);
                call.set_on_cancel(move || {
                    let (answer, answered) = mpsc::sync_channel(1);
                    if wake.send(Wake::Cancel(answer)).is_err() {
                        return None;
                    }
                    signals.cancel_requested();
                    answered.recv_timeout(ON_CANCEL_WAIT).ok().flatten()
                });
            })?,
        )?;

        let state = Rc::clone(&self.state);
        native.set(
            "setTimer",
            Function::new(
                js.clone(),
                move |js: Ctx<'js>, callback: Function<'js>, ms: f64, repeat: bool| {
                    let delay = Duration::from_secs_f64((ms / 1000.0).clamp(0.0, 1e9));
                    let mut state = state.borrow_mut();
                    state.next_id += 1;
                    let id = state.next_id;
                    let at = Instant::now() + delay;
                    state.due.insert(id, at);
                    state.timers.insert(
                        (at, id),
                        Timer {
                            id,
                            callback: Persistent::save(&js, callback),
                            repeat: repeat.then_some(delay.max(Duration::from_millis(1))),
                        },
                    );
                    id
                },
            )?,
        )?;
        let state = Rc::clone(&self.state);
        native.set(
            "clearTimer",
            Function::new(js.clone(), move |id: u64| {
                let mut state = state.borrow_mut();
                if let Some(at) = state.due.remove(&id) {
                    state.timers.remove(&(at, id));
                }
            })?,
        )?;
        let tool = ctx.as_ref().map(|c| c.tool_name().to_owned()).unwrap_or_default();
        native.set(
            "log",
            Function::new(js.clone(), move |level: String, text: String| {
                match level.as_str() {
                    "error" => tracing::error!(tool = %tool, "{text}"),
                    "warn" => tracing::warn!(tool = %tool, "{text}"),
                    "debug" => tracing::debug!(tool = %tool, "{text}"),
                    _ => tracing::info!(tool = %tool, "{text}"),
                }
            })?,
        )?;
        if let Some(tokio) = tokio {
            let state = Rc::clone(&self.state);
            let client = http_client();
            native.set(
                "fetch",
                Function::new(
                    js.clone(),
                    move |js: Ctx<'js>, url: String, method: String, headers: String, body: Opt<String>| {
                        let (promise, resolve, reject) = Promise::new(&js)?;
                        let mut state = state.borrow_mut();
                        state.next_id += 1;
                        let id = state.next_id;
                        state.fetches.insert(
                            id,
                            (Persistent::save(&js, resolve), Persistent::save(&js, reject)),
                        );
                        let wake = wake.clone();
                        let client = client.clone();
                        tokio.spawn(async move {
                            let fetched = match &client {
                                Ok(client) => fetch(client, url, method, headers, body.0).await,
                                Err(e) => Err(e.clone()),
                            };
                            let _ = wake.send(Wake::Fetched(id, fetched));
                        });
                        rquickjs::Result::Ok(promise)
                    },
                )?,
            )?;
        }
        Ok(native)
    }

    /// Whether a timer or a fetch can still wake the script.
    pub(crate) fn waits_for_something(&self) -> bool {
        let state = self.state.borrow();
        !state.timers.is_empty() || !state.fetches.is_empty()
    }

    /// When the next timer is due.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.state.borrow().timers.keys().next().map(|(at, _)| *at)
    }

    /// Runs the timers that are due; whether any ran.
    pub(crate) fn fire_due_timers(&self, context: &Context) -> bool {
        let now = Instant::now();
        let due: Vec<Timer> = {
            let mut state = self.state.borrow_mut();
            let later = state.timers.split_off(&(now, u64::MAX));
            let due = std::mem::replace(&mut state.timers, later);
            due.into_values().collect()
        };
        let fired = !due.is_empty();
        for timer in due {
            let repeat = timer.repeat;
            let id = timer.id;
            let callback = timer.callback.clone();
            context.with(|js| {
                if let Ok(callback) = callback.restore(&js)
                    && callback.call::<_, ()>(()).is_err()
                {
                    // An exception in a timer callback is the script's to handle; clear it.
                    let _ = js.catch();
                }
            });
            let mut state = self.state.borrow_mut();
            match repeat {
                // Cleared from its own callback: it stays cleared.
                Some(every) if state.due.contains_key(&id) => {
                    let at = Instant::now() + every;
                    state.due.insert(id, at);
                    state.timers.insert((at, id), timer);
                }
                _ => {
                    state.due.remove(&id);
                }
            }
        }
        fired
    }

    /// Answers a cancel or settles a fetch's promise.
    pub(crate) fn receive(
        &self,
        context: &Context,
        handle: &Persistent<Object<'static>>,
        wake: Wake,
        signals: &Signals,
    ) {
        match wake {
            Wake::Cancel(answer) => {
                signals.on_cancel_started();
                let message = context.with(|js| {
                    let message = handle
                        .clone()
                        .restore(&js)
                        .and_then(|handle| handle.get::<_, Function>("cancelMessage"))
                        .and_then(|cancel_message| cancel_message.call::<_, Option<String>>(()));
                    match message {
                        Ok(message) => message,
                        Err(_) => {
                            // onCancel threw (or ran too long): the standard cancel result.
                            let _ = js.catch();
                            None
                        }
                    }
                });
                signals.on_cancel_ended();
                let _ = answer.send(message);
            }
            Wake::Stop => {}
            Wake::Fetched(id, fetched) => {
                let Some((resolve, reject)) = self.state.borrow_mut().fetches.remove(&id) else {
                    return;
                };
                context.with(|js| {
                    let settled = match fetched {
                        Ok(response) => serde_json::to_string(&response)
                            .map_err(|e| {
                                rquickjs::Error::new_from_js_message("response", "object", e.to_string())
                            })
                            .and_then(|json| js.json_parse(json))
                            .and_then(|value| resolve.restore(&js)?.call::<_, ()>((value,))),
                        Err(message) => reject.restore(&js).and_then(|reject| {
                            let error = rquickjs::Exception::from_message(
                                js.clone(),
                                &format!("fetch failed: {message}"),
                            )?;
                            reject.call::<_, ()>((error,))
                        }),
                    };
                    if settled.is_err() {
                        let _ = js.catch();
                    }
                });
            }
        }
    }
}

fn http_client() -> Result<reqwest::Client, String> {
    // reqwest is built without a default TLS crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())
}

async fn fetch(
    client: &reqwest::Client,
    url: String,
    method: String,
    headers: String,
    body: Option<String>,
) -> Result<Fetched, String> {
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("{method:?} is not an HTTP method"))?;
    let headers: Vec<(String, String)> = serde_json::from_str(&headers).map_err(|e| e.to_string())?;
    let mut request = client.request(method, &url);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let mut response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let url = response.url().to_string();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > FETCH_BODY_LIMIT {
            return Err(format!(
                "the response body is larger than {} MiB",
                FETCH_BODY_LIMIT >> 20
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched {
        status: status.as_u16(),
        status_text: status.canonical_reason().unwrap_or_default().to_owned(),
        url,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
