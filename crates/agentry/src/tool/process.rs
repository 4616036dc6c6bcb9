//! Child processes a tool starts, stopped together with its call (spec X14).
//!
//! A tool that runs a command through [`spawn_process`] needs no cancel handling of its own for
//! the process: when the call is cancelled or times out, the child and everything it started
//! are killed at once, and again when the [`ToolProcess`] is dropped (the body dropped after its
//! cancel grace, or a body that simply forgot the process).

use std::io;
use std::process::{ExitStatus, Output};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::ToolContext;

/// A child process started for a tool call with [`spawn_process`].
///
/// On Unix the child leads its own process group, so the terminal's Ctrl-C does not reach it
/// and the whole group (the child and its own children) can be killed with SIGKILL: this
/// happens the moment the call is cancelled or times out, and when this value is dropped. Once
/// the child has exited, dropping this value still kills what it left running in its group.
/// Elsewhere only the child itself is killed.
///
/// ```no_run
/// use agentry::tool::{ToolContext, spawn_process};
/// # async fn body(ctx: ToolContext) -> std::io::Result<String> {
/// let mut cmd = tokio::process::Command::new("grep");
/// cmd.args(["-r", "needle", "."]).stdout(std::process::Stdio::piped());
/// let output = spawn_process(&ctx, cmd)?.output().await?;
/// Ok(String::from_utf8_lossy(&output.stdout).into_owned())
/// # }
/// ```
#[derive(Debug)]
pub struct ToolProcess {
    child: Child,
    /// The process group id (the child's pid), where groups exist.
    group: Option<u32>,
    /// Kills the group when the call's token is cancelled.
    watcher: JoinHandle<()>,
}

/// Starts `cmd` for the call of `ctx`, in its own process group, killed when the call is
/// cancelled or times out and when the returned [`ToolProcess`] is dropped.
///
/// Fails with [`io::ErrorKind::Interrupted`] without starting anything when the call was already
/// cancelled, and with the spawn error when the command cannot start. Must be called inside a
/// tokio runtime (it starts a small watcher task).
pub fn spawn_process(ctx: &ToolContext, mut cmd: Command) -> io::Result<ToolProcess> {
    if ctx.is_cancelled() {
        return Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "the tool call was cancelled; the process was not started",
        ));
    }
    #[cfg(unix)]
    cmd.process_group(0);
    cmd.kill_on_drop(true);
    let child = cmd.spawn()?;
    let group = if cfg!(unix) { child.id() } else { None };
    let token = ctx.cancellation_token().clone();
    let call_id = ctx.call_id().to_string();
    let watcher = tokio::spawn(async move {
        token.cancelled().await;
        if let Some(group) = group {
            tracing::debug!(
                call_id = call_id.as_str(),
                group,
                "the call was cancelled: killing its process group"
            );
            kill_group(group);
        }
    });
    Ok(ToolProcess {
        child,
        group,
        watcher,
    })
}

impl ToolProcess {
    /// The child's process id, while it has not been waited for.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The child itself: its pipes (`stdin`, `stdout`, `stderr`) and everything else tokio
    /// offers. Killing or waiting through it is fine; the group is still killed on cancel.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for the child to exit. After a cancel it exits at once (killed by SIGKILL).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Waits for the child to exit while reading its piped stdout and stderr to the end (pipes
    /// that were not set to `Stdio::piped()` read as empty).
    pub async fn output(mut self) -> io::Result<Output> {
        let stdout = self.child.stdout.take();
        let stderr = self.child.stderr.take();
        let (status, stdout, stderr) =
            tokio::try_join!(self.child.wait(), read_all(stdout), read_all(stderr))?;
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }
}

impl Drop for ToolProcess {
    fn drop(&mut self) {
        self.watcher.abort();
        match self.group {
            Some(group) => kill_group(group),
            // Without process groups, kill_on_drop stops the child itself.
            None => {
                let _ = self.child.start_kill();
            }
        }
    }
}

