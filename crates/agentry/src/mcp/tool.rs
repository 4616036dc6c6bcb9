//! An MCP server's tool as a [`Tool`]: called like any local tool, through the same
//! `ToolContext` (cancellation, progress), with the same cumulative chunks.

use std::sync::Arc;

use futures::StreamExt;
use rmcp::ServiceError;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::McpTransport;
use super::cancel_slot::CancelSlot;
use super::client::{McpClient, McpToolInfo, Progress};
use super::result::{Chunks, map_result};
use super::task_call::TaskCall;
use crate::error_chain;
use crate::tool::{CancelCause, Tool, ToolContext, ToolError, ToolResponse, ToolStream};

pub(crate) struct McpTool {
    pub(crate) client: McpClient,
    pub(crate) info: McpToolInfo,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn parameters(&self) -> Value {
        self.info.input_schema.clone()
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move { self.run(args, ctx, tx).await });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }).boxed()
    }
}

/// Why a call stopped, in the words `notifications/cancelled` carries (M1).
fn cancel_reason(ctx: &ToolContext) -> &'static str {
    match ctx.cancel_cause() {
        Some(CancelCause::TimedOut { .. }) => "timed out",
        Some(CancelCause::Reply) => "reply cancelled",
        Some(CancelCause::Restart) => "agent stopped",
        Some(CancelCause::Budget) => "budget reached",
        Some(CancelCause::User) | None => "user cancelled",
    }
}

impl McpTool {
    fn server(&self) -> &str {
        self.client.name()
    }

    async fn run(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext, tx: Chunks) {
        let task = TaskCall {
            client: &self.client,
            tool: &self.info.name,
        };
        if let Some(token) = ctx
            .resumed_from()
            .filter(|t| t.get(super::task_call::RESUME_KEY).is_some())
        {
            return task.resume(&token.clone(), &ctx, &tx).await;
        }
        if self.info.task_support.as_task() {
            return task.run(&args, &ctx, &tx).await;
        }
        // Retry once when an HTTP server lost our session (some answer 400, not 404).
        if let Err(Retry::SessionLost) = self.attempt(&args, &ctx, &tx).await {
            tracing::warn!(mcp = %self.server(), "the MCP session is gone; starting a new one");
            self.client.reset().await;
            if let Err(Retry::SessionLost) = self.attempt(&args, &ctx, &tx).await {
                let _ = tx.send(Err(ToolError::msg(format!(
                    "the MCP server \"{}\" rejected the session twice; it is not usable now.",
                    self.server()
                ))));
            }
        }
    }

