//! Context compaction: before a model request that would pass a share of the model's context
//! window, the older messages are summarised by the model and the summary takes their place in
//! the prompt. Nothing is deleted: the summary is stored as a message right before the newest
//! messages it keeps, and a prompt starts at the last summary in memory.
//!
//! A call and its result are never split (the cut is never right before a result), and the
//! summary request is itself a valid request: each call in it is followed by its result. The
//! summary's fields are all optional; an answer that is not the JSON asked for is kept as plain
//! text, so a model or provider without structured output still compacts.

use futures::StreamExt;
use serde_json::{Map, Value};

use super::AgentError;
use super::events::AgentEvent;
use super::react::ReplyCx;
use crate::message::{ContentBlock, Msg, Role};
use crate::model::{ChatRequest, ToolChoice, estimate_tokens};

/// The metadata key that marks a message as a compaction summary; its value says how many
/// messages it summarises (`{"messages": 42}`).
pub const COMPACTION_KEY: &str = "compaction";

/// When and how the agent compacts its context
/// ([`ReActAgentBuilder::compaction`](super::ReActAgentBuilder::compaction)).
///
/// On by default: it acts only when the context window is known, from the model
/// ([`ChatModel::context_window`](crate::model::ChatModel::context_window)) or set here.
///
/// ```
/// use agentry::agent::Compaction;
/// let compaction = Compaction::new().context_window(8192).compact_at(0.7).keep_recent(4);
/// assert_eq!(compaction.threshold(), Some(5734));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Compaction {
    /// Whether the agent compacts at all.
    pub enabled: bool,
    /// The context window in tokens; `None` takes the model's.
    pub window: Option<u64>,
    /// The share of the window a request may fill before the agent compacts (default 0.8).
    pub compact_at: f64,
    /// The newest messages kept as they are (default 3; more when the cut would split a call
    /// from its result).
    pub keep_recent: usize,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            enabled: true,
            window: None,
            compact_at: 0.8,
            keep_recent: 3,
        }
    }
}

impl Compaction {
    /// Compaction at 80 % of the model's window, keeping the newest three messages.
    pub fn new() -> Self {
        Compaction::default()
    }

    /// No compaction: requests grow until the model refuses them.
    pub fn disabled() -> Self {
        Compaction {
            enabled: false,
            ..Compaction::default()
        }
    }

    /// The context window, in tokens, instead of the model's.
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.window = Some(tokens);
        self
    }

    /// The share of the window (0 to 1) past which the agent compacts.
    pub fn compact_at(mut self, ratio: f64) -> Self {
        self.compact_at = ratio.clamp(0.05, 1.0);
        self
    }

    /// How many of the newest messages are always kept as they are.
    pub fn keep_recent(mut self, messages: usize) -> Self {
        self.keep_recent = messages.max(1);
        self
    }

    /// The tokens past which the agent compacts, when the window is set here.
    pub fn threshold(&self) -> Option<u64> {
        self.window.map(|window| threshold(window, self.compact_at))
    }
}

fn threshold(window: u64, ratio: f64) -> u64 {
    (window as f64 * ratio) as u64
}

/// Whether `msg` is a compaction summary.
pub fn is_summary(msg: &Msg) -> bool {
    msg.metadata.contains_key(COMPACTION_KEY)
}

/// Where a prompt's history starts: at the last summary, or at the first message.
pub(crate) fn prompt_start(msgs: &[Msg]) -> usize {
    msgs.iter().rposition(is_summary).unwrap_or(0)
}

/// The tokens the model's answer to a summary request may take.
const SUMMARY_ANSWER_TOKENS: u64 = 512;

/// The most characters a summary keeps: a summary longer than what it replaces would only
/// bring the next compaction sooner.
const SUMMARY_MAX_CHARS: usize = 2400;

const SUMMARY_SYSTEM: &str = "You write the working notes of an AI agent whose conversation has grown too long \
     for its context. The notes replace the earlier messages, so keep every fact the agent still needs: what \
     the user asked, the decisions made, the results of tool calls (numbers, names, paths, ids, URLs), the \
     errors met, and what remains to do. Be specific and concise.";

