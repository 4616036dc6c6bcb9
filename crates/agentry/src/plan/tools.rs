//! The eight plan tools. They hold no state: each call finds the calling agent's notebook in
//! its [`ToolContext`], so one registration serves every agent of a shared toolkit.

use std::sync::Arc;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{PlanNotebook, SubTask};
use crate::tool::{
    Tool, ToolContext, ToolError, ToolOptions, ToolResponse, ToolStream, Toolkit, ToolkitError,
};

/// The plan tools' names, in the order they are registered.
pub const PLAN_TOOL_NAMES: [&str; 8] = [
    "view_subtasks",
    "update_subtask_state",
    "finish_subtask",
    "create_plan",
    "revise_current_plan",
    "finish_plan",
    "view_historical_plans",
    "recover_historical_plan",
];

/// The tool group of the plan tools when the agent's meta tool is on.
pub const PLAN_GROUP: &str = "plan_related";

/// Registers the plan tools in `toolkit` (once: a toolkit that has them is left as it is). With
/// `grouped`, they go into the group [`PLAN_GROUP`], active, for the meta tool to switch.
pub fn register_plan_tools(toolkit: &Toolkit, grouped: bool) -> Result<(), ToolkitError> {
    let names = toolkit.tool_names();
    if names.iter().any(|name| name == PLAN_TOOL_NAMES[0]) {
        return Ok(());
    }
    if grouped && !toolkit.groups().iter().any(|g| g.name == PLAN_GROUP) {
        toolkit.create_group(
            PLAN_GROUP,
            "Tools to break a complex task into subtasks and track them: create, revise, advance and finish a plan.",
            true,
            None,
        )?;
    }
    for kind in KINDS {
        let options = ToolOptions::new();
        let options = if grouped {
            options.group(PLAN_GROUP)
        } else {
            options
        };
        toolkit.register_with(PlanTool { kind }, options)?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    ViewSubtasks,
    UpdateSubtaskState,
    FinishSubtask,
    CreatePlan,
    ReviseCurrentPlan,
    FinishPlan,
    ViewHistoricalPlans,
    RecoverHistoricalPlan,
}

const KINDS: [Kind; 8] = [
    Kind::ViewSubtasks,
    Kind::UpdateSubtaskState,
    Kind::FinishSubtask,
    Kind::CreatePlan,
    Kind::ReviseCurrentPlan,
    Kind::FinishPlan,
    Kind::ViewHistoricalPlans,
    Kind::RecoverHistoricalPlan,
];

struct PlanTool {
    kind: Kind,
}

/// A subtask as the model writes it.
#[derive(Deserialize)]
struct SubTaskArg {
    name: String,
    description: String,
    expected_outcome: String,
}

impl From<SubTaskArg> for SubTask {
    fn from(arg: SubTaskArg) -> Self {
        SubTask::new(arg.name, arg.description, arg.expected_outcome)
    }
}

fn subtask_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "A short name for the subtask."},
            "description": {"type": "string", "description": "What is to be done, specific enough to act on."},
            "expected_outcome": {"type": "string", "description": "What counts as done, concretely."}
        },
        "required": ["name", "description", "expected_outcome"]
    })
}

fn index_schema(what: &str) -> Value {
    json!({"type": "integer", "minimum": 0, "description": what})
}

impl Tool for PlanTool {
    fn name(&self) -> &str {
        PLAN_TOOL_NAMES[self.kind as usize]
    }

    fn description(&self) -> &str {
        match self.kind {
            Kind::ViewSubtasks => "Shows the given subtasks of the current plan in detail.",
            Kind::UpdateSubtaskState => {
                "Sets a subtask's state to 'todo', 'in_progress' or 'abandoned'. Only one subtask may be in \
                 progress, and only after every subtask before it is done or abandoned. To mark a subtask \
                 done, call 'finish_subtask'."
            }
            Kind::FinishSubtask => {
                "Marks a subtask done with its concrete outcome, and starts the next subtask. Every subtask \
                 before it must be done or abandoned."
            }
            Kind::CreatePlan => {
                "Creates a plan for a complex task: its name, description, expected outcome and ordered \
                 subtasks. It replaces the current plan (which is kept in the history)."
            }
            Kind::ReviseCurrentPlan => {
                "Changes the current plan's subtasks: 'add' inserts the subtask before subtask_idx (use the \
                 number of subtasks to append), 'revise' replaces the subtask at subtask_idx, 'delete' \
                 removes it."
            }
            Kind::FinishPlan => {
                "Finishes the current plan as 'done' or 'abandoned', with its outcome, and moves it into the \
                 history."
            }
            Kind::ViewHistoricalPlans => "Lists the finished and abandoned plans with their ids.",
            Kind::RecoverHistoricalPlan => {
                "Makes a historical plan current again (the current plan, if any, is kept in the history as \
                 abandoned)."
            }
        }
    }

