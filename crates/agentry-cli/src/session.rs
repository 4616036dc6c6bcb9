//! One reply in the terminal: events rendered as they come, approval prompts answered from
//! stdin, Ctrl-C to cancel (twice to quit).

use agentry::model::ChatUsage;
use agentry::{CallId, ReplyId};
use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentry::agent::{AgentError, AgentEvent, ReplyRun, StopReason};
use agentry::message::Msg;
use agentry::tool::{ApprovalDecision, ApprovalRequest, DecisionSource};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

use crate::render::{NAME_CHARS, Renderer, Style};
use crate::sanitize;

/// Two Ctrl-C presses closer than this quit.
const DOUBLE_PRESS: Duration = Duration::from_secs(2);

/// Lines typed on stdin, read on their own thread so the terminal stays responsive.
///
/// An approval question only takes a line typed after it was shown (type-ahead never approves):
/// every line gets a number when the reader takes it from stdin, and showing a question
/// discards what was typed so far (the lines read, and on a terminal what is typed but not yet
/// entered).
pub struct Input {
    lines: Option<mpsc::UnboundedReceiver<(u64, String)>>,
    /// Lines the reader has taken from stdin so far (numbered from 1).
    taken: Arc<AtomicU64>,
    /// Lines with a number up to this one were typed before the current question.
    stale_up_to: u64,
    /// Lines typed while a reply ran, for the next prompt.
    ahead: VecDeque<String>,
}

impl Input {
    pub fn stdin() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let taken = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&taken);
        std::thread::spawn(move || read_lines(std::io::stdin().lock(), &counter, &tx));
        Input {
            lines: Some(rx),
            taken,
            stale_up_to: 0,
            ahead: VecDeque::new(),
        }
    }

    /// Whether stdin may still give lines.
    pub fn is_reading(&self) -> bool {
        self.lines.is_some()
    }

    /// Whether stdin is closed and every line it gave was taken.
    pub fn is_closed(&self) -> bool {
        self.lines.is_none() && self.ahead.is_empty()
    }

    /// The next line for a prompt: one typed ahead during a reply, or the next one typed;
    /// `None` once stdin is closed.
    pub async fn next(&mut self) -> Option<String> {
        match self.ahead.pop_front() {
            Some(line) => Some(line),
            None => self.typed().await,
        }
    }

    /// The next line read from stdin, skipping those typed before the current question;
    /// `None` once stdin is closed.
    pub async fn typed(&mut self) -> Option<String> {
        loop {
            let lines = self.lines.as_mut()?;
            match lines.recv().await {
                Some((number, line)) if number > self.stale_up_to => return Some(line),
                Some(_) => {}
                None => {
                    self.lines = None;
                    return None;
                }
            }
        }
    }

    /// Keeps a line typed while a reply runs, for the next prompt.
    pub fn keep_for_later(&mut self, line: String) {
        self.ahead.push_back(line);
    }

    /// A question is shown now: forgets everything typed before it. Returns how many lines
    /// were dropped (those still on their way from the reader are dropped when they arrive).
    pub fn question_shown(&mut self) -> usize {
        let mut dropped = self.ahead.len();
        self.ahead.clear();
        // Keys typed on a terminal but not entered yet would finish a line after the question.
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            let _ = rustix::termios::tcflush(&stdin, rustix::termios::QueueSelector::IFlush);
        }
        self.stale_up_to = self.taken.load(Ordering::SeqCst);
        if let Some(lines) = self.lines.as_mut() {
            while let Ok((number, _)) = lines.try_recv() {
                if number <= self.stale_up_to {
                    dropped += 1;
                }
            }
        }
        dropped
    }
}

/// Reads lines from `from` until it ends, numbering them. All the lines of one read are
/// counted before the first is sent, so a line typed together with an earlier one is never
/// taken for typed after a question that the earlier one led to.
fn read_lines(mut from: impl BufRead, taken: &AtomicU64, to: &mpsc::UnboundedSender<(u64, String)>) {
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let chunk = match from.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk.to_vec(),
        };
        from.consume(chunk.len());
        partial.extend_from_slice(&chunk);
        let Some(last_newline) = partial.iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let complete: Vec<u8> = partial.drain(..=last_newline).collect();
        let lines: Vec<String> = complete[..last_newline]
            .split(|&b| b == b'\n')
            .map(line_text)
            .collect();
        if !send_all(lines, taken, to) {
            return;
        }
    }
    if !partial.is_empty() {
        send_all(vec![line_text(&partial)], taken, to);
    }
}

fn line_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .trim_end_matches(['\n', '\r'])
        .to_owned()
}

/// Numbers `lines`, then sends them; false when nobody listens any more.
fn send_all(lines: Vec<String>, taken: &AtomicU64, to: &mpsc::UnboundedSender<(u64, String)>) -> bool {
    let first = taken.fetch_add(lines.len() as u64, Ordering::SeqCst) + 1;
    lines
        .into_iter()
        .zip(first..)
        .all(|(line, number)| to.send((number, line)).is_ok())
}

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
}

impl Question {
    fn call_id(&self) -> &str {
        match self {
            Question::Choice { call_id, .. } | Question::Reason { call_id, .. } => call_id,
        }
    }
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
}

