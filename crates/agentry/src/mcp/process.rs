//! The process of a stdio MCP server: started in its own process group, so that the terminal's
//! Ctrl-C (sent to agentry's foreground group) does not reach it, and stopped with its whole
//! group, so that a server that ignores the end of its stdin, or left children behind, does not
//! outlive agentry.
//!
//! Stopping: close stdin (the caller's transport does), give the server [`STDIN_GRACE`] to exit,
//! then SIGTERM the group, then SIGKILL whatever is left after [`TERM_GRACE`]. Dropping a
//! process that was not stopped sends SIGTERM at once and SIGKILL after [`TERM_GRACE`] from a
//! helper thread; [`kill_all_servers`] does the same for every group still running, for the
//! exit path of a program (it blocks for at most [`TERM_GRACE`]).

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

/// How long a server has to exit by itself once its stdin is closed.
pub(crate) const STDIN_GRACE: Duration = Duration::from_millis(500);
/// How long a server's group has after SIGTERM before SIGKILL.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(1);
/// How often a stopping group is checked.
const POLL: Duration = Duration::from_millis(10);

/// Process groups of the servers started and not yet stopped.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn live_groups() -> MutexGuard<'static, BTreeSet<i32>> {
    LIVE_GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A started stdio server and its pipes.
pub(crate) struct Started {
    pub(crate) process: ServerProcess,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: ChildStdout,
    pub(crate) stderr: Option<ChildStderr>,
}

/// One server process, leader of its own process group.
pub(crate) struct ServerProcess {
    child: Child,
    /// The group id (the server's pid); `None` when the pid could not be read.
    group: Option<i32>,
    stopped: bool,
}

impl ServerProcess {
    /// Starts `command` with piped stdio in a new process group.
    pub(crate) fn spawn(mut command: Command) -> std::io::Result<Started> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(false);
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the server's stdio pipes are missing"));
        };
        let stderr = child.stderr.take();
        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
        if let Some(group) = group {
            live_groups().insert(group);
        }
        Ok(Started {
            process: ServerProcess {
                child,
                group,
                stopped: false,
            },
            stdin,
            stdout,
            stderr,
        })
    }

    /// The server's pid (also its process group id).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.group.and_then(|g| u32::try_from(g).ok())
    }

    /// Stops the server and its group once its stdin is closed: waits [`STDIN_GRACE`] for it
    /// to exit, then SIGTERM, then SIGKILL. Returns within about `STDIN_GRACE + 2 * TERM_GRACE`.
    pub(crate) async fn stop(mut self) {
        let exited = tokio::time::timeout(STDIN_GRACE, self.child.wait()).await.is_ok();
        if let Some(group) = self.group {
            // Children of the server may still run in its group after it exited.
            if !exited || group_alive(group) {
                tracing::debug!(
                    group,
                    "the MCP server did not exit after its stdin closed; SIGTERM"
                );
                signal_group(group, Signal::Term);
                if !wait_group_gone(group, &mut self.child, TERM_GRACE).await {
                    tracing::warn!(group, "the MCP server ignored SIGTERM; SIGKILL");
                    signal_group(group, Signal::Kill);
                    wait_group_gone(group, &mut self.child, TERM_GRACE).await;
                }
            }
            live_groups().remove(&group);
        } else {
            let _ = self.child.kill().await;
        }
        self.stopped = true;
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let Some(group) = self.group else {
            let _ = self.child.start_kill();
            return;
        };
        // Not stopped (a dropped client, a failed start): no runtime to wait on, so SIGTERM
        // now and SIGKILL from a thread if the group is still there after the grace period.
        if group_alive(group) {
            signal_group(group, Signal::Term);
            let _ = std::thread::Builder::new()
                .name("agentry-mcp-reaper".into())
                .spawn(move || {
                    if !block_until_gone(&[group], TERM_GRACE) {
                        signal_group(group, Signal::Kill);
                    }
                });
        }
        live_groups().remove(&group);
    }
}

/// Kills the process groups of every stdio MCP server still running in this process: SIGTERM,
/// then SIGKILL to the groups left after a short grace period (1 s). Blocks for at most that
/// long. Meant for the exit path of a program (after a signal, say), where the clients' own
/// `close` may not get to run; clients closed normally have nothing left for it to do.
pub fn kill_all_servers() {
    let groups: Vec<i32> = std::mem::take(&mut *live_groups()).into_iter().collect();
    let alive: Vec<i32> = groups.into_iter().filter(|g| group_alive(*g)).collect();
    if alive.is_empty() {
        return;
    }
    for group in &alive {
        signal_group(*group, Signal::Term);
    }
    if !block_until_gone(&alive, TERM_GRACE) {
        for group in alive.iter().filter(|g| group_alive(**g)) {
            signal_group(*group, Signal::Kill);
        }
    }
}

#[derive(Clone, Copy)]
enum Signal {
    Term,
    Kill,
}

#[cfg(unix)]
fn signal_group(group: i32, signal: Signal) {
    use rustix::process::{Pid, Signal as Sig, kill_process_group};
    let Some(pid) = Pid::from_raw(group) else { return };
    let sig = match signal {
        Signal::Term => Sig::TERM,
        Signal::Kill => Sig::KILL,
    };
    if let Err(e) = kill_process_group(pid, sig)
        && e != rustix::io::Errno::SRCH
    {
        tracing::debug!(group, error = %e, "cannot signal the MCP server's process group");
    }
}

#[cfg(not(unix))]
fn signal_group(_group: i32, _signal: Signal) {}

/// Whether any process of the group exists (an unreaped leader counts).
#[cfg(unix)]
fn group_alive(group: i32) -> bool {
    rustix::process::Pid::from_raw(group)
        .is_some_and(|pid| rustix::process::test_kill_process_group(pid).is_ok())
}

#[cfg(not(unix))]
fn group_alive(_group: i32) -> bool {
    false
}

/// Waits until the group is gone (reaping the leader on the way), at most `limit`.
async fn wait_group_gone(group: i32, leader: &mut Child, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let _ = leader.try_wait();
        if !group_alive(group) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Blocks until every group is gone, at most `limit`.
fn block_until_gone(groups: &[i32], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !groups.iter().any(|g| group_alive(*g)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}
