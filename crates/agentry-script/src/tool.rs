//! A script tool as an Agentry [`Tool`]: its manifest gives the name, description, schema and
//! approval settings; each call runs the code in a fresh engine on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentry::tool::{ApprovalRequest, Tool, ToolContext, ToolError, ToolOptions, ToolResponse, ToolStream};
use futures::StreamExt;
use serde_json::{Map, Value};

use crate::engine::{self, Entry, Limits, Program, Run, Signals};
use crate::error::{LoadError, ScriptError};
use crate::manifest::Manifest;
use crate::source;

/// The manifest's file name.
pub const MANIFEST_FILE: &str = "assistant_tool.json";
/// The code's file names, in the order they are looked for.
pub const CODE_FILES: &[&str] = &["assistant_tool.tsx", "assistant_tool.ts", "assistant_tool.js"];

/// How long the approval request and declined-message functions may take: they run while the
/// agent waits, and must be quick and free of side effects.
const QUICK_RUN: Duration = Duration::from_secs(2);

/// What the user lets script tools do, for every tool loaded with it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScriptSettings {
    /// Tools whose manifest sets `"network": true` may use `fetch` (default: no).
    pub allow_network: bool,
    /// Memory one call may use, in bytes (default 64 MiB).
    pub memory_limit: usize,
    /// JavaScript evaluated before every tool's code (shared helpers), if any.
    pub prelude: Option<String>,
}

impl Default for ScriptSettings {
    fn default() -> Self {
        ScriptSettings {
            allow_network: false,
            memory_limit: 64 << 20,
            prelude: None,
        }
    }
}

impl ScriptSettings {
    /// Lets tools that ask for it use the network.
    pub fn allow_network(mut self, allow: bool) -> Self {
        self.allow_network = allow;
        self
    }

    /// Sets the memory one call may use.
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// JavaScript evaluated before every tool's code.
    pub fn prelude(mut self, code: impl Into<String>) -> Self {
        self.prelude = Some(code.into());
        self
    }
}

/// A tool written as a script: a folder with `assistant_tool.json` and `assistant_tool.tsx`,
/// `.ts` or `.js` that registers its functions on the `AssistantTool` global.
#[derive(Clone)]
pub struct ScriptTool {
    inner: Arc<Inner>,
}

struct Inner {
    manifest: Manifest,
    schema: Value,
    dir: PathBuf,
    program: Program,
    limits: Limits,
    /// The functions the code registers (`execute`, `approvalRequest`, ...).
    registered: Vec<String>,
    /// Calls whose script still runs.
    running: Arc<Running>,
}

#[derive(Default)]
struct Running {
    count: std::sync::Mutex<usize>,
    changed: std::sync::Condvar,
}

impl Running {
    fn add(&self, delta: isize) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *count = count.saturating_add_signed(delta);
        self.changed.notify_all();
    }
}

/// Counts a run until its thread ends.
struct RunningGuard(Arc<Running>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.add(-1);
    }
}

impl std::fmt::Debug for ScriptTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptTool")
            .field("id", &self.inner.manifest.id)
            .field("dir", &self.inner.dir)
            .finish()
    }
}

impl ScriptTool {
    /// Loads the tool in `dir`: reads the manifest, checks its schema, strips the code's types
    /// and evaluates it once to see what it registers.
    pub fn load(dir: &Path, settings: &ScriptSettings) -> Result<ScriptTool, LoadError> {
        let manifest_path = dir.join(MANIFEST_FILE);
        let manifest_text = read(&manifest_path)?;
        let manifest_file = manifest_path.display().to_string();
        let manifest = Manifest::parse(&manifest_text, &manifest_file)?;
        let schema = manifest.schema(&manifest_file)?;
        let code_path = CODE_FILES
            .iter()
            .map(|name| dir.join(name))
            .find(|path| path.is_file())
            .ok_or_else(|| LoadError::NoCode { dir: dir.to_owned() })?;
        let code = source::to_javascript(&read(&code_path)?, &code_path)?;
        let code_file = code_path.display().to_string();
        let program = Program {
            file: code_file.clone().into(),
            code: code.into(),
            prelude: settings.prelude.as_deref().map(Arc::from),
        };
        let limits = Limits {
            memory: settings.memory_limit,
            network: manifest.network && settings.allow_network,
        };
        let registered = probe(&program, limits).map_err(|e| LoadError::Code {
            file: code_file.clone(),
            detail: e.to_string(),
        })?;
        if !registered
            .iter()
            .any(|r| r == "execute" || r == "executeWithApproval")
        {
            return Err(LoadError::Code {
                file: code_file,
                detail: "it registers no execute function (AssistantTool.registerExecuteTool or registerExecuteToolWithApproval)"
                    .into(),
            });
        }
        Ok(ScriptTool {
            inner: Arc::new(Inner {
                manifest,
                schema,
                dir: dir.to_owned(),
                program,
                limits,
                registered,
                running: Arc::default(),
            }),
        })
    }

