//! Recovery on load (spec Y4), as a pure plan over a session's messages and call records, so
//! that every store applies the same rules in its own transaction.
//!
//! The messages are what the model saw and will see, so they decide: a live call whose result
//! is stored is settled as that result says; a call without a result gets `INTERRUPTED_RESTART`
//! right after its message (through the core's [`repair_tool_pairs`], which also drops orphan
//! results). Nothing is ever re-run: a call that may have run once is reported, not repeated,
//! whatever its `idempotent` flag says.

use std::collections::{HashMap, HashSet};

use agentry::CallId;
use agentry::memory::{check_tool_pairs, interrupted_by_restart, repair_tool_pairs, unanswered_last_calls};
use agentry::message::{ContentBlock, Msg};
use agentry::tool::{CancelPhase, CancelReason, ToolCallState};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::{CallRecord, CallStatus, PendingApprovals, Recovery};

/// What recovery writes.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The index of the first message that changes, and the messages from there on (the whole
    /// new tail, which replaces the old one).
    pub(crate) tail: Option<(usize, Vec<Msg>)>,
    /// Call records to write: closed live calls, and records for interrupted calls that had none.
    pub(crate) calls: Vec<CallRecord>,
    /// What it did.
    pub(crate) report: Recovery,
}

/// The interrupted state of a call found in `status` (spec Y2, Y4): it never started if it was
/// waiting for approval or a slot; otherwise it may have partly run.
fn interrupted_state(status: Option<&CallStatus>) -> ToolCallState {
    let phase = match status {
        Some(CallStatus::PendingApproval | CallStatus::Queued) => CancelPhase::BeforeStart,
        _ => CancelPhase::Running,
    };
    ToolCallState::Cancelled {
        phase,
        partial: false,
        reason: CancelReason::Restart,
    }
}

fn interrupted_result(id: CallId, name: String, state: &ToolCallState, now: DateTime<Utc>) -> Msg {
    let mut result = interrupted_by_restart(id, name, state);
    if let Some(Value::Object(record)) = result.metadata.get_mut("tool_call") {
        record.insert("finished_at".into(), Value::String(now.to_rfc3339()));
    }
    result
}

/// The model-visible note that follows a reply the agent did not finish because it stopped
/// (spec Y4: a reply that was mid-way keeps what was committed and gets the interrupted note),
/// as a user message, like the note after a reply the user cancelled (R5).
pub const REPLY_INTERRUPTED_BY_RESTART: &str = "<interrupted>The previous reply did not finish: the agent stopped \
     (a crash, a kill or a restart) before it ended. Tool calls that were running were stopped and may have \
     partly run.</interrupted>";

/// Whether a session whose last message is `last` stopped mid-reply: it is a tool result (the
/// model never took its next step). A reply that stopped while calls ran shows it by the calls
/// recovery closes.
fn ends_mid_reply(last: Option<&Msg>) -> bool {
    last.is_some_and(|m| m.tool_results().next().is_some())
}

/// The note for a reply that stopped mid-way.
fn restart_note(now: DateTime<Utc>) -> Msg {
    let mut note = Msg::new(
        "system",
        agentry::message::Role::User,
        vec![ContentBlock::text(REPLY_INTERRUPTED_BY_RESTART)],
    );
    note.timestamp = now;
    note
}

/// Whether a live call can wait for the next `start_resumed_reply`: it waits for approval, or
/// it runs work that can be found again (it left a resume point).
fn can_wait(call: &CallRecord) -> bool {
    call.status == CallStatus::PendingApproval
        || (call.status == CallStatus::Running && call.resume.is_some())
}

/// The calls to keep open: every unfinished call is waiting for approval or resumable, and
/// they are the last model message's calls without a result, after which only results follow.
fn waiting_for_approval(msgs: &[Msg], calls: &[CallRecord]) -> Option<Vec<CallId>> {
    let live: Vec<&CallRecord> = calls.iter().filter(|c| !c.status.is_terminal()).collect();
    if live.is_empty() || !live.iter().all(|c| can_wait(c)) {
        return None;
    }
    let (at, calls) = unanswered_last_calls(msgs)?;
    if msgs[at + 1..].iter().any(|m| m.tool_results().next().is_none()) {
        return None;
    }
    let unanswered: Vec<CallId> = calls.into_iter().map(|c| c.id.clone()).collect();
    let mut live_ids: Vec<&str> = live.iter().map(|c| c.call_id.as_str()).collect();
    let mut waiting: Vec<&str> = unanswered.iter().map(CallId::as_str).collect();
    live_ids.sort_unstable();
    waiting.sort_unstable();
    // Nothing else may be unanswered, anywhere before.
    (live_ids == waiting && check_tool_pairs(&msgs[..at]).is_ok()).then_some(unanswered)
}

