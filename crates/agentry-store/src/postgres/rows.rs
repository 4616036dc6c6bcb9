//! Rows to records and back.

use agentry::tool::{ApprovalDecision, DecisionSource, ToolCallState};
use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use super::text::{from_db, opt_from_db, opt_to_db, to_db};
use crate::codec::{from_json, from_name, json, name_of};
use crate::{CallRecord, CallStatus, SessionId, SessionInfo, StoreError};

/// The columns of `sessions` and the message count, as [`session_info`] reads them.
pub(super) const SESSION_COLUMNS: &str = "s.id, s.name, s.created_at, s.updated_at, s.config, \
     (SELECT count(*) FROM messages m WHERE m.session_id = s.id), s.owner";

pub(super) fn session_info(row: &Row) -> Result<SessionInfo, StoreError> {
    let config: String = row.try_get(4).map_err(|e| StoreError::decode("session", e))?;
    let count: i64 = row.try_get(5).map_err(|e| StoreError::decode("session", e))?;
    Ok(SessionInfo {
        id: SessionId::new(
            row.try_get::<_, String>(0)
                .map_err(|e| StoreError::decode("session", e))?,
        ),
        name: row.try_get(1).map_err(|e| StoreError::decode("session", e))?,
        created_at: row
            .try_get(2)
            .map_err(|e| StoreError::decode("session time", e))?,
        updated_at: row
            .try_get(3)
            .map_err(|e| StoreError::decode("session time", e))?,
        config: from_json("session config", &config)?,
        message_count: u64::try_from(count).unwrap_or(0),
        owner: row.try_get(6).map_err(|e| StoreError::decode("session", e))?,
    })
}

/// A call record as column values.
#[derive(Debug)]
pub(super) struct CallColumns {
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
    pub(super) created_at: DateTime<Utc>,
    pub(super) started_at: Option<DateTime<Utc>>,
    pub(super) finished_at: Option<DateTime<Utc>>,
}

impl CallColumns {
    /// The digest of its tool and arguments (what an approval is bound to).
    pub(super) fn digest(&self) -> Result<String, StoreError> {
        let arguments: serde_json::Value = from_json("call arguments", &self.arguments)?;
        Ok(crate::arguments_digest(
            &from_db(self.tool_name.clone()),
            &arguments,
        ))
    }

    pub(super) fn new(call: &CallRecord) -> Result<Self, StoreError> {
        let status = &call.status;
        Ok(CallColumns {
            call_id: to_db(call.call_id.as_str()).into_owned(),
            reply_id: opt_to_db(call.reply_id.as_ref().map(|r| r.as_str())),
            message_id: opt_to_db(call.message_id.as_deref()),
            tool_name: to_db(&call.tool_name).into_owned(),
            arguments: json("call arguments", &call.arguments)?,
            state: status.name(),
            terminal: status.is_terminal(),
            outcome: status.terminal().map(|s| json("call state", s)).transpose()?,
            phase: status.phase().map(|p| name_of("cancel phase", &p)).transpose()?,
            partial: status.partial(),
            stop_reason: status.stop_reason(),
            partial_result: opt_to_db(call.partial_result.as_deref()),
            decision: call.decision.as_ref().map(|d| json("decision", d)).transpose()?,
            decision_source: call
                .decision_source
                .map(|s| name_of("decision source", &s))
                .transpose()?,
            explanation: opt_to_db(call.explanation.as_deref()),
            idempotent: call.idempotent,
            progress: opt_to_db(call.progress.as_deref()),
            resume: call
                .resume
                .as_ref()
                .map(|r| json("call resume point", r))
                .transpose()?,
            created_at: call.created_at,
            started_at: call.started_at,
            finished_at: call.finished_at,
        })
    }
}

/// The columns [`call_record`] reads, in order.
pub(super) const CALL_COLUMNS: &str = "call_id, reply_id, message_id, tool_name, arguments, state, outcome, \
     partial_result, decision, decision_source, idempotent, progress, created_at, started_at, finished_at, explanation, resume";

pub(super) fn call_record(row: &Row) -> Result<CallRecord, StoreError> {
    let get_err = |e: tokio_postgres::Error| StoreError::decode("call record", e);
    let state: String = row.try_get(5).map_err(get_err)?;
    let outcome: Option<String> = row.try_get(6).map_err(get_err)?;
    let status = match (state.as_str(), outcome) {
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
    let arguments: String = row.try_get(4).map_err(get_err)?;
    let decision: Option<String> = row.try_get(8).map_err(get_err)?;
    let source: Option<String> = row.try_get(9).map_err(get_err)?;
    Ok(CallRecord {
        call_id: from_db(row.try_get::<_, String>(0).map_err(get_err)?).into(),
        reply_id: opt_from_db(row.try_get::<_, Option<String>>(1).map_err(get_err)?).map(Into::into),
        message_id: opt_from_db(row.try_get(2).map_err(get_err)?),
        tool_name: from_db(row.try_get(3).map_err(get_err)?),
        arguments: from_json("call arguments", &arguments)?,
        status,
        partial_result: opt_from_db(row.try_get(7).map_err(get_err)?),
        decision: decision
            .map(|d| from_json::<ApprovalDecision>("decision", &d))
            .transpose()?,
        decision_source: source
            .map(|s| from_name::<DecisionSource>("decision source", s))
            .transpose()?,
        idempotent: row.try_get(10).map_err(get_err)?,
        progress: opt_from_db(row.try_get(11).map_err(get_err)?),
        created_at: row.try_get(12).map_err(get_err)?,
        started_at: row.try_get(13).map_err(get_err)?,
        finished_at: row.try_get(14).map_err(get_err)?,
        explanation: opt_from_db(row.try_get(15).map_err(get_err)?),
        resume: row
            .try_get::<_, Option<String>>(16)
            .map_err(get_err)?
            .map(|r| from_json("call resume point", &r))
            .transpose()?,
    })
}
