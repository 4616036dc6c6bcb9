use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::*;

fn three() -> Vec<SubTask> {
    vec![
        SubTask::new("a", "do a", "a done"),
        SubTask::new("b", "do b", "b done"),
        SubTask::new("c", "do c", "c done"),
    ]
}

async fn planned() -> PlanNotebook {
    let notebook = PlanNotebook::new();
    notebook
        .create_plan("p", "the task", "all done", three())
        .await
        .unwrap();
    notebook
}

fn states(plan: &Plan) -> Vec<SubTaskState> {
    plan.subtasks.iter().map(|s| s.state).collect()
}

#[tokio::test]
async fn one_subtask_in_progress_and_only_after_the_earlier_ones_close() {
    use SubTaskState::*;
    let notebook = planned().await;
    let error = notebook.update_subtask_state(1, "in_progress").await.unwrap_err();
    assert!(error.to_string().contains("Subtask 0 ('a') is todo"), "{error}");
    notebook.update_subtask_state(0, "in_progress").await.unwrap();
    let error = notebook.finish_subtask(1, "early").await.unwrap_err();
    assert!(error.to_string().contains("before 1"), "{error}");
    notebook.finish_subtask(0, "a is done").await.unwrap();
    let plan = notebook.current().await.unwrap();
    assert_eq!(states(&plan), [Done, InProgress, Todo]);
    assert_eq!(plan.state, PlanState::InProgress);
    let error = notebook.update_subtask_state(2, "in_progress").await.unwrap_err();
    assert!(error.to_string().contains("already in progress"), "{error}");
    notebook.update_subtask_state(1, "abandoned").await.unwrap();
    notebook.update_subtask_state(2, "in_progress").await.unwrap();
    let error = notebook.update_subtask_state(2, "done").await.unwrap_err();
    assert!(error.to_string().contains("finish_subtask"), "{error}");
    let error = notebook.update_subtask_state(7, "todo").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Invalid subtask_idx 7: the current plan has subtasks 0 to 2."
    );
}

#[tokio::test]
async fn the_hint_follows_the_plan_through_its_states() {
    let notebook = PlanNotebook::new();
    assert!(notebook.hint().await.contains("create_plan"));
    notebook
        .create_plan("p", "the task", "all done", three())
        .await
        .unwrap();
    let hint = notebook.hint().await;
    assert!(
        hint.contains("No subtask has started") && hint.contains("subtask_idx=0"),
        "{hint}"
    );
    notebook.update_subtask_state(0, "in_progress").await.unwrap();
    let hint = notebook.hint().await;
    assert!(
        hint.contains("working on subtask 0") && hint.contains("- [ ] [WIP] 0. a"),
        "{hint}"
    );
    notebook.finish_subtask(0, "a out").await.unwrap();
    notebook.update_subtask_state(1, "todo").await.unwrap();
    let hint = notebook.hint().await;
    assert!(
        hint.contains("1 subtask(s) are done") && hint.contains("subtask_idx=1"),
        "{hint}"
    );
    notebook.update_subtask_state(1, "abandoned").await.unwrap();
    notebook.update_subtask_state(2, "abandoned").await.unwrap();
    let hint = notebook.hint().await;
    assert!(
        hint.contains("Call 'finish_plan'") && hint.contains("- [x] 0. a"),
        "{hint}"
    );
}