const SUMMARY_INSTRUCTION: &str = "Summarise the conversation above (and the earlier summary, if there is one) \
     for the agent to continue from. Answer with one JSON object and nothing else, with these keys, each a \
     short text of at most about 300 characters, each optional: \"task_overview\" (what the user asked for, \
     with its constraints), \"current_state\" (what is done so far, with its results), \
     \"important_discoveries\" (facts, values, names and paths found that are still needed), \"next_steps\" \
     (what remains, in order), \"context_to_preserve\" (anything else needed to go on: preferences, ids, \
     open questions).";

/// The summary's sections, in order: JSON key and heading.
const SECTIONS: [(&str, &str); 5] = [
    ("task_overview", "Task overview"),
    ("current_state", "Current state"),
    ("important_discoveries", "Important discoveries"),
    ("next_steps", "Next steps"),
    ("context_to_preserve", "Context to preserve"),
];

impl ReplyCx<'_> {
    /// Compacts memory when `request` would pass the threshold; returns whether it did (the
    /// caller then builds its request again). A summary that fails or is cancelled leaves
    /// memory as it was.
    pub(super) async fn compact_if_needed(&mut self, request: &ChatRequest) -> Result<bool, AgentError> {
        let settings = &self.inner.config.compaction;
        if !settings.enabled {
            return Ok(false);
        }
        let model = &self.inner.config.model;
        let Some(window) = settings.window.or_else(|| model.context_window()) else {
            return Ok(false);
        };
        let tokens = model
            .count_tokens(request)
            .unwrap_or_else(|| estimate_tokens(request));
        if tokens <= threshold(window, settings.compact_at) {
            return Ok(false);
        }
        let msgs = self.inner.config.memory.messages().await?;
        let start = prompt_start(&msgs);
        let (earlier, first) = match msgs.get(start) {
            Some(msg) if is_summary(msg) => (msg.text(), start + 1),
            _ => (None, start),
        };
        let Some(cut) = choose_cut(&msgs, first, settings.keep_recent) else {
            tracing::warn!(
                tokens,
                window,
                "the context is full but its newest messages cannot be compacted"
            );
            return Ok(false);
        };
        let Some(mut summary) = self
            .summarize(earlier, &msgs[first..cut], window, request)
            .await?
        else {
            return Ok(false);
        };
        if let Some(question) = latest_question(&msgs, first, cut) {
            // The request being worked on stays word for word, whatever the summary says.
            summary = summary.replace(
                "\n</system-info>",
                &format!(
                    "\n# The user's latest message\n{}\n</system-info>",
                    bounded(question)
                ),
            );
        }
        let compacted = cut - first
            + msgs
                .get(start)
                .filter(|m| is_summary(m))
                .and_then(|m| m.metadata.get(COMPACTION_KEY))
                .and_then(|c| c["messages"].as_u64())
                .unwrap_or(0) as usize;
        let mut msg = Msg::new("system", Role::User, vec![ContentBlock::text(summary)]);
        msg.metadata.insert(
            COMPACTION_KEY.to_owned(),
            serde_json::json!({"messages": compacted, "tokens_before": tokens}),
        );
        self.inner
            .config
            .memory
            .insert_before(&msgs[cut].id, vec![msg])
            .await?;
        let reply_id = self.active.reply_id.clone();
        self.emit_with(|| AgentEvent::ContextCompacted {
            reply_id,
            messages: compacted,
            tokens_before: tokens,
        });
        Ok(true)
    }

    /// The summary of `earlier` (a previous summary) and `msgs`, asked of the model in as many
    /// requests as it takes for each to fit the window. `None` when the reply was cancelled or
    /// the model failed (memory is then left as it was).
    async fn summarize(
        &mut self,
        mut earlier: Option<String>,
        msgs: &[Msg],
        window: u64,
        request: &ChatRequest,
    ) -> Result<Option<String>, AgentError> {
        let budget = (window * 3 / 4).saturating_sub(SUMMARY_ANSWER_TOKENS).max(256);
        for batch in batches(msgs, budget, request) {
            let mut messages = vec![Msg::system(SUMMARY_SYSTEM)];
            messages.extend(earlier.take().map(Msg::user));
            messages.extend(batch);
            messages.push(Msg::user(SUMMARY_INSTRUCTION));
            let summary_request = ChatRequest {
                messages,
                tools: request.tools.clone(),
                tool_choice: Some(ToolChoice::None),
                max_tokens: Some(SUMMARY_ANSWER_TOKENS as u32),
            };
            match self.side_call(summary_request).await {
                Ok(Some(answer)) => earlier = Some(summary_text(&answer)),
                Ok(None) => return Ok(None),
                Err(e) => {
                    tracing::warn!(error = %e, "the context could not be summarised; continuing without compaction");
                    return Ok(None);
                }
            }
        }
        Ok(earlier)
    }

    /// A model call of the runtime's own (a summary, a rewritten query): its answer's text,
    /// never shown as a message; `None` when the reply was cancelled meanwhile.
    pub(super) async fn side_call(&mut self, request: ChatRequest) -> Result<Option<String>, AgentError> {
        let mut stream = super::trace::chat(self.inner, &self.agent_span, request);
        let mut last = None;
        loop {
            let item = tokio::select! {
                biased;
                () = self.active.token.cancelled() => return Ok(None),
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            let response = item?;
            if let Some(usage) = &response.usage {
                self.active.add_usage(&self.inner.events, usage);
            }
            last = Some(response.content);
        }
        let text: String = last
            .unwrap_or_default()
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        Ok(Some(text))
    }
}

