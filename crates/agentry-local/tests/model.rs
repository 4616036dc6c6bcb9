//! The embedded model on a real GGUF file: generation, the cache kept across the steps of a
//! reply, a tool call through the agent, and a question in two parts. The file is named by
//! `AGENTRY_TEST_MODEL` (e.g. the Qwen2.5-Coder 0.5B that `.ci/run` fetches), the two-part
//! question's by `AGENTRY_TEST_DEFAULT_MODEL` (the default 1.5B); without them these tests say
//! so and pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use agentry::message::Msg;
use agentry::model::{ChatModel, ChatRequest, ToolSchema};
use agentry::tool::{FunctionTool, Toolkit};
use agentry::{AgentEvent, ReActAgent};
use agentry_local::{LocalModel, LocalModelConfig};
use futures::StreamExt;
use serde_json::json;

fn model_file() -> Option<PathBuf> {
    match std::env::var_os("AGENTRY_TEST_MODEL") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            eprintln!("AGENTRY_TEST_MODEL is not set: the real-model tests are skipped");
            None
        }
    }
}

fn load(path: &PathBuf) -> LocalModel {
    LocalModel::load(path, LocalModelConfig::default().max_tokens(64)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_step_reuses_the_cached_prefix() {
    let Some(path) = model_file() else { return };
    let model = load(&path);
    let first = vec![
        Msg::system("Answer with one word."),
        Msg::user("Capital of France?"),
    ];
    let mut stream = model.chat(ChatRequest::new(first.clone()));
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item.unwrap());
    }
    let answer = last.unwrap();
    let text = agentry::message::join_text(&answer.content).unwrap_or_default();
    assert!(text.to_lowercase().contains("paris"), "{text:?}");
    let usage = answer.usage.clone().unwrap();
    assert!(usage.input_tokens > 10 && usage.output_tokens > 0, "{usage:?}");
    let after_first = model.stats();
    assert_eq!(
        after_first.reused_tokens, 0,
        "nothing cached before the first call"
    );

    let mut second = first;
    second.push(Msg::assistant("agentry", text.clone()));
    second.push(Msg::user("And of Italy?"));
    let mut stream = model.chat(ChatRequest::new(second));
    while let Some(item) = stream.next().await {
        item.unwrap();
    }
    let stats = model.stats();
    assert!(
        stats.reused_tokens >= after_first.prompt_tokens,
        "the whole first prompt comes from the cache: {stats:?} after {after_first:?}"
    );
    assert!(stats.prompt_tokens > stats.reused_tokens);
}

/// The whole answer to `messages`.
async fn answer(model: &LocalModel, messages: Vec<Msg>) -> String {
    let mut stream = model.chat(ChatRequest::new(messages));
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item.unwrap());
    }
    agentry::message::join_text(&last.unwrap().content).unwrap_or_default()
}

/// The whole answer to `request`, text and calls (their ids left out), as one string.
async fn reply(model: &LocalModel, request: ChatRequest) -> String {
    let mut stream = model.chat(request);
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item.unwrap());
    }
    let mut content = serde_json::to_value(&last.unwrap().content).unwrap();
    for block in content.as_array_mut().unwrap() {
        block.as_object_mut().unwrap().remove("id");
    }
    content.to_string()
}

fn tool(name: &str, description: &str, argument: &str) -> ToolSchema {
    ToolSchema {
        name: name.into(),
        description: description.into(),
        parameters: json!({"type": "object", "properties": {argument: {"type": "string"}}, "required": [argument]}),
    }
}

