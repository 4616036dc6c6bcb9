//! The plan notebook: the agent breaks a complex task into subtasks, works through them in
//! order, and is reminded before every reasoning step where it stands.
//!
//! A [`PlanNotebook`] holds the current plan and the finished ones. Give it to
//! [`ReActAgentBuilder::plan_notebook`](crate::agent::ReActAgentBuilder::plan_notebook) and the
//! agent gets the eight plan tools ([`PLAN_TOOL_NAMES`]) and, before each model request, a
//! `<system-hint>` user message chosen by the plan's state ([`PlanNotebook::hint`]). The hint is
//! sent, never stored in memory. Every change is saved in the notebook's [`PlanStorage`] before
//! the tool returns (`agentry-store` keeps it with the session, so a plan resumes where it was
//! after a crash), and the agent announces it as
//! [`AgentEvent::PlanChanged`](crate::agent::AgentEvent::PlanChanged).
//!
//! The rules the tools enforce, each broken rule an error the model reads:
//! - at most one subtask is in progress, and all subtasks before it are done or abandoned;
//! - `finish_subtask` marks a subtask done with its outcome and starts the next one;
//! - a plan replaced by `create_plan` or `recover_historical_plan` is kept in the history as
//!   abandoned, never lost.
//!
//! ```
//! use agentry::plan::{PlanNotebook, SubTask};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let notebook = PlanNotebook::new();
//! notebook
//!     .create_plan("trip", "Plan a trip", "an itinerary", vec![
//!         SubTask::new("dates", "Choose the dates", "two dates"),
//!         SubTask::new("hotel", "Book a hotel", "a booking"),
//!     ])
//!     .await
//!     .unwrap();
//! notebook.update_subtask_state(0, "in_progress").await.unwrap();
//! notebook.finish_subtask(0, "May 3 to May 9").await.unwrap();
//! let plan = notebook.current().await.unwrap();
//! assert_eq!(plan.subtasks[1].state, agentry::plan::SubTaskState::InProgress);
//! assert!(notebook.hint().await.contains("finish_subtask"));
//! # });
//! ```

mod hint;
mod tools;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::protocol::{Plan, PlanState, SubTask, SubTaskState, subtask_line};
pub use tools::{PLAN_GROUP, PLAN_TOOL_NAMES, register_plan_tools};

/// The current plan and the finished ones: what a [`PlanStorage`] keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanBook {
    /// The plan being worked on.
    #[serde(default)]
    pub current: Option<Plan>,
    /// Finished and abandoned plans, oldest first.
    #[serde(default)]
    pub history: Vec<Plan>,
}

/// A plan storage failed; the change was not made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the plan could not be saved: {0}")]
pub struct PlanStorageError(pub String);

/// Where a notebook keeps its plans.
#[async_trait]
pub trait PlanStorage: Send + Sync {
    /// What was saved last, `None` when nothing was.
    async fn load(&self) -> Result<Option<PlanBook>, PlanStorageError>;
    /// Saves the whole book; returns once it is durable.
    async fn save(&self, book: &PlanBook) -> Result<(), PlanStorageError>;
}

/// Why a plan operation was refused; the text is what the model reads.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The operation needs a current plan.
    #[error("There is no current plan. Create one with 'create_plan' first.")]
    NoPlan,
    /// A subtask index out of range.
    #[error("Invalid subtask_idx {idx}: the current plan has subtasks 0 to {last}.")]
    InvalidIndex {
        /// The index given.
        idx: i64,
        /// The last valid index (`-1` when there are none).
        last: i64,
    },
    /// A rule of the plan was broken; the text says which.
    #[error("{0}")]
    Rule(String),
    /// The change could not be saved and was not made.
    #[error(transparent)]
    Storage(#[from] PlanStorageError),
}

/// A notebook of plans for one agent (one session). Clones share it.
#[derive(Clone, Default)]
pub struct PlanNotebook {
    inner: Arc<NotebookInner>,
}

#[derive(Default)]
struct NotebookInner {
    /// The book, locked across a save so that changes are saved in the order they are made.
    book: tokio::sync::Mutex<PlanBook>,
    storage: std::sync::RwLock<Option<Arc<dyn PlanStorage>>>,
    /// Counts changes, so the agent can tell that a step changed the plan.
    revision: AtomicU64,
    max_subtasks: Option<usize>,
}

impl std::fmt::Debug for PlanNotebook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanNotebook")
            .field("revision", &self.revision())
            .finish()
    }
}

impl PlanNotebook {
    /// An empty notebook kept in memory only (see [`PlanNotebook::bind`]).
    pub fn new() -> Self {
        PlanNotebook::default()
    }

    /// An empty notebook whose plans may have at most `max` subtasks.
    pub fn with_max_subtasks(max: usize) -> Self {
        PlanNotebook {
            inner: Arc::new(NotebookInner {
                max_subtasks: Some(max),
                ..NotebookInner::default()
            }),
        }
    }

