//! The plan as the terminal shows it when it changes: a checklist on stderr.

use agentry::plan::{Plan, PlanState, SubTaskState};

use super::sanitize;

/// The longest subtask name or outcome shown, in characters.
const TEXT_CHARS: usize = 80;

/// The checklist of `plan` (`None`: the plan was finished), one line each, escaped.
///
/// ```text
/// plan: write the report (1 of 3 done)
///   [x] 0. gather facts: three sources
///   [>] 1. draft
///   [ ] 2. review
/// ```
pub fn plan_lines(plan: Option<&Plan>) -> Vec<String> {
    let Some(plan) = plan else {
        return vec!["plan: finished".to_owned()];
    };
    let done = plan
        .subtasks
        .iter()
        .filter(|s| s.state == SubTaskState::Done)
        .count();
    let state = match plan.state {
        PlanState::Done => ", done",
        PlanState::Abandoned => ", abandoned",
        _ => "",
    };
    let mut lines = vec![format!(
        "plan: {} ({done} of {} done{state})",
        sanitize::short(&plan.name, TEXT_CHARS),
        plan.subtasks.len()
    )];
    for (idx, subtask) in plan.subtasks.iter().enumerate() {
        let mark = match subtask.state {
            SubTaskState::Done => "[x]",
            SubTaskState::InProgress => "[>]",
            SubTaskState::Abandoned => "[-]",
            _ => "[ ]",
        };
        let mut line = format!("  {mark} {idx}. {}", sanitize::short(&subtask.name, TEXT_CHARS));
        if let Some(outcome) = subtask.outcome.as_deref().filter(|o| !o.trim().is_empty()) {
            line.push_str(": ");
            line.push_str(&sanitize::summary(outcome, TEXT_CHARS));
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use agentry::plan::{PlanNotebook, SubTask};

    use super::*;

    #[tokio::test]
    async fn the_checklist_marks_each_state_and_escapes_model_text() {
        let notebook = PlanNotebook::new();
        notebook
            .create_plan(
                "re\u{1b}[31mport",
                "d",
                "e",
                vec![
                    SubTask::new("gather", "g", "facts"),
                    SubTask::new("draft", "d", "text"),
                    SubTask::new("review", "r", "ok"),
                ],
            )
            .await
            .unwrap();
        notebook.update_subtask_state(0, "in_progress").await.unwrap();
        notebook.finish_subtask(0, "three\nsources").await.unwrap();
        let lines = plan_lines(notebook.current().await.as_ref());
        assert!(!lines.iter().any(|l| l.contains('\u{1b}')), "{lines:?}");
        assert!(
            lines[0].starts_with("plan: re") && lines[0].ends_with("(1 of 3 done)"),
            "{lines:?}"
        );
        assert_eq!(lines[1], "  [x] 0. gather: three sources");
        assert_eq!(lines[2], "  [>] 1. draft");
        assert_eq!(lines[3], "  [ ] 2. review");
        assert_eq!(plan_lines(None), ["plan: finished"]);
    }
}
