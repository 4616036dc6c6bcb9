//! The OpenAI-compatible provider on the wire: request shape, SSE accumulation, quirks of other
//! servers, retries and errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
#[path = "openai/raw_server.rs"]
mod raw_server;

use std::sync::Arc;
use std::time::Duration;

use agentry::message::{ContentBlock, Msg};
use agentry::model::{
    ChatModel, ChatRequest, ChatResponse, ModelError, OpenAiChatModel, OpenAiConfig, RetryPolicy, ToolChoice,
    ToolSchema,
};
use agentry_testkit::{Call, FakeLlm, Reply};
use common::fast_retry;
use futures::StreamExt;
use raw_server::{Action, RawServer};
use serde_json::json;

fn config(fake: &FakeLlm, stream: bool) -> OpenAiConfig {
    OpenAiConfig::new("m")
        .base_url(fake.base_url())
        .stream(stream)
        .retry(fast_retry())
}

async fn collect(model: &OpenAiChatModel, request: ChatRequest) -> Result<Vec<ChatResponse>, ModelError> {
    let mut out = Vec::new();
    let mut stream = model.chat(request);
    while let Some(item) = stream.next().await {
        out.push(item?);
    }
    Ok(out)
}

fn add_schema() -> Arc<[ToolSchema]> {
    Arc::from(vec![ToolSchema {
        name: "add".into(),
        description: "Add.".into(),
        parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
    }])
}

#[tokio::test]
async fn streamed_tool_calls_accumulate_even_when_ids_and_names_repeat() {
    let fake = FakeLlm::start().await;
    fake.push(
        Reply::tool_calls([
            Call::new("call_a", "add", r#"{"a": 1, "b": 22}"#),
            Call::new("call_b", "add", r#"{"a": 333}"#),
        ])
        .repeat_ids()
        .chunks(5),
    );
    let model = OpenAiChatModel::new(config(&fake, true)).unwrap();
    let responses = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert!(
        responses.len() > 3,
        "cumulative items as the stream goes: {}",
        responses.len()
    );
    let last = responses.last().unwrap();
    let calls: Vec<_> = last.tool_uses().collect();
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("call_a", "add"));
    assert_eq!(calls[0].input, json!({"a": 1, "b": 22}));
    assert_eq!(calls[1].input, json!({"a": 333}));
    assert_eq!(last.finish_reason.as_deref(), Some("tool_calls"));
    assert!(last.usage.is_some());
    fake.assert_no_violations();
}

#[tokio::test]
async fn reasoning_becomes_thinking_and_text_is_cumulative() {
    for stream in [false, true] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::text("The answer.").with_reasoning("First, think."));
        let model = OpenAiChatModel::new(config(&fake, stream)).unwrap();
        let responses = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
            .await
            .unwrap();
        assert_eq!(
            responses.last().unwrap().content,
            vec![
                ContentBlock::thinking("First, think."),
                ContentBlock::text("The answer.")
            ]
        );
        if stream {
            assert!(responses.len() > 2);
        } else {
            assert_eq!(responses.len(), 1, "a non-streaming call yields one item");
        }
    }
}

