//! What the user types: prompts (with line editing and history on a terminal), answers to
//! approval questions, and lines typed while a reply runs.
//!
//! stdin is read on its own thread so the terminal stays responsive. On a terminal that thread
//! either edits a prompt (rustyline, raw mode) when the chat asks for one, or listens for whole
//! lines in the terminal's ordinary mode (answers, `/cancel`) until asked for the next prompt.
//! It never blocks in a read while a prompt is wanted: it waits on stdin and on a wake-up pipe
//! together, so keys typed for the next prompt stay in the terminal for the editor.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::termios::Termios;
use tokio::sync::mpsc;

/// What the reader thread hands over.
enum Typed {
    /// A line, numbered from 1 in the order the reader took lines from stdin.
    Line(u64, String),
    /// Ctrl-C while a prompt was edited (raw mode: no SIGINT is sent).
    Interrupted,
}

/// The answer to a prompt.
#[derive(Debug, PartialEq, Eq)]
pub enum Prompted {
    Line(String),
    /// Ctrl-C at an edited prompt.
    Interrupted,
    /// stdin is closed (Ctrl-D).
    Closed,
}

/// Where the history of edited prompts comes from and goes.
pub enum History {
    /// Loaded from and appended to this file.
    File(PathBuf),
    /// Given at the start (e.g. a session's earlier prompts), kept for this process only.
    Entries(Vec<String>),
}

/// What the chat asks of the reader thread on a terminal.
enum Request {
    /// Edit a prompt shown with this text.
    Prompt(String),
    /// Use this history from now on.
    History(History),
}

/// The prompt editor's side of a terminal: asks the reader thread for an edited prompt.
struct Editing {
    requests: std::sync::mpsc::Sender<Request>,
    /// A prompt was asked for and its answer has not come yet (the wait for it was dropped,
    /// e.g. for a signal): the editor still shows it, so it is not asked for again.
    prompt_showing: bool,
    /// A byte written here wakes the reader from listening.
    wake: OwnedFd,
    /// The terminal's settings at start, put back when agentry leaves (the editor may be in
    /// raw mode on another thread at that moment).
    saved: Option<Termios>,
}

/// Lines typed on stdin.
///
/// An approval question only takes a line typed after it was shown (type-ahead never approves):
/// every line gets a number when the reader takes it from stdin, and showing a question
/// discards what was typed so far (the lines read, and on a terminal what is typed but not yet
/// entered).
pub struct Input {
    lines: Option<mpsc::UnboundedReceiver<Typed>>,
    /// Lines the reader has taken from stdin so far (numbered from 1).
    taken: Arc<AtomicU64>,
    /// Lines with a number up to this one were typed before the current question.
    stale_up_to: u64,
    /// Lines typed while a reply ran, for the next prompt.
    ahead: VecDeque<String>,
    editing: Option<Editing>,
}

