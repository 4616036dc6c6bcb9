//! A running `agentry` driven like a terminal user: lines typed on stdin, signals sent, and its
//! output collected as it comes. Every wait has a deadline; nothing waits for a fixed time.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

/// How long any single wait on the program may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// One output stream of the program: the text so far, updated by a reader thread.
struct Stream {
    text: watch::Receiver<String>,
    reader: JoinHandle<()>,
}

fn collect(mut from: impl Read + Send + 'static) -> Stream {
    let (tx, text) = watch::channel(String::new());
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut pending = Vec::new();
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&buf[..n]);
            // Only whole UTF-8 characters: a split one must not become U+FFFD.
            let valid = match std::str::from_utf8(&pending) {
                Ok(_) => pending.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => pending.len(),
            };
            let chunk: Vec<u8> = pending.drain(..valid).collect();
            tx.send_modify(|text| text.push_str(&String::from_utf8_lossy(&chunk)));
        }
        if !pending.is_empty() {
            tx.send_modify(|text| text.push_str(&String::from_utf8_lossy(&pending)));
        }
    });
    Stream { text, reader }
}

/// A running `agentry`.
pub struct Program {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Stream,
    stderr: Stream,
}

impl Program {
    /// Starts the binary with `args` in the clean environment of [`super::command`].
    pub fn start(args: &[String], home: &Path) -> Program {
        Self::start_command(super::command(args, home))
    }

    /// Starts a prepared [`super::command`] (e.g. with more variables set).
    pub fn start_command(mut command: std::process::Command) -> Program {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        let stdin = child.stdin.take();
        Program {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    /// The process id, e.g. to send it a signal.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn output_so_far(&self) -> String {
        format!(
            "stdout: {}\nstderr: {}",
            self.stdout.text.borrow().as_str(),
            self.stderr.text.borrow().as_str()
        )
    }

    async fn wait_for(&self, stream: &Stream, what: &str) {
        let mut text = stream.text.clone();
        let found = tokio::time::timeout(DEADLINE, text.wait_for(|t| t.contains(what))).await;
        assert!(
            matches!(found, Ok(Ok(_))),
            "{what:?} never appeared.\n{}",
            self.output_so_far()
        );
    }

    /// stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.text.borrow().clone()
    }

    /// Waits until stderr shows `what`.
    pub async fn stderr_has(&self, what: &str) {
        self.wait_for(&self.stderr, what).await;
    }

    /// Waits until stdout shows `what`.
    pub async fn stdout_has(&self, what: &str) {
        self.wait_for(&self.stdout, what).await;
    }

    /// Waits until stderr shows `what` `n` times.
    pub async fn stderr_has_n(&self, what: &str, n: usize) {
        let mut text = self.stderr.text.clone();
        let found = tokio::time::timeout(DEADLINE, text.wait_for(|t| t.matches(what).count() >= n)).await;
        assert!(
            matches!(found, Ok(Ok(_))),
            "{what:?} never appeared {n} times.\n{}",
            self.output_so_far()
        );
    }

    /// Writes `line` and a newline to stdin.
    pub fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin, as Ctrl-D at the start of a line does.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Sends SIGINT, as Ctrl-C in a terminal does.
    pub fn interrupt(&self) {
        self.signal(rustix::process::Signal::INT);
    }

    /// Sends SIGKILL, as `kill -9` does: the process dies at once, nothing of it runs.
    pub fn kill(&self) {
        self.signal(rustix::process::Signal::KILL);
    }

    /// Sends SIGTERM, as `kill` and service managers do.
    pub fn terminate(&self) {
        self.signal(rustix::process::Signal::TERM);
    }

    /// Waits for the program to exit (stdin still open), then for its whole output (the reader threads end when
    /// the pipes close). Returns the exit status, stdout and stderr.
    pub async fn finish(self) -> (ExitStatus, String, String) {
        // stdin stays open until the program exited: closing it is an answer of its own (no
        // decision), which would race with a signal just sent.
        let _stdin = self.stdin;
        let mut child = self.child;
        let pid = child.id();
        let waited = tokio::task::spawn_blocking(move || {
            let status = child.wait();
            (child, status)
        });
        let status = match tokio::time::timeout(DEADLINE, waited).await {
            Ok(Ok((_, status))) => status.unwrap(),
            _ => {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                panic!(
                    "agentry did not exit within {DEADLINE:?}.\nstdout: {}\nstderr: {}",
                    self.stdout.text.borrow().as_str(),
                    self.stderr.text.borrow().as_str()
                )
            }
        };
        let mut texts = Vec::new();
        for stream in [self.stdout, self.stderr] {
            let Stream { text, reader } = stream;
            let joined = tokio::task::spawn_blocking(move || reader.join());
            let joined = tokio::time::timeout(DEADLINE, joined).await;
            assert!(
                matches!(joined, Ok(Ok(Ok(())))),
                "a pipe of agentry stayed open after it exited (a child process kept it?): {}",
                text.borrow().as_str()
            );
            texts.push(text.borrow().clone());
        }
        let err = texts.pop().unwrap_or_default();
        let out = texts.pop().unwrap_or_default();
        (status, out, err)
    }
}