#[tokio::test]
async fn request_carries_key_headers_extras_and_tool_choice() {
    let fake = FakeLlm::start().await;
    let model = OpenAiChatModel::new(
        config(&fake, false)
            .api_key("sk-test")
            .header("x-team", "blue")
            .extra("temperature", json!(0.2)),
    )
    .unwrap();
    for choice in [
        ToolChoice::Auto,
        ToolChoice::None,
        ToolChoice::Required,
        ToolChoice::Named("add".into()),
    ] {
        fake.push(Reply::text("ok"));
        let request = ChatRequest {
            messages: vec![Msg::user("x")],
            tools: add_schema(),
            tool_choice: Some(choice),
            max_tokens: None,
        };
        collect(&model, request).await.unwrap();
    }
    let requests = fake.requests();
    assert_eq!(requests[0].headers["authorization"], "Bearer sk-test");
    assert_eq!(requests[0].headers["x-team"], "blue");
    assert_eq!(requests[0].body["temperature"], 0.2);
    let choices: Vec<_> = requests.iter().map(|r| r.body["tool_choice"].clone()).collect();
    assert_eq!(
        choices,
        [
            json!("auto"),
            json!("none"),
            json!("required"),
            json!({"type": "function", "function": {"name": "add"}})
        ]
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn client_errors_are_not_retried_and_say_what_the_server_said() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(401).body(r#"{"error": {"message": "bad key"}}"#));
    let model = OpenAiChatModel::new(config(&fake, true)).unwrap();
    let err = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    match &err {
        ModelError::Status {
            status,
            attempts,
            body,
            ..
        } => {
            assert_eq!((*status, *attempts), (401, 1));
            assert!(body.contains("bad key"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn throttling_is_retried_and_bounded_retries_end_in_an_error() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(503).header("retry-after-ms", "20"));
    fake.push(Reply::status(429).header("retry-after", "0"));
    fake.push(Reply::text("ok"));
    let model = OpenAiChatModel::new(config(&fake, false)).unwrap();
    collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert_eq!(
        fake.request_count(),
        3,
        "503 and 429 with retry headers are retried"
    );

    let fake = FakeLlm::start().await;
    for _ in 0..3 {
        fake.push(Reply::status(502));
    }
    let policy = RetryPolicy {
        max_retries: 2,
        ..fast_retry()
    };
    let model = OpenAiChatModel::new(config(&fake, false).retry(policy)).unwrap();
    let err = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::Status {
                status: 502,
                attempts: 3,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn unreachable_server_is_a_connect_error() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let policy = RetryPolicy {
        max_retries: 1,
        ..fast_retry()
    };
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("m")
            .base_url(format!("http://127.0.0.1:{port}/v1"))
            .retry(policy),
    )
    .unwrap();
    let err = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    match &err {
        ModelError::Connect { attempts, url, .. } => {
            assert_eq!(*attempts, 2);
            assert!(url.contains(&port.to_string()));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("cannot reach the model server"), "{err}");
}

#[tokio::test]
async fn slow_server_times_out() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("late").delay(Duration::from_secs(5)));
    let model = OpenAiChatModel::new(
        config(&fake, false)
            .retry(RetryPolicy::none())
            .request_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let err = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn error_event_inside_the_stream_is_an_api_error() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::raw_sse([
        "data: {\"error\": {\"message\": \"model overloaded\"}}\n\n",
    ]));
    let model = OpenAiChatModel::new(config(&fake, true)).unwrap();
    let err = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Api(m) if m == "model overloaded"),
        "{err:?}"
    );
}

#[test]
fn misconfiguration_is_reported_before_any_request() {
    let err = OpenAiChatModel::new(OpenAiConfig::new("")).unwrap_err();
    assert!(matches!(err, ModelError::Config(_)));
    let err = OpenAiChatModel::new(OpenAiConfig::new("m").base_url("localhost:8080")).unwrap_err();
    assert!(err.to_string().contains("http"), "{err}");
}

/// Defect 13: streaming a large argument in small pieces must cost work linear in its size.
/// Every cumulative item copies the arguments so far, so the sum of the copies (and the number
/// of items) is what grows quadratically when each delta yields a fresh preview.
#[tokio::test]
async fn streamed_arguments_cost_linear_work() {
    const PIECE: usize = 8;
    let content = "x".repeat(64 * 1024);
    let arguments = json!({"path": "big.txt", "content": content}).to_string();
    let pieces = arguments.len().div_ceil(PIECE);
    let fake = FakeLlm::start().await;
    fake.push(Reply::tool_calls([Call::new("call_big", "write", arguments.clone())]).chunks(pieces));
    let model = OpenAiChatModel::new(config(&fake, true)).unwrap();
    let responses = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    let copied: usize = responses
        .iter()
        .flat_map(|r| r.tool_uses())
        .map(|u| u.raw_input.as_deref().map_or(0, str::len))
        .sum();
    assert!(
        copied <= 16 * arguments.len(),
        "{} items copied {copied} bytes of arguments for {} bytes streamed in {pieces} pieces",
        responses.len(),
        arguments.len()
    );
    // Previews still follow the stream: several intermediate items, each a valid object.
    assert!(responses.len() > 10, "{} items", responses.len());
    let last = responses.last().unwrap().tool_uses().next().unwrap();
    assert_eq!(last.input["content"].as_str().map(str::len), Some(64 * 1024));
    assert_eq!(last.raw_input.as_deref(), Some(arguments.as_str()));
    fake.assert_no_violations();
}

/// Defect 15: a stream without any choice is the same error as a body without any.
#[tokio::test]
async fn empty_streamed_answer_is_the_no_choices_error_both_ways() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(200).body(r#"{"id": "x", "object": "chat.completion", "choices": []}"#));
    fake.push(Reply::raw_sse([
        "data: {\"id\": \"x\", \"choices\": []}\n\n",
        "data: {\"id\": \"x\", \"choices\": [], \"usage\": {\"prompt_tokens\": 1}}\n\n",
        "data: [DONE]\n\n",
    ]));
    fake.push(Reply::raw_sse(["data: [DONE]\n\n"]));
    for stream in [false, true, true] {
        let model = OpenAiChatModel::new(config(&fake, stream)).unwrap();
        let err = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ModelError::Decode { reason, .. } if reason == "the response has no choices"),
            "stream {stream}: {err:?}"
        );
    }
    assert_eq!(fake.request_count(), 3, "an empty answer is not retried");
}

