//! The plan notebook kept with the session: every change is committed before the plan tool
//! returns, so a plan continued after a crash or in another process resumes where it was.

use std::sync::Arc;

use agentry::plan::{PlanBook, PlanStorage, PlanStorageError};
use async_trait::async_trait;

use crate::SessionMemory;
use crate::session_config::{config_value, set_config_value};

/// The key of the session's configuration that holds its plans (the current one and the
/// finished ones).
pub const PLANS_KEY: &str = "plan_notebook";

/// A [`PlanStorage`] in a session: [`SessionMemory::attach`] binds the builder's plan notebook
/// to one.
#[derive(Clone)]
pub struct SessionPlanStorage {
    memory: Arc<SessionMemory>,
}

impl std::fmt::Debug for SessionPlanStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionPlanStorage")
            .field("session", &self.memory.session().name)
            .finish()
    }
}

impl SessionPlanStorage {
    /// The plans of `memory`'s session.
    pub fn new(memory: Arc<SessionMemory>) -> Self {
        SessionPlanStorage { memory }
    }
}

#[async_trait]
impl PlanStorage for SessionPlanStorage {
    async fn load(&self) -> Result<Option<PlanBook>, PlanStorageError> {
        let Some(saved) = config_value(&self.memory, PLANS_KEY)
            .await
            .map_err(|e| PlanStorageError(e.to_string()))?
        else {
            return Ok(None);
        };
        serde_json::from_value(saved)
            .map(Some)
            .map_err(|e| PlanStorageError(format!("the session's plans cannot be read: {e}")))
    }

    async fn save(&self, book: &PlanBook) -> Result<(), PlanStorageError> {
        let value = serde_json::to_value(book).map_err(|e| PlanStorageError(e.to_string()))?;
        set_config_value(&self.memory, PLANS_KEY, value)
            .await
            .map_err(|e| PlanStorageError(e.to_string()))
    }
}