fn saved_chunks(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "safetensors")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_reads_the_system_block_from_disk_and_answers_the_same() {
    let Some(path) = model_file() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        LocalModelConfig::default()
            .max_tokens(24)
            .prefix_cache_dir(dir.path())
    };
    let system = format!(
        "You are a terse assistant. {} Answer with one word.",
        "Never explain, never apologise, never add a greeting or a closing line. ".repeat(6)
    );
    let messages = || vec![Msg::system(system.clone()), Msg::user("Capital of France?")];

    let first = LocalModel::load(&path, config()).unwrap();
    let first_answer = answer(&first, messages()).await;
    assert_eq!(first.stats().reused_tokens, 0);
    assert!(saved_chunks(dir.path()) >= 1, "the system block is saved");
    drop(first);

    // Another model instance, as in a new process: the system block comes from disk.
    let second = LocalModel::load(&path, config()).unwrap();
    let second_answer = answer(&second, messages()).await;
    let stats = second.stats();
    assert!(
        stats.stored_tokens >= 64 && stats.stored_tokens == stats.reused_tokens,
        "{stats:?}"
    );
    assert!(stats.reused_tokens < stats.prompt_tokens, "{stats:?}");
    assert_eq!(
        second_answer, first_answer,
        "the same keys and values, the same answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tool_list_reads_the_part_it_shares_from_disk_and_answers_as_without() {
    let Some(path) = model_file() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = || LocalModelConfig::default().max_tokens(24).plan_calls(false);
    let system = format!(
        "You are a careful assistant. {}",
        "Use a tool only when the question needs one; otherwise answer in one short sentence. ".repeat(8)
    );
    let weather = tool("weather", "Today's weather in a city.", "city");
    let request = |tools: Vec<ToolSchema>| {
        let mut request = ChatRequest::new(vec![Msg::system(system.clone()), Msg::user("What is 2 + 2?")]);
        request.tools = tools.into();
        request
    };
    let first_tools = vec![
        weather.clone(),
        tool("stock_price", "A company's share price.", "symbol"),
    ];
    let second_tools = vec![
        weather,
        tool("translate", "Translates a text into English.", "text"),
    ];

    let first = LocalModel::load(&path, config().prefix_cache_dir(dir.path())).unwrap();
    reply(&first, request(first_tools.clone())).await;
    let first_block = saved_chunks(dir.path());
    drop(first);

    // A new process with a tool list that begins like the first one and then differs.
    let second = LocalModel::load(&path, config().prefix_cache_dir(dir.path())).unwrap();
    let second_answer = reply(&second, request(second_tools.clone())).await;
    let stats = second.stats();
    let shared = common_prefix(&second, request(first_tools), request(second_tools.clone()));
    assert!(
        stats.stored_tokens == shared && shared >= 128,
        "every shared token, no more, comes from disk ({shared} shared): {stats:?}"
    );
    assert!(
        saved_chunks(dir.path()) > first_block,
        "the new tail is saved too"
    );

    let fresh = LocalModel::load(&path, config()).unwrap();
    let fresh_answer = reply(&fresh, request(second_tools)).await;
    assert_eq!(fresh.stats().reused_tokens, 0);
    assert_eq!(
        second_answer, fresh_answer,
        "the shared keys and values give the same answer"
    );
}

/// How many leading tokens the prompts of two requests share.
fn common_prefix(model: &LocalModel, a: ChatRequest, b: ChatRequest) -> usize {
    let a = model.tokenize(&model.render_prompt(&a).unwrap()).unwrap();
    let b = model.tokenize(&model.render_prompt(&b).unwrap()).unwrap();
    a.iter().zip(&b).take_while(|(x, y)| x == y).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_calls_a_tool_and_answers_with_its_result() {
    let Some(path) = model_file() else { return };
    let model = Arc::new(load(&path));
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&calls);
    let toolkit = Toolkit::new();
    // Pure: a small model that calls it again is answered from the first call.
    toolkit
        .register_with(
            FunctionTool::new(
                "multiply",
                "Multiplies two integers exactly.",
                json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
                move |args, _| {
                    seen.lock().unwrap().push(args.clone());
                    let product = args["a"].as_i64().unwrap_or(0) * args["b"].as_i64().unwrap_or(0);
                    agentry::tool::once(async move { product.to_string() })
                },
            ),
            agentry::tool::ToolOptions::new().pure(true),
        )
        .unwrap();
    let agent = ReActAgent::builder()
        .name("agentry")
        .sys_prompt("You are a helpful assistant. Use the tools for arithmetic.")
        .model(Arc::clone(&model))
        .toolkit(toolkit)
        .max_iters(4)
        .build()
        .unwrap();
    let mut run = agent.start_reply(Msg::user("What is 1234 times 5678?"));
    let mut events = Vec::new();
    while let Some(event) = run.next_event().await {
        events.push(event);
    }
    let reply = run.finish().await.unwrap();
    let made: Vec<_> = calls.lock().unwrap().clone();
    assert_eq!(
        made,
        [json!({"a": 1234, "b": 5678}).as_object().unwrap().clone()],
        "{events:#?}"
    );
    let text = reply.text().unwrap_or_default().replace([',', ' '], "");
    assert!(text.contains("7006652"), "{text:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolFinished { .. }))
    );
}

