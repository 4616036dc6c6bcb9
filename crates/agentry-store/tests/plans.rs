//! The plan notebook kept with the session: a session continued by a new process (a new
//! `SessionMemory`, a new notebook) resumes its plan where it was, not at subtask 0.

use std::sync::Arc;

use agentry::ReActAgent;
use agentry::message::Msg;
use agentry::plan::{PlanNotebook, SubTaskState};
use agentry_store::{PLANS_KEY, SessionMemory, StoreError};
use serde_json::json;

use crate::backends::{TestDb, conformance};
use crate::common::Replies;

async fn planned_agent(memory: &Arc<SessionMemory>, model: Replies) -> (ReActAgent, PlanNotebook) {
    let notebook = PlanNotebook::new();
    let builder = ReActAgent::builder()
        .name("bot")
        .model(model)
        .plan_notebook(notebook.clone());
    (memory.attach(builder).await.unwrap().build().unwrap(), notebook)
}

async fn a_continued_session_resumes_its_plan_at_the_subtask_it_had_reached(db: TestDb) {
    {
        let memory = Arc::new(
            SessionMemory::open_or_create(db.open().await, "work", &json!({"agent": "t"}))
                .await
                .unwrap(),
        );
        let model = Replies::default()
            .call(
                "c1",
                "create_plan",
                json!({"name": "trip", "description": "plan a trip", "expected_outcome": "a plan",
                "subtasks": [
                    {"name": "dates", "description": "choose dates", "expected_outcome": "dates"},
                    {"name": "hotel", "description": "book a hotel", "expected_outcome": "booking"},
                    {"name": "train", "description": "book a train", "expected_outcome": "tickets"}
                ]}),
            )
            .call(
                "c2",
                "update_subtask_state",
                json!({"subtask_idx": 0, "state": "in_progress"}),
            )
            .call(
                "c3",
                "finish_subtask",
                json!({"subtask_idx": 0, "subtask_outcome": "May 3-9"}),
            )
            .text("Dates chosen.");
        let (agent, _) = planned_agent(&memory, model).await;
        agent.reply(Msg::user("Plan my trip.")).await.unwrap();
    }
    // A new process: a new memory on the same database, a new empty notebook.
    let store = db.open().await;
    let config = json!({});
    let memory = Arc::new(
        db.once_released(|| SessionMemory::open_or_create(store.clone(), "work", &config))
            .await
            .unwrap(),
    );
    let model = Replies::default().text("Booking the hotel.");
    let (agent, notebook) = planned_agent(&memory, model.clone()).await;
    let plan = notebook.current().await.expect("the plan came back");
    let states: Vec<SubTaskState> = plan.subtasks.iter().map(|s| s.state).collect();
    assert_eq!(
        states,
        [SubTaskState::Done, SubTaskState::InProgress, SubTaskState::Todo]
    );
    assert_eq!(plan.subtasks[0].outcome.as_deref(), Some("May 3-9"));
    agent.reply(Msg::user("Go on.")).await.unwrap();
    let requests = model.requests.lock().unwrap().clone();
    let hint = requests[0].last().unwrap().text().unwrap_or_default();
    assert!(hint.contains("working on subtask 1"), "{hint}");
    // The session's other settings are kept beside the plans.
    let info = memory
        .store()
        .session(&memory.session().id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.config["agent"], "t");
    assert!(info.config[PLANS_KEY]["current"].is_object());
}
conformance!(a_continued_session_resumes_its_plan_at_the_subtask_it_had_reached);

async fn unreadable_stored_plans_stop_the_attach_rather_than_be_overwritten(db: TestDb) {
    let memory = Arc::new(
        SessionMemory::open_or_create(
            db.open().await,
            "work",
            &json!({PLANS_KEY: {"current": "not a plan"}}),
        )
        .await
        .unwrap(),
    );
    let builder = ReActAgent::builder()
        .name("bot")
        .model(Replies::default())
        .plan_notebook(PlanNotebook::new());
    let Err(error) = memory.attach(builder).await else {
        panic!("the attach went through")
    };
    assert!(matches!(error, StoreError::Decode { .. }), "{error}");
    let info = memory
        .store()
        .session(&memory.session().id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.config[PLANS_KEY]["current"], "not a plan");
}
conformance!(unreadable_stored_plans_stop_the_attach_rather_than_be_overwritten);
