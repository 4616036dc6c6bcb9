//! `agentry run` exports its GenAI spans over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is
//! set, before it exits, and sends nothing otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use agentry_otel::receiver::OtlpReceiver;
use agentry_testkit::{Call, FakeLlm, Reply};
use common::program::Program;
use common::{command, http_client, output, run_args, serve_args, served_reply, server_base, text};

fn script(fake: &FakeLlm) {
    fake.push(Reply::tool_calls([Call::new(
        "c1",
        "calculate",
        r#"{"expression": "6*7"}"#,
    )]));
    fake.push(Reply::text("42"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exports_its_spans_when_an_otlp_endpoint_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = OtlpReceiver::start().await.unwrap();
    let fake = FakeLlm::start().await;
    script(&fake);
    let mut run = command(
        &run_args(&fake.base_url(), dir.path(), &[], "What is 6*7?"),
        dir.path(),
    );
    run.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_SERVICE_NAME", "agentry-test");
    let out = output(run).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "42\n");
    // The process flushed before it exited: the spans are there (the wait only covers the
    // receiver's own bookkeeping).
    let spans = receiver
        .wait_for(Duration::from_secs(10), |s| s.len() >= 4)
        .await
        .unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names.iter().filter(|n| **n == "invoke_agent agentry").count(),
        1,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| **n == "chat test-model").count(),
        2,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| **n == "execute_tool calculate").count(),
        1,
        "{names:?}"
    );
    let agent = spans.iter().find(|s| s.name == "invoke_agent agentry").unwrap();
    let tool = spans.iter().find(|s| s.name == "execute_tool calculate").unwrap();
    assert_eq!(tool.parent_span_id, agent.span_id);
    assert_eq!(tool.str("gen_ai.tool.call.id"), Some("c1"));
    assert_eq!(agent.str("gen_ai.provider.name"), Some("openai"));
    assert_eq!(agent.service_name.as_deref(), Some("agentry-test"));
    // Only the GenAI spans are exported.
    assert!(
        spans.iter().all(|s| s.str("gen_ai.operation.name").is_some()),
        "{names:?}"
    );
    // No contents without the opt-in.
    assert!(spans.iter().all(|s| s.attr("gen_ai.input.messages").is_none()));
    fake.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sends_nothing_without_an_otlp_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = OtlpReceiver::start().await.unwrap();
    let fake = FakeLlm::start().await;
    script(&fake);
    // Other OTEL variables alone do not turn the export on.
    let mut run = command(
        &run_args(&fake.base_url(), dir.path(), &[], "What is 6*7?"),
        dir.path(),
    );
    run.env("OTEL_SERVICE_NAME", "agentry-test").env(
        "OTEL_EXPORTER_OTLP_HEADERS",
        format!("x-receiver={}", receiver.endpoint()),
    );
    let out = output(run).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "42\n");
    assert_eq!(receiver.requests(), 0);
    assert!(receiver.spans().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_reply_is_traced_with_its_session_as_the_conversation() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let receiver = OtlpReceiver::start().await.unwrap();
    let fake = FakeLlm::start().await;
    script(&fake);
    let mut serve = command(&serve_args(&fake, home, &["--addr", "127.0.0.1:0"]), home);
    serve.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    let server = Program::start_command(serve);
    let base = server_base(&server).await;
    let (id, _) = served_reply(&http_client(), &base, "traced", "What is 6*7?").await;
    server.terminate();
    let (status, _, err) = server.finish().await;
    assert!(status.success(), "{err}");
    let spans = receiver
        .wait_for(Duration::from_secs(10), |s| s.len() >= 4)
        .await
        .unwrap();
    for span in spans.iter().filter(|s| s.name.starts_with("invoke_agent")) {
        assert_eq!(
            span.str("gen_ai.conversation.id"),
            Some(id.as_str()),
            "{}",
            span.name
        );
    }
    assert!(spans.iter().any(|s| s.name.starts_with("invoke_agent")));
    fake.assert_no_violations();
}
