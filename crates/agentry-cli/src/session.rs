//! One reply in the terminal: events rendered as they come, approval prompts answered from
//! stdin, Ctrl-C to cancel (twice to quit).

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use agentry::agent::{AgentError, AgentEvent, ReplyRun, StopReason};
use agentry::message::Msg;
use agentry::tool::{ApprovalDecision, ApprovalRequest};
use tokio::sync::mpsc;

use crate::render::{Renderer, Style};

/// Two Ctrl-C presses closer than this quit.
const DOUBLE_PRESS: Duration = Duration::from_secs(2);

/// Lines typed on stdin, read on their own thread so the terminal stays responsive.
pub struct Input {
    lines: Option<mpsc::UnboundedReceiver<String>>,
}

impl Input {
    pub fn stdin() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            let mut line = String::new();
            while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
                if tx.send(line.trim_end_matches(['\n', '\r']).to_owned()).is_err() {
                    break;
                }
                line.clear();
            }
        });
        Input { lines: Some(rx) }
    }

    /// The next line; `None` once stdin is closed.
    pub async fn next(&mut self) -> Option<String> {
        let lines = self.lines.as_mut()?;
        let line = lines.recv().await;
        if line.is_none() {
            self.lines = None;
        }
        line
    }
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
}

/// What the terminal is asking about.
enum Question {
    Choice { call_id: String },
    Reason { call_id: String, kind: DeclineKind },
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

pub struct Terminal {
    pub renderer: Renderer<std::io::Stdout, std::io::Stderr>,
    pub style: Style,
    pub input: Input,
    pub interrupts: Interrupts,
}

impl Terminal {
    pub fn new() -> Self {
        let style = Style::detect(std::io::stderr().is_terminal());
        Terminal {
            renderer: Renderer::new(std::io::stdout(), std::io::stderr(), style),
            style,
            input: Input::stdin(),
            interrupts: Interrupts::default(),
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

    fn show_request(&self, name: &str, request: &ApprovalRequest) {
        let title = request.title.clone().unwrap_or_else(|| format!("Run {name}?"));
        self.say(&self.style.cyan(&format!("? {title}")));
        for line in request.message.lines() {
            self.say(&format!("  {line}"));
        }
        if let Some(preview) = &request.preview {
            for line in preview.lines() {
                self.say(&self.style.dim(&format!("  │ {line}")));
            }
        }
    }

    fn prompt_choice(&self) {
        self.ask("  [y] allow  [a] always (this session)  [n] decline  [v] never (this session)  [s] decline and stop > ");
    }

    /// Drives one reply to its end.
    pub async fn drive(&mut self, mut run: ReplyRun) -> Outcome {
        let mut waiting: VecDeque<(String, String, ApprovalRequest)> = VecDeque::new();
        let mut question: Option<Question> = None;
        let mut cancelled = false;
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
                    match event {
                        AgentEvent::ApprovalRequested { call_id, name, request, automatic: false, .. } => {
                            waiting.push_back((call_id, name, request));
                        }
                        AgentEvent::ApprovalResolved { call_id, .. } | AgentEvent::ApprovalWithdrawn { call_id, .. } => {
                            waiting.retain(|(id, _, _)| *id != call_id);
                            let asked = match &question {
                                Some(Question::Choice { call_id: id } | Question::Reason { call_id: id, .. }) => id == &call_id,
                                None => false,
                            };
                            if asked {
                                question = None;
                                self.say("");
                            }
                        }
                        AgentEvent::ReplyFinished { stop_reason: StopReason::Cancelled, .. } => {
                            self.say(&self.style.dim("(reply cancelled: the model is told what ran, what did not, and that you interrupted it)"));
                        }
                        _ => {}
                    }
                    if question.is_none()
                        && let Some((call_id, name, request)) = waiting.front().cloned()
                    {
                        self.show_request(&name, &request);
                        self.prompt_choice();
                        question = Some(Question::Choice { call_id });
                    }
                }
                line = self.input.next(), if question.is_some() => {
                    let handle = run.handle().clone();
                    match (question.take(), line) {
                        (Some(Question::Choice { call_id }), Some(answer)) => {
                            let kind = match answer.trim().to_ascii_lowercase().as_str() {
                                "y" | "yes" => { let _ = handle.decide(&call_id, ApprovalDecision::Approve); None }
                                "a" | "always" => { let _ = handle.decide(&call_id, ApprovalDecision::ApproveForSession); None }
                                "n" | "no" => Some(DeclineKind::Once),
                                "v" | "never" => Some(DeclineKind::Session),
                                "s" | "stop" => Some(DeclineKind::Stop),
                                _ => {
                                    self.prompt_choice();
                                    question = Some(Question::Choice { call_id });
                                    continue;
                                }
                            };
                            if let Some(kind) = kind {
                                self.ask("  reason for the model (optional) > ");
                                question = Some(Question::Reason { call_id, kind });
                            }
                        }
                        (Some(Question::Reason { call_id, kind }), Some(reason)) => {
                            let reason = Some(reason.trim().to_owned()).filter(|r| !r.is_empty());
                            let _ = handle.decide(&call_id, kind.decision(reason));
                        }
                        (Some(Question::Choice { call_id } | Question::Reason { call_id, .. }), None) => {
                            // stdin is closed: nobody can answer, so decline (fail closed).
                            let reason = Some("no answer: the terminal's input is closed".to_owned());
                            let _ = handle.decide(&call_id, ApprovalDecision::Decline { reason });
                        }
                        (None, _) => {}
                    }
                }
                _ = tokio::signal::ctrl_c() => {
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
            }
        }
        Outcome::Finished {
            result: run.finish().await,
            cancelled,
        }
    }
}
