//! The hint before each reasoning step: one text for each state of the plan.

use super::{Plan, SubTask, SubTaskState};

/// The hint for `plan` (none, all to do, one in progress, some closed and none in progress,
/// all closed).
pub(super) fn hint_for(plan: Option<&Plan>) -> String {
    let Some(plan) = plan else {
        return "If the user's request is complex (it takes several distinct steps, such as \
                gathering facts and then writing something from them), create a plan first by \
                calling 'create_plan'. Otherwise answer or act directly, without a plan."
            .to_owned();
    };
    let overview = plan.to_markdown();
    if let Some(at) = plan
        .subtasks
        .iter()
        .position(|s| s.state == SubTaskState::InProgress)
    {
        return format!(
            "The current plan:\n```\n{overview}```\nYou are working on subtask {at}:\n```\n{}\n```\n\
             Work on it now. When it is finished, call 'finish_subtask' with subtask_idx={at} and \
             its concrete outcome (the next subtask then starts). If the plan no longer fits, \
             change it with 'revise_current_plan'.",
            subtask_details(at, &plan.subtasks[at])
        );
    }
    let closed = plan.subtasks.iter().filter(|s| s.state.is_closed()).count();
    if plan.subtasks.is_empty() || closed == plan.subtasks.len() {
        return format!(
            "The current plan:\n```\n{overview}```\nEvery subtask is done or abandoned. Call \
             'finish_plan' with state='done' (or 'abandoned') and the outcome, then give the \
             user a summary of what was done."
        );
    }
    let next = plan
        .subtasks
        .iter()
        .position(|s| !s.state.is_closed())
        .unwrap_or(0);
    let progress = if closed == 0 {
        "No subtask has started yet.".to_owned()
    } else {
        format!("{closed} subtask(s) are done or abandoned; none is in progress.")
    };
    format!(
        "The current plan:\n```\n{overview}```\n{progress} Start subtask {next} by calling \
         'update_subtask_state' with subtask_idx={next} and state='in_progress', then work on it. \
         If the plan needs changing first, call 'revise_current_plan'. If the user asks for \
         something unrelated, answer that first. If the user wants to stop, call 'finish_plan' \
         with state='abandoned'."
    )
}

/// One subtask in full.
pub(super) fn subtask_details(idx: usize, subtask: &SubTask) -> String {
    let mut out = format!(
        "Subtask {idx}: {}\nState: {}\nDescription: {}\nExpected outcome: {}",
        subtask.name,
        subtask.state.as_str(),
        subtask.description,
        subtask.expected_outcome
    );
    if let Some(outcome) = &subtask.outcome {
        out.push_str(&format!("\nOutcome: {outcome}"));
    }
    out
}
