//! The terminal's driver of a reply: events rendered as they come, approval prompts answered
//! from stdin, Ctrl-C to cancel (twice to quit).

use agentry::model::ChatUsage;
use agentry::{CallId, ReplyId};
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use agentry::agent::{AgentError, AgentEvent, InputAnswer, InputError, ReplyRun, SteerError, StopReason};
use agentry::message::Msg;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use tokio::signal::unix::{Signal, SignalKind, signal};

use agentry_store::SessionMemory;

use super::form::Form;
use super::input::Input;
use super::live::Live;
use super::render::{Renderer, Style};
use super::sanitize::{self, NAME_CHARS};

/// Two Ctrl-C presses closer than this quit.
const DOUBLE_PRESS: Duration = Duration::from_secs(2);

/// Ctrl-C presses: the first cancels, a second within `DOUBLE_PRESS` quits.
#[derive(Default)]
pub struct Interrupts {
    last: Option<Instant>,
}

impl Interrupts {
    /// Records a press; true when it is the second of a quick pair.
    pub fn press(&mut self) -> bool {
        let now = Instant::now();
        let quit = self
            .last
            .is_some_and(|last| now.duration_since(last) < DOUBLE_PRESS);
        self.last = Some(now);
        quit
    }
}

/// How a reply in the terminal ended.
pub enum Outcome {
    /// The reply ended (answered, summarised, cancelled or failed).
    Finished {
        result: Result<Msg, AgentError>,
        cancelled: bool,
    },
    /// The user pressed Ctrl-C twice: leave now.
    Quit,
    /// SIGTERM: the reply was cancelled (its tools told so), leave now.
    Terminated,
}

/// What the terminal is asking about.
enum Question {
    /// The choice; `prompted` when the prompt line is showing.
    Choice {
        call_id: CallId,
        prompted: bool,
    },
    Reason {
        call_id: CallId,
        kind: DeclineKind,
    },
    /// A form, field by field (an MCP server's elicitation).
    Form {
        call_id: CallId,
        form: Form,
        schema: serde_json::Value,
    },
}

impl Question {
    fn call_id(&self) -> &str {
        match self {
            Question::Choice { call_id, .. }
            | Question::Reason { call_id, .. }
            | Question::Form { call_id, .. } => call_id,
        }
    }
}

/// What a question waiting its turn asks.
#[derive(Clone)]
enum Ask {
    Approval(ApprovalRequest),
    Input {
        message: String,
        schema: serde_json::Value,
    },
}

#[derive(Clone, Copy)]
enum DeclineKind {
    Once,
    Session,
    Stop,
}

impl DeclineKind {
    fn decision(self, reason: Option<String>) -> ApprovalDecision {
        match self {
            DeclineKind::Once => ApprovalDecision::Decline { reason },
            DeclineKind::Session => ApprovalDecision::DeclineForSession { reason },
            DeclineKind::Stop => ApprovalDecision::DeclineAndStop { reason },
        }
    }
}

/// Characters shown of an approval question's title and of each line of its message/preview.
const QUESTION_LINE_CHARS: usize = 200;
/// Lines shown of an approval request's message and of its preview.
const QUESTION_LINES: usize = 40;
/// How often the live lines are redrawn (elapsed times, spinners).
const LIVE_REDRAW: Duration = Duration::from_millis(100);
/// How long a reply may take to wind down after SIGTERM (tools' `on_cancel`, grace period).
const TERMINATE_GRACE: Duration = Duration::from_secs(5);

pub struct Terminal {
    pub renderer: Renderer<std::io::Stdout, std::io::Stderr>,
    pub style: Style,
    pub input: Input,
    pub interrupts: Interrupts,
    /// SIGTERM, registered when the terminal is made so that it never kills agentry outright.
    pub terminate: Option<Signal>,
    /// SIGINT, registered once a reply or a prompt can take it (before, Ctrl-C just quits). A
    /// stream keeps a press that comes while nobody awaits it, unlike a fresh `ctrl_c()`.
    pub interrupt: Option<Signal>,
    /// Lines typed during a reply are kept for the next prompt (chat), not dropped (run).
    keeps_prompts: bool,
    /// A question was shown in full after stdin closed: later ones take one line.
    closed_question_shown: bool,
    /// The token use of the last reply that finished, for the session's ledger.
    pub last_usage: Option<(ReplyId, ChatUsage)>,
    /// The last reply's cost, when the model's price is known.
    pub last_cost: Option<f64>,
}

