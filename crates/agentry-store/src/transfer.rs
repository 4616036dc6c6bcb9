//! A whole session as one JSON document, and back: [`SessionExport`].

use agentry::message::Msg;
use serde::{Deserialize, Serialize};

use crate::{
    CallRecord, Grant, PendingApproval, SessionId, SessionInfo, SessionStore, StoreError, UsageTotals,
};

/// The `format` field of an export.
pub const EXPORT_FORMAT: &str = "agentry-session";
/// The version of the export document this build writes and reads.
pub const EXPORT_VERSION: u32 = 1;

/// A session with everything it holds, in the serialized shapes of the protocol types
/// (messages as `Msg`, call states as `ToolCallState`, ...): what `agentry sessions export`
/// prints and `agentry sessions import` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionExport {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// [`EXPORT_VERSION`] when written by this build.
    pub version: u32,
    /// The session: id, name, times, configuration.
    pub session: SessionInfo,
    /// The conversation, in order.
    pub messages: Vec<Msg>,
    /// A record per tool call, in the order they were registered.
    pub calls: Vec<CallRecord>,
    /// Calls waiting for a decision, with what the user is asked.
    pub pending_approvals: Vec<PendingApproval>,
    /// Session approval grants (spec A14).
    pub grants: Vec<Grant>,
    /// Token use so far (informative: an import does not restore it).
    pub usage: UsageTotals,
}

impl SessionExport {
    /// Reads session `id` of `store`. Consistent when no writer holds the session; while one
    /// does, each part is as committed when it was read.
    pub async fn read(store: &dyn SessionStore, id: &SessionId) -> Result<Self, StoreError> {
        let session = store
            .session(id)
            .await?
            .ok_or_else(|| StoreError::SessionNotFound(id.to_string()))?;
        Ok(SessionExport {
            format: EXPORT_FORMAT.to_owned(),
            version: EXPORT_VERSION,
            session,
            messages: store.messages(id).await?,
            calls: store.calls(id).await?,
            pending_approvals: store.pending_approvals(id).await?,
            grants: store.grants(id).await?,
            usage: store.usage(id).await?,
        })
    }

    /// Parses an export document, refusing another format or a newer version.
    pub fn from_json(text: &str) -> Result<Self, StoreError> {
        let header: serde_json::Value = serde_json::from_str(text).map_err(|e| StoreError::Decode {
            what: "session export",
            detail: e.to_string(),
        })?;
        let format = header.get("format").and_then(|f| f.as_str()).unwrap_or_default();
        if format != EXPORT_FORMAT {
            return Err(StoreError::Decode {
                what: "session export",
                detail: format!("this is not an agentry session export (format {format:?})"),
            });
        }
        let version = header.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version != u64::from(EXPORT_VERSION) {
            return Err(StoreError::Decode {
                what: "session export",
                detail: format!("export version {version}; this agentry reads version {EXPORT_VERSION}"),
            });
        }
        serde_json::from_value(header).map_err(|e| StoreError::Decode {
            what: "session export",
            detail: e.to_string(),
        })
    }

    /// Writes it as a new session named `name` (the exported name when `None`) with a new id;
    /// refused with [`StoreError::NameTaken`] when the name is used. Call records, approvals
    /// and grants come back as exported; a failure part-way removes the new session.
    pub async fn import(
        &self,
        store: &dyn SessionStore,
        name: Option<&str>,
    ) -> Result<SessionInfo, StoreError> {
        let name = name.unwrap_or(&self.session.name);
        let created = store.create_session(name, &self.session.config).await?;
        match self.write_into(store, &created.id).await {
            Ok(()) => store
                .session(&created.id)
                .await?
                .ok_or_else(|| StoreError::SessionNotFound(created.id.to_string())),
            Err(e) => {
                if let Err(cleanup) = store.delete_session(&created.id).await {
                    tracing::warn!(error = %cleanup, "the half-imported session could not be removed");
                }
                Err(e)
            }
        }
    }

    async fn write_into(&self, store: &dyn SessionStore, id: &SessionId) -> Result<(), StoreError> {
        let lease = store.acquire(id).await?;
        // Records first: the messages then find their calls as exported (a closed record never
        // changes, S1) instead of deriving poorer ones.
        for call in &self.calls {
            store.record_call(&lease, call).await?;
        }
        store.append_messages(&lease, &self.messages).await?;
        for approval in &self.pending_approvals {
            store
                .request_approval(&lease, &approval.call_id, &approval.request)
                .await?;
        }
        for grant in &self.grants {
            store.put_grant(&lease, grant).await?;
        }
        Ok(())
    }
}