    fn parameters(&self) -> Value {
        let (properties, required): (Value, &[&str]) = match self.kind {
            Kind::ViewSubtasks => (
                json!({"subtask_idx": {"type": "array", "items": {"type": "integer", "minimum": 0},
                    "description": "The indices of the subtasks to show (from 0)."}}),
                &["subtask_idx"],
            ),
            Kind::UpdateSubtaskState => (
                json!({
                    "subtask_idx": index_schema("The subtask's index (from 0)."),
                    "state": {"type": "string", "enum": ["todo", "in_progress", "abandoned"]}
                }),
                &["subtask_idx", "state"],
            ),
            Kind::FinishSubtask => (
                json!({
                    "subtask_idx": index_schema("The subtask's index (from 0)."),
                    "subtask_outcome": {"type": "string", "description": "What came of the subtask, specific and concise."}
                }),
                &["subtask_idx", "subtask_outcome"],
            ),
            Kind::CreatePlan => (
                json!({
                    "name": {"type": "string", "description": "A short name for the plan."},
                    "description": {"type": "string", "description": "The task, with its constraints."},
                    "expected_outcome": {"type": "string", "description": "What counts as done, concretely."},
                    "subtasks": {"type": "array", "items": subtask_schema(), "description": "The steps, in the order to do them."}
                }),
                &["name", "description", "expected_outcome", "subtasks"],
            ),
            Kind::ReviseCurrentPlan => (
                json!({
                    "subtask_idx": index_schema("Where to add, or which subtask to revise or delete (from 0)."),
                    "action": {"type": "string", "enum": ["add", "revise", "delete"]},
                    "subtask": subtask_schema()
                }),
                &["subtask_idx", "action"],
            ),
            Kind::FinishPlan => (
                json!({
                    "state": {"type": "string", "enum": ["done", "abandoned"]},
                    "outcome": {"type": "string", "description": "What came of the plan, specific and concise."}
                }),
                &["state", "outcome"],
            ),
            Kind::ViewHistoricalPlans => (json!({}), &[]),
            Kind::RecoverHistoricalPlan => (
                json!({"plan_id": {"type": "string", "description": "The id 'view_historical_plans' shows."}}),
                &["plan_id"],
            ),
        };
        json!({"type": "object", "properties": properties, "required": required})
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        let kind = self.kind;
        futures::stream::once(async move {
            let Some(notebook) = ctx.extension::<PlanNotebook>().cloned() else {
                return Err(ToolError::msg(
                    "This agent has no plan notebook, so the plan tools cannot be used.",
                ));
            };
            run(kind, &notebook, args)
                .await
                .map(ToolResponse::text)
                .map_err(ToolError::Failed)
        })
        .boxed()
    }
}

/// Runs one plan tool; an error is the text the model reads.
async fn run(kind: Kind, notebook: &PlanNotebook, args: Map<String, Value>) -> Result<String, String> {
    let args = Args(args);
    let answer = match kind {
        Kind::ViewSubtasks => {
            let indices: Vec<i64> = args.get("subtask_idx")?;
            notebook.view_subtasks(&indices).await
        }
        Kind::UpdateSubtaskState => {
            notebook
                .update_subtask_state(args.get("subtask_idx")?, &args.get::<String>("state")?)
                .await
        }
        Kind::FinishSubtask => {
            notebook
                .finish_subtask(args.get("subtask_idx")?, &args.get::<String>("subtask_outcome")?)
                .await
        }
        Kind::CreatePlan => {
            let subtasks: Vec<SubTaskArg> = args.get("subtasks")?;
            notebook
                .create_plan(
                    &args.get::<String>("name")?,
                    &args.get::<String>("description")?,
                    &args.get::<String>("expected_outcome")?,
                    subtasks.into_iter().map(SubTask::from).collect(),
                )
                .await
        }
        Kind::ReviseCurrentPlan => {
            let subtask: Option<SubTaskArg> = args.get_opt("subtask")?;
            notebook
                .revise_current_plan(
                    args.get("subtask_idx")?,
                    &args.get::<String>("action")?,
                    subtask.map(SubTask::from),
                )
                .await
        }
        Kind::FinishPlan => {
            notebook
                .finish_plan(&args.get::<String>("state")?, &args.get::<String>("outcome")?)
                .await
        }
        Kind::ViewHistoricalPlans => Ok(notebook.view_historical_plans().await),
        Kind::RecoverHistoricalPlan => {
            notebook
                .recover_historical_plan(&args.get::<String>("plan_id")?)
                .await
        }
    };
    answer.map_err(|e| e.to_string())
}

/// The arguments, read one at a time with an error that names the argument.
struct Args(Map<String, Value>);

impl Args {
    fn get<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T, String> {
        self.get_opt(name)?
            .ok_or_else(|| format!("The argument '{name}' is missing."))
    }

    fn get_opt<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>, String> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => serde_json::from_value(value.clone())
                .map(Some)
                .map_err(|e| format!("The argument '{name}' is not valid: {e}.")),
        }
    }
}
