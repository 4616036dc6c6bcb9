//! The tool groups the model activated stay active when its session is continued, also after
//! the process died in the middle of the reply.

use std::sync::Arc;

use agentry::ReActAgent;
use agentry::message::{ContentBlock, Msg, ToolUseBlock};
use agentry::model::{ChatModel, ChatRequest, ChatResponse, ChatStream};
use agentry::tool::{META_TOOL_NAME, Toolkit};
use agentry_store::{SessionMemory, ToolGroupRecorder, restore_tool_groups};
use futures::StreamExt;
use serde_json::json;

use crate::backends::{TestDb, conformance};

/// Activates the group `web` with the meta tool, then never answers: the reply is cut there,
/// as by a crash.
struct ActivatesWeb {
    answered: tokio::sync::mpsc::UnboundedSender<()>,
}

impl ChatModel for ActivatesWeb {
    fn model_name(&self) -> &str {
        "activates-web"
    }

    fn is_streaming(&self) -> bool {
        false
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        if request.messages.iter().any(|m| m.tool_results().next().is_some()) {
            let _ = self.answered.send(());
            return futures::stream::pending().boxed();
        }
        let content = vec![ContentBlock::ToolUse(ToolUseBlock {
            id: "g1".into(),
            name: META_TOOL_NAME.into(),
            input: json!({"web": true}),
            raw_input: None,
        })];
        futures::stream::once(async move {
            Ok(ChatResponse {
                content,
                ..ChatResponse::default()
            })
        })
        .boxed()
    }
}

fn toolkit() -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit
        .create_group("web", "Browse the web", false, None)
        .unwrap();
    toolkit.create_group("mail", "Send mail", false, None).unwrap();
    toolkit.enable_meta_tool().unwrap();
    toolkit
}

fn active(toolkit: &Toolkit) -> Vec<(String, bool)> {
    toolkit.groups().into_iter().map(|g| (g.name, g.active)).collect()
}

async fn groups_the_model_activated_are_active_again_in_the_next_process(db: TestDb) {
    let memory = Arc::new(
        SessionMemory::open_or_create(db.open().await, "groups", &json!({"model": "m"}))
            .await
            .unwrap(),
    );
    let id = memory.session().id.clone();
    let tools = toolkit();
    let (answered, mut next_request) = tokio::sync::mpsc::unbounded_channel();
    let agent = ReActAgent::builder()
        .name("bot")
        .model(ActivatesWeb { answered })
        .toolkit(tools.clone())
        .memory(Arc::clone(&memory))
        .hook(
            "session-tool-groups",
            ToolGroupRecorder::new(Arc::clone(&memory), tools.clone()),
        )
        .build()
        .unwrap();
    let reply = tokio::spawn(async move { agent.reply(Msg::user("browse")).await });
    tokio::time::timeout(std::time::Duration::from_secs(20), next_request.recv())
        .await
        .unwrap();
    // The process dies while the model is asked again.
    reply.abort();
    let _ = reply.await;
    drop(memory);

    let store = db.open().await;
    let memory = db
        .once_released(|| SessionMemory::open(store.clone(), &id))
        .await
        .unwrap();
    assert_eq!(
        memory.store().session(&id).await.unwrap().unwrap().config["model"],
        "m",
        "the rest of the configuration is kept"
    );
    let fresh = toolkit();
    assert_eq!(restore_tool_groups(&fresh, &memory).await.unwrap(), 2);
    assert_eq!(
        active(&fresh),
        [("web".to_owned(), true), ("mail".to_owned(), false)]
    );
}
conformance!(groups_the_model_activated_are_active_again_in_the_next_process);
