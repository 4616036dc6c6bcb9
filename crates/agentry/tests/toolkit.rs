//! The Toolkit from its public API: registration, schemas, groups, the meta tool, presets,
//! validation, and every failure turned into a result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentry::message::{ContentBlock, ToolUseBlock};
use agentry::tool::{
    FunctionTool, META_TOOL_NAME, NamesakeStrategy, ToolContext, ToolOptions, ToolResponse, Toolkit,
    ToolkitError, tool,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Add two integers.
///
/// # Arguments
/// * `a` - the first addend
/// * `b` - the second addend
#[tool]
async fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Greet someone, synchronously.
#[tool]
fn greet(name: String, excited: Option<bool>) -> String {
    if excited.unwrap_or(false) {
        format!("Hello, {name}!")
    } else {
        format!("Hello, {name}.")
    }
}

/// Count up to `n`, streaming cumulative chunks.
#[tool(stream)]
fn count(n: u32) -> impl futures::Stream<Item = ToolResponse> + Send {
    futures::stream::iter((1..=n).map(move |i| {
        let text: String = (1..=i).map(|d| d.to_string()).collect();
        ToolResponse::text(text).last(i == n)
    }))
}

/// Stream two chunks, then fail.
#[tool(stream)]
fn flaky() -> impl futures::Stream<Item = Result<ToolResponse, String>> + Send {
    futures::stream::iter(vec![
        Ok(ToolResponse::partial("1")),
        Ok(ToolResponse::partial("12")),
        Err("disk on fire".to_owned()),
    ])
}

/// Always panics.
#[tool]
async fn explode() -> String {
    panic!("kaboom")
}

/// Panics in the middle of its stream.
#[tool(stream)]
fn explode_later() -> impl futures::Stream<Item = ToolResponse> + Send {
    futures::stream::iter(0..3).map(|i| {
        if i == 1 {
            panic!("mid-stream kaboom");
        }
        ToolResponse::partial("before")
    })
}

/// Fails with an error.
#[tool]
async fn refuse(reason: String) -> Result<String, String> {
    Err(format!("refused: {reason}"))
}

/// Echoes its context's call id.
#[tool]
async fn whoami(ctx: ToolContext) -> String {
    format!("{} {}", ctx.tool_name(), ctx.call_id())
}

/// Uses a preset secret.
///
/// # Arguments
/// * `query` - what to search
/// * `api_key` - the secret
#[tool]
async fn search(query: String, api_key: String) -> String {
    format!("{query} with {api_key}")
}

fn call(name: &str, input: Value) -> ToolUseBlock {
    ToolUseBlock {
        id: format!("id_{name}").into(),
        name: name.into(),
        input,
        raw_input: None,
    }
}

fn ctx(call: &ToolUseBlock) -> ToolContext {
    ToolContext::new(call.id.clone(), call.name.clone(), CancellationToken::new())
}

/// All chunks of a call.
async fn chunks(toolkit: &Toolkit, call: &ToolUseBlock) -> Vec<ToolResponse> {
    toolkit.call(call, ctx(call)).collect().await
}

/// The final chunk, after checking there is exactly one and that it is the last.
async fn result(toolkit: &Toolkit, call: &ToolUseBlock) -> ToolResponse {
    let all = chunks(toolkit, call).await;
    assert_eq!(
        all.iter().filter(|c| c.is_last).count(),
        1,
        "exactly one last chunk: {all:?}"
    );
    let last = all.last().cloned().unwrap();
    assert!(last.is_last, "the last chunk comes last: {all:?}");
    last
}

fn toolkit_with_all() -> Toolkit {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    toolkit.register(GreetTool).unwrap();
    toolkit.register(CountTool).unwrap();
    toolkit.register(FlakyTool).unwrap();
    toolkit.register(ExplodeTool).unwrap();
    toolkit.register(ExplodeLaterTool).unwrap();
    toolkit.register(RefuseTool).unwrap();
    toolkit.register(WhoamiTool).unwrap();
    toolkit
}

#[test]
fn macro_schema_has_descriptions_types_and_required() {
    let toolkit = toolkit_with_all();
    let schemas = toolkit.json_schemas();
    let add = schemas.iter().find(|s| s.name == "add").unwrap();
    assert_eq!(add.description, "Add two integers.");
    assert_eq!(add.parameters["properties"]["a"]["type"], "integer");
    assert_eq!(
        add.parameters["properties"]["a"]["description"],
        "the first addend"
    );
    assert_eq!(add.parameters["required"], json!(["a", "b"]));
    let greet = schemas.iter().find(|s| s.name == "greet").unwrap();
    assert_eq!(
        greet.parameters["required"],
        json!(["name"]),
        "Option params are optional"
    );
    let whoami = schemas.iter().find(|s| s.name == "whoami").unwrap();
    assert_eq!(
        whoami.parameters["properties"],
        json!({}),
        "ToolContext is not an argument"
    );
    let names: Vec<&str> = schemas.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "add",
            "greet",
            "count",
            "flaky",
            "explode",
            "explode_later",
            "refuse",
            "whoami"
        ]
    );
}

