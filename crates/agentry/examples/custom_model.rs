//! A model provider in a few dozen lines: implement `ChatModel`, feed what each server event
//! adds into a `DeltaAccumulator`, yield its cumulative snapshots. This one plays scripted
//! deltas instead of a network, so it runs offline: `cargo run -p agentry --example custom_model`.

use agentry::message::Msg;
use agentry::model::{CallDelta, ChatModel, ChatRequest, ChatStream, DeltaAccumulator};
use agentry::tool::{Toolkit, tool};
use agentry::{AgentEvent, ReActAgent};
use futures::StreamExt;

/// What one server event carries, as a provider's wire decoder would produce it.
enum Delta {
    Text(String),
    Call(CallDelta),
}

/// A provider: calls `add` the first time, then answers with the tool's result.
struct ScriptedProvider;

impl ChatModel for ScriptedProvider {
    fn model_name(&self) -> &str {
        "scripted"
    }

    fn is_streaming(&self) -> bool {
        true
    }

    fn chat(&self, request: ChatRequest) -> ChatStream {
        let result = request
            .messages
            .iter()
            .flat_map(|m| m.tool_results())
            .last()
            .map(|r| r.text());
        let deltas: Vec<Delta> = match result {
            None => vec![
                Delta::Text("Let me add those. ".into()),
                Delta::Call(CallDelta {
                    index: Some(0),
                    id: Some("call_1".into()),
                    name: Some("add".into()),
                    arguments: Some(r#"{"a": 19, "#.into()),
                }),
                Delta::Call(CallDelta {
                    index: Some(0),
                    arguments: Some(r#""b": 23}"#.into()),
                    ..CallDelta::default()
                }),
            ],
            Some(sum) => vec![Delta::Text("The sum is ".into()), Delta::Text(format!("{sum}."))],
        };
        // One accumulator per call: every item is the whole response so far.
        let mut acc = DeltaAccumulator::new();
        let mut items: Vec<_> = deltas
            .into_iter()
            .filter_map(|delta| {
                let changed = match delta {
                    Delta::Text(text) => acc.push_text(&text),
                    Delta::Call(call) => acc.push_call(call),
                };
                changed.then(|| Ok(acc.snapshot()))
            })
            .collect();
        items.push(Ok(acc.finish()));
        futures::stream::iter(items).boxed()
    }
}

/// Adds two numbers.
///
/// # Arguments
/// * `a` - The first number.
/// * `b` - The second number.
#[tool]
fn add(a: i64, b: i64) -> String {
    (a + b).to_string()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool)?;
    let agent = ReActAgent::builder()
        .model(ScriptedProvider)
        .toolkit(toolkit)
        .build()?;
    let mut run = agent.start_reply(Msg::user("What is 19 + 23?"));
    while let Some(event) = run.next_event().await {
        if let AgentEvent::ToolFinished { name, state, .. } = event {
            println!("tool {name}: {}", state.name());
        }
    }
    let reply = run.finish().await?;
    println!("{}", reply.text().unwrap_or_default());
    Ok(())
}
