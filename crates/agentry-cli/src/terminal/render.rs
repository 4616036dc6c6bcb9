//! Showing a reply in the terminal: the answer streams to stdout, one line per tool call and
//! the model's thinking go to stderr.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::Duration;

use agentry::CallId;
use agentry::agent::{AgentEvent, StopReason, ToolCallState};
use agentry::message::{ContentBlock, Msg, Role};
use agentry::tool::ApprovalDecision;

use super::live::Live;
use super::sanitize::{self, NAME_CHARS};

/// Terminal styling, off when the stream is not a terminal or `NO_COLOR` is set.
#[derive(Clone, Copy)]
pub struct Style {
    color: bool,
}

impl Style {
    pub fn detect(stream_is_terminal: bool) -> Self {
        Style {
            color: stream_is_terminal && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn cyan(self, text: &str) -> String {
        self.paint("36", text)
    }
}

/// Turns events into terminal output.
pub struct Renderer<O: Write, E: Write> {
    out: O,
    err: E,
    style: Style,
    /// Bytes of text (and of thinking) already shown, per message id.
    shown_text: HashMap<String, usize>,
    shown_thinking: HashMap<String, usize>,
    /// Whether stdout is in the middle of a line.
    open_line: bool,
    /// Arguments as the model wrote them, from its finished message: call id → text.
    sent_args: HashMap<CallId, String>,
    /// Tool calls that started: call id → (name, arguments), both shortened and escaped.
    calls: HashMap<CallId, (String, String)>,
    /// Final results: call id → (summary, is_error).
    results: HashMap<CallId, (String, bool)>,
    /// When progress of a call was last shown (one line a second at most).
    progress_shown: HashMap<CallId, std::time::Instant>,
    /// Whether the tool-shim note was printed (once: one renderer per process).
    shim_noted: bool,
    /// The live lines, on a terminal.
    live: Option<Live>,
}

/// Said once when the tool shim recovered a call the model wrote as text.
pub const TOOL_SHIM_NOTE: &str = "note: the model wrote its tool call as text; agentry recovered it (tool shim). --no-tool-shim turns this off.";

/// Characters shown of arguments, results and progress messages.
const SUMMARY_CHARS: usize = 120;

impl<O: Write, E: Write> Renderer<O, E> {
    pub fn new(out: O, err: E, style: Style) -> Self {
        Renderer {
            out,
            err,
            style,
            shown_text: HashMap::new(),
            shown_thinking: HashMap::new(),
            open_line: false,
            sent_args: HashMap::new(),
            calls: HashMap::new(),
            results: HashMap::new(),
            progress_shown: HashMap::new(),
            shim_noted: false,
            live: None,
        }
    }

    /// Shows live lines (waiting for the model, calls being written and running) on `live`.
    pub fn with_live(mut self, live: Live) -> Self {
        self.live = Some(live);
        self
    }

    /// Runs `write` (which prints something else) with the live lines out of its way.
    pub fn suspend<R>(&self, write: impl FnOnce() -> R) -> R {
        match &self.live {
            Some(live) => live.suspend(write),
            None => write(),
        }
    }

    /// A reply starts: its first request goes to the model.
    pub fn reply_started(&mut self) {
        if let Some(live) = &mut self.live {
            live.waiting_for_model();
        }
    }

    /// Redraws the live lines (their elapsed times).
    pub fn tick(&self) {
        if let Some(live) = &self.live {
            live.tick();
        }
    }

    /// Whether live lines are showing, to be redrawn as time passes.
    pub fn is_live(&self) -> bool {
        self.live.as_ref().is_some_and(Live::is_active)
    }

    /// Hides the live lines while the user answers a question, or shows them again.
    pub fn pause_live(&mut self, paused: bool) {
        if let Some(live) = &mut self.live {
            if paused {
                live.pause();
            } else {
                live.resume();
            }
        }
    }

    /// Writes with the live lines out of the way.
    fn emit(&mut self, write: impl FnOnce(&mut O, &mut E) -> io::Result<()>) -> io::Result<()> {
        let (out, err) = (&mut self.out, &mut self.err);
        match &self.live {
            Some(live) => live.suspend(|| write(out, err)),
            None => write(out, err),
        }
    }

    pub fn event(&mut self, event: &AgentEvent) -> io::Result<()> {
        match event {
            AgentEvent::Message { msg, last } => self.message(msg, *last),
            AgentEvent::ToolStarted {
                call_id, name, input, ..
            } => {
                let sent = self.sent_args.remove(call_id);
                // What runs (after hooks) when it is an object; otherwise what the model sent,
                // which is what the model is told was wrong.
                let args = match sent {
                    Some(sent) if !input.is_object() => sent,
                    _ => input.to_string(),
                };
                if let Some(live) = &mut self.live {
                    live.call_started(call_id, name, &args);
                }
                self.calls.insert(
                    call_id.clone(),
                    (
                        sanitize::short(name, NAME_CHARS),
                        sanitize::summary(&args, SUMMARY_CHARS),
                    ),
                );
                Ok(())
            }
            AgentEvent::ToolProgress {
                call_id,
                id: Some(id),
                message,
                nested: true,
                ..
            } => match &mut self.live {
                Some(live) => {
                    live.nested(call_id, id, message);
                    Ok(())
                }
                None => self.nested(message),
            },
            AgentEvent::ToolProgress { call_id, message, .. } => match &mut self.live {
                Some(live) => {
                    live.progress(call_id, message);
                    Ok(())
                }
                None => self.progress(call_id, message),
            },
            AgentEvent::ApprovalRequested {
                call_id,
                automatic: false,
                ..
            } => {
                if let Some(live) = &mut self.live {
                    live.call_asks(call_id);
                }
                Ok(())
            }
            AgentEvent::ApprovalResolved {
                call_id,
                decision: ApprovalDecision::Approve | ApprovalDecision::ApproveForSession,
                ..
            } => {
                if let Some(live) = &mut self.live {
                    live.call_approved(call_id);
                }
                Ok(())
            }
            AgentEvent::TextCallsRecovered { .. } if !self.shim_noted => {
                self.shim_noted = true;
                self.end_line()?;
                let note = self.style.dim(TOOL_SHIM_NOTE);
                self.emit(|_, err| {
                    writeln!(err, "{note}")?;
                    err.flush()
                })
            }
            AgentEvent::ToolFinished {
                call_id,
                name,
                state,
                duration,
                ..
            } => {
                // Its live line goes first, so that it is not drawn again under its record.
                if let Some(live) = &mut self.live {
                    live.call_finished(call_id);
                }
                self.tool_line(call_id, name, state, *duration)?;
                if let Some(live) = &mut self.live
                    && !live.is_active()
                {
                    // The results go back to the model (unless the reply ends, which clears
                    // this line at once).
                    live.waiting_for_model();
                }
                Ok(())
            }
            AgentEvent::ContextCompacted { messages, .. } => {
                self.end_line()?;
                let note = self.style.dim(&format!(
                    "(the conversation was compacted: {messages} earlier messages are now a summary; they stay in the session)"
                ));
                self.emit(|_, err| {
                    writeln!(err, "{note}")?;
                    err.flush()
                })
            }
            AgentEvent::PlanChanged { plan, .. } => {
                self.end_line()?;
                let lines = super::plan_view::plan_lines(plan.as_ref());
                let style = self.style;
                self.emit(|_, err| {
                    for line in &lines {
                        writeln!(err, "{}", style.cyan(line))?;
                    }
                    err.flush()
                })
            }
            AgentEvent::ReplyFinished { stop_reason, .. } => {
                if let Some(live) = &mut self.live {
                    live.clear();
                }
                self.end_line()?;
                let note = match stop_reason {
                    StopReason::MaxIters => {
                        Some("(the step limit was reached; the answer above is the model's summary)")
                    }
                    StopReason::RepeatedCalls => Some(
                        "(the model kept repeating calls it had the results of; the answer above is its summary)",
                    ),
                    _ => None,
                };
                if let Some(note) = note {
                    writeln!(self.err, "{}", self.style.dim(note))?;
                }
                self.err.flush()
            }
            _ => Ok(()),
        }
    }

    fn progress(&mut self, call_id: &str, message: &str) -> io::Result<()> {
        let now = std::time::Instant::now();
        if self
            .progress_shown
            .get(call_id)
            .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(1))
        {
            return Ok(());
        }
        self.progress_shown.insert(call_id.into(), now);
        self.end_line()?;
        let name = self
            .calls
            .get(call_id)
            .map(|(name, _)| name.as_str())
            .unwrap_or("tool");
        let line = self.style.dim(&format!(
            "  ⋯ {name}: {}",
            sanitize::summary(message, SUMMARY_CHARS)
        ));
        writeln!(self.err, "{line}")?;
        self.err.flush()
    }

    /// A call's call of its own (a sub-agent's), indented under it; every report is shown, they
    /// are few (its start, its progress, its result).
    fn nested(&mut self, message: &str) -> io::Result<()> {
        self.end_line()?;
        let line = self
            .style
            .dim(&format!("    ↳ {}", sanitize::summary(message, SUMMARY_CHARS)));
        writeln!(self.err, "{line}")?;
        self.err.flush()
    }

    fn message(&mut self, msg: &Msg, last: bool) -> io::Result<()> {
        match msg.role {
            Role::Assistant => {
                if let Some(live) = &mut self.live {
                    live.model_answers();
                }
                let thinking: String = msg
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
                        _ => None,
                    })
                    .collect();
                let shown = self.shown_thinking.entry(msg.id.clone()).or_insert(0);
                if let Some(new) = thinking.get(*shown..).filter(|s| !s.is_empty()) {
                    let new = self.style.dim(&sanitize::multiline(new));
                    *shown = thinking.len();
                    self.emit(|_, err| {
                        write!(err, "{new}")?;
                        err.flush()
                    })?;
                }
                let text = msg.text().unwrap_or_default();
                let shown = self.shown_text.entry(msg.id.clone()).or_insert(0);
                let new = match text.get(*shown..) {
                    Some(new) => new.to_owned(),
                    // A hook rewrote what was already shown: start a fresh line.
                    None => format!("\n{text}"),
                };
                if !new.is_empty() {
                    *shown = text.len();
                    let mut new = sanitize::multiline(&new);
                    self.open_line = !text.ends_with('\n');
                    // Live lines are drawn under a whole line, never after a part of one.
                    if self.open_line && self.is_live() {
                        new.push('\n');
                        self.open_line = false;
                    }
                    self.emit(|out, _| {
                        write!(out, "{new}")?;
                        out.flush()
                    })?;
                }
                if !last && self.live.is_some() {
                    let written: Vec<_> = msg.tool_uses().cloned().collect();
                    if !written.is_empty() {
                        self.end_line()?;
                    }
                    if let Some(live) = &mut self.live {
                        for call in written {
                            let arguments = call.raw_input.unwrap_or_else(|| call.input.to_string());
                            live.call_written(&call.id, &call.name, &arguments);
                        }
                    }
                }
                if last {
                    for call in msg.tool_uses() {
                        if let Some(raw) = &call.raw_input {
                            self.sent_args.insert(call.id.clone(), raw.clone());
                        }
                    }
                    self.end_line()?;
                }
                Ok(())
            }
            _ => {
                if last {
                    for result in msg.tool_results() {
                        let summary = sanitize::summary(&result.text(), SUMMARY_CHARS);
                        self.results.insert(result.id.clone(), (summary, result.is_error));
                    }
                }
                Ok(())
            }
        }
    }

    fn tool_line(
        &mut self,
        call_id: &str,
        name: &str,
        state: &ToolCallState,
        duration: Duration,
    ) -> io::Result<()> {
        self.end_line()?;
        let (name, args) = self
            .calls
            .remove(call_id)
            .unwrap_or_else(|| (sanitize::short(name, NAME_CHARS), String::new()));
        let (summary, is_error) = self.results.remove(call_id).unwrap_or_default();
        let failed = is_error || *state != ToolCallState::Completed;
        let arrow = if failed {
            self.style.red("✗")
        } else {
            "→".to_owned()
        };
        let line = format!(
            "{} {}{} {arrow} {} {}",
            self.style.cyan("⚙"),
            name,
            self.style.dim(&format!("({args})")),
            if failed { self.style.red(&summary) } else { summary },
            self.style.dim(&format!("[{}]", format_duration(duration))),
        );
        self.emit(|_, err| {
            writeln!(err, "{line}")?;
            err.flush()
        })
    }

    fn end_line(&mut self) -> io::Result<()> {
        if self.open_line {
            self.open_line = false;
            self.emit(|out, _| {
                writeln!(out)?;
                out.flush()
            })?;
        }
        Ok(())
    }
}

