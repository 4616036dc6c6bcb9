//! The wire shape of a plan: what the plan notebook keeps and what `plan_changed` events carry.

use serde::{Deserialize, Serialize};

/// Where a subtask stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SubTaskState {
    /// Not started.
    #[default]
    Todo,
    /// Being worked on; at most one subtask of a plan is.
    InProgress,
    /// Finished, with an outcome.
    Done,
    /// Given up.
    Abandoned,
}

impl SubTaskState {
    /// Done or abandoned: nothing more will happen to it.
    pub fn is_closed(self) -> bool {
        matches!(self, SubTaskState::Done | SubTaskState::Abandoned)
    }

    /// The name the tools use (`"in_progress"`).
    pub fn as_str(self) -> &'static str {
        match self {
            SubTaskState::Todo => "todo",
            SubTaskState::InProgress => "in_progress",
            SubTaskState::Done => "done",
            SubTaskState::Abandoned => "abandoned",
        }
    }
}

/// Where a plan stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PlanState {
    /// No subtask has started.
    #[default]
    Todo,
    /// Some subtask has started or finished.
    InProgress,
    /// Finished (`finish_plan` with `done`).
    Done,
    /// Given up (`finish_plan` with `abandoned`, or replaced by a recovered plan).
    Abandoned,
}

impl PlanState {
    /// The name the tools use.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanState::Todo => "todo",
            PlanState::InProgress => "in_progress",
            PlanState::Done => "done",
            PlanState::Abandoned => "abandoned",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SubTask {
    /// A short name.
    pub name: String,
    /// What is to be done.
    pub description: String,
    /// What counts as done.
    pub expected_outcome: String,
    /// What came of it, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Where it stands.
    #[serde(default)]
    pub state: SubTaskState,
    /// When it was added (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// When it was done or abandoned (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

impl SubTask {
    /// A new subtask to do.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        expected_outcome: impl Into<String>,
    ) -> Self {
        SubTask {
            name: name.into(),
            description: description.into(),
            expected_outcome: expected_outcome.into(),
            outcome: None,
            state: SubTaskState::Todo,
            created_at: None,
            finished_at: None,
        }
    }
}

/// A task broken into subtasks, done in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Plan {
    /// A short unique id (`recover_historical_plan` takes it).
    pub id: String,
    /// A short name.
    pub name: String,
    /// What the task is.
    pub description: String,
    /// What counts as done.
    pub expected_outcome: String,
    /// The steps, in order.
    pub subtasks: Vec<SubTask>,
    /// Where it stands.
    #[serde(default)]
    pub state: PlanState,
    /// When it was made (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// When it was finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// What came of it, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

impl Plan {
    /// The plan as a Markdown checklist: `- [x]` done, `- [ ] [WIP]` in progress,
    /// `- [ ] [Abandoned]`, `- [ ]` to do.
    pub fn to_markdown(&self) -> String {
        let mut out = format!(
            "# {}\n**Description**: {}\n**Expected Outcome**: {}\n**State**: {}\n**Created At**: {}\n## Subtasks\n",
            self.name,
            self.description,
            self.expected_outcome,
            self.state.as_str(),
            self.created_at
        );
        for (idx, subtask) in self.subtasks.iter().enumerate() {
            out.push_str(&format!("{}\n", subtask_line(idx, subtask)));
        }
        out
    }
}

/// One line of the checklist: `- [x] 0. name`.
pub fn subtask_line(idx: usize, subtask: &SubTask) -> String {
    let mark = match subtask.state {
        SubTaskState::Todo => "- [ ]",
        SubTaskState::InProgress => "- [ ] [WIP]",
        SubTaskState::Done => "- [x]",
        SubTaskState::Abandoned => "- [ ] [Abandoned]",
    };
    format!("{mark} {idx}. {}", subtask.name)
}
