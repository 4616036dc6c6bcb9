//! One call of the reply tool: a reply of a fresh agent, its events turned into progress
//! notifications and approval questions, and the client's cancel into the reply's.

use std::pin::Pin;

use agentry::CallId;
use agentry::agent::{
    AgentEvent, InputAnswer, InputError, ReplyRun, ReplySoFar, ToolCallState, status_lines,
};
use agentry::message::Msg;
use agentry::tool::ApprovalDecision;
use futures::stream::FuturesUnordered;
use futures::{Future, StreamExt};
use rmcp::model::{CallToolResult, ContentBlock as Content, JsonObject};
use rmcp::service::{Peer, RequestContext};
use rmcp::task_manager::{TaskContext, TaskExit};
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use crate::approval::Approver;
use crate::progress::Progress;
use agentry::agent::AgentSource;

/// Longest tool result text in a progress message.
const RESULT_CHARS: usize = 500;

/// The client's answer to a question of the reply.
enum Answer {
    Approval(ApprovalDecision),
    Input(InputAnswer),
}

type Asking = Pin<Box<dyn Future<Output = (CallId, Answer)> + Send>>;

/// The reply tool's prompt, checked.
pub(crate) fn prompt(args: &JsonObject) -> Result<String, ErrorData> {
    match args.get("prompt").and_then(Value::as_str) {
        Some(prompt) => Ok(prompt.to_owned()),
        None => Err(ErrorData::invalid_params(
            "the argument `prompt` (a string) is required",
            None,
        )),
    }
}

/// A reply of a fresh agent for `prompt`, started.
fn start(agents: &AgentSource, prompt: &str) -> Result<(String, ReplyRun), ErrorData> {
    let agent =
        agents().map_err(|e| ErrorData::internal_error(format!("the agent could not be made: {e}"), None))?;
    Ok((agent.name().to_owned(), agent.start_reply(Msg::user(prompt))))
}

/// Runs the reply tool's call: the reply for `args.prompt`, until it ends or the client
/// cancels the request.
pub(crate) async fn run(
    agents: &AgentSource,
    args: JsonObject,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let (name, run) = start(agents, &prompt(&args)?)?;
    let mut call = ReplyCall {
        name,
        progress: Progress::of(&context),
        approver: Approver::of(&context.peer),
        so_far: ReplySoFar::default(),
        asking: FuturesUnordered::new(),
        cancelled: false,
    };
    call.follow(run, context.ct.cancelled()).await
}

/// Runs the reply tool's call as an MCP task (the tasks extension): its status message follows
/// the reply, approvals are the task's input requests, and `tasks/cancel` cancels the reply,
/// whose partial result becomes the task's result.
pub(crate) async fn run_task(
    agents: &AgentSource,
    prompt: &str,
    peer: &Peer<RoleServer>,
    task: TaskContext,
) -> Result<CallToolResult, TaskExit> {
    let (name, run) = start(agents, prompt)?;
    let mut call = ReplyCall {
        name,
        progress: Progress::of_task(task.clone()),
        approver: Approver::of_task(peer, task.clone()),
        so_far: ReplySoFar::default(),
        asking: FuturesUnordered::new(),
        cancelled: false,
    };
    Ok(call.follow(run, task.cancelled()).await?)
}

struct ReplyCall {
    /// The agent's name, in approval questions and the cancelled text.
    name: String,
    progress: Progress,
    approver: Approver,
    so_far: ReplySoFar,
    /// Approval questions waiting for the client's answer.
    asking: FuturesUnordered<Asking>,
    cancelled: bool,
}

impl ReplyCall {
    /// Follows the reply until it ends; `cancel` resolving cancels it.
    async fn follow(
        &mut self,
        mut run: ReplyRun,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallToolResult, ErrorData> {
        tokio::pin!(cancel);
        loop {
            tokio::select! {
                biased;
                () = &mut cancel, if !self.cancelled => {
                    self.cancelled = true;
                    run.cancel();
                }
                Some((call_id, answer)) = self.asking.next(), if !self.asking.is_empty() => {
                    // Refused when the call was cancelled meanwhile: nothing to do then.
                    let _ = match answer {
                        Answer::Approval(decision) => run.handle().decide(call_id, decision).map_err(|_| ()),
                        Answer::Input(input) => match run.handle().answer_input(call_id.clone(), input) {
                            // The client's answer does not fit the form: nobody answered.
                            Err(InputError::Invalid(_)) => run.handle().answer_input(call_id, InputAnswer::Cancel).map_err(|_| ()),
                            other => other.map_err(|_| ()),
                        },
                    };
                }
                event = run.next_event() => match event {
                    Some(event) => self.on_event(&run, event).await,
                    None => break,
                },
            }
        }
        // Questions still open are moot: their calls ended with the reply.
        self.asking.clear();
        let outcome = run.finish().await;
        if self.cancelled {
            let text = self.so_far.cancelled_text(&self.name);
            // The MCP spec gives a cancelled request no response: the partial result goes
            // where the client sees it.
            self.progress.send_whole(&text).await;
            return Ok(CallToolResult::error(vec![Content::text(text)]));
        }
        match outcome {
            Ok(msg) => Ok(answer(&msg)),
            Err(e) => Ok(CallToolResult::error(vec![Content::text(format!(
                "the agent `{}` failed: {e}",
                self.name
            ))])),
        }
    }

    async fn on_event(&mut self, run: &ReplyRun, event: AgentEvent) {
        self.so_far.observe(&event);
        for line in status_lines(&event, RESULT_CHARS) {
            self.progress.send(&line).await;
        }
        match event {
            AgentEvent::ToolProgress { message, .. } => self.progress.send(&message).await,
            AgentEvent::ToolFinished {
                name,
                state: ToolCallState::Declined { reason },
                ..
            } => {
                let why = reason.map(|r| format!(" ({r})")).unwrap_or_default();
                self.progress.send(&format!("{name} declined{why}")).await;
            }
            AgentEvent::ApprovalRequested {
                call_id,
                name,
                input,
                request,
                automatic: false,
                ..
            } => {
                if !self.approver.can_ask() {
                    // Fail closed, at once: nobody can answer.
                    let _ = run.handle().decide_no_decision(call_id);
                    return;
                }
                self.progress.send(&format!("asking to approve {name}")).await;
                let approver = self.approver.clone();
                let agent = self.name.clone();
                self.asking.push(Box::pin(async move {
                    let decision = approver.ask(&agent, &name, &input, &request).await;
                    (call_id, Answer::Approval(decision))
                }));
            }
            AgentEvent::InputRequested {
                call_id,
                name,
                message,
                schema,
                ..
            } => {
                if !self.approver.can_ask() {
                    let _ = run.handle().answer_input(call_id, InputAnswer::Cancel);
                    return;
                }
                let approver = self.approver.clone();
                self.asking.push(Box::pin(async move {
                    let answer = approver.fill(&name, &message, schema).await;
                    (call_id, Answer::Input(answer))
                }));
            }
            _ => {}
        }
    }
}

/// The call's result: the answer's text, and its structured output when the reply made one.
fn answer(msg: &Msg) -> CallToolResult {
    let text = msg.text().unwrap_or_default();
    let mut result = CallToolResult::success(vec![Content::text(text)]);
    // A structured reply keeps its output as the message's metadata object.
    if !msg.metadata.is_empty() {
        result.structured_content = Some(Value::Object(msg.metadata.clone()));
    }
    result
}