#[tokio::test]
async fn sync_async_and_streaming_tools_share_one_call_path() {
    let toolkit = toolkit_with_all();
    assert_eq!(
        result(&toolkit, &call("add", json!({"a": 2, "b": 40})))
            .await
            .text_content(),
        "42"
    );
    let greeting = result(&toolkit, &call("greet", json!({"name": "Ada", "excited": true}))).await;
    assert_eq!(greeting.text_content(), "Hello, Ada!");
    let streamed = chunks(&toolkit, &call("count", json!({"n": 3}))).await;
    let texts: Vec<String> = streamed.iter().map(ToolResponse::text_content).collect();
    assert_eq!(texts, ["1", "12", "123"], "chunks are cumulative");
    assert_eq!(
        streamed.iter().map(|c| c.is_last).collect::<Vec<_>>(),
        [false, false, true]
    );
    let who = result(&toolkit, &call("whoami", json!({}))).await;
    assert_eq!(who.text_content(), "whoami id_whoami");
}

#[tokio::test]
async fn unknown_tool_is_a_result_naming_the_available_tools() {
    let toolkit = toolkit_with_all();
    let r = result(&toolkit, &call("nope", json!({}))).await;
    assert!(r.is_error);
    let text = r.text_content();
    assert!(
        text.starts_with("Error: there is no tool named \"nope\""),
        "{text}"
    );
    assert!(text.contains("add, greet"), "{text}");
}