#[tokio::test]
async fn revising_adds_replaces_and_deletes_subtasks() {
    let notebook = planned().await;
    let new = || SubTask::new("n", "do n", "n done");
    notebook.revise_current_plan(3, "add", Some(new())).await.unwrap();
    notebook
        .revise_current_plan(0, "revise", Some(SubTask::new("a2", "x", "y")))
        .await
        .unwrap();
    notebook.revise_current_plan(1, "delete", None).await.unwrap();
    let names: Vec<_> = notebook
        .current()
        .await
        .unwrap()
        .subtasks
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["a2", "c", "n"]);
    let error = notebook.revise_current_plan(0, "add", None).await.unwrap_err();
    assert!(error.to_string().contains("needs the 'subtask'"), "{error}");
    let error = notebook.revise_current_plan(0, "move", None).await.unwrap_err();
    assert!(error.to_string().contains("Invalid action"), "{error}");
    // Nothing to do may go before the subtask in progress.
    notebook.update_subtask_state(0, "in_progress").await.unwrap();
    notebook.finish_subtask(0, "ok").await.unwrap();
    let error = notebook
        .revise_current_plan(0, "add", Some(new()))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("cannot go before"), "{error}");
}

#[tokio::test]
async fn a_replaced_plan_goes_into_the_history_and_can_come_back() {
    let notebook = planned().await;
    let first = notebook.current().await.unwrap().id;
    notebook.update_subtask_state(0, "in_progress").await.unwrap();
    let answer = notebook
        .create_plan("q", "other", "other done", three())
        .await
        .unwrap();
    assert!(answer.contains("kept in the history"), "{answer}");
    assert!(notebook.view_historical_plans().await.contains(&first));
    notebook.recover_historical_plan(&first).await.unwrap();
    let plan = notebook.current().await.unwrap();
    assert_eq!(plan.name, "p");
    assert_eq!(plan.subtasks[0].state, SubTaskState::InProgress);
    assert_eq!(plan.state, PlanState::InProgress);
    let book = notebook.book().await;
    assert_eq!(book.history.len(), 1);
    assert_eq!(book.history[0].name, "q");
    assert_eq!(book.history[0].state, PlanState::Abandoned);
    notebook.finish_plan("done", "all of it").await.unwrap();
    assert!(notebook.current().await.is_none());
    assert_eq!(
        notebook
            .finish_plan("done", "again")
            .await
            .unwrap_err()
            .to_string(),
        PlanError::NoPlan.to_string()
    );
    let error = notebook.recover_historical_plan("nope").await.unwrap_err();
    assert!(error.to_string().contains("view_historical_plans"), "{error}");
}

/// A storage that keeps the last book, or fails every save while `broken`.
#[derive(Default)]
struct Kept {
    book: Mutex<Option<PlanBook>>,
    broken: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl PlanStorage for Kept {
    async fn load(&self) -> Result<Option<PlanBook>, PlanStorageError> {
        Ok(self.book.lock().unwrap().clone())
    }

    async fn save(&self, book: &PlanBook) -> Result<(), PlanStorageError> {
        if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(PlanStorageError("disk full".into()));
        }
        *self.book.lock().unwrap() = Some(book.clone());
        Ok(())
    }
}

#[tokio::test]
async fn a_bound_notebook_saves_each_change_and_a_new_one_resumes_from_it() {
    let storage = Arc::new(Kept::default());
    let notebook = PlanNotebook::new();
    notebook.bind(storage.clone()).await.unwrap();
    notebook
        .create_plan("p", "the task", "all done", three())
        .await
        .unwrap();
    notebook.update_subtask_state(0, "in_progress").await.unwrap();
    notebook.finish_subtask(0, "a out").await.unwrap();

    let again = PlanNotebook::new();
    again.bind(storage.clone()).await.unwrap();
    let plan = again.current().await.unwrap();
    assert_eq!(
        states(&plan),
        [SubTaskState::Done, SubTaskState::InProgress, SubTaskState::Todo]
    );
    assert!(again.hint().await.contains("working on subtask 1"));

    // A change that cannot be saved is not made.
    storage.broken.store(true, std::sync::atomic::Ordering::SeqCst);
    let revision = again.revision();
    let error = again.finish_subtask(1, "b out").await.unwrap_err();
    assert!(
        error.to_string().contains("could not be saved: disk full"),
        "{error}"
    );
    assert_eq!(
        again.current().await.unwrap().subtasks[1].state,
        SubTaskState::InProgress
    );
    assert_eq!(again.revision(), revision);
}