/// Where to cut `msgs[first..]`: keeping at most the newest `keep` messages when it can (the
/// nearest cut that keeps fewer, then the nearest that keeps more), never right before a tool
/// result (so a call is never parted from its result), and leaving something to compact.
/// `None` when no such cut exists.
fn choose_cut(msgs: &[Msg], first: usize, keep: usize) -> Option<usize> {
    let latest = msgs.len().saturating_sub(keep.max(1)).max(first + 1);
    let valid = |cut: &usize| *cut > first && *cut < msgs.len() && !has_results(&msgs[*cut]);
    (latest..msgs.len())
        .find(valid)
        .or_else(|| (first + 1..latest).rev().find(valid))
}

/// The text of the user's latest message when it is among the compacted ones `msgs[first..cut]`
/// (no user message comes after it).
fn latest_question(msgs: &[Msg], first: usize, cut: usize) -> Option<String> {
    let at = msgs
        .iter()
        .rposition(|m| m.role == Role::User && m.name == "user" && !has_results(m) && !is_summary(m))?;
    (first..cut).contains(&at).then(|| msgs[at].text()).flatten()
}

fn has_results(msg: &Msg) -> bool {
    msg.content
        .iter()
        .any(|block| matches!(block, ContentBlock::ToolResult(_)))
}