    /// The tool's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// The folder it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// How many of its calls have a script still running (a cancelled call's script may run on
    /// briefly, until it notices or is stopped).
    pub fn running(&self) -> usize {
        *self.inner.running.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks until no script of this tool runs, at most `timeout`; whether none does.
    pub fn wait_until_idle(&self, timeout: Duration) -> bool {
        let count = self.inner.running.count.lock().unwrap_or_else(|e| e.into_inner());
        let (count, _) = self
            .inner
            .running
            .changed
            .wait_timeout_while(count, timeout, |count| *count > 0)
            .unwrap_or_else(|e| e.into_inner());
        *count == 0
    }

    /// Whether its calls may use `fetch`.
    pub fn network(&self) -> bool {
        self.inner.limits.network
    }

    /// How to register it: approval as the manifest says, the approval request and declined
    /// message from the code, the manifest's timeout.
    pub fn options(&self) -> ToolOptions {
        let manifest = &self.inner.manifest;
        let mut options = ToolOptions::new()
            .require_approval(manifest.require_approval)
            .auto_approve(manifest.auto_approve);
        if manifest.require_approval && self.registers("approvalRequest") {
            let tool = self.clone();
            options = options.approval_request(move |args| tool.approval_request(args));
        }
        if self.registers("declinedMessage") {
            let tool = self.clone();
            options = options.declined_message(move |args, reason| tool.declined_message(args, reason));
        }
        if let Some(seconds) = manifest.timeout_seconds {
            options = options.timeout(Duration::from_secs_f64(seconds));
        }
        options
    }

    fn registers(&self, function: &str) -> bool {
        self.inner.registered.iter().any(|r| r == function)
    }

    /// Runs `entry` on this thread, briefly, without network or call context.
    fn run_quick(&self, entry: Entry, args: &Map<String, Value>) -> Result<Option<Value>, ScriptError> {
        run_quick(
            &self.inner.program,
            self.inner.limits,
            entry,
            Value::Object(args.clone()),
        )
    }

    /// The code's approval request (A5), as the dialog shows it.
    fn approval_request(&self, args: &Map<String, Value>) -> Result<ApprovalRequest, String> {
        let value = self
            .run_quick(Entry::ApprovalRequest, args)
            .map_err(|e| e.to_string())?;
        let Some(Value::Object(fields)) = value else {
            return Err("the approval request function returned no { message }".into());
        };
        let text = |key: &str| fields.get(key).and_then(Value::as_str).map(str::to_owned);
        let Some(message) = text("message") else {
            return Err("the approval request has no message".into());
        };
        let mut request = ApprovalRequest::new(message);
        request.title = text("title");
        request.primary_label = text("primaryButtonLabel");
        request.secondary_label = text("secondaryButtonLabel");
        // A preview button runs script code when pressed: there is no such button here, so
        // its label says what there would be to look at.
        request.preview = fields
            .get("previewButton")
            .and_then(|button| button.get("label"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(request)
    }

    /// The code's declined message (A10), or the standard one.
    fn declined_message(&self, args: &Map<String, Value>, reason: Option<&str>) -> String {
        let entry = Entry::DeclinedMessage {
            reason: reason.map(str::to_owned),
        };
        match self.run_quick(entry, args) {
            Ok(Some(Value::String(text))) if !text.trim().is_empty() => text,
            Ok(_) => agentry::tool::declined_text(reason),
            Err(e) => {
                tracing::warn!(tool = %self.inner.manifest.id, error = %e, "the declined message function failed");
                agentry::tool::declined_text(reason)
            }
        }
    }
}

impl Tool for ScriptTool {
    fn name(&self) -> &str {
        &self.inner.manifest.id
    }

    fn description(&self) -> &str {
        &self.inner.manifest.description
    }

    fn parameters(&self) -> Value {
        self.inner.schema.clone()
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            let error = ToolError::msg("a script tool runs within a Tokio runtime");
            return futures::stream::once(async move { Err(error) }).boxed();
        };
        let signals = Arc::new(Signals::new(None));
        let (wake, woken) = mpsc::channel();
        let abandon = AbandonOnDrop {
            signals: Arc::clone(&signals),
            wake: wake.clone(),
        };
        let run = Run {
            program: self.inner.program.clone(),
            limits: self.inner.limits,
            entry: Entry::Execute {
                action: ctx.user_action(),
            },
            params: Value::Object(args),
            ctx: Some(ctx),
            signals,
            wake: (wake, woken),
            tokio: Some(tokio.clone()),
        };
        self.inner.running.add(1);
        let guard = RunningGuard(Arc::clone(&self.inner.running));
        let running = tokio.spawn_blocking(move || {
            let _guard = guard;
            engine::run(run)
        });
        futures::stream::once(async move {
            let _abandon = abandon;
            match running.await {
                Ok(result) => to_response(result),
                Err(e) => Err(ToolError::msg(format!("the script's thread failed: {e}"))),
            }
        })
        .boxed()
    }
}

/// Stops the run when nobody waits for its result any more (the call's stream was dropped:
/// the reply went away, or the cancel grace passed).
struct AbandonOnDrop {
    signals: Arc<Signals>,
    wake: mpsc::Sender<engine::Wake>,
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.signals.abandon();
        // The run may be waiting for a timer far off.
        let _ = self.wake.send(engine::Wake::Stop);
    }
}

/// What the model reads: `{ success: true, message }` is the result, `success: false` an error
/// result; a bare string is taken as a message.
fn to_response(result: Result<Option<Value>, ScriptError>) -> Result<ToolResponse, ToolError> {
    let value = match result {
        Ok(Some(value)) => value,
        Ok(None) => return Err(ToolError::msg(ScriptError::BadResult("undefined".into()))),
        Err(e) => return Err(ToolError::msg(e)),
    };
    match value {
        Value::String(message) => Ok(ToolResponse::text(message)),
        Value::Object(fields) if fields.get("success").is_some_and(Value::is_boolean) => {
            let message = match fields.get("message") {
                Some(Value::String(message)) => message.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            };
            if fields.get("success") == Some(&Value::Bool(true)) {
                Ok(ToolResponse::text(message))
            } else {
                Err(ToolError::Failed(message))
            }
        }
        other => {
            let mut shown = other.to_string();
            if shown.len() > 200 {
                let cut = (0..=200).rev().find(|i| shown.is_char_boundary(*i)).unwrap_or(0);
                shown.truncate(cut);
                shown.push('…');
            }
            Err(ToolError::msg(ScriptError::BadResult(shown)))
        }
    }
}

/// Evaluates the code once: the functions it registers.
fn probe(program: &Program, limits: Limits) -> Result<Vec<String>, ScriptError> {
    let value = run_quick(program, limits, Entry::Probe, Value::Object(Map::new()))?;
    Ok(match value {
        Some(Value::Array(names)) => names
            .into_iter()
            .filter_map(|name| name.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    })
}

/// Runs `entry` on this thread within [`QUICK_RUN`], without network or call context: the
/// load-time probe, the approval request and the declined message.
fn run_quick(
    program: &Program,
    limits: Limits,
    entry: Entry,
    params: Value,
) -> Result<Option<Value>, ScriptError> {
    engine::run(Run {
        program: program.clone(),
        limits: Limits {
            network: false,
            ..limits
        },
        entry,
        params,
        ctx: None,
        signals: Arc::new(Signals::new(Some(Instant::now() + QUICK_RUN))),
        wake: mpsc::channel(),
        tokio: None,
    })
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|e| LoadError::Io {
        path: path.to_owned(),
        detail: e.to_string(),
    })
}
