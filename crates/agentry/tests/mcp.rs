//! MCP tools from real servers we did not write, through the same Toolkit and agent as local
//! tools: `@modelcontextprotocol/server-everything`, `server-filesystem`, PyPI `mcp-server-fetch`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use agentry::mcp::{McpClient, McpStatus, McpToolOptions};
use agentry::message::ToolUseBlock;
use agentry::tool::{CancellationToken, ToolContext, ToolResponse, Toolkit};
use common::peers;
use futures::StreamExt;
use serde_json::{Value, json};

async fn call(toolkit: &Toolkit, name: &str, input: Value) -> ToolResponse {
    let call = ToolUseBlock {
        id: format!("c_{name}"),
        name: name.into(),
        input,
        raw_input: None,
    };
    let chunks: Vec<ToolResponse> = toolkit
        .call(
            &call,
            ToolContext::new(call.id.clone(), name, CancellationToken::new()),
        )
        .collect()
        .await;
    chunks.last().cloned().unwrap()
}

#[tokio::test]
async fn everything_over_stdio_echo_sum_structured_and_image() {
    let client = McpClient::connect(peers::everything()).await.unwrap();
    assert!(
        matches!(client.status(), McpStatus::Connected { .. }),
        "{:?}",
        client.status()
    );
    let toolkit = Toolkit::new();
    let names = toolkit
        .register_mcp_client(&client, McpToolOptions::new())
        .await
        .unwrap();
    assert!(
        names.contains(&"echo".to_owned()) && names.contains(&"get-sum".to_owned()),
        "{names:?}"
    );
    let echo = call(&toolkit, "echo", json!({"message": "hello"})).await;
    assert_eq!(echo.text_content(), "Echo: hello");
    let sum = call(&toolkit, "get-sum", json!({"a": 2, "b": 40})).await;
    assert_eq!(sum.text_content(), "The sum of 2 and 40 is 42.");
    eprintln!("{names:?}");
}

#[tokio::test]
async fn probe_test_server_builds_on_demand() {
    let client = McpClient::connect(peers::test_server(&[])).await.unwrap();
    let toolkit = Toolkit::new();
    toolkit
        .register_mcp_client(&client, McpToolOptions::new())
        .await
        .unwrap();
    assert_eq!(
        call(&toolkit, "echo", json!({"text": "hi"})).await.text_content(),
        "hi"
    );
}