    /// Keeps the notebook in `storage` from now on, starting from what it holds (when it holds
    /// something: an empty storage gets the notebook's plans at the next change).
    pub async fn bind(&self, storage: Arc<dyn PlanStorage>) -> Result<(), PlanStorageError> {
        let mut book = self.inner.book.lock().await;
        if let Some(saved) = storage.load().await? {
            *book = saved;
            self.inner.revision.fetch_add(1, Ordering::Release);
        }
        *self.inner.storage.write().unwrap_or_else(|e| e.into_inner()) = Some(storage);
        Ok(())
    }

    /// How many changes were made; it grows with each.
    pub fn revision(&self) -> u64 {
        self.inner.revision.load(Ordering::Acquire)
    }

    /// The plan being worked on.
    pub async fn current(&self) -> Option<Plan> {
        self.inner.book.lock().await.current.clone()
    }

    /// The current plan and the finished ones.
    pub async fn book(&self) -> PlanBook {
        self.inner.book.lock().await.clone()
    }

    /// The hint for the next reasoning step, chosen by the plan's state (without the
    /// `<system-hint>` tags).
    pub async fn hint(&self) -> String {
        hint::hint_for(self.inner.book.lock().await.current.as_ref())
    }

    /// Runs `change` on a copy of the book and, when it succeeds, saves the copy and makes it
    /// the book: a refused or unsaved change leaves everything as it was.
    async fn change<F>(&self, change: F) -> Result<String, PlanError>
    where
        F: FnOnce(&mut PlanBook) -> Result<String, PlanError>,
    {
        let mut book = self.inner.book.lock().await;
        let mut next = book.clone();
        let answer = change(&mut next)?;
        let storage = self
            .inner
            .storage
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(storage) = storage {
            storage.save(&next).await?;
        }
        *book = next;
        self.inner.revision.fetch_add(1, Ordering::Release);
        Ok(answer)
    }

    /// Makes a new current plan (a current one that is not finished is kept in the history as
    /// abandoned).
    pub async fn create_plan(
        &self,
        name: &str,
        description: &str,
        expected_outcome: &str,
        subtasks: Vec<SubTask>,
    ) -> Result<String, PlanError> {
        if let Some(max) = self.inner.max_subtasks
            && subtasks.len() > max
        {
            return Err(PlanError::Rule(format!(
                "A plan may have at most {max} subtasks; this one has {}.",
                subtasks.len()
            )));
        }
        let now = now();
        let plan = Plan {
            id: crate::message::new_id()[..12].to_owned(),
            name: name.to_owned(),
            description: description.to_owned(),
            expected_outcome: expected_outcome.to_owned(),
            subtasks: subtasks.into_iter().map(|s| fresh_subtask(s, &now)).collect(),
            state: PlanState::Todo,
            created_at: now.clone(),
            finished_at: None,
            outcome: None,
        };
        let name = plan.name.clone();
        self.change(move |book| {
            let replaced = retire_current(book, &now, "replaced by a new plan");
            book.current = Some(plan);
            Ok(match replaced {
                Some(old) => format!(
                    "Plan '{name}' created. The previous plan '{old}' was unfinished; it is kept in the history as abandoned."
                ),
                None => format!("Plan '{name}' created."),
            })
        })
        .await
    }

    /// Adds a subtask before `idx` (`add`, `idx` may be the length), replaces the one at
    /// `idx` (`revise`) or removes it (`delete`).
    pub async fn revise_current_plan(
        &self,
        idx: i64,
        action: &str,
        subtask: Option<SubTask>,
    ) -> Result<String, PlanError> {
        let max = self.inner.max_subtasks;
        let action = action.to_owned();
        self.change(move |book| {
            let plan = book.current.as_mut().ok_or(PlanError::NoPlan)?;
            let len = plan.subtasks.len();
            let now = now();
            match action.as_str() {
                "add" => {
                    let at = index(idx, len + 1, len)?;
                    let subtask = subtask.ok_or_else(|| needs_subtask("add"))?;
                    if max.is_some_and(|max| len >= max) {
                        return Err(PlanError::Rule(format!(
                            "The plan already has the most subtasks allowed ({len})."
                        )));
                    }
                    plan.subtasks.insert(at, fresh_subtask(subtask, &now));
                    check_order(plan)?;
                    Ok(format!("Subtask added at index {at}."))
                }
                "revise" => {
                    let at = index(idx, len, len)?;
                    let subtask = subtask.ok_or_else(|| needs_subtask("revise"))?;
                    let mut revised = fresh_subtask(subtask, &now);
                    let old = &plan.subtasks[at];
                    revised.state = old.state;
                    revised.outcome = old.outcome.clone().or(revised.outcome);
                    revised.created_at = old.created_at.clone();
                    revised.finished_at = old.finished_at.clone();
                    plan.subtasks[at] = revised;
                    Ok(format!("Subtask {at} revised."))
                }
                "delete" => {
                    let at = index(idx, len, len)?;
                    let removed = plan.subtasks.remove(at);
                    refresh_state(plan);
                    Ok(format!("Subtask {at} ('{}') deleted.", removed.name))
                }
                other => Err(PlanError::Rule(format!(
                    "Invalid action '{other}': use 'add', 'revise' or 'delete'."
                ))),
            }
        })
        .await
    }

