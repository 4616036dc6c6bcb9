//! A running `agentry` on a pseudo-terminal: what a person at a terminal sees and types,
//! keys included (arrows, backspace, Ctrl-C as the byte a keyboard sends). Every wait has a
//! deadline; nothing waits for a fixed time.

use std::path::Path;
use std::time::Duration;

use expectrl::process::unix::WaitStatus;
use expectrl::{Eof, Expect, Session};

/// How long any single wait on the program may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// Keys as a terminal sends them.
pub mod keys {
    pub const ENTER: &str = "\r";
    pub const BACKSPACE: &str = "\x7f";
    pub const UP: &str = "\x1b[A";
    pub const LEFT: &str = "\x1b[D";
    pub const CTRL_C: &str = "\x03";
    pub const CTRL_D: &str = "\x04";
}

/// `agentry` on a terminal of 120 × 40.
pub struct Tty {
    session: expectrl::session::OsSession,
    /// Everything the program wrote so far, escape sequences included.
    seen: String,
}

impl Tty {
    /// Starts the binary with `args` in the clean environment of [`super::command`].
    pub fn start(args: &[String], home: &Path) -> Tty {
        let mut command = super::command(args, home);
        command.env("TERM", "xterm-256color");
        let mut session = Session::spawn(command).unwrap();
        session.set_expect_timeout(Some(DEADLINE));
        session.get_process_mut().set_window_size(120, 40).unwrap();
        Tty {
            session,
            seen: String::new(),
        }
    }

    /// Waits until the terminal shows `what` (after what was already waited for).
    pub fn shows(&mut self, what: &str) {
        let found = tokio::task::block_in_place(|| self.session.expect(what));
        match found {
            Ok(captures) => {
                self.seen.push_str(&String::from_utf8_lossy(captures.before()));
                self.seen.push_str(what);
            }
            Err(e) => panic!("{what:?} never appeared ({e}).\nSo far:\n{}", self.seen),
        }
    }

    /// Sends keys (text or [`keys`]).
    pub fn press(&mut self, keys: &str) {
        self.session.send(keys).unwrap();
    }

    /// Types `line` and Enter.
    pub fn enter(&mut self, line: &str) {
        self.press(line);
        self.press(keys::ENTER);
    }

    /// Everything shown so far.
    pub fn seen(&self) -> &str {
        &self.seen
    }

    /// Waits for the program to end; its exit code.
    pub fn exit_code(mut self) -> i32 {
        let ended = tokio::task::block_in_place(|| self.session.expect(Eof));
        if let Ok(captures) = &ended {
            self.seen.push_str(&String::from_utf8_lossy(captures.before()));
        }
        assert!(ended.is_ok(), "the program did not end.\nSo far:\n{}", self.seen);
        match self.session.get_process().wait().unwrap() {
            WaitStatus::Exited(_, code) => code,
            other => panic!("ended with {other:?}.\nSo far:\n{}", self.seen),
        }
    }
}