impl Terminal {
    /// The terminal of one command; `keeps_prompts` for `chat`.
    pub fn new(keeps_prompts: bool) -> Self {
        let stderr_is_terminal = std::io::stderr().is_terminal();
        let style = Style::detect(stderr_is_terminal);
        let mut renderer = Renderer::new(std::io::stdout(), std::io::stderr(), style);
        if stderr_is_terminal && std::env::var("TERM").map_or(true, |t| t != "dumb") {
            renderer = renderer.with_live(Live::stderr());
        }
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        Terminal {
            renderer,
            style,
            input: if keeps_prompts {
                Input::for_chat()
            } else {
                Input::stdin()
            },
            interrupts: Interrupts::default(),
            terminate,
            interrupt: None,
            keeps_prompts,
            closed_question_shown: false,
            last_usage: None,
            last_cost: None,
        }
    }

    /// From now on Ctrl-C is handled here (see [`Terminal::interrupt`]).
    pub fn take_interrupts(&mut self) {
        if self.interrupt.is_none() {
            self.interrupt = listen(SignalKind::interrupt(), "Ctrl-C");
        }
    }

    fn say(&self, text: &str) {
        self.renderer.suspend(|| {
            let mut err = std::io::stderr();
            let _ = writeln!(err, "{text}");
            let _ = err.flush();
        });
    }

    fn ask(&self, text: &str) {
        self.renderer.suspend(|| {
            let mut err = std::io::stderr();
            let _ = write!(err, "{text}");
            let _ = err.flush();
        });
    }

    fn show_request(&self, name: &str, request: &ApprovalRequest, brief: bool) {
        let title = match &request.title {
            Some(title) => sanitize::short(title, QUESTION_LINE_CHARS),
            None => format!("Run {}?", sanitize::short(name, NAME_CHARS)),
        };
        self.say(&self.style.cyan(&format!("? {title}")));
        if brief {
            return;
        }
        for line in sanitize::lines(&request.message, QUESTION_LINES, QUESTION_LINE_CHARS) {
            self.say(&format!("  {line}"));
        }
        if let Some(preview) = &request.preview {
            for line in sanitize::lines(preview, QUESTION_LINES, QUESTION_LINE_CHARS) {
                self.say(&self.style.dim(&format!("  │ {line}")));
            }
        }
    }

    fn prompt_choice(&self) {
        self.ask("  [y] allow  [a] always (this session)  [n] decline  [v] never (this session)  [s] decline and stop > ");
    }

    /// Shows the question about `call_id`, and declines it at once when nobody can answer.
    fn pose(&mut self, run: &ReplyRun, call_id: CallId, name: &str, request: &ApprovalRequest) -> Question {
        let dropped = self.input.question_shown();
        let closed = self.input.is_closed();
        self.show_request(name, request, closed && self.closed_question_shown);
        if dropped > 0 {
            let lines = if dropped == 1 { "line" } else { "lines" };
            self.say(&self.style.dim(&format!(
                "  (ignored {dropped} {lines} typed before this question)"
            )));
        }
        if closed {
            self.closed_question_shown = true;
            let _ = run.handle().decide_no_decision(&call_id);
            return Question::Choice {
                call_id,
                prompted: false,
            };
        }
        self.prompt_choice();
        Question::Choice {
            call_id,
            prompted: true,
        }
    }

    /// Shows a form asked by a call (`name`) and its first field; answers `Cancel` at once when
    /// nobody can answer.
    fn pose_form(
        &mut self,
        run: &ReplyRun,
        call_id: CallId,
        name: &str,
        message: &str,
        schema: serde_json::Value,
    ) -> Question {
        self.input.question_shown();
        self.say(
            &self
                .style
                .cyan(&format!("? {} asks:", sanitize::short(name, NAME_CHARS))),
        );
        for line in sanitize::lines(message, QUESTION_LINES, QUESTION_LINE_CHARS) {
            self.say(&format!("  {line}"));
        }
        let form = Form::new(&schema);
        if self.input.is_closed() {
            let _ = run.handle().answer_input(call_id.clone(), InputAnswer::Cancel);
            self.say(
                &self
                    .style
                    .dim("  nobody can answer (the input is closed): cancelled"),
            );
            return Question::Form {
                call_id,
                form,
                schema,
            };
        }
        self.say(
            &self
                .style
                .dim("  (one field at a time; /decline refuses, /cancel dismisses)"),
        );
        self.prompt_field(&form);
        Question::Form {
            call_id,
            form,
            schema,
        }
    }