    async fn attempt(&self, args: &Map<String, Value>, ctx: &ToolContext, tx: &Chunks) -> Result<(), Retry> {
        // Registered before the request exists, so that a cancel at any point finds it (the
        // agent runs `on_cancel` before it records the cancelled result). It hands back
        // nothing (M9).
        let client = self.client.clone();
        let slot = Arc::new(CancelSlot::new(
            tokio::runtime::Handle::current(),
            ctx.on_cancel_budget(),
            move || client.count_cancel_notification(),
        ));
        {
            let (slot, reason_ctx) = (Arc::clone(&slot), ctx.clone());
            // Bounded (the hand-over wait is within the budget): never skipped for want of a
            // slot, so the notification always goes before the result is recorded (L4).
            ctx.set_bounded_on_cancel(move || {
                slot.cancel(cancel_reason(&reason_ctx));
                None
            });
        }
        let peer = match self.client.peer().await {
            Ok(peer) => peer,
            Err(e) => {
                slot.close();
                let _ = tx.send(Err(ToolError::msg(format!("The call was not sent: {e}"))));
                return Ok(());
            }
        };
        if ctx.is_cancelled() {
            // Cancelled before anything went out: nothing to send, nothing to notify.
            slot.close();
            return Ok(());
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(self.info.name.clone()).with_arguments(args.clone()),
        ));
        // What the server asks while it serves this call is asked through it.
        let _in_flight = self.client.in_flight(ctx.clone());
        let mut handle = match peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                slot.close();
                let _ = tx.send(Err(self.transport_failure(&e, false)));
                return Ok(());
            }
        };
        slot.sent(
            peer.clone(),
            handle.id.clone(),
            ctx.is_cancelled().then(|| cancel_reason(ctx)),
        );
        let mut progress = self.client.route(&handle.progress_token);

        let mut messages: Vec<String> = Vec::new();
        let outcome = loop {
            tokio::select! {
                biased;
                () = ctx.cancelled() => {
                    // For contexts nobody runs `on_cancel` for; a no-op once it ran.
                    slot.cancel(cancel_reason(ctx));
                    // The response, if it ever comes, is dropped with the receiver (M3).
                    break Ok(());
                }
                Some(update) = progress.recv() => self.progress(ctx, tx, &mut messages, update),
                response = &mut handle.rx => {
                    if !slot.close() {
                        // The cancel went out first: this response is not used (M3).
                        break Ok(());
                    }
                    if matches!(response, Ok(Ok(_)) | Ok(Err(ServiceError::McpError(_)))) {
                        self.client.mark_up(&peer);
                    }
                    break self.finish(response, tx);
                }
            }
        };
        self.client.unroute(&handle.progress_token);
        outcome
    }

    fn progress(&self, ctx: &ToolContext, tx: &Chunks, messages: &mut Vec<String>, update: Progress) {
        let amount = match update.total {
            Some(total) => format!("{}/{}", update.progress, total),
            None => format!("{}", update.progress),
        };
        let text = match &update.message {
            Some(message) => format!("{message} ({amount})"),
            None => format!("progress {amount}"),
        };
        ctx.report(&text, Some("progress"));
        if let Some(message) = update.message {
            // Progress messages as cumulative chunks: shown while running, not the result.
            messages.push(message);
            let _ = tx.send(Ok(ToolResponse::partial(messages.join("\n"))));
        }
    }

    fn finish(
        &self,
        response: Result<Result<ServerResult, ServiceError>, tokio::sync::oneshot::error::RecvError>,
        tx: &Chunks,
    ) -> Result<(), Retry> {
        let item = match response {
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(map_result(result)),
            Ok(Ok(ServerResult::EmptyResult(_))) => Ok(ToolResponse::new(Vec::new())),
            Ok(Ok(other)) => Err(ToolError::msg(format!(
                "the MCP server \"{}\" answered with {} instead of a tool result; agentry cannot use it.",
                self.server(),
                result_kind(&other)
            ))),
            Ok(Err(ServiceError::McpError(error))) => Err(ToolError::msg(format!(
                "the MCP server \"{}\" refused the call: {} (JSON-RPC error {})",
                self.server(),
                error.message,
                error.code.0
            ))),
            Ok(Err(e)) => {
                if self.session_lost(&e) {
                    return Err(Retry::SessionLost);
                }
                Err(self.transport_failure(&e, true))
            }
            // The responder went away: the connection closed under the call.
            Err(_) => Err(self.transport_failure(&ServiceError::TransportClosed, true)),
        };
        let _ = tx.send(item);
        Ok(())
    }

    fn session_lost(&self, error: &ServiceError) -> bool {
        if !matches!(self.client.config().transport, McpTransport::Http { .. }) {
            return false;
        }
        let text = error_chain(error).to_ascii_lowercase();
        text.contains("session") && (text.contains("400") || text.contains("404") || text.contains("expired"))
    }

    /// `handed_over`: the request went to the transport (so it may have reached the server).
    fn transport_failure(&self, error: &ServiceError, handed_over: bool) -> ToolError {
        let reason = super::tidy(&error_chain(error));
        self.client.mark_down(&reason);
        // A request that could not be sent never ran; say so, the model may simply retry later.
        let not_sent = !handed_over
            || matches!(error, ServiceError::TransportSend(_)) && reason.contains("error sending request");
        let mut text = if not_sent {
            format!(
                "the MCP server \"{}\" is not reachable ({reason}); the call was not sent. The next call will try \
                 to reconnect.",
                self.server()
            )
        } else {
            format!(
                "the MCP server \"{}\" closed the connection during the call ({reason}); it may have crashed, \
                 and the call may have partly run. The next call will try to restart it.",
                self.server()
            )
        };
        let tail = self.client.stderr_tail();
        if !tail.is_empty() {
            let last: Vec<&str> = tail.iter().rev().take(5).rev().map(String::as_str).collect();
            text.push_str("\nIts last stderr lines:\n");
            text.push_str(&last.join("\n"));
        }
        ToolError::msg(text)
    }
}

enum Retry {
    SessionLost,
}

fn result_kind(result: &ServerResult) -> &'static str {
    match result {
        ServerResult::CreateTaskResult(_) => "a task",
        ServerResult::InputRequiredResult(_) => "a request for more input",
        _ => "another kind of result",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn transport_type_names_are_left_out() {
        let raw = "Transport send error: Transport [rmcp::transport::worker::WorkerTransport<rmcp::X<a::B>>] error: \
                   Client error: error sending request for url (http://127.0.0.1:1/mcp)";
        assert_eq!(
            super::super::tidy(raw),
            "Transport send error: Client error: error sending request for url (http://127.0.0.1:1/mcp)"
        );
        assert_eq!(super::super::tidy("Transport closed"), "Transport closed");
    }
}