    /// Sets a subtask to `todo`, `in_progress` or `abandoned` (`done` is
    /// [`PlanNotebook::finish_subtask`]'s).
    pub async fn update_subtask_state(&self, idx: i64, state: &str) -> Result<String, PlanError> {
        let state = match state {
            "todo" => SubTaskState::Todo,
            "in_progress" => SubTaskState::InProgress,
            "abandoned" => SubTaskState::Abandoned,
            "done" => {
                return Err(PlanError::Rule(
                    "Use 'finish_subtask' with the subtask's outcome to mark it done.".into(),
                ));
            }
            other => {
                return Err(PlanError::Rule(format!(
                    "Invalid state '{other}': use 'todo', 'in_progress' or 'abandoned'."
                )));
            }
        };
        self.change(move |book| {
            let plan = book.current.as_mut().ok_or(PlanError::NoPlan)?;
            let at = index(idx, plan.subtasks.len(), plan.subtasks.len())?;
            if state == SubTaskState::InProgress {
                if let Some(busy) = plan
                    .subtasks
                    .iter()
                    .position(|s| s.state == SubTaskState::InProgress)
                    .filter(|&busy| busy != at)
                {
                    return Err(PlanError::Rule(format!(
                        "Subtask {busy} is already in progress; finish it with 'finish_subtask' or change its state first."
                    )));
                }
                earlier_closed(plan, at)?;
            }
            let subtask = &mut plan.subtasks[at];
            subtask.state = state;
            subtask.finished_at = (state == SubTaskState::Abandoned).then(now);
            if state == SubTaskState::Todo {
                subtask.outcome = None;
            }
            refresh_state(plan);
            Ok(format!("Subtask {at} ('{}') is now {}.", plan.subtasks[at].name, state.as_str()))
        })
        .await
    }

    /// Marks a subtask done with its outcome and starts the next one that is to do.
    pub async fn finish_subtask(&self, idx: i64, outcome: &str) -> Result<String, PlanError> {
        let outcome = outcome.to_owned();
        self.change(move |book| {
            let plan = book.current.as_mut().ok_or(PlanError::NoPlan)?;
            let at = index(idx, plan.subtasks.len(), plan.subtasks.len())?;
            earlier_closed(plan, at)?;
            let subtask = &mut plan.subtasks[at];
            subtask.state = SubTaskState::Done;
            subtask.outcome = Some(outcome);
            subtask.finished_at = Some(now());
            let mut answer = format!("Subtask {at} ('{}') is done.", plan.subtasks[at].name);
            if let Some(next) = plan.subtasks.get_mut(at + 1)
                && next.state == SubTaskState::Todo
            {
                next.state = SubTaskState::InProgress;
                answer.push_str(&format!(
                    " Subtask {} ('{}') is now in progress.",
                    at + 1,
                    next.name
                ));
            } else if plan.subtasks.iter().all(|s| s.state.is_closed()) {
                answer.push_str(" Every subtask is closed: call 'finish_plan'.");
            }
            refresh_state(plan);
            Ok(answer)
        })
        .await
    }

    /// The subtasks at `indices`, in detail.
    pub async fn view_subtasks(&self, indices: &[i64]) -> Result<String, PlanError> {
        let book = self.inner.book.lock().await;
        let plan = book.current.as_ref().ok_or(PlanError::NoPlan)?;
        let len = plan.subtasks.len();
        let mut out = Vec::new();
        for &idx in indices {
            let at = index(idx, len, len)?;
            out.push(hint::subtask_details(at, &plan.subtasks[at]));
        }
        if out.is_empty() {
            return Err(PlanError::Rule("Give at least one subtask index.".into()));
        }
        Ok(out.join("\n\n"))
    }

    /// Ends the current plan as `done` or `abandoned` with its outcome, into the history.
    pub async fn finish_plan(&self, state: &str, outcome: &str) -> Result<String, PlanError> {
        let state = match state {
            "done" => PlanState::Done,
            "abandoned" => PlanState::Abandoned,
            other => {
                return Err(PlanError::Rule(format!(
                    "Invalid state '{other}': use 'done' or 'abandoned'."
                )));
            }
        };
        let outcome = outcome.to_owned();
        self.change(move |book| {
            let mut plan = book.current.take().ok_or(PlanError::NoPlan)?;
            plan.state = state;
            plan.outcome = Some(outcome);
            plan.finished_at = Some(now());
            let answer = format!("Plan '{}' finished as {}.", plan.name, state.as_str());
            book.history.push(plan);
            Ok(answer)
        })
        .await
    }