    fn prompt_field(&self, form: &Form) {
        if let Some(prompt) = form.prompt() {
            self.ask(&sanitize::line(&prompt));
        }
    }

    /// A line typed for a form: the next field, or the answer once all are filled.
    fn fill(
        &mut self,
        run: &ReplyRun,
        call_id: CallId,
        mut form: Form,
        schema: serde_json::Value,
        line: Option<String>,
    ) -> Option<Question> {
        let handle = run.handle();
        let answer = match line.as_deref().map(str::trim) {
            None | Some("/cancel") => Some(InputAnswer::Cancel),
            Some("/decline") => Some(InputAnswer::Decline),
            Some(typed) => {
                if let Err(e) = form.take(typed) {
                    self.say(&self.style.red(&format!("  {}", sanitize::line(&e))));
                }
                match form.prompt() {
                    Some(_) => None,
                    None => Some(InputAnswer::Accept(form.content())),
                }
            }
        };
        let Some(answer) = answer else {
            self.prompt_field(&form);
            return Some(Question::Form {
                call_id,
                form,
                schema,
            });
        };
        match handle.answer_input(call_id.clone(), answer) {
            Err(InputError::Invalid(why)) => {
                // The server's form says no: fill it again.
                self.say(&self.style.red(&format!("  {}: again", sanitize::line(&why))));
                let form = Form::new(&schema);
                self.prompt_field(&form);
                Some(Question::Form {
                    call_id,
                    form,
                    schema,
                })
            }
            _ => None,
        }
    }