/// Defect 14: the error names the limit that fired, with its configured value, and a server
/// that stays silent is not asked again (it would only start over, or stay silent again).
#[tokio::test]
async fn silent_server_error_names_the_limit_that_fired() {
    for stream in [true, false] {
        let server = RawServer::start([Action::Silent, Action::Silent]).await;
        let mut config = OpenAiConfig::new("m")
            .base_url(&server.base_url)
            .stream(stream)
            .retry(fast_retry());
        config.http.read_timeout = Duration::from_millis(200);
        config.http.request_timeout = Duration::from_millis(if stream { 30_000 } else { 400 });
        let model = OpenAiChatModel::new(config).unwrap();
        let err = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
            .await
            .unwrap_err();
        let text = err.to_string();
        let expected = if stream {
            ["read timeout", "200ms"]
        } else {
            ["request timeout", "400ms"]
        };
        for word in expected {
            assert!(text.contains(word), "stream {stream}: {text}");
        }
        assert!(matches!(err, ModelError::Timeout { attempts: 1, .. }), "{err:?}");
        assert_eq!(
            server.requests(),
            1,
            "stream {stream}: a silent server is not asked again"
        );
    }
}

/// Defect 17 (a): a stream that ends or breaks before its first data event used nothing, so
/// it is retried (as a counted attempt).
#[tokio::test]
async fn stream_broken_before_its_first_event_is_retried() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::raw_sse(Vec::<String>::new()));
    fake.push(Reply::text("ok"));
    let model = OpenAiChatModel::new(config(&fake, true)).unwrap();
    let responses = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert_eq!(responses.last().unwrap().content, vec![ContentBlock::text("ok")]);
    assert_eq!(fake.request_count(), 2);

    let server = RawServer::start([Action::HeadThenClose, Action::Sse(raw_server::sse("ok"))]).await;
    let policy = RetryPolicy {
        max_retries: 1,
        ..fast_retry()
    };
    let model =
        OpenAiChatModel::new(OpenAiConfig::new("m").base_url(&server.base_url).retry(policy)).unwrap();
    let responses = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert_eq!(responses.last().unwrap().content, vec![ContentBlock::text("ok")]);
    assert_eq!(server.requests(), 2);
}

/// Captures what `tracing` writes on this thread.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Defect 17 (b): a kept-alive connection the server closed is replaced at once: no attempt
/// is used up (here there are none to spare) and nothing is logged as a warning.
#[tokio::test]
async fn closed_pooled_connection_is_replaced_without_a_retry() {
    let server = RawServer::start([
        Action::Json(raw_server::completion("one")),
        Action::Close,
        Action::Json(raw_server::completion("two")),
    ])
    .await;
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let model = OpenAiChatModel::new(
        OpenAiConfig::new("m")
            .base_url(&server.base_url)
            .stream(false)
            .retry(RetryPolicy::none()),
    )
    .unwrap();
    for expected in ["one", "two"] {
        let responses = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
            .await
            .unwrap();
        assert_eq!(responses[0].content, vec![ContentBlock::text(expected)]);
    }
    assert_eq!((server.requests(), server.connections()), (3, 2));
    let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(!log.contains("WARN"), "{log}");
}

/// Defect 17 (c): a server answering without streaming is silent until the whole answer is
/// ready; the read timeout (silence while streaming) must not cut it and start it over.
#[tokio::test]
async fn slow_non_streamed_answer_is_not_cut_by_the_read_timeout() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("late").delay(Duration::from_millis(600)));
    let mut config = config(&fake, false);
    config.http.read_timeout = Duration::from_millis(150);
    config.http.request_timeout = Duration::from_secs(30);
    let model = OpenAiChatModel::new(config).unwrap();
    let responses = collect(&model, ChatRequest::new(vec![Msg::user("x")]))
        .await
        .unwrap();
    assert_eq!(responses[0].content, vec![ContentBlock::text("late")]);
    assert_eq!(fake.request_count(), 1);
}

/// The fuzz targets' checks (`fuzz/`), replayed over their committed corpus on stable.
#[test]
fn fuzz_corpus_replays_clean() {
    type Check = fn(&[u8]);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let targets: [(&str, Check); 5] = [
        ("sse_stream", agentry::model::fuzz::check_sse),
        ("partial_json", agentry::model::fuzz::check_partial_json),
        ("arguments_linear", agentry::model::fuzz::check_arguments_linear),
        ("tool_arguments", agentry::fuzz_checks::check_tool_arguments),
        ("mcp_config", agentry::fuzz_checks::check_mcp_config),
    ];
    for (target, check) in targets {
        let mut files = 0;
        for entry in std::fs::read_dir(root.join(target)).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                panic!("{target}: {} fails its check", path.display());
            }
            files += 1;
        }
        assert!(files >= 5, "{target}: {files} corpus files");
    }
}