/// Plans the recovery of a session holding `msgs` (in order) and `calls`.
pub(crate) fn plan(
    msgs: &[Msg],
    calls: &[CallRecord],
    now: DateTime<Utc>,
    pending: PendingApprovals,
) -> Plan {
    if pending == PendingApprovals::Keep
        && let Some(kept) = waiting_for_approval(msgs, calls)
    {
        let resumable: std::collections::HashSet<&str> = calls
            .iter()
            .filter(|c| c.status == CallStatus::Running)
            .map(|c| c.call_id.as_str())
            .collect();
        let mut plan = Plan::default();
        let (resumed, waiting) = kept.into_iter().partition(|id| resumable.contains(id.as_str()));
        plan.report.pending_kept = waiting;
        plan.report.resumable_kept = resumed;
        return plan;
    }
    let mut plan = plan_calls(msgs, calls, now);
    // The last message once the plan is applied.
    let last = match &plan.tail {
        Some((at, tail)) => tail.last().or_else(|| msgs[..*at].last()),
        None => msgs.last(),
    };
    if !plan.report.interrupted.is_empty() || ends_mid_reply(last) {
        let note = restart_note(now);
        match &mut plan.tail {
            Some((_, tail)) => tail.push(note),
            None => plan.tail = Some((msgs.len(), vec![note])),
        }
        plan.report.reply_noted = true;
    }
    plan
}

/// The calls' part of [`plan`]: every call closed, with exactly one result.
fn plan_calls(msgs: &[Msg], calls: &[CallRecord], now: DateTime<Utc>) -> Plan {
    let records: HashMap<&str, &CallRecord> = calls.iter().map(|c| (c.call_id.as_str(), c)).collect();
    let live: Vec<&CallRecord> = calls.iter().filter(|c| !c.status.is_terminal()).collect();
    if live.is_empty() && check_tool_pairs(msgs).is_ok() {
        return Plan::default();
    }

    // A result for every call that has none anywhere, appended: the repair moves each call's
    // first result right after its message, so a stored result always wins over these.
    let answered: HashSet<&str> = msgs
        .iter()
        .flat_map(Msg::tool_results)
        .map(|r| r.id.as_str())
        .collect();
    let mut work: Vec<Msg> = msgs.to_vec();
    let mut synthetic: HashMap<String, ToolCallState> = HashMap::new();
    let mut in_messages: Vec<(CallId, String, Value, String)> = Vec::new();
    for msg in msgs {
        for call in msg.tool_uses() {
            in_messages.push((
                call.id.clone(),
                call.name.clone(),
                call.input.clone(),
                msg.id.clone(),
            ));
            if answered.contains(call.id.as_str()) || synthetic.contains_key(call.id.as_str()) {
                continue;
            }
            let state = interrupted_state(records.get(call.id.as_str()).map(|r| &r.status));
            let result = interrupted_result(call.id.clone(), call.name.clone(), &state, now);
            synthetic.insert(call.id.to_string(), state);
            work.push(result);
        }
    }
    let original_results = msgs.iter().flat_map(Msg::tool_results).count();
    // The repair rebuilds every result message; one that holds just its result keeps its id,
    // time and metadata, so only what moved or is new is rewritten.
    let mut originals: HashMap<&str, &Msg> = HashMap::new();
    for msg in msgs {
        if let [ContentBlock::ToolResult(result)] = msg.content.as_slice() {
            originals.entry(result.id.as_str()).or_insert(msg);
        }
    }
    let repaired: Vec<Msg> = repair_tool_pairs(work)
        .into_iter()
        .map(|msg| match msg.content.as_slice() {
            [ContentBlock::ToolResult(result)] => match originals.get(result.id.as_str()) {
                Some(original) if original.content == msg.content => (*original).clone(),
                _ => msg,
            },
            _ => msg,
        })
        .collect();

    let mut plan = Plan::default();
    let kept_results = repaired
        .iter()
        .flat_map(Msg::tool_results)
        .filter(|r| !synthetic.contains_key(r.id.as_str()))
        .count();
    plan.report.orphan_results_removed = original_results.saturating_sub(kept_results);
    let first_change = msgs
        .iter()
        .zip(&repaired)
        .position(|(a, b)| a != b)
        .or_else(|| (msgs.len() != repaired.len()).then(|| msgs.len().min(repaired.len())));

    // How each call in the repaired messages ended.
    let mut ended: HashMap<&str, ToolCallState> = HashMap::new();
    for msg in &repaired {
        for result in msg.tool_results() {
            let state = match synthetic.get(result.id.as_str()) {
                Some(state) => state.clone(),
                None => agentry::memory::result_state(msg, result),
            };
            ended.insert(result.id.as_str(), state);
        }
    }

    let mut closed: HashSet<&str> = HashSet::new();
    // Calls in message order first, then live records that no message holds.
    for (id, name, input, message_id) in &in_messages {
        if !closed.insert(id.as_str()) {
            continue;
        }
        let Some(state) = ended.get(id.as_str()) else {
            continue;
        };
        let interrupted = synthetic.contains_key(id.as_str());
        match records.get(id.as_str()) {
            Some(record) if !record.status.is_terminal() => {
                plan.calls.push(close(record, state.clone(), now));
                note(&mut plan.report, record, interrupted);
            }
            // A terminal record keeps its state (S1); the write order (result first) makes a
            // terminal record without a result impossible short of a bug.
            Some(_) => {}
            None if interrupted => {
                let mut record = CallRecord::new(id.clone(), name.clone(), input.clone());
                record.message_id = Some(message_id.clone());
                record.created_at = now;
                record.status = CallStatus::Finished(state.clone());
                record.finished_at = Some(now);
                plan.calls.push(record);
                plan.report.interrupted.push(id.clone());
            }
            None => {}
        }
    }
    for record in live {
        if closed.insert(record.call_id.as_str()) {
            plan.calls
                .push(close(record, interrupted_state(Some(&record.status)), now));
            note(&mut plan.report, record, true);
        }
    }
    plan.tail = first_change.map(|at| (at, repaired[at..].to_vec()));
    plan
}