    /// Handles a line typed (or the end of input) while `question` is asked.
    fn answer(&mut self, run: &ReplyRun, question: Question, line: Option<String>) -> Option<Question> {
        let handle = run.handle();
        match (question, line) {
            (
                Question::Form {
                    call_id,
                    form,
                    schema,
                },
                line,
            ) => self.fill(run, call_id, form, schema, line),
            (Question::Choice { call_id, .. }, Some(answer)) => {
                let kind = match answer.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" => {
                        let _ = handle.decide(&call_id, ApprovalDecision::Approve);
                        return None;
                    }
                    "a" | "always" => {
                        let _ = handle.decide(&call_id, ApprovalDecision::ApproveForSession);
                        return None;
                    }
                    "n" | "no" => DeclineKind::Once,
                    "v" | "never" => DeclineKind::Session,
                    "s" | "stop" => DeclineKind::Stop,
                    _ => {
                        self.prompt_choice();
                        return Some(Question::Choice {
                            call_id,
                            prompted: true,
                        });
                    }
                };
                self.ask("  reason for the model (optional) > ");
                Some(Question::Reason { call_id, kind })
            }
            (Question::Reason { call_id, kind }, reason) => {
                // The user chose to decline; the end of input only leaves the reason out.
                let reason = reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
                let _ = handle.decide(&call_id, kind.decision(reason));
                None
            }
            (Question::Choice { call_id, .. }, None) => {
                // stdin is closed: nobody can answer, so decline (fail closed, A15).
                self.closed_question_shown = true;
                let _ = handle.decide_no_decision(&call_id);
                self.say("");
                Some(Question::Choice {
                    call_id,
                    prompted: false,
                })
            }
        }
    }

    /// A line typed while the reply runs and nothing is asked: in a chat at a terminal, it
    /// steers the reply.
    fn typed_during_reply(&mut self, run: &ReplyRun, line: String) {
        if line.trim().is_empty() {
            return;
        }
        // Steering is for a person at a terminal; lines piped into a chat are its next prompts.
        if self.keeps_prompts && !self.input.edits_prompts() {
            self.input.keep_for_later(line);
            self.say(&self.style.dim(
                "(typed while the reply runs: kept as your next prompt, unless a question comes first)",
            ));
        } else if self.keeps_prompts {
            match run.handle().steer(agentry::message::Msg::user(line)) {
                Ok(()) => self.say(&self.style.dim(
                    "(typed while the reply runs: added to it; the agent reads it before its next step)",
                )),
                Err(SteerError::NotReplying(msg) | SteerError::NotUserMessage(msg)) => {
                    // The reply is ending: the line is the next prompt.
                    self.input.keep_for_later(msg.text().unwrap_or_default());
                    self.say(
                        &self
                            .style
                            .dim("(typed as the reply ended: kept as your next prompt)"),
                    );
                }
                Err(_) => {}
            }
        } else {
            self.say(
                &self
                    .style
                    .dim("(ignored: typed while the reply runs, before any question)"),
            );
        }
    }

    /// When the last process stopped while calls waited for approval: asks about them again,
    /// runs the approved ones (once) and lets the model go on from their results, before
    /// anything else; calls whose work goes on elsewhere (an MCP task) are found again and
    /// waited for. `None` when nothing waited.
    pub async fn resume_waiting_calls(
        &mut self,
        session: Option<&SessionMemory>,
        agent: &agentry::ReActAgent,
    ) -> Option<Outcome> {
        let memory = session?;
        let (waiting, running) = (
            memory.recovery().pending_kept.len(),
            memory.recovery().resumable_kept.len(),
        );
        if waiting + running == 0 {
            return None;
        }
        if waiting > 0 {
            eprintln!(
                "agentry: {waiting} tool call(s) of the last run still wait for your decision; asking again \
                 (--close-pending closes them instead)."
            );
        }
        if running > 0 {
            eprintln!(
                "agentry: {running} tool call(s) of the last run still run on their server; following them \
                 again (--close-pending closes them instead)."
            );
        }
        Some(self.drive(agent.start_resumed_reply()).await)
    }

    /// Drives one reply to its end.
    pub async fn drive(&mut self, mut run: ReplyRun) -> Outcome {
        let mut waiting: VecDeque<(CallId, String, Ask)> = VecDeque::new();
        let mut question: Option<Question> = None;
        let mut cancelled = false;
        let mut terminating: Option<tokio::time::Instant> = None;
        let mut started: Vec<Started> = Vec::new();
        let mut redraw = tokio::time::interval(LIVE_REDRAW);
        redraw.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        self.take_interrupts();
        self.renderer.reply_started();
        loop {
            self.renderer.pause_live(question.is_some());
            tokio::select! {
                event = run.next_event() => {
                    let Some(event) = event else { break };
                    if let Err(e) = self.renderer.event(&event)
                        && e.kind() == std::io::ErrorKind::BrokenPipe
                    {
                        // Nobody reads the answer any more (e.g. `| head`): stop the reply.
                        run.cancel();
                        continue;
                    }
                    track_started(&mut started, &event);
                    if let AgentEvent::ReplyFinished { reply_id, usage, cost, .. } = &event {
                        self.last_usage = Some((reply_id.clone(), usage.clone()));
                        self.last_cost = *cost;
                    }
                    match event {
                        AgentEvent::ApprovalRequested { call_id, name, request, automatic: false, .. } => {
                            waiting.push_back((call_id, name, Ask::Approval(request)));
                        }
                        AgentEvent::InputRequested { call_id, name, message, schema, .. } => {
                            waiting.push_back((call_id, name, Ask::Input { message, schema }));
                        }
                        AgentEvent::InputAnswered { ref call_id, .. } => {
                            self.settled(&mut waiting, &mut question, call_id);
                        }
                        AgentEvent::ApprovalResolved { ref call_id, source: DecisionSource::NoDecision, .. } => {
                            self.say(&self.style.dim("  no decision: nobody can answer (the input is closed); declined"));
                            self.settled(&mut waiting, &mut question, call_id);
                        }
                        AgentEvent::ApprovalResolved { ref call_id, .. } | AgentEvent::ApprovalWithdrawn { ref call_id, .. } => {
                            self.settled(&mut waiting, &mut question, call_id);
                        }
                        AgentEvent::ReplyFinished { stop_reason: StopReason::Cancelled, .. } => {
                            self.say(&self.style.dim("(reply cancelled: the model is told what ran, what did not, and that you interrupted it)"));
                        }
                        AgentEvent::ReplyFinished { stop_reason: StopReason::BudgetReached(ref why), .. } => {
                            self.say(&self.style.dim(&format!("(reply stopped: {why}; the model is told what ran and what did not)")));
                        }
                        _ => {}
                    }
                    if question.is_none()
                        && !cancelled
                        && terminating.is_none()
                        && let Some((call_id, name, ask)) = waiting.front().cloned()
                    {
                        self.renderer.pause_live(true);
                        question = Some(match ask {
                            Ask::Approval(request) => self.pose(&run, call_id, &name, &request),
                            Ask::Input { message, schema } => self.pose_form(&run, call_id, &name, &message, schema),
                        });
                    }
                }
                line = self.input.typed(), if self.input.is_reading() => {
                    match (question.take(), line) {
                        (Some(asked), line) => question = self.answer(&run, asked, line),
                        // `/cancel` typed during a reply cancels the reply.
                        (None, Some(line)) if line.trim() == "/cancel" && !cancelled => {
                            cancelled = true;
                            self.say(&self.style.red("⏹ Cancelling the reply…"));
                            run.cancel();
                        }
                        (None, Some(line)) => self.typed_during_reply(&run, line),
                        (None, None) => {}
                    }
                }
                () = received(&mut self.interrupt) => {
                    let quick = self.interrupts.press();
                    if quick && cancelled {
                        return Outcome::Quit;
                    }
                    let asked = question.take().is_some();
                    if asked {
                        self.say("");
                    }
                    // Calls that run (or wait for a free slot); an approved call too.
                    let running: Vec<&Started> = started.iter().filter(|s| !s.asking).collect();
                    if !cancelled && !quick && !asked && !running.is_empty() {
                        // The seed's cancel: the running calls stop (their partial results go
                        // to the model) and the reply goes on.
                        let names: Vec<String> = running.iter().map(|s| sanitize::short(&s.name, NAME_CHARS)).collect();
                        self.say(&self.style.red(&format!(
                            "⏹ Cancelling {}… (Ctrl-C again cancels the reply)",
                            names.join(", ")
                        )));
                        for call in running {
                            let _ = run.handle().cancel_call(call.call_id.clone());
                        }
                    } else {
                        cancelled = true;
                        self.say(&self.style.red("⏹ Cancelling the reply… (Ctrl-C again to quit)"));
                        run.cancel();
                    }
                }
                () = received(&mut self.terminate) => {
                    if terminating.is_some() {
                        return Outcome::Terminated;
                    }
                    if question.take().is_some() {
                        self.say("");
                    }
                    self.say(&self.style.red("⏹ Terminated: cancelling the reply, then quitting"));
                    run.cancel();
                    terminating = Some(tokio::time::Instant::now() + TERMINATE_GRACE);
                }
                () = sleep_until(terminating) => return Outcome::Terminated,
                _ = redraw.tick(), if self.renderer.is_live() => self.renderer.tick(),
            }
        }
        if terminating.is_some() {
            return Outcome::Terminated;
        }
        Outcome::Finished {
            result: run.finish().await,
            cancelled,
        }
    }

    /// The call's approval is no longer pending: forget it, and end its question if asked.
    fn settled(
        &self,
        waiting: &mut VecDeque<(CallId, String, Ask)>,
        question: &mut Option<Question>,
        call_id: &str,
    ) {
        waiting.retain(|(id, _, _)| id != call_id);
        if question.as_ref().is_some_and(|q| q.call_id() == call_id) {
            let prompted = !matches!(question, Some(Question::Choice { prompted: false, .. }));
            *question = None;
            if prompted {
                self.say("");
            }
        }
    }
}

