//! A reply against a real OpenAI-compatible server, with the first step's tool forced by a
//! pre-reasoning hook (small local models rarely call tools on their own).
//!
//! ```sh
//! OPENAI_BASE_URL=http://127.0.0.1:18000/v1 AGENTRY_MODEL=qwen2.5-coder-0.5b \
//!     cargo run -p agentry --example forced_tool -- "What is 1234 * 5678?"
//! ```

use agentry::agent::{AgentEvent, AgentHook, HookContext, ReActAgent};
use agentry::message::Msg;
use agentry::model::{OpenAiChatModel, OpenAiConfig, ToolChoice};
use agentry::tool::{Toolkit, tool};
use async_trait::async_trait;
use futures::StreamExt;

/// Multiply two integers exactly.
///
/// # Arguments
/// * `a` - the first factor
/// * `b` - the second factor
#[tool]
fn multiply(a: i64, b: i64) -> Result<i64, String> {
    a.checked_mul(b)
        .ok_or_else(|| "the product does not fit in 64 bits".to_owned())
}

/// Forces `multiply` in the first round; later rounds are the model's choice.
struct ForceMultiply;

#[async_trait]
impl AgentHook for ForceMultiply {
    async fn pre_reasoning(&self, ctx: &HookContext, tool_choice: &mut Option<ToolChoice>) {
        if ctx.iteration == 0 {
            *tool_choice = Some(ToolChoice::Named("multiply".into()));
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let question = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "What is 1234 * 5678?".to_owned());
    let toolkit = Toolkit::new();
    toolkit.register(MultiplyTool)?;
    let agent = ReActAgent::builder()
        .name("calc")
        .sys_prompt("You answer arithmetic questions with the multiply tool.")
        .model(OpenAiChatModel::new(OpenAiConfig::from_env())?)
        .toolkit(toolkit)
        .max_iters(3)
        .hook("force", ForceMultiply)
        .build()?;
    let mut run = agent.start_reply(Msg::user(question));
    while let Some(event) = run.next().await {
        match event {
            AgentEvent::ToolStarted { name, input, .. } => println!("tool call: {name}({input})"),
            AgentEvent::Message { msg, last: true } => {
                for result in msg.tool_results() {
                    println!("tool result: {}", result.text());
                }
                if let Some(text) = msg.text() {
                    println!("{}: {text}", msg.name);
                }
            }
            _ => {}
        }
    }
    run.finish().await?;
    Ok(())
}