fn format_duration(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{} µs", d.as_micros())
    } else if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::message::{ToolResultBlock, ToolUseBlock};
    use serde_json::json;

    fn render(events: &[AgentEvent]) -> (String, String) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        {
            let mut r = Renderer::new(&mut out, &mut err, Style { color: false });
            for e in events {
                r.event(e).unwrap();
            }
        }
        (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    /// A streamed answer with one call `c1`: a first chunk of `first_text`, the complete message
    /// (`text` and the call), the call's start, its result message when given, and its end.
    fn one_call(
        first_text: &str,
        text: &str,
        call: ToolUseBlock,
        result: Option<&str>,
        ran_for: Duration,
    ) -> Vec<AgentEvent> {
        let mut m = Msg::assistant("bot", first_text);
        let mut events = vec![AgentEvent::Message {
            msg: m.clone(),
            last: false,
        }];
        m.content = vec![ContentBlock::text(text), ContentBlock::ToolUse(call.clone())];
        events.push(AgentEvent::Message { msg: m, last: true });
        events.push(AgentEvent::ToolStarted {
            reply_id: "r".into(),
            call_id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
        if let Some(result) = result {
            events.push(AgentEvent::Message {
                msg: Msg::tool_result(ToolResultBlock {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    output: vec![ContentBlock::text(result)],
                    is_error: false,
                }),
                last: true,
            });
        }
        events.push(AgentEvent::ToolFinished {
            reply_id: "r".into(),
            call_id: call.id,
            name: call.name,
            state: ToolCallState::Completed,
            duration: ran_for,
        });
        events
    }

    #[test]
    fn model_text_is_escaped_however_it_is_split() {
        let call = ToolUseBlock {
            id: "c1".into(),
            name: "calc\u{1b}[2K\r".into(),
            input: serde_json::Value::Null,
            raw_input: Some("[\"\u{1b}]0;t\u{7}\"]".into()),
        };
        let events = one_call(
            "Hel\u{1b}",
            "Hel\u{1b}[2Jlo\u{202e}",
            call,
            None,
            Duration::from_micros(5),
        );
        let (out, err) = render(&events);
        assert_eq!(out, "Hel\\e[2Jlo\\u{202e}\n");
        assert_eq!(err, "⚙ calc\\e[2K\\r([\"\\e]0;t\\a\"]) →  [5 µs]\n");
    }

    #[test]
    fn the_tool_shim_note_is_printed_once() {
        let recovered = AgentEvent::TextCallsRecovered {
            reply_id: "r".into(),
            call_ids: vec!["c1".into()],
        };
        let (out, err) = render(&[recovered.clone(), recovered]);
        assert_eq!(out, "");
        assert_eq!(err, format!("{TOOL_SHIM_NOTE}\n"));
    }

    #[test]
    fn streamed_text_is_printed_once_and_tool_calls_get_a_line() {
        let call = ToolUseBlock {
            id: "c1".into(),
            name: "add".into(),
            input: json!({"a": 1}),
            raw_input: None,
        };
        let events = one_call("Hel", "Hello", call, Some("2\nmore"), Duration::from_micros(1500));
        let (out, err) = render(&events);
        assert_eq!(out, "Hello\n");
        assert_eq!(err, "⚙ add({\"a\":1}) → 2 more [1.5 ms]\n");
    }
}