impl Terminal {
    /// The terminal of one command; `keeps_prompts` for `chat`.
    pub fn new(keeps_prompts: bool) -> Self {
        let style = Style::detect(std::io::stderr().is_terminal());
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        Terminal {
            renderer: Renderer::new(std::io::stdout(), std::io::stderr(), style),
            style,
            input: Input::stdin(),
            interrupts: Interrupts::default(),
            terminate,
            interrupt: None,
            keeps_prompts,
            closed_question_shown: false,
            last_usage: None,
        }
    }

    /// From now on Ctrl-C is handled here (see [`Terminal::interrupt`]).
    pub fn take_interrupts(&mut self) {
        if self.interrupt.is_none() {
            self.interrupt = listen(SignalKind::interrupt(), "Ctrl-C");
        }
    }

    fn say(&self, text: &str) {
        let mut err = std::io::stderr();
        let _ = writeln!(err, "{text}");
        let _ = err.flush();
    }

    fn ask(&self, text: &str) {
        let mut err = std::io::stderr();
        let _ = write!(err, "{text}");
        let _ = err.flush();
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

    /// Handles a line typed (or the end of input) while `question` is asked.
    fn answer(&mut self, run: &ReplyRun, question: Question, line: Option<String>) -> Option<Question> {
        let handle = run.handle();
        match (question, line) {
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

    /// A line typed while the reply runs and nothing is asked.
    fn typed_during_reply(&mut self, line: String) {
        if self.keeps_prompts {
            self.input.keep_for_later(line);
            self.say(&self.style.dim(
                "(typed while the reply runs: kept as your next prompt, unless a question comes first)",
            ));
        } else {
            self.say(
                &self
                    .style
                    .dim("(ignored: typed while the reply runs, before any question)"),
            );
        }
    }

    /// Drives one reply to its end.
    pub async fn drive(&mut self, mut run: ReplyRun) -> Outcome {
        let mut waiting: VecDeque<(CallId, String, ApprovalRequest)> = VecDeque::new();
        let mut question: Option<Question> = None;
        let mut cancelled = false;
        let mut terminating: Option<tokio::time::Instant> = None;
        self.take_interrupts();
        loop {
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
                    if let AgentEvent::ReplyFinished { reply_id, usage, .. } = &event {
                        self.last_usage = Some((reply_id.clone(), usage.clone()));
                    }
                    match event {
                        AgentEvent::ApprovalRequested { call_id, name, request, automatic: false, .. } => {
                            waiting.push_back((call_id, name, request));
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
                        _ => {}
                    }
                    if question.is_none()
                        && !cancelled
                        && terminating.is_none()
                        && let Some((call_id, name, request)) = waiting.front().cloned()
                    {
                        question = Some(self.pose(&run, call_id, &name, &request));
                    }
                }
                line = self.input.typed(), if self.input.is_reading() => {
                    match (question.take(), line) {
                        (Some(asked), line) => question = self.answer(&run, asked, line),
                        // `/cancel` typed during a reply does what Ctrl-C does.
                        (None, Some(line)) if line.trim() == "/cancel" && !cancelled => {
                            cancelled = true;
                            self.say(&self.style.red("⏹ Cancelling the reply…"));
                            run.cancel();
                        }
                        (None, Some(line)) => self.typed_during_reply(line),
                        (None, None) => {}
                    }
                }
                () = received(&mut self.interrupt) => {
                    if self.interrupts.press() {
                        return Outcome::Quit;
                    }
                    cancelled = true;
                    if question.take().is_some() {
                        self.say("");
                    }
                    self.say(&self.style.red("⏹ Cancelling the reply… (Ctrl-C again to quit)"));
                    run.cancel();
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
        waiting: &mut VecDeque<(CallId, String, ApprovalRequest)>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn input_with(taken: u64) -> (Input, mpsc::UnboundedSender<(u64, String)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let input = Input {
            lines: Some(rx),
            taken: Arc::new(AtomicU64::new(taken)),
            stale_up_to: 0,
            ahead: VecDeque::new(),
        };
        (input, tx)
    }

    #[tokio::test]
    async fn a_question_only_takes_lines_read_after_it_was_shown() {
        let (mut input, tx) = input_with(3);
        input.keep_for_later("typed during the reply".into());
        tx.send((1, "y".into())).unwrap();
        tx.send((2, "yes".into())).unwrap();
        // Line 3 was taken from stdin but is still on its way.
        assert_eq!(input.question_shown(), 3);
        tx.send((3, "a".into())).unwrap();
        tx.send((4, "n".into())).unwrap();
        assert_eq!(input.typed().await.as_deref(), Some("n"));
        drop(tx);
        assert_eq!(input.typed().await, None);
        assert!(input.is_closed());
    }

    #[tokio::test]
    async fn prompts_take_lines_typed_ahead_first() {
        let (mut input, tx) = input_with(1);
        input.keep_for_later("first".into());
        tx.send((1, "second".into())).unwrap();
        assert_eq!(input.next().await.as_deref(), Some("first"));
        assert_eq!(input.next().await.as_deref(), Some("second"));
    }

    #[test]
    fn the_lines_of_one_read_are_counted_before_any_is_sent() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let taken = AtomicU64::new(0);
        let reader = std::io::BufReader::new(&b"one\r\ntwo\nno newline"[..]);
        read_lines(reader, &taken, &tx);
        assert_eq!(taken.load(Ordering::SeqCst), 3);
        let mut got = Vec::new();
        while let Ok(line) = rx.try_recv() {
            got.push(line);
        }
        assert_eq!(
            got,
            [
                (1, "one".to_owned()),
                (2, "two".to_owned()),
                (3, "no newline".to_owned())
            ]
        );
    }
}