impl Input {
    /// stdin read line by line; prompts are printed on stderr.
    pub fn stdin() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let taken = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&taken);
        std::thread::spawn(move || read_lines(std::io::stdin().lock(), &counter, &tx));
        Self::reading(rx, taken, None)
    }

    /// On a terminal (stdin, stdout and stderr all terminals, `TERM` not `dumb`): prompts
    /// edited, with a history once [`Input::use_history`] gives one; otherwise
    /// [`Input::stdin`].
    pub fn for_chat() -> Self {
        let terminal = std::io::stdin().is_terminal()
            && std::io::stdout().is_terminal()
            && std::io::stderr().is_terminal()
            && std::env::var("TERM").map_or(true, |t| t != "dumb");
        if !terminal {
            return Self::stdin();
        }
        match Self::editing() {
            Ok(input) => input,
            Err(e) => {
                tracing::warn!(error = %e, "no line editing");
                Self::stdin()
            }
        }
    }

    fn editing() -> Result<Self, Box<dyn std::error::Error>> {
        let editor = rustyline::DefaultEditor::with_config(
            rustyline::Config::builder()
                .auto_add_history(false)
                .history_ignore_dups(true)?
                .max_history_size(2000)?
                .build(),
        )?;
        let saved = rustix::termios::tcgetattr(std::io::stdin()).ok();
        let (wake_read, wake) = rustix::pipe::pipe()?;
        let (requests, prompts) = std::sync::mpsc::channel();
        let (tx, rx) = mpsc::unbounded_channel();
        let taken = Arc::new(AtomicU64::new(0));
        let reader = TerminalReader {
            editor,
            history_file: None,
            requests: prompts,
            wake: wake_read,
            taken: Arc::clone(&taken),
            to: tx,
            partial: Vec::new(),
        };
        std::thread::spawn(move || reader.run());
        Ok(Self::reading(
            rx,
            taken,
            Some(Editing {
                requests,
                prompt_showing: false,
                wake,
                saved,
            }),
        ))
    }

    /// The history of edited prompts (up arrow); nothing without line editing.
    pub fn use_history(&self, history: History) {
        if let Some(editing) = &self.editing {
            editing.send(Request::History(history));
        }
    }

    fn reading(
        lines: mpsc::UnboundedReceiver<Typed>,
        taken: Arc<AtomicU64>,
        editing: Option<Editing>,
    ) -> Self {
        Input {
            lines: Some(lines),
            taken,
            stale_up_to: 0,
            ahead: VecDeque::new(),
            editing,
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

    /// Whether prompts are edited (a terminal with line editing).
    pub fn edits_prompts(&self) -> bool {
        self.editing.is_some()
    }

    /// The next prompt: a line typed ahead during a reply, or one typed after `prompt` is shown
    /// (edited, on a terminal).
    pub async fn prompt(&mut self, prompt: &str) -> Prompted {
        // A line typed during a reply, or entered while nothing was asked (e.g. while a
        // command ran), comes first: shown after the prompt, as if typed there.
        let early = match self.ahead.pop_front() {
            Some(line) => Some(Prompted::Line(line)),
            None => self.typed_already(),
        };
        if let Some(early) = early {
            let mut err = std::io::stderr();
            match &early {
                Prompted::Line(line) if self.editing.is_some() => {
                    let _ = writeln!(err, "{prompt}{}", super::sanitize::line(line));
                }
                _ => {
                    let _ = write!(err, "{prompt}");
                }
            }
            let _ = err.flush();
            return early;
        }
        match &mut self.editing {
            Some(editing) if editing.prompt_showing => {}
            Some(editing) => {
                if !editing.send(Request::Prompt(prompt.to_owned())) {
                    self.lines = None;
                    return Prompted::Closed;
                }
                editing.prompt_showing = true;
            }
            None => {
                let mut err = std::io::stderr();
                let _ = write!(err, "{prompt}");
                let _ = err.flush();
            }
        }
        loop {
            let Some(lines) = self.lines.as_mut() else {
                return Prompted::Closed;
            };
            let typed = lines.recv().await;
            if let Some(editing) = &mut self.editing {
                editing.prompt_showing = false;
            }
            match typed {
                Some(Typed::Line(number, line)) if number > self.stale_up_to => return Prompted::Line(line),
                Some(Typed::Line(..)) => {}
                Some(Typed::Interrupted) => return Prompted::Interrupted,
                None => {
                    self.lines = None;
                    return Prompted::Closed;
                }
            }
        }
    }

    fn typed_already(&mut self) -> Option<Prompted> {
        let lines = self.lines.as_mut()?;
        while let Ok(typed) = lines.try_recv() {
            match typed {
                Typed::Line(number, line) if number > self.stale_up_to => return Some(Prompted::Line(line)),
                Typed::Line(..) => {}
                Typed::Interrupted => return Some(Prompted::Interrupted),
            }
        }
        None
    }

    /// The next line read from stdin, skipping those typed before the current question;
    /// `None` once stdin is closed.
    pub async fn typed(&mut self) -> Option<String> {
        loop {
            let lines = self.lines.as_mut()?;
            match lines.recv().await {
                Some(Typed::Line(number, line)) if number > self.stale_up_to => return Some(line),
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
            while let Ok(typed) = lines.try_recv() {
                if matches!(typed, Typed::Line(number, _) if number <= self.stale_up_to) {
                    dropped += 1;
                }
            }
        }
        dropped
    }
}

impl Editing {
    /// Sends `request` and wakes the reader; false when the reader is gone.
    fn send(&self, request: Request) -> bool {
        if self.requests.send(request).is_err() {
            return false;
        }
        let _ = rustix::io::write(&self.wake, &[1]);
        true
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        // The editor may be in raw mode on the reader thread when agentry leaves.
        if let Some(saved) = self.editing.as_ref().and_then(|e| e.saved.as_ref()) {
            let _ =
                rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, saved);
        }
    }
}

/// Ctrl-D, as read in raw mode.
const END_OF_TRANSMISSION: u8 = 0x04;
/// Ctrl-C, as read in raw mode.
const END_OF_TEXT: u8 = 0x03;

/// The reader thread on a terminal.
struct TerminalReader {
    editor: rustyline::DefaultEditor,
    history_file: Option<PathBuf>,
    /// What the chat asks, each sent with a byte on the wake-up pipe.
    requests: std::sync::mpsc::Receiver<Request>,
    wake: OwnedFd,
    taken: Arc<AtomicU64>,
    to: mpsc::UnboundedSender<Typed>,
    /// The start of a line read while listening, not finished yet.
    partial: Vec<u8>,
}

impl TerminalReader {
    fn run(mut self) {
        while let Some(prompt) = self.listen() {
            // The start of a line typed before the prompt came: the user goes on editing it.
            let initial: String = String::from_utf8_lossy(&std::mem::take(&mut self.partial))
                .chars()
                .filter(|c| !c.is_control())
                .collect();
            match self.editor.readline_with_initial(&prompt, (&initial, "")) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = self.editor.add_history_entry(line.as_str());
                        if let Some(path) = &self.history_file {
                            save_history(&mut self.editor, path);
                        }
                    }
                    if !send_all(vec![line], &self.taken, &self.to) {
                        return;
                    }
                }
                Err(rustyline::error::ReadlineError::Interrupted) => {
                    if self.to.send(Typed::Interrupted).is_err() {
                        return;
                    }
                }
                Err(rustyline::error::ReadlineError::Eof) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the prompt failed");
                    return;
                }
            }
        }
    }

    /// Reads whole lines (the terminal's ordinary mode) until a prompt is asked for; `None`
    /// when stdin ends or nobody listens any more.
    fn listen(&mut self) -> Option<String> {
        let stdin = std::io::stdin();
        loop {
            while let Ok(request) = self.requests.try_recv() {
                match request {
                    Request::Prompt(prompt) => return Some(prompt),
                    Request::History(history) => self.use_history(history),
                }
            }
            let mut fds = [
                rustix::event::PollFd::new(&stdin, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&self.wake, rustix::event::PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return None,
            }
            let stdin_ready = !fds[0].revents().is_empty();
            let woken = !fds[1].revents().is_empty();
            // What was typed first: the editor's raw mode would turn a pending end of input
            // (Ctrl-D in this mode) into nothing.
            if stdin_ready && !self.read_available(&stdin) {
                return None;
            }
            if woken {
                let mut byte = [0u8; 64];
                let _ = rustix::io::read(&self.wake, &mut byte);
            }
        }
    }

    fn use_history(&mut self, history: History) {
        match history {
            History::File(path) => {
                // A missing file is a first chat; any other problem only loses the history.
                if path.exists()
                    && let Err(e) = self.editor.load_history(&path)
                {
                    tracing::warn!(file = %path.display(), error = %e, "chat history not loaded");
                }
                self.history_file = Some(path);
            }
            History::Entries(entries) => {
                for entry in entries {
                    let _ = self.editor.add_history_entry(entry);
                }
            }
        }
    }

    /// Reads what stdin has and sends its whole lines; false at its end.
    fn read_available(&mut self, stdin: &impl AsFd) -> bool {
        let mut buf = [0u8; 4096];
        let n = match rustix::io::read(stdin, &mut buf) {
            Ok(0) => {
                if !self.partial.is_empty() {
                    let last = std::mem::take(&mut self.partial);
                    send_all(vec![line_text(&last)], &self.taken, &self.to);
                }
                return false;
            }
            Ok(n) => n,
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => return true,
            Err(_) => return false,
        };
        for &byte in &buf[..n] {
            match byte {
                // Keys typed while the editor had the terminal in raw mode, read after it gave
                // it back: they mean what they meant to the editor.
                END_OF_TRANSMISSION if self.partial.is_empty() => return false,
                END_OF_TEXT => {
                    self.partial.clear();
                    if self.to.send(Typed::Interrupted).is_err() {
                        return false;
                    }
                }
                byte => self.partial.push(byte),
            }
        }
        let Some(last_newline) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return true;
        };
        let complete: Vec<u8> = self.partial.drain(..=last_newline).collect();
        let lines = complete[..last_newline]
            .split(|&b| b == b'\n')
            .map(line_text)
            .collect();
        send_all(lines, &self.taken, &self.to)
    }
}