    /// The finished plans: id, name, when, state and description of each.
    pub async fn view_historical_plans(&self) -> String {
        let book = self.inner.book.lock().await;
        if book.history.is_empty() {
            return "There are no historical plans.".to_owned();
        }
        book.history
            .iter()
            .map(|plan| {
                format!(
                    "Plan id: {}\nName: {}\nCreated at: {}\nState: {}\nDescription: {}",
                    plan.id,
                    plan.name,
                    plan.created_at,
                    plan.state.as_str(),
                    plan.description
                )
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// Makes a historical plan current again; the current plan, if any, goes into the history
    /// as abandoned.
    pub async fn recover_historical_plan(&self, plan_id: &str) -> Result<String, PlanError> {
        let plan_id = plan_id.trim().to_owned();
        self.change(move |book| {
            let at = book
                .history
                .iter()
                .position(|plan| plan.id == plan_id)
                .ok_or_else(|| {
                    PlanError::Rule(format!(
                        "No historical plan has the id '{plan_id}'; call 'view_historical_plans' to see them."
                    ))
                })?;
            let mut plan = book.history.remove(at);
            let replaced = retire_current(book, &now(), "replaced by a recovered plan");
            plan.finished_at = None;
            plan.outcome = None;
            plan.state = PlanState::Todo;
            refresh_state(&mut plan);
            let answer = match replaced {
                Some(old) => format!(
                    "Plan '{}' recovered; the plan '{old}' it replaces is kept in the history as abandoned.",
                    plan.name
                ),
                None => format!("Plan '{}' recovered.", plan.name),
            };
            book.current = Some(plan);
            Ok(answer)
        })
        .await
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A subtask as a new plan takes it: to do unless the model said otherwise, dated now.
fn fresh_subtask(mut subtask: SubTask, now: &str) -> SubTask {
    subtask.created_at = Some(now.to_owned());
    if !subtask.state.is_closed() {
        subtask.finished_at = None;
    }
    subtask
}

/// Moves an unfinished current plan into the history as abandoned; returns its name.
fn retire_current(book: &mut PlanBook, now: &str, why: &str) -> Option<String> {
    let mut old = book.current.take()?;
    let name = old.name.clone();
    old.state = PlanState::Abandoned;
    old.finished_at = Some(now.to_owned());
    old.outcome.get_or_insert_with(|| why.to_owned());
    book.history.push(old);
    Some(name)
}

/// `idx` as an index below `bound`; the error names the valid range of `len` subtasks.
fn index(idx: i64, bound: usize, len: usize) -> Result<usize, PlanError> {
    usize::try_from(idx)
        .ok()
        .filter(|&at| at < bound)
        .ok_or(PlanError::InvalidIndex {
            idx,
            last: len as i64 - 1,
        })
}

fn needs_subtask(action: &str) -> PlanError {
    PlanError::Rule(format!("The action '{action}' needs the 'subtask' argument."))
}

/// Every subtask before `at` must be done or abandoned.
fn earlier_closed(plan: &Plan, at: usize) -> Result<(), PlanError> {
    match plan.subtasks[..at].iter().position(|s| !s.state.is_closed()) {
        Some(open) => Err(PlanError::Rule(format!(
            "Subtask {open} ('{}') is {}: every subtask before {at} must be done or abandoned first.",
            plan.subtasks[open].name,
            plan.subtasks[open].state.as_str()
        ))),
        None => Ok(()),
    }
}

/// After an insertion: a subtask added before the one in progress must not be left to do.
fn check_order(plan: &Plan) -> Result<(), PlanError> {
    if let Some(busy) = plan
        .subtasks
        .iter()
        .position(|s| s.state == SubTaskState::InProgress)
    {
        earlier_closed(plan, busy).map_err(|_| {
            PlanError::Rule(format!(
                "A subtask to do cannot go before subtask {} while it is in progress; add it after it, or set that subtask back to 'todo' first.",
                busy.saturating_sub(1)
            ))
        })?;
    }
    Ok(())
}

/// A plan that is not finished is in progress once any subtask started or closed.
fn refresh_state(plan: &mut Plan) {
    if matches!(plan.state, PlanState::Todo | PlanState::InProgress) {
        plan.state = if plan.subtasks.iter().any(|s| s.state != SubTaskState::Todo) {
            PlanState::InProgress
        } else {
            PlanState::Todo
        };
    }
}

#[cfg(test)]
mod tests;