#[tokio::test]
async fn invalid_arguments_never_reach_the_tool() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let toolkit = Toolkit::new();
    toolkit
        .register(FunctionTool::new(
            "strict",
            "Counts its executions.",
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]}),
            move |_args, _ctx| {
                counter.fetch_add(1, Ordering::SeqCst);
                agentry::tool::once(async { "ran" })
            },
        ))
        .unwrap();
    let wrong_type = result(&toolkit, &call("strict", json!({"n": "three"}))).await;
    assert!(wrong_type.is_error);
    assert!(
        wrong_type.text_content().contains("at /n"),
        "{}",
        wrong_type.text_content()
    );
    let missing = result(&toolkit, &call("strict", json!({}))).await;
    assert!(
        missing.text_content().contains("\"n\" is a required property"),
        "{}",
        missing.text_content()
    );
    let below = result(&toolkit, &call("strict", json!({"n": -1}))).await;
    assert!(below.is_error);
    let not_object = result(&toolkit, &call("strict", json!([1]))).await;
    assert!(
        not_object
            .text_content()
            .contains("the arguments are an array, not a JSON object")
    );
    let invalid_json = ToolUseBlock {
        id: "bad".into(),
        name: "strict".into(),
        input: Value::Null,
        raw_input: Some("{\"n\": 1,,}".into()),
    };
    let r = result(&toolkit, &invalid_json).await;
    assert!(r.is_error);
    assert!(
        r.text_content().contains("not valid JSON"),
        "{}",
        r.text_content()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the tool never ran");
    assert_eq!(
        result(&toolkit, &call("strict", json!({"n": 1})))
            .await
            .text_content(),
        "ran"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn presets_are_hidden_applied_and_cannot_be_overridden() {
    let toolkit = Toolkit::new();
    toolkit
        .register_with(SearchTool, ToolOptions::new().preset("api_key", json!("s3cret")))
        .unwrap();
    let schema = &toolkit.json_schemas()[0];
    assert!(schema.parameters["properties"].get("api_key").is_none());
    assert_eq!(schema.parameters["required"], json!(["query"]));
    let ok = result(&toolkit, &call("search", json!({"query": "rust"}))).await;
    assert_eq!(ok.text_content(), "rust with s3cret");
    let attempt = result(
        &toolkit,
        &call("search", json!({"query": "rust", "api_key": "mine"})),
    )
    .await;
    assert!(attempt.is_error);
    assert!(
        attempt.text_content().contains("\"api_key\""),
        "{}",
        attempt.text_content()
    );
    assert!(
        !attempt.text_content().contains("s3cret"),
        "the preset value is never shown"
    );
    let err = toolkit
        .register_with(AddTool, ToolOptions::new().preset("c", json!(1)))
        .unwrap_err();
    assert!(matches!(err, ToolkitError::InvalidSchema { .. }), "{err}");
}

#[tokio::test]
async fn tool_errors_panics_and_mid_stream_failures_become_results() {
    let toolkit = toolkit_with_all();
    let refused = result(&toolkit, &call("refuse", json!({"reason": "no"}))).await;
    assert!(refused.is_error);
    assert_eq!(refused.text_content(), "Error: refused: no");

    let panicked = result(&toolkit, &call("explode", json!({}))).await;
    assert!(panicked.is_error);
    assert!(
        panicked.text_content().contains("panicked: kaboom"),
        "{}",
        panicked.text_content()
    );

    let all = chunks(&toolkit, &call("flaky", json!({}))).await;
    let last = all.last().unwrap();
    assert!(last.is_last && last.is_error);
    assert_eq!(
        last.content,
        vec![
            ContentBlock::text("12"),
            ContentBlock::text("Error: disk on fire")
        ],
        "the partial output is kept before the error"
    );

    let later = result(&toolkit, &call("explode_later", json!({}))).await;
    assert!(later.is_error);
    assert!(
        later.text_content().contains("mid-stream kaboom"),
        "{}",
        later.text_content()
    );
    // The toolkit still works after all that.
    assert_eq!(
        result(&toolkit, &call("add", json!({"a": 1, "b": 1})))
            .await
            .text_content(),
        "2"
    );
}

#[tokio::test]
async fn stream_without_last_flag_is_closed_and_postprocess_applies_per_chunk() {
    let toolkit = Toolkit::new();
    toolkit
        .register_with(
            FunctionTool::new(
                "open",
                "Never says last.",
                json!({"type": "object"}),
                |_args, _ctx| {
                    agentry::tool::streaming(futures::stream::iter(vec![
                        ToolResponse::partial("a"),
                        ToolResponse::partial("ab"),
                    ]))
                },
            ),
            ToolOptions::new().postprocess(|call, mut chunk| {
                chunk.content.push(ContentBlock::text(format!("[{}]", call.id)));
                chunk
            }),
        )
        .unwrap();
    let all = chunks(&toolkit, &call("open", json!({}))).await;
    let texts: Vec<String> = all.iter().map(ToolResponse::text_content).collect();
    assert_eq!(texts, ["a\n[id_open]", "ab\n[id_open]", "ab\n[id_open]"]);
    assert_eq!(
        all.iter().map(|c| c.is_last).collect::<Vec<_>>(),
        [false, false, true]
    );
}

#[test]
fn namesake_strategies() {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    assert_eq!(
        toolkit.register(AddTool).unwrap_err(),
        ToolkitError::NameTaken("add".into())
    );
    assert_eq!(
        toolkit
            .register_with(AddTool, ToolOptions::new().namesake(NamesakeStrategy::Skip))
            .unwrap(),
        "add"
    );
    assert_eq!(toolkit.tool_names(), ["add"]);
    let renamed = toolkit
        .register_with(AddTool, ToolOptions::new().namesake(NamesakeStrategy::Rename))
        .unwrap();
    assert!(renamed.starts_with("add_") && renamed.len() == 9, "{renamed}");
    toolkit
        .register_with(
            GreetTool,
            ToolOptions::new()
                .name("add")
                .description("Now a greeter.")
                .namesake(NamesakeStrategy::Override),
        )
        .unwrap();
    let schemas = toolkit.json_schemas();
    assert_eq!(schemas[0].name, "add");
    assert_eq!(schemas[0].description, "Now a greeter.");
    assert_eq!(toolkit.tool_names(), ["add", renamed.as_str()]);
    assert!(toolkit.remove("add"));
    assert!(!toolkit.remove("add"));
    assert_eq!(toolkit.tool_names(), [renamed.as_str()]);
    let bad = toolkit
        .register_with(AddTool, ToolOptions::new().name("has space"))
        .unwrap_err();
    assert!(matches!(bad, ToolkitError::InvalidName(_)));
}

#[tokio::test]
async fn inactive_group_tools_are_hidden_and_refused() {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    toolkit
        .create_group("social", "Greeting people.", false, Some("Be polite.".into()))
        .unwrap();
    toolkit
        .register_with(GreetTool, ToolOptions::new().group("social"))
        .unwrap();
    assert_eq!(
        toolkit
            .register_with(CountTool, ToolOptions::new().group("nope"))
            .unwrap_err(),
        ToolkitError::UnknownGroup("nope".into())
    );
    let names = |t: &Toolkit| {
        t.json_schemas()
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&toolkit), ["add"]);
    let refused = result(&toolkit, &call("greet", json!({"name": "Ada"}))).await;
    assert!(refused.is_error);
    assert!(
        refused.text_content().contains("inactive group \"social\""),
        "{}",
        refused.text_content()
    );

    toolkit.set_groups_active(&["social"], true).unwrap();
    assert_eq!(names(&toolkit), ["add", "greet"]);
    assert_eq!(
        toolkit.activated_notes(),
        "## About Tool Group 'social'\nBe polite."
    );
    assert_eq!(
        toolkit.set_groups_active(&["basic"], false).unwrap_err(),
        ToolkitError::BasicGroup
    );
    toolkit.remove_groups(&["social"]).unwrap();
    assert_eq!(
        toolkit.tool_names(),
        ["add"],
        "removing a group removes its tools"
    );
}

#[tokio::test]
async fn meta_tool_switches_groups_with_absolute_semantics_and_validates_first() {
    let toolkit = Toolkit::new();
    toolkit.register(AddTool).unwrap();
    toolkit
        .create_group("social", "Greeting people.", true, Some("Be polite.".into()))
        .unwrap();
    toolkit.create_group("numbers", "Counting.", false, None).unwrap();
    toolkit
        .register_with(GreetTool, ToolOptions::new().group("social"))
        .unwrap();
    toolkit
        .register_with(CountTool, ToolOptions::new().group("numbers"))
        .unwrap();
    toolkit.enable_meta_tool().unwrap();
    let meta = toolkit
        .json_schemas()
        .iter()
        .find(|s| s.name == META_TOOL_NAME)
        .cloned()
        .unwrap();
    assert_eq!(meta.parameters["properties"]["social"]["type"], "boolean");
    assert_eq!(
        meta.parameters["properties"]["numbers"]["description"],
        "Counting."
    );

    // Invalid input: nothing changes, "social" stays active.
    let bad = result(
        &toolkit,
        &call(META_TOOL_NAME, json!({"numbers": "yes", "ghost": true})),
    )
    .await;
    assert!(bad.is_error);
    assert!(
        bad.text_content().contains("No group was changed"),
        "{}",
        bad.text_content()
    );
    assert!(toolkit.groups().iter().any(|g| g.name == "social" && g.active));

    // Absolute: only "numbers" is active afterwards.
    let ok = result(&toolkit, &call(META_TOOL_NAME, json!({"numbers": true}))).await;
    assert_eq!(ok.text_content(), "Now tool groups 'numbers' are activated.");
    let active: Vec<String> = toolkit
        .groups()
        .into_iter()
        .filter(|g| g.active)
        .map(|g| g.name)
        .collect();
    assert_eq!(active, ["numbers"]);
    assert_eq!(
        result(&toolkit, &call("count", json!({"n": 1})))
            .await
            .text_content(),
        "1"
    );

    let notes = result(&toolkit, &call(META_TOOL_NAME, json!({"social": true}))).await;
    assert!(
        notes
            .text_content()
            .contains("<notes>## About Tool Group 'social'\nBe polite.</notes>")
    );
    let none = result(&toolkit, &call(META_TOOL_NAME, json!({}))).await;
    assert_eq!(none.text_content(), "All tool groups are now deactivated.");
}