fn save_history(editor: &mut rustyline::DefaultEditor, path: &std::path::Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = editor.append_history(path) {
        tracing::warn!(file = %path.display(), error = %e, "chat history not saved");
    }
}

/// Reads lines from `from` until it ends, numbering them. All the lines of one read are
/// counted before the first is sent, so a line typed together with an earlier one is never
/// taken for typed after a question that the earlier one led to.
fn read_lines(mut from: impl BufRead, taken: &AtomicU64, to: &mpsc::UnboundedSender<Typed>) {
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
fn send_all(lines: Vec<String>, taken: &AtomicU64, to: &mpsc::UnboundedSender<Typed>) -> bool {
    let first = taken.fetch_add(lines.len() as u64, Ordering::SeqCst) + 1;
    lines
        .into_iter()
        .zip(first..)
        .all(|(line, number)| to.send(Typed::Line(number, line)).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input_with(taken: u64) -> (Input, mpsc::UnboundedSender<Typed>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Input::reading(rx, Arc::new(AtomicU64::new(taken)), None), tx)
    }

    fn line(number: u64, text: &str) -> Typed {
        Typed::Line(number, text.into())
    }

    #[tokio::test]
    async fn a_question_only_takes_lines_read_after_it_was_shown() {
        let (mut input, tx) = input_with(3);
        input.keep_for_later("typed during the reply".into());
        tx.send(line(1, "y")).unwrap();
        tx.send(line(2, "yes")).unwrap();
        // Line 3 was taken from stdin but is still on its way.
        assert_eq!(input.question_shown(), 3);
        tx.send(line(3, "a")).unwrap();
        tx.send(line(4, "n")).unwrap();
        assert_eq!(input.typed().await.as_deref(), Some("n"));
        drop(tx);
        assert_eq!(input.typed().await, None);
        assert!(input.is_closed());
    }

    #[tokio::test]
    async fn prompts_take_lines_typed_ahead_first() {
        let (mut input, tx) = input_with(1);
        input.keep_for_later("first".into());
        tx.send(line(1, "second")).unwrap();
        assert_eq!(input.prompt("").await, Prompted::Line("first".into()));
        assert_eq!(input.prompt("").await, Prompted::Line("second".into()));
        tx.send(Typed::Interrupted).unwrap();
        assert_eq!(input.prompt("").await, Prompted::Interrupted);
        drop(tx);
        assert_eq!(input.prompt("").await, Prompted::Closed);
    }

    #[test]
    fn the_lines_of_one_read_are_counted_before_any_is_sent() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let taken = AtomicU64::new(0);
        let reader = std::io::BufReader::new(&b"one\r\ntwo\nno newline"[..]);
        read_lines(reader, &taken, &tx);
        assert_eq!(taken.load(Ordering::SeqCst), 3);
        let mut got = Vec::new();
        while let Ok(Typed::Line(number, text)) = rx.try_recv() {
            got.push((number, text));
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