async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if let Some(mut pipe) = pipe {
        pipe.read_to_end(&mut buf).await?;
    }
    Ok(buf)
}

/// SIGKILL to every process of the group. A group that is already gone is not an error.
#[cfg(unix)]
fn kill_group(group: u32) {
    use rustix::process::{Pid, Signal, kill_process_group};
    let Some(pid) = i32::try_from(group).ok().and_then(Pid::from_raw) else {
        return;
    };
    match kill_process_group(pid, Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(error) => tracing::warn!(group, %error, "cannot kill a tool's process group"),
    }
}

#[cfg(not(unix))]
fn kill_group(_group: u32) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;

    /// Whether `pid` no longer runs: no such process, or a zombie nobody reaped yet.
    fn gone(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the command name in parentheses: "pid (comm) S ...".
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    async fn until_gone(pid: u32) -> bool {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !gone(pid) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .is_ok()
    }

    /// A shell that starts `sleep 1000` in the background, prints its pid, and waits.
    fn shell_with_grandchild() -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 1000 & echo $!; wait"])
            .stdout(std::process::Stdio::piped());
        cmd
    }

    async fn grandchild_pid(process: &mut ToolProcess) -> Option<u32> {
        use tokio::io::AsyncBufReadExt;
        let stdout = process.child_mut().stdout.take()?;
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await
            .ok()?;
        line.trim().parse().ok()
    }

    #[tokio::test]
    async fn x14_a_cancel_kills_the_whole_group_at_once() {
        let token = CancellationToken::new();
        let ctx = ToolContext::new("c", "t", token.clone());
        let Ok(mut process) = spawn_process(&ctx, shell_with_grandchild()) else {
            panic!("sh did not start");
        };
        let child = process.id();
        let grandchild = grandchild_pid(&mut process).await;
        let (Some(child), Some(grandchild)) = (child, grandchild) else {
            panic!("no pids: {child:?} {grandchild:?}");
        };
        assert!(!gone(child) && !gone(grandchild));
        token.cancel();
        // The value is still alive: only the cancel can have killed them.
        assert!(until_gone(grandchild).await, "the grandchild survived the cancel");
        let status = tokio::time::timeout(Duration::from_secs(10), process.wait()).await;
        assert!(
            matches!(status, Ok(Ok(s)) if !s.success()),
            "the child was not killed: {status:?}"
        );
        drop(process);
    }

    #[tokio::test]
    async fn x14_dropping_the_process_kills_the_group() {
        let ctx = ToolContext::new("c", "t", CancellationToken::new());
        let Ok(mut process) = spawn_process(&ctx, shell_with_grandchild()) else {
            panic!("sh did not start");
        };
        let (Some(child), Some(grandchild)) = (process.id(), grandchild_pid(&mut process).await) else {
            panic!("no pids");
        };
        drop(process);
        assert!(until_gone(grandchild).await, "the grandchild survived the drop");
        assert!(until_gone(child).await, "the child survived the drop");
    }

    #[tokio::test]
    async fn a_cancelled_call_starts_nothing_and_a_finished_one_reports_its_output() {
        let token = CancellationToken::new();
        let ctx = ToolContext::new("c", "t", token.clone());
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo out; echo err >&2"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let Ok(process) = spawn_process(&ctx, echo) else {
            panic!("sh did not start");
        };
        let Ok(output) = process.output().await else {
            panic!("no output");
        };
        assert!(output.status.success());
        assert_eq!(
            (output.stdout.as_slice(), output.stderr.as_slice()),
            (&b"out\n"[..], &b"err\n"[..])
        );
        token.cancel();
        let refused = spawn_process(&ctx, Command::new("true"));
        assert_eq!(
            refused.map(|_| ()).map_err(|e| e.kind()),
            Err(io::ErrorKind::Interrupted)
        );
    }
}
