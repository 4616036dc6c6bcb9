//! Session approval grants kept with the session (spec A14): an agent's grants saved into its
//! session and given back to the agent that continues it.

use std::collections::HashMap;

use agentry::agent::{ReActAgent, SessionGrant};
use chrono::Utc;

use crate::{Grant, GrantKind, SessionMemory, StoreError};

fn kind(grant: &SessionGrant) -> GrantKind {
    match grant {
        SessionGrant::Allow => GrantKind::Allow,
        SessionGrant::Deny { reason } => GrantKind::Deny {
            reason: reason.clone(),
        },
        // A kind this store does not know is kept as a deny: never an approval by accident.
        _ => GrantKind::Deny { reason: None },
    }
}

/// The tool a grant key is about: the key up to its arguments.
fn tool_of(key: &str) -> &str {
    key.split('\u{0}').next().unwrap_or(key)
}

/// The stored form of the grant the agent holds under `key`.
pub(crate) fn grant_row(key: &str, grant: &SessionGrant) -> Grant {
    Grant {
        key: key.to_owned(),
        tool_name: tool_of(key).to_owned(),
        kind: kind(grant),
        created_at: Utc::now(),
    }
}

/// Gives `agent` the grants kept in `memory`'s session; how many.
pub async fn restore_grants(agent: &ReActAgent, memory: &SessionMemory) -> Result<usize, StoreError> {
    let stored = memory.store().grants(&memory.session().id).await?;
    let count = stored.len();
    agent.restore_session_grants(stored.into_iter().map(agent_grant));
    Ok(count)
}

/// A stored grant as the agent holds it, under its key.
pub(crate) fn agent_grant(grant: Grant) -> (String, SessionGrant) {
    let kind = match grant.kind {
        GrantKind::Deny { reason } => SessionGrant::Deny { reason },
        GrantKind::Allow => SessionGrant::Allow,
    };
    (grant.key, kind)
}

/// Makes `memory`'s session hold exactly `agent`'s grants: new and changed ones written, ones
/// the agent no longer has (revoked) removed. Returns how many rows changed.
pub async fn save_grants(agent: &ReActAgent, memory: &SessionMemory) -> Result<usize, StoreError> {
    let store = memory.store();
    let stored: HashMap<String, GrantKind> = store
        .grants(&memory.session().id)
        .await?
        .into_iter()
        .map(|g| (g.key, g.kind))
        .collect();
    let current = agent.session_grants();
    let mut changed = 0;
    for (key, grant) in &current {
        let row = grant_row(key, grant);
        if stored.get(key) != Some(&row.kind) {
            store.put_grant(memory.lease(), &row).await?;
            changed += 1;
        }
    }
    for key in stored.keys() {
        if !current.iter().any(|(k, _)| k == key) && store.revoke_grant(memory.lease(), key).await? {
            changed += 1;
        }
    }
    Ok(changed)
}