/// `msgs` in runs whose estimated tokens fit `budget`, each starting at a message that is not
/// a result; a message too big for any run alone is cut down to fit.
fn batches(msgs: &[Msg], budget: u64, request: &ChatRequest) -> Vec<Vec<Msg>> {
    let tools_tokens = estimate_tokens(&ChatRequest {
        messages: Vec::new(),
        tools: request.tools.clone(),
        tool_choice: None,
        max_tokens: None,
    });
    let budget = budget.saturating_sub(tools_tokens).max(128);
    let mut out: Vec<Vec<Msg>> = Vec::new();
    let mut current: Vec<Msg> = Vec::new();
    let mut used = 0;
    for msg in msgs {
        let msg = shrink(msg, budget / 2);
        let size = estimate_tokens(&ChatRequest::new(vec![msg.clone()]));
        if used + size > budget && !current.is_empty() && !has_results(&msg) {
            out.push(std::mem::take(&mut current));
            used = 0;
        }
        used += size;
        current.push(msg);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `msg` with each text longer than about `tokens` tokens cut to its beginning and end.
fn shrink(msg: &Msg, tokens: u64) -> Msg {
    let max_chars = (tokens as usize).saturating_mul(3).max(400);
    let cut = |text: &str| -> Option<String> {
        let count = text.chars().count();
        (count > max_chars).then(|| {
            let head: String = text.chars().take(max_chars * 2 / 3).collect();
            let tail: String = text.chars().skip(count - max_chars / 3).collect();
            format!("{head}\n[… {} characters left out …]\n{tail}", count - max_chars)
        })
    };
    let mut msg = msg.clone();
    for block in &mut msg.content {
        match block {
            ContentBlock::Text { text } => {
                if let Some(short) = cut(text) {
                    *text = short;
                }
            }
            ContentBlock::ToolResult(result) => {
                for part in &mut result.output {
                    if let ContentBlock::Text { text } = part
                        && let Some(short) = cut(text)
                    {
                        *text = short;
                    }
                }
            }
            _ => {}
        }
    }
    msg
}

/// The summary message's text from the model's answer: the sections of the JSON object it was
/// asked for (each optional), or the answer itself when it is not such an object.
pub(crate) fn summary_text(answer: &str) -> String {
    let body = json_object(answer)
        .and_then(|fields| {
            let sections: Vec<String> = SECTIONS
                .iter()
                .filter_map(|(key, heading)| {
                    let text = field_text(fields.get(*key)?)?;
                    Some(format!("# {heading}\n{text}"))
                })
                .collect();
            (!sections.is_empty()).then(|| sections.join("\n"))
        })
        .unwrap_or_else(|| {
            let plain = distinct_lines(answer.trim());
            if plain.is_empty() {
                "(The earlier messages could not be summarised.)".to_owned()
            } else {
                plain
            }
        });
    let body = bounded(body);
    format!(
        "<system-info>The earlier part of this conversation was compacted to fit the context. Here is a \
         summary of it:\n{body}\n</system-info>"
    )
}

/// The JSON object in `text` (models wrap it in a code fence or words; an answer cut at its
/// token limit leaves it unclosed).
fn json_object(text: &str) -> Option<Map<String, Value>> {
    let start = text.find('{')?;
    let body = &text[start..];
    let end = body.rfind('}').map_or(body.len(), |end| end + 1);
    serde_json::from_str::<Map<String, Value>>(&body[..end])
        .ok()
        .or_else(|| crate::model::parse_partial_object(body))
}

/// A field as text: a string, a list as lines (each once), anything else as JSON; `None` when
/// empty.
fn field_text(value: &Value) -> Option<String> {
    let text = match value {
        Value::Null => return None,
        Value::String(s) => distinct_lines(s.trim()),
        Value::Array(items) => {
            let mut lines: Vec<String> = Vec::new();
            for item in items.iter().filter_map(field_text) {
                let line = format!("- {item}");
                if !lines.contains(&line) {
                    lines.push(line);
                }
            }
            lines.join("\n")
        }
        other => other.to_string(),
    };
    (!text.is_empty()).then_some(text)
}

/// `text` without repeated lines (small models loop).
fn distinct_lines(text: &str) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() || !seen.contains(&line) {
            seen.push(line);
        }
    }
    seen.join("\n")
}

