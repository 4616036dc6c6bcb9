//! The live lines under a reply on a terminal: "waiting for the model" until it answers, a
//! tool call's arguments as the model writes them, and a line per running call with its
//! progress and elapsed time. They are redrawn in place (indicatif) and vanish when what they
//! show is over; the lasting record is the line the renderer prints when a call finishes.
//!
//! Everything is drawn from the task that drives the reply: there is no ticking thread, so
//! nothing is drawn while other output is written except through [`Live::suspend`].

use std::time::{Duration, Instant};

use agentry::CallId;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::sanitize::{self, NAME_CHARS};

/// Characters shown of a call's arguments and of its progress on its live line (the line is
/// also cut to the terminal's width).
const LIVE_CHARS: usize = 200;

/// What a live call line shows.
enum Phase {
    /// The model is still writing the call.
    Written,
    /// Waiting for the user's approval.
    Asking,
    /// Running since this instant, with its last progress report.
    Running {
        since: Instant,
        progress: Option<String>,
    },
}

struct LiveCall {
    id: CallId,
    bar: ProgressBar,
    /// "name(arguments)", shortened and escaped.
    call: String,
    phase: Phase,
    /// The calls it makes of its own (a sub-agent's), a line each under it, by id: the most
    /// recent [`NESTED_LINES`].
    nested: Vec<(String, ProgressBar)>,
}

/// The most lines of nested calls shown under a call.
const NESTED_LINES: usize = 6;

/// The live lines of one terminal.
pub struct Live {
    multi: MultiProgress,
    /// "waiting for the model", and since when.
    waiting: Option<(ProgressBar, Instant)>,
    /// In the order the model wrote them.
    calls: Vec<LiveCall>,
    /// Hidden while a question waits for the user's answer.
    paused: bool,
}

impl Live {
    /// Lines drawn on stderr (which must be a terminal).
    pub fn stderr() -> Self {
        Live {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            waiting: None,
            calls: Vec::new(),
            paused: false,
        }
    }

    fn line(&self) -> ProgressBar {
        let style = ProgressStyle::with_template("{spinner} {wide_msg} {prefix}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ");
        self.multi.add(ProgressBar::new_spinner().with_style(style))
    }

    /// Whether any line is showing (or would, once unpaused).
    pub fn is_active(&self) -> bool {
        self.waiting.is_some() || !self.calls.is_empty()
    }

    /// A request went to the model: show that it is awaited until it answers.
    pub fn waiting_for_model(&mut self) {
        if self.waiting.is_none() {
            let bar = self.line();
            bar.set_message("waiting for the model…");
            self.waiting = Some((bar, Instant::now()));
            self.tick();
        }
    }