/// A toolkit of `multiply` (pure) and `weather`, each call recorded in `calls`.
fn two_tools(calls: &Arc<std::sync::Mutex<Vec<String>>>) -> Toolkit {
    let toolkit = Toolkit::new();
    let seen = Arc::clone(calls);
    toolkit
        .register_with(
            FunctionTool::new(
                "multiply",
                "Multiplies two integers exactly.",
                json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
                move |args, _| {
                    seen.lock().unwrap().push("multiply".into());
                    let product = args["a"].as_i64().unwrap_or(0) * args["b"].as_i64().unwrap_or(0);
                    agentry::tool::once(async move { product.to_string() })
                },
            ),
            agentry::tool::ToolOptions::new().pure(true),
        )
        .unwrap();
    let seen = Arc::clone(calls);
    toolkit
        .register(FunctionTool::new(
            "weather",
            "Today's weather in a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            move |_, _| {
                seen.lock().unwrap().push("weather".into());
                agentry::tool::once(async move { "Sunny, 21 °C".to_string() })
            },
        ))
        .unwrap();
    toolkit
}

/// An agent on the default model (`AGENTRY_TEST_DEFAULT_MODEL`) with [`two_tools`], and the
/// names of the tools it calls; `None` when the model is not named.
fn default_model_agent(system: &str) -> Option<(ReActAgent, Arc<std::sync::Mutex<Vec<String>>>)> {
    let Some(path) = std::env::var_os("AGENTRY_TEST_DEFAULT_MODEL").map(PathBuf::from) else {
        eprintln!("AGENTRY_TEST_DEFAULT_MODEL is not set: the real-model test is skipped");
        return None;
    };
    let model = Arc::new(LocalModel::load(&path, LocalModelConfig::default().max_tokens(96)).unwrap());
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = ReActAgent::builder()
        .name("agentry")
        .sys_prompt(system)
        .model(model)
        .toolkit(two_tools(&calls))
        .max_iters(5)
        .build()
        .unwrap();
    Some((agent, calls))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_in_two_parts_gets_both_tools_called_before_the_answer() {
    // The default model: the 0.5B plans one part of two.
    let Some((agent, calls)) = default_model_agent("You are a helpful assistant.") else {
        return;
    };

    let reply = agent
        .reply(Msg::user(
            "What is 1234 times 5678, and what is the weather in Paris?",
        ))
        .await
        .unwrap();

    let mut made = calls.lock().unwrap().clone();
    made.sort();
    assert_eq!(made, ["multiply", "weather"], "each part's tool, once");
    let text = reply.text().unwrap_or_default();
    assert!(!text.trim().is_empty(), "an answer follows the calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_no_tool_can_do_is_declined_in_words_not_imitated_as_a_call() {
    // The default model: told only that it may not call, it wrote ```json {"name": "send_email", ...}.
    let Some((agent, calls)) = default_model_agent(
        "You are a helpful assistant. Use a tool whenever it gives a more reliable answer than guessing.",
    ) else {
        return;
    };

    let reply = agent
        .reply(Msg::user(
            "Send an email to Dana telling her the launch is on track.",
        ))
        .await
        .unwrap();

    assert!(calls.lock().unwrap().is_empty(), "no tool sends email");
    let text = reply.text().unwrap_or_default().to_lowercase();
    assert!(
        ["can't", "cannot", "unable", "not able"]
            .iter()
            .any(|w| text.contains(w)),
        "the answer says it cannot: {text:?}"
    );
    assert!(
        !text.contains('{') && !text.contains('<') && !text.contains("```"),
        "no imitation of a call: {text:?}"
    );
}