/// `text` cut to [`SUMMARY_MAX_CHARS`] characters.
fn bounded(text: String) -> String {
    match text.char_indices().nth(SUMMARY_MAX_CHARS) {
        Some((at, _)) => format!("{} …", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolResultBlock, ToolUseBlock};

    fn call(id: &str) -> Msg {
        Msg::new(
            "a",
            Role::Assistant,
            vec![ContentBlock::ToolUse(ToolUseBlock {
                id: id.into(),
                name: "t".into(),
                input: serde_json::json!({}),
                raw_input: None,
            })],
        )
    }

    fn result(id: &str) -> Msg {
        Msg::new(
            "a",
            Role::User,
            vec![ContentBlock::ToolResult(ToolResultBlock {
                id: id.into(),
                name: "t".into(),
                output: vec![ContentBlock::text("ok")],
                is_error: false,
            })],
        )
    }

    #[test]
    fn the_cut_never_parts_a_call_from_its_result() {
        // user, call, result, call, result, call, result
        let msgs = vec![
            Msg::user("go"),
            call("1"),
            result("1"),
            call("2"),
            result("2"),
            call("3"),
            result("3"),
        ];
        // Keeping three would start at result 2: the cut keeps fewer, from call 3.
        assert_eq!(choose_cut(&msgs, 0, 3), Some(5));
        assert_eq!(choose_cut(&msgs, 0, 2), Some(5));
        assert_eq!(choose_cut(&msgs, 0, 4), Some(3));
        // When only results follow, it keeps more.
        let tail = vec![Msg::user("go"), call("1"), result("1"), result("1")];
        assert_eq!(choose_cut(&tail, 0, 1), Some(1));
        // Fewer messages than to keep: keep fewer; a single message cannot be cut.
        assert_eq!(choose_cut(&msgs[..2], 0, 3), Some(1));
        assert_eq!(choose_cut(&msgs[..1], 0, 3), None);
        // Past an earlier summary (`first` = 5), nothing is left to compact.
        assert_eq!(choose_cut(&msgs, 5, 3), None);
    }

    #[test]
    fn the_summary_reads_any_subset_of_fields_and_falls_back_to_plain_text() {
        let text = summary_text(
            "Here:\n```json\n{\"task_overview\": \"book a trip\", \"next_steps\": [\"hotel\", \"train\"]}\n```",
        );
        assert!(
            text.starts_with("<system-info>") && text.ends_with("</system-info>"),
            "{text}"
        );
        assert!(text.contains("# Task overview\nbook a trip"), "{text}");
        assert!(text.contains("# Next steps\n- hotel\n- train"), "{text}");
        assert!(!text.contains("Current state"), "{text}");
        let plain = summary_text("We booked the hotel; the train is next.");
        assert!(
            plain.contains("We booked the hotel; the train is next."),
            "{plain}"
        );
        assert!(summary_text("{\"other\": 1}").contains("{\"other\": 1}"));
        assert!(summary_text("  ").contains("could not be summarised"));
        // Cut at its token limit, looping: what was written is read, each item once, bounded.
        let looping = format!(
            "{{\"task_overview\": \"count\", \"important_discoveries\": [{}",
            "\"birch\", \"cedar\", ".repeat(500)
        );
        let text = summary_text(&looping);
        assert!(text.contains("# Task overview\ncount"), "{text}");
        assert!(text.contains("- birch\n- cedar"), "{text}");
        assert_eq!(text.matches("birch").count(), 1, "{text}");
        assert!(summary_text(&"x".repeat(10_000)).len() < SUMMARY_MAX_CHARS + 400);
    }

    #[test]
    fn batches_fit_the_budget_and_start_at_no_result() {
        let big = "x".repeat(4000);
        let msgs = vec![
            Msg::user(big.clone()),
            call("1"),
            result("1"),
            Msg::user(big.clone()),
            call("2"),
            result("2"),
            Msg::user(big.clone()),
            Msg::user(big.clone()),
        ];
        let runs = batches(&msgs, 600, &ChatRequest::new(Vec::new()));
        assert!(runs.len() >= 2, "{}", runs.len());
        for run in &runs {
            assert!(!has_results(&run[0]));
            assert!(estimate_tokens(&ChatRequest::new(run.clone())) <= 600);
        }
        assert_eq!(runs.iter().map(Vec::len).sum::<usize>(), msgs.len());
        let shrunk = shrink(&Msg::user("y".repeat(10_000)), 200);
        assert!(shrunk.text().unwrap().contains("characters left out"));
    }
}