    /// The model answers: its first words (or call) arrived.
    pub fn model_answers(&mut self) {
        if let Some((bar, _)) = self.waiting.take() {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }

    /// The model is writing call `id`: its arguments so far.
    pub fn call_written(&mut self, id: &CallId, name: &str, arguments: &str) {
        self.show_call(id, call_text(name, arguments), None);
    }

    /// Call `id` entered the runtime with these arguments (it may still wait for approval).
    pub fn call_started(&mut self, id: &CallId, name: &str, arguments: &str) {
        let running = Phase::Running {
            since: Instant::now(),
            progress: None,
        };
        self.show_call(id, call_text(name, arguments), Some(running));
    }

    /// Shows `call` on the line of call `id` (a new line: written), in `phase` when given.
    fn show_call(&mut self, id: &CallId, call: String, phase: Option<Phase>) {
        let at = match self.calls.iter().position(|c| c.id == *id) {
            Some(at) => at,
            None => {
                let bar = self.line();
                self.calls.push(LiveCall {
                    id: id.clone(),
                    bar,
                    call: String::new(),
                    phase: Phase::Written,
                    nested: Vec::new(),
                });
                self.calls.len() - 1
            }
        };
        if let Some(live) = self.calls.get_mut(at) {
            live.call = call;
            if let Some(phase) = phase {
                live.phase = phase;
            }
        }
        self.tick();
    }

    /// Call `id` waits for the user's approval.
    pub fn call_asks(&mut self, id: &str) {
        if let Some(live) = self.calls.iter_mut().find(|c| c.id == id) {
            live.phase = Phase::Asking;
        }
    }

    /// Call `id` was approved: it runs from now.
    pub fn call_approved(&mut self, id: &str) {
        if let Some(live) = self.calls.iter_mut().find(|c| c.id == id) {
            live.phase = Phase::Running {
                since: Instant::now(),
                progress: None,
            };
        }
        self.tick();
    }

    /// Call `id` reported progress.
    pub fn progress(&mut self, id: &str, message: &str) {
        if let Some(live) = self.calls.iter_mut().find(|c| c.id == id)
            && let Phase::Running { progress, .. } = &mut live.phase
        {
            *progress = Some(sanitize::summary(message, LIVE_CHARS));
        }
        self.tick();
    }

    /// Call `id` reported on a call of its own (`nested` names it): its line under the call.
    pub fn nested(&mut self, id: &str, nested: &str, message: &str) {
        let text = format!("  ↳ {}", sanitize::summary(message, LIVE_CHARS));
        let Some(live) = self.calls.iter_mut().find(|c| c.id == id) else {
            return;
        };
        if let Some((_, bar)) = live.nested.iter().find(|(n, _)| n == nested) {
            bar.set_message(text);
        } else {
            let after = live.nested.last().map(|(_, bar)| bar).unwrap_or(&live.bar);
            let style = ProgressStyle::with_template("{wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            let bar = self
                .multi
                .insert_after(after, ProgressBar::new_spinner().with_style(style));
            bar.set_message(text);
            live.nested.push((nested.to_owned(), bar));
            if live.nested.len() > NESTED_LINES {
                let (_, oldest) = live.nested.remove(0);
                oldest.finish_and_clear();
                self.multi.remove(&oldest);
            }
        }
        self.tick();
    }

    /// Call `id` is over: its lines go.
    pub fn call_finished(&mut self, id: &str) {
        if let Some(at) = self.calls.iter().position(|c| c.id == id) {
            let live = self.calls.remove(at);
            self.remove(live);
        }
    }

    fn remove(&self, live: LiveCall) {
        for (_, bar) in live.nested {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
        live.bar.finish_and_clear();
        self.multi.remove(&live.bar);
    }

    /// The reply is over: every line goes.
    pub fn clear(&mut self) {
        self.model_answers();
        for live in std::mem::take(&mut self.calls) {
            self.remove(live);
        }
    }

    /// Redraws the lines with the time now.
    pub fn tick(&self) {
        if self.paused {
            return;
        }
        let now = Instant::now();
        if let Some((bar, since)) = &self.waiting {
            bar.set_prefix(elapsed(now.duration_since(*since)));
            bar.tick();
        }
        for live in &self.calls {
            let (message, prefix) = match &live.phase {
                Phase::Written => (format!("✎ {}", live.call), String::new()),
                Phase::Asking => (
                    format!("⚙ {} · waiting for your approval", live.call),
                    String::new(),
                ),
                Phase::Running { since, progress } => (
                    match progress {
                        Some(progress) => format!("⚙ {} ⋯ {progress}", live.call),
                        None => format!("⚙ {}", live.call),
                    },
                    elapsed(now.duration_since(*since)),
                ),
            };
            live.bar.set_message(message);
            live.bar.set_prefix(prefix);
            live.bar.tick();
            for (_, bar) in &live.nested {
                bar.tick();
            }
        }
    }

    /// Runs `write` with the lines taken away, then draws them again below what it wrote.
    pub fn suspend<R>(&self, write: impl FnOnce() -> R) -> R {
        if self.paused {
            write()
        } else {
            self.multi.suspend(write)
        }
    }

    /// Hides the lines (a question is asked: the user types under it).
    pub fn pause(&mut self) {
        if !self.paused {
            let _ = self.multi.clear();
            self.multi.set_draw_target(ProgressDrawTarget::hidden());
            self.paused = true;
        }
    }

    /// Shows the lines again.
    pub fn resume(&mut self) {
        if self.paused {
            self.multi.set_draw_target(ProgressDrawTarget::stderr());
            self.paused = false;
            self.tick();
        }
    }
}

fn call_text(name: &str, arguments: &str) -> String {
    format!(
        "{}({})",
        sanitize::short(name, NAME_CHARS),
        sanitize::summary(arguments, LIVE_CHARS)
    )
}

fn elapsed(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_line_follows_the_call_from_written_to_finished() {
        let mut live = Live {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
            waiting: None,
            calls: Vec::new(),
            paused: false,
        };
        live.waiting_for_model();
        assert!(live.is_active());
        live.model_answers();
        assert!(!live.is_active());
        let id = CallId::new("c1");
        live.call_written(&id, "search", "{\"q\":\"ru");
        live.tick();
        assert_eq!(live.calls[0].bar.message(), "✎ search({\"q\":\"ru)");
        live.call_started(&id, "search", "{\"q\":\"rust\"}");
        live.progress("c1", "page\u{1b}[2J 2");
        live.tick();
        assert_eq!(
            live.calls[0].bar.message(),
            "⚙ search({\"q\":\"rust\"}) ⋯ page\\e[2J 2"
        );
        assert!(live.calls[0].bar.prefix().ends_with(" s"));
        live.call_finished("c1");
        assert!(!live.is_active());
    }
}
