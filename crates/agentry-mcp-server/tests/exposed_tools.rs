//! `--expose-tools`: the agent's own tools as MCP tools, under its approval and permission
//! rules, cancellable with the tool's `on_cancel` text handed back.

use agentry::tool::{PermissionRules, ToolOptions, Toolkit};
use agentry_testkit::FakeLlm;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::common::{Slow, connect, server, within};

#[tokio::test]
async fn exposed_tools_are_listed_and_a_cancel_hands_back_the_tools_on_cancel_text() {
    let fake = FakeLlm::start().await;
    let slow = Slow::default();
    let toolkit = Toolkit::new();
    toolkit.register(slow.clone()).unwrap();
    let server = server(&fake, toolkit.clone())
        .expose_tools(toolkit, PermissionRules::new())
        .unwrap();
    let mut connected = connect(server, None).await;

    let names: Vec<String> = connected
        .client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["ask", "slow_search"]);

    let handle = connected.start_call("slow_search", json!({})).await;
    within("the tool to start", slow.started.notified()).await;
    handle.cancel(None).await.unwrap();
    let partial = connected.progress_until("found").await;
    assert_eq!(partial, "found 2 of 5 sources before the stop");
    assert_eq!(slow.on_cancel_runs(), 1);
}

#[tokio::test]
async fn an_exposed_tool_that_needs_approval_is_declined_for_a_client_that_cannot_be_asked_unless_a_rule_allows_it()
 {
    let fake = FakeLlm::start().await;
    let slow = Slow::default();
    let toolkit = Toolkit::new();
    toolkit
        .register_with(slow.clone(), ToolOptions::new().require_approval(true))
        .unwrap();
    let declined = server(&fake, toolkit.clone())
        .expose_tools(toolkit.clone(), PermissionRules::new())
        .unwrap();
    let connected = connect(declined, None).await;
    let result = within(
        "the call",
        connected
            .client
            .call_tool(CallToolRequestParams::new("slow_search")),
    )
    .await
    .unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(
        serde_json::to_string(&result.content)
            .unwrap()
            .contains("elicitation")
    );
    assert_eq!(slow.calls(), 0);

    let denied = server(&fake, toolkit.clone())
        .expose_tools(
            toolkit.clone(),
            PermissionRules::new()
                .allow("slow_search")
                .unwrap()
                .deny("slow_search")
                .unwrap(),
        )
        .unwrap();
    let connected = connect(denied, None).await;
    let result = within(
        "the call",
        connected
            .client
            .call_tool(CallToolRequestParams::new("slow_search")),
    )
    .await
    .unwrap();
    assert!(
        serde_json::to_string(&result.content)
            .unwrap()
            .contains("permission rule")
    );
    assert_eq!(slow.calls(), 0);

    let allowed = server(&fake, toolkit.clone())
        .expose_tools(toolkit, PermissionRules::new().allow("slow_search").unwrap())
        .unwrap();
    let connected = connect(allowed, None).await;
    let call = connected.start_call("slow_search", json!({})).await;
    within("the allowed tool to start", slow.started.notified()).await;
    assert_eq!(slow.calls(), 1);
    call.cancel(None).await.unwrap();
}
