//! Approvals asked of the MCP client through elicitation (fail closed when it cannot be asked).

use agentry::agent::InputAnswer;
use agentry::tool::{ApprovalDecision, ApprovalRequest};
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
};
use rmcp::service::{ElicitationMode, Peer};
use rmcp::task_manager::TaskContext;
use serde_json::{Value, json};

use agentry::message::truncate_chars as cut;

/// Longest arguments text shown in an approval question.
const ARGUMENTS_CHARS: usize = 1_000;
/// Longest preview shown in an approval question.
const PREVIEW_CHARS: usize = 2_000;
/// The property of the elicitation form that holds the user's answer.
const APPROVE: &str = "approve";

/// Who can decide a call's approval for this client: the client through a form elicitation
/// (sent at once, or, for a call that runs as a task, asked through the task's input
/// requests), or nobody.
#[derive(Clone)]
pub(crate) struct Approver {
    peer: Option<Peer<RoleServer>>,
    task: Option<TaskContext>,
}

/// Keys of a task's input requests, unique over the task's life.
static INPUT_KEYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Why a call was declined without asking anyone.
pub(crate) const CANNOT_ASK: &str =
    "the MCP client cannot be asked for approval (it did not declare elicitation)";

impl Approver {
    /// The client of `peer`, when it declared form elicitation.
    pub(crate) fn of(peer: &Peer<RoleServer>) -> Self {
        let can = peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
        Self {
            peer: can.then(|| peer.clone()),
            task: None,
        }
    }

    /// The client of `peer` asked through `task`'s input requests (`input_required` in
    /// `tasks/get`, answered with `tasks/update`), when it declared form elicitation.
    pub(crate) fn of_task(peer: &Peer<RoleServer>, task: TaskContext) -> Self {
        Self {
            task: Some(task),
            ..Self::of(peer)
        }
    }

    /// Sends one elicitation and reads its answer.
    async fn elicit(&self, params: ElicitRequestParams) -> Result<ElicitResult, String> {
        let Some(peer) = &self.peer else {
            return Err(CANNOT_ASK.to_owned());
        };
        let Some(task) = &self.task else {
            return peer.create_elicitation(params).await.map_err(|e| e.to_string());
        };
        let key = format!(
            "elicit-{}",
            INPUT_KEYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let request = InputRequest::Elicitation(ElicitRequest::new(params));
        match task.request_input(key, request).await {
            Ok(answer) => {
                serde_json::from_value(answer).map_err(|e| format!("an answer that is not one: {e}"))
            }
            Err(_) => Err("the task ended before the answer".to_owned()),
        }
    }

    /// Whether the client can be asked.
    pub(crate) fn can_ask(&self) -> bool {
        self.peer.is_some()
    }

    /// Asks the client whether `agent` may run `tool` with `input`. Anything but an explicit
    /// approval declines, with the reason the model reads.
    pub(crate) async fn ask(
        &self,
        agent: &str,
        tool: &str,
        input: &Value,
        request: &ApprovalRequest,
    ) -> ApprovalDecision {
        if self.peer.is_none() {
            return decline(CANNOT_ASK);
        }
        let params = match form(agent, tool, input, request) {
            Ok(params) => params,
            Err(e) => return decline(&format!("the approval question could not be made: {e}")),
        };
        match self.elicit(params).await {
            Ok(result) => decision(&result),
            Err(e) => decline(&format!("the approval question failed: {e}")),
        }
    }
}

impl Approver {
    /// Asks the client to fill a form one of the agent's tools asks for (an MCP server's
    /// elicitation, passed on); cancelled when it cannot be asked or the form cannot be sent.
    pub(crate) async fn fill(&self, name: &str, message: &str, schema: Value) -> InputAnswer {
        if self.peer.is_none() {
            return InputAnswer::Cancel;
        }
        let params = serde_json::from_value::<ElicitRequestParams>(json!({
            "mode": "form",
            "message": format!("{name} asks: {message}"),
            "requestedSchema": schema,
        }));
        let Ok(params) = params else {
            return InputAnswer::Cancel;
        };
        match self.elicit(params).await {
            Ok(result) => match result.action {
                ElicitationAction::Accept => InputAnswer::Accept(result.content.unwrap_or_else(|| json!({}))),
                ElicitationAction::Decline => InputAnswer::Decline,
                _ => InputAnswer::Cancel,
            },
            Err(_) => InputAnswer::Cancel,
        }
    }
}

fn decline(reason: &str) -> ApprovalDecision {
    ApprovalDecision::Decline {
        reason: Some(reason.to_owned()),
    }
}

/// The decision an elicitation answer stands for: approved only when accepted with `approve`
/// true.
pub(crate) fn decision(result: &ElicitResult) -> ApprovalDecision {
    match result.action {
        ElicitationAction::Accept => {
            let approved = result
                .content
                .as_ref()
                .and_then(|content| content.get(APPROVE))
                .and_then(Value::as_bool);
            match approved {
                Some(true) => ApprovalDecision::Approve,
                Some(false) => decline("the user declined"),
                None => decline("the approval answer did not say whether to run the call"),
            }
        }
        ElicitationAction::Decline => decline("the user declined"),
        _ => decline("the user dismissed the approval question"),
    }
}

/// The form asking the question: one required boolean.
fn form(
    agent: &str,
    tool: &str,
    input: &Value,
    request: &ApprovalRequest,
) -> Result<ElicitRequestParams, serde_json::Error> {
    let arguments = serde_json::to_string(input).unwrap_or_default();
    let mut message = format!(
        "The agent `{agent}` asks to run the tool `{tool}`. {}\nArguments: {}",
        request.message,
        cut(&arguments, ARGUMENTS_CHARS)
    );
    if let Some(preview) = &request.preview {
        message.push_str("\n\n");
        message.push_str(&cut(preview, PREVIEW_CHARS));
    }
    let title = request.primary_label.as_deref().unwrap_or("Allow");
    let schema: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            APPROVE: {
                "type": "boolean",
                "title": title,
                "description": format!("Run `{tool}` as shown"),
                "default": false
            }
        },
        "required": [APPROVE]
    }))?;
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(action: &str, content: Option<Value>) -> ElicitResult {
        let mut value = json!({ "action": action });
        if let Some(content) = content {
            value["content"] = content;
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_an_explicit_approval_runs_the_call() {
        let approved = answer("accept", Some(json!({ "approve": true })));
        assert_eq!(decision(&approved), ApprovalDecision::Approve);
        for refused in [
            answer("accept", Some(json!({ "approve": false }))),
            answer("accept", Some(json!({ "approve": "yes" }))),
            answer("accept", None),
            answer("decline", None),
            answer("cancel", None),
        ] {
            assert!(
                matches!(decision(&refused), ApprovalDecision::Decline { .. }),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn the_question_is_a_valid_form() {
        let request = ApprovalRequest::generic("write_file", &serde_json::Map::new());
        let params = form("agentry", "write_file", &json!({"path": "a.txt"}), &request);
        let params = params.unwrap();
        let wire = serde_json::to_value(&params).unwrap_or_default();
        assert_eq!(wire["requestedSchema"]["required"], json!(["approve"]));
        assert!(
            wire["message"]
                .as_str()
                .unwrap_or_default()
                .contains("write_file")
        );
    }
}