/// A call of the reply in progress, from its start until it finishes.
struct Started {
    call_id: CallId,
    name: String,
    /// Waiting for the user's answer (not running).
    asking: bool,
}

/// Keeps `started` current with `event`.
fn track_started(started: &mut Vec<Started>, event: &AgentEvent) {
    match event {
        AgentEvent::ToolStarted { call_id, name, .. } => started.push(Started {
            call_id: call_id.clone(),
            name: name.clone(),
            asking: false,
        }),
        AgentEvent::ApprovalRequested {
            call_id,
            automatic: false,
            ..
        } => started
            .iter_mut()
            .filter(|s| s.call_id == *call_id)
            .for_each(|s| s.asking = true),
        AgentEvent::ApprovalResolved { call_id, .. } => started
            .iter_mut()
            .filter(|s| s.call_id == *call_id)
            .for_each(|s| s.asking = false),
        AgentEvent::ToolFinished { call_id, .. } => started.retain(|s| s.call_id != *call_id),
        _ => {}
    }
}

fn listen(kind: SignalKind, name: &str) -> Option<Signal> {
    match signal(kind) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot handle {name}");
            None
        }
    }
}

/// Resolves when `signal` arrives (never when it could not be registered).
pub async fn received(signal: &mut Option<Signal>) {
    match signal.as_mut() {
        Some(signal) => {
            if signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