fn close(record: &CallRecord, state: ToolCallState, now: DateTime<Utc>) -> CallRecord {
    let mut record = record.clone();
    record.status = CallStatus::Finished(state);
    record.finished_at = Some(now);
    record
}

fn note(report: &mut Recovery, record: &CallRecord, interrupted: bool) {
    if interrupted {
        report.interrupted.push(record.call_id.clone());
        if record.status == CallStatus::PendingApproval {
            report.approvals_closed.push(record.call_id.clone());
        }
    } else {
        report.settled.push(record.call_id.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry::message::{Role, ToolResultBlock, ToolUseBlock};
    use agentry::tool::INTERRUPTED_RESTART;
    use serde_json::json;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse(ToolUseBlock {
            id: id.into(),
            name: "t".into(),
            input: json!({"x": id}),
            raw_input: None,
        })
    }

    fn result(id: &str, state: Option<ToolCallState>) -> Msg {
        let mut msg = Msg::tool_result(ToolResultBlock {
            id: id.into(),
            name: "t".into(),
            output: vec![ContentBlock::text(format!("r{id}"))],
            is_error: false,
        });
        if let Some(state) = state {
            msg.metadata
                .insert("tool_call".into(), serde_json::to_value(state).unwrap());
        }
        msg
    }

    fn record(id: &str, status: CallStatus) -> CallRecord {
        let mut r = CallRecord::new(id, "t", json!({}));
        r.status = status;
        r
    }

    #[test]
    fn a_consistent_session_needs_nothing() {
        let msgs = vec![
            Msg::user("q"),
            Msg::new("bot", Role::Assistant, vec![call("a")]),
            result("a", None),
            Msg::new("bot", Role::Assistant, vec![ContentBlock::text("done")]),
        ];
        let calls = [record("a", CallStatus::Finished(ToolCallState::Completed))];
        let plan = plan(&msgs, &calls, Utc::now(), PendingApprovals::Close);
        assert!(plan.tail.is_none() && plan.calls.is_empty() && plan.report.is_empty());
    }

    #[test]
    fn y4_a_reply_that_stopped_after_a_result_gets_the_interrupted_note_once() {
        let mut msgs = vec![
            Msg::user("q"),
            Msg::new("bot", Role::Assistant, vec![call("a")]),
            result("a", None),
        ];
        let calls = [record("a", CallStatus::Finished(ToolCallState::Completed))];
        let first = plan(&msgs, &calls, Utc::now(), PendingApprovals::Close);
        assert!(first.report.reply_noted && first.calls.is_empty());
        let (at, tail) = first.tail.unwrap();
        assert_eq!(at, 3, "appended; nothing before it changes");
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].role, Role::User);
        assert_eq!(tail[0].text().as_deref(), Some(REPLY_INTERRUPTED_BY_RESTART));
        msgs.extend(tail);
        let again = plan(&msgs, &calls, Utc::now(), PendingApprovals::Close);
        assert!(again.tail.is_none() && again.report.is_empty(), "noted once");
    }

    #[test]
    fn y4_plan_closes_live_calls_and_settles_stored_results() {
        let timed_out = ToolCallState::TimedOut { partial: false };
        let msgs = vec![
            Msg::user("q"),
            Msg::new(
                "bot",
                Role::Assistant,
                vec![call("a"), call("b"), call("c"), call("d")],
            ),
            result("a", Some(timed_out.clone())),
            result("zz", None),
        ];
        let calls = [
            record("a", CallStatus::Running),
            record("b", CallStatus::Running),
            record("c", CallStatus::PendingApproval),
            record("e", CallStatus::Queued),
        ];
        let plan = plan(&msgs, &calls, Utc::now(), PendingApprovals::Close);
        let ids = |v: &[CallId]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(ids(&plan.report.interrupted), ["b", "c", "d", "e"]);
        assert_eq!(ids(&plan.report.settled), ["a"]);
        assert_eq!(ids(&plan.report.approvals_closed), ["c"]);
        assert_eq!(plan.report.orphan_results_removed, 1);
        let (at, tail) = plan.tail.unwrap();
        assert_eq!(at, 3, "the stored result of a stays");
        let mut all = msgs[..at].to_vec();
        all.extend(tail);
        assert_eq!(check_tool_pairs(&all), Ok(()));
        let texts: Vec<String> = all[2..]
            .iter()
            .flat_map(|m| m.tool_results().map(|r| r.text()))
            .collect();
        assert_eq!(
            texts,
            [
                "ra",
                INTERRUPTED_RESTART,
                INTERRUPTED_RESTART,
                INTERRUPTED_RESTART
            ]
        );
        let status = |id: &str| {
            plan.calls
                .iter()
                .find(|c| c.call_id == id)
                .unwrap()
                .status
                .clone()
        };
        assert_eq!(status("a"), CallStatus::Finished(timed_out));
        assert_eq!(status("b").phase(), Some(CancelPhase::Running));
        assert_eq!(status("c").phase(), Some(CancelPhase::BeforeStart));
        assert_eq!(
            status("d").stop_reason(),
            Some("restart"),
            "an unrecorded call gets a record"
        );
        assert_eq!(status("e").phase(), Some(CancelPhase::BeforeStart));
    }

    #[test]
    fn calls_waiting_for_approval_are_kept_only_when_they_are_all_that_is_unfinished() {
        let msgs = vec![
            Msg::user("q"),
            Msg::new("bot", Role::Assistant, vec![call("a"), call("b")]),
        ];
        let waiting = [
            record("a", CallStatus::PendingApproval),
            record("b", CallStatus::PendingApproval),
        ];
        let kept = plan(&msgs, &waiting, Utc::now(), PendingApprovals::Keep);
        let ids: Vec<&str> = kept.report.pending_kept.iter().map(CallId::as_str).collect();
        assert_eq!(ids, ["a", "b"]);
        assert!(kept.tail.is_none() && kept.calls.is_empty() && !kept.report.reply_noted);

        // Asked to close them, or with a sibling that was running: everything is closed.
        let closed = plan(&msgs, &waiting, Utc::now(), PendingApprovals::Close);
        assert_eq!(closed.report.interrupted.len(), 2);
        let mixed = [
            record("a", CallStatus::PendingApproval),
            record("b", CallStatus::Running),
        ];
        let closed = plan(&msgs, &mixed, Utc::now(), PendingApprovals::Keep);
        assert!(closed.report.pending_kept.is_empty());
        assert_eq!(closed.report.interrupted.len(), 2);
    }

    #[test]
    fn a_running_call_that_left_a_resume_point_is_kept_with_those_waiting_for_approval() {
        let msgs = vec![
            Msg::user("q"),
            Msg::new("bot", Role::Assistant, vec![call("a"), call("b")]),
        ];
        let mut resumable = record("b", CallStatus::Running);
        resumable.resume = Some(serde_json::json!({"mcp_task": {"task_id": "t1"}}));
        let calls = [record("a", CallStatus::PendingApproval), resumable.clone()];
        let kept = plan(&msgs, &calls, Utc::now(), PendingApprovals::Keep);
        let ids = |list: &[CallId]| list.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(ids(&kept.report.pending_kept), ["a"]);
        assert_eq!(ids(&kept.report.resumable_kept), ["b"]);
        assert!(kept.tail.is_none() && kept.calls.is_empty() && !kept.report.reply_noted);

        // Without a resume point it may have partly run: closed, and its sibling with it.
        let plain = [
            record("a", CallStatus::PendingApproval),
            record("b", CallStatus::Running),
        ];
        let closed = plan(&msgs, &plain, Utc::now(), PendingApprovals::Keep);
        assert!(closed.report.resumable_kept.is_empty());
        assert_eq!(closed.report.interrupted.len(), 2);
        // Asked to close what waits: closed too.
        let closed = plan(&msgs, &calls, Utc::now(), PendingApprovals::Close);
        assert!(closed.report.resumable_kept.is_empty());
        assert_eq!(closed.report.interrupted.len(), 2);
    }
}
