//! Rows to records and back.

use agentry::tool::{ApprovalDecision, DecisionSource, ToolCallState};
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::Row;

use crate::{CallRecord, CallStatus, SessionId, SessionInfo, StoreError};

/// A time as stored: RFC 3339 UTC with microseconds, so text order is time order.
pub(super) fn ts(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub(super) fn parse_ts(what: &'static str, text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::decode(what, e))
}

fn parse_opt_ts(what: &'static str, text: Option<String>) -> Result<Option<DateTime<Utc>>, StoreError> {
    text.map(|t| parse_ts(what, &t)).transpose()
}

pub(super) use crate::codec::{from_json, json};
use crate::codec::{from_name, name_of};

/// The columns of `sessions` and the message count, in [`SESSION_COLUMNS`] order.
pub(super) const SESSION_COLUMNS: &str = "s.id, s.name, s.created_at, s.updated_at, s.config, \
     (SELECT count(*) FROM messages m WHERE m.session_id = s.id), s.owner";

/// Raw text of a session row; decoded outside the row callback so errors keep their type.
pub(super) type SessionRow = (String, String, String, String, String, i64, Option<String>);

pub(super) fn session_row(row: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
    ))
}

pub(super) fn session_info(row: SessionRow) -> Result<SessionInfo, StoreError> {
    let (id, name, created, updated, config, count, owner) = row;
    Ok(SessionInfo {
        id: SessionId::new(id),
        name,
        created_at: parse_ts("session time", &created)?,
        updated_at: parse_ts("session time", &updated)?,
        config: from_json("session config", &config)?,
        message_count: u64::try_from(count).unwrap_or(0),
        owner,
    })
}

/// A call record as column values.
#[derive(Debug)]
pub(crate) struct EncodedCall {
    pub(super) call_id: String,
    pub(super) reply_id: Option<String>,
    pub(super) message_id: Option<String>,
    pub(super) tool_name: String,
    pub(super) arguments: String,
    pub(super) state: &'static str,
    pub(super) terminal: bool,
    pub(super) outcome: Option<String>,
    pub(super) phase: Option<String>,
    pub(super) partial: Option<bool>,
    pub(super) stop_reason: Option<&'static str>,
    pub(super) partial_result: Option<String>,
    pub(super) decision: Option<String>,
    pub(super) decision_source: Option<String>,
    pub(super) explanation: Option<String>,
    pub(super) idempotent: bool,
    pub(super) progress: Option<String>,
    pub(super) resume: Option<String>,
    pub(super) created_at: String,
    pub(super) started_at: Option<String>,
    pub(super) finished_at: Option<String>,
}

impl EncodedCall {
    /// The digest of its tool and arguments (what an approval is bound to).
    pub(super) fn digest(&self) -> Result<String, StoreError> {
        let arguments: serde_json::Value = from_json("call arguments", &self.arguments)?;
        Ok(crate::arguments_digest(&self.tool_name, &arguments))
    }

    pub(crate) fn new(call: &CallRecord) -> Result<Self, StoreError> {
        let status = &call.status;
        Ok(EncodedCall {
            call_id: call.call_id.to_string(),
            reply_id: call.reply_id.as_ref().map(ToString::to_string),
            message_id: call.message_id.clone(),
            tool_name: call.tool_name.clone(),
            arguments: json("call arguments", &call.arguments)?,
            state: status.name(),
            terminal: status.is_terminal(),
            outcome: status.terminal().map(|s| json("call state", s)).transpose()?,
            phase: status.phase().map(|p| name_of("cancel phase", &p)).transpose()?,
            partial: status.partial(),
            stop_reason: status.stop_reason(),
            partial_result: call.partial_result.clone(),
            decision: call.decision.as_ref().map(|d| json("decision", d)).transpose()?,
            decision_source: call
                .decision_source
                .map(|s| name_of("decision source", &s))
                .transpose()?,
            explanation: call.explanation.clone(),
            idempotent: call.idempotent,
            progress: call.progress.clone(),
            resume: call
                .resume
                .as_ref()
                .map(|r| json("call resume point", r))
                .transpose()?,
            created_at: ts(call.created_at),
            started_at: call.started_at.map(ts),
            finished_at: call.finished_at.map(ts),
        })
    }
}

/// The columns [`call_row`] reads, in order.
pub(super) const CALL_COLUMNS: &str = "call_id, reply_id, message_id, tool_name, arguments, state, outcome, \
     partial_result, decision, decision_source, idempotent, progress, created_at, started_at, finished_at, explanation, resume";

/// Raw values of a call row.
pub(super) struct CallRow {
    call_id: String,
    reply_id: Option<String>,
    message_id: Option<String>,
    tool_name: String,
    arguments: String,
    state: String,
    outcome: Option<String>,
    partial_result: Option<String>,
    decision: Option<String>,
    decision_source: Option<String>,
    idempotent: bool,
    progress: Option<String>,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    explanation: Option<String>,
    resume: Option<String>,
}

pub(super) fn call_row(row: &Row<'_>) -> rusqlite::Result<CallRow> {
    Ok(CallRow {
        call_id: row.get(0)?,
        reply_id: row.get(1)?,
        message_id: row.get(2)?,
        tool_name: row.get(3)?,
        arguments: row.get(4)?,
        state: row.get(5)?,
        outcome: row.get(6)?,
        partial_result: row.get(7)?,
        decision: row.get(8)?,
        decision_source: row.get(9)?,
        idempotent: row.get(10)?,
        progress: row.get(11)?,
        created_at: row.get(12)?,
        started_at: row.get(13)?,
        finished_at: row.get(14)?,
        explanation: row.get(15)?,
        resume: row.get(16)?,
    })
}

pub(super) fn call_record(row: CallRow) -> Result<CallRecord, StoreError> {
    let status = match (row.state.as_str(), row.outcome) {
        (_, Some(outcome)) => CallStatus::Finished(from_json::<ToolCallState>("call state", &outcome)?),
        ("pending_approval", None) => CallStatus::PendingApproval,
        ("queued", None) => CallStatus::Queued,
        ("running", None) => CallStatus::Running,
        (other, None) => {
            return Err(StoreError::decode(
                "call state",
                format!("unknown live state {other:?}"),
            ));
        }
    };
    Ok(CallRecord {
        call_id: row.call_id.into(),
        reply_id: row.reply_id.map(Into::into),
        message_id: row.message_id,
        tool_name: row.tool_name,
        arguments: from_json("call arguments", &row.arguments)?,
        status,
        idempotent: row.idempotent,
        partial_result: row.partial_result,
        decision: row
            .decision
            .map(|d| from_json::<ApprovalDecision>("decision", &d))
            .transpose()?,
        decision_source: row
            .decision_source
            .map(|s| from_name::<DecisionSource>("decision source", s))
            .transpose()?,
        explanation: row.explanation,
        progress: row.progress,
        resume: row
            .resume
            .map(|r| from_json("call resume point", &r))
            .transpose()?,
        created_at: parse_ts("call time", &row.created_at)?,
        started_at: parse_opt_ts("call time", row.started_at)?,
        finished_at: parse_opt_ts("call time", row.finished_at)?,
    })
}
