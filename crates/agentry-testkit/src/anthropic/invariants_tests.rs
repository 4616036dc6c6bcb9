//! Unit tests of [`check_anthropic_conversation`].

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::invariants::check_anthropic_conversation;
use super::thinking_signature;

fn thinking(text: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": thinking_signature(text)})
}

fn tool_use(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "add", "input": {"a": 1}})
}

fn tool_result(id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": "2"})
}

fn user(content: Value) -> Value {
    json!({"role": "user", "content": content})
}

fn assistant(content: Value) -> Value {
    json!({"role": "assistant", "content": content})
}

fn headers() -> BTreeMap<String, String> {
    BTreeMap::from([("anthropic-version".to_owned(), "2023-06-01".to_owned())])
}

/// A valid request: thinking on, tools, a system prompt with cache_control, two tool calls.
fn request(messages: Vec<Value>) -> Value {
    json!({
        "model": "claude-fake",
        "max_tokens": 4096,
        "stream": true,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "tools": [{"name": "add", "description": "adds", "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "auto"},
        "messages": messages,
    })
}

fn valid_messages() -> Vec<Value> {
    vec![
        user(json!("add 1 and 1, twice")),
        assistant(
            json!([thinking("I will call add."), {"type": "text", "text": "Adding."}, tool_use("t1"), tool_use("t2")]),
        ),
        user(json!([tool_result("t1"), tool_result("t2"), {"type": "text", "text": "go on"}])),
        assistant(json!([thinking("Once more."), tool_use("t3")])),
        user(json!([tool_result("t3")])),
    ]
}

fn check(messages: Vec<Value>) -> Vec<String> {
    check_anthropic_conversation(Some(&headers()), &request(messages))
}

/// Exactly one violation, containing `needle`.
#[track_caller]
fn assert_one(problems: &[String], needle: &str) {
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].contains(needle), "{needle:?} not in {problems:#?}");
}

#[test]
fn valid_conversation_with_thinking_and_tools_passes() {
    assert_eq!(check(valid_messages()), Vec::<String>::new());
    let minimal = json!({"model": "m", "max_tokens": 1, "messages": [user(json!("hi"))]});
    assert!(check_anthropic_conversation(None, &minimal).is_empty());
}

#[test]
fn missing_anthropic_version_header_is_a_violation() {
    let problems = check_anthropic_conversation(Some(&BTreeMap::new()), &request(valid_messages()));
    assert_one(&problems, "anthropic-version");
}

#[test]
fn missing_tool_result_is_a_violation() {
    let mut messages = valid_messages();
    messages[2] = user(json!([tool_result("t1"), {"type": "text", "text": "go on"}]));
    assert_one(&check(messages), "tool_use \"t2\" has no tool_result");
}

#[test]
fn tool_use_as_the_last_message_has_no_result() {
    let mut messages = valid_messages();
    messages.pop();
    assert_one(&check(messages), "tool_use \"t3\" has no tool_result");
}

#[test]
fn result_in_the_wrong_message_is_a_violation() {
    let mut messages = valid_messages();
    // t2's result moves from right after its call to the message after the next call.
    messages[2] = user(json!([tool_result("t1")]));
    messages[4] = user(json!([tool_result("t3"), tool_result("t2")]));
    let problems = check(messages);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].contains("tool_use \"t2\" has no tool_result"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("tool_result \"t2\" answers no tool_use"),
        "{problems:#?}"
    );
}

#[test]
fn text_before_tool_result_is_a_violation() {
    let mut messages = valid_messages();
    messages[2] = user(json!([{"type": "text", "text": "here"}, tool_result("t1"), tool_result("t2")]));
    let problems = check(messages);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems.iter().all(|p| p.contains("must come first")),
        "{problems:#?}"
    );
}

#[test]
fn duplicate_result_is_a_violation() {
    let mut messages = valid_messages();
    messages[2] = user(json!([tool_result("t1"), tool_result("t2"), tool_result("t1")]));
    assert_one(&check(messages), "a second tool_result for \"t1\"");
}

#[test]
fn duplicate_tool_use_id_is_a_violation() {
    let mut messages = valid_messages();
    messages[3] = assistant(json!([thinking("Once more."), tool_use("t1")]));
    messages[4] = user(json!([tool_result("t1")]));
    assert_one(&check(messages), "\"t1\" is not unique");
}

#[test]
fn altered_thinking_text_or_signature_is_a_violation() {
    let mut messages = valid_messages();
    messages[1]["content"][0]["thinking"] = json!("I will call add!");
    assert_one(&check(messages), "invalid signature");
    let mut messages = valid_messages();
    messages[1]["content"][0]["signature"] = json!("fake-sig-0000000000000000");
    assert_one(&check(messages), "invalid signature");
    let mut messages = valid_messages();
    messages[1]["content"][0]
        .as_object_mut()
        .unwrap()
        .remove("signature");
    assert_one(&check(messages), "without a non-empty `signature`");
}

#[test]
fn tool_use_without_leading_thinking_is_a_violation_when_thinking_is_enabled() {
    let mut messages = valid_messages();
    messages[3] = assistant(json!([tool_use("t3")]));
    assert_one(
        &check(messages.clone()),
        "expected `thinking` or `redacted_thinking`, but found `tool_use`",
    );
    // Not required with thinking off, nor for earlier assistant messages.
    let mut off = request(messages);
    off["thinking"] = json!({"type": "disabled"});
    assert!(check_anthropic_conversation(Some(&headers()), &off).is_empty());
    let mut messages = valid_messages();
    messages[1]["content"].as_array_mut().unwrap().remove(0);
    assert!(check(messages).is_empty());
}

#[test]
fn redacted_thinking_needs_data() {
    let mut messages = valid_messages();
    messages[3] = assistant(json!([{"type": "redacted_thinking", "data": "xyz"}, tool_use("t3")]));
    assert!(check(messages.clone()).is_empty());
    messages[3]["content"][0]["data"] = json!("");
    assert_one(&check(messages), "redacted_thinking without non-empty `data`");
}

#[test]
fn missing_max_tokens_model_or_messages_is_a_violation() {
    let mut body = request(valid_messages());
    body.as_object_mut().unwrap().remove("max_tokens");
    body.as_object_mut().unwrap().remove("thinking");
    assert_one(&check_anthropic_conversation(None, &body), "`max_tokens`");
    body["max_tokens"] = json!(0);
    assert_one(&check_anthropic_conversation(None, &body), "`max_tokens`");
    body["max_tokens"] = json!(10);
    body["model"] = json!("");
    assert_one(&check_anthropic_conversation(None, &body), "`model`");
    body["model"] = json!("m");
    body["messages"] = json!([]);
    assert_one(&check_anthropic_conversation(None, &body), "`messages` is empty");
}

#[test]
fn system_role_in_messages_is_a_violation() {
    let mut messages = valid_messages();
    messages.insert(0, json!({"role": "system", "content": "be brief"}));
    let problems = check(messages);
    assert!(problems[0].contains("top-level `system`"), "{problems:#?}");
    assert!(problems[1].contains("first message"), "{problems:#?}");
}

#[test]
fn roles_must_alternate_and_start_with_user() {
    let problems = check(vec![user(json!("a")), user(json!("b"))]);
    assert_one(&problems, "two \"user\" messages in a row");
    let problems = check(vec![assistant(json!("a")), user(json!("b"))]);
    assert_one(&problems, "not \"user\"");
}

#[test]
fn blocks_in_the_wrong_role_or_of_unknown_type_are_violations() {
    let problems = check(vec![user(json!([tool_use("x")]))]);
    assert!(
        problems[0].contains("a tool_use block in a \"user\" message"),
        "{problems:#?}"
    );
    let problems = check(vec![user(json!("hi")), assistant(json!([tool_result("x")]))]);
    assert!(
        problems[0].contains("a tool_result block in a \"assistant\" message"),
        "{problems:#?}"
    );
    assert_one(
        &check(vec![user(json!([{"type": "video"}]))]),
        "unknown block type \"video\"",
    );
    assert_one(&check(vec![user(json!(42))]), "neither a string nor an array");
    assert_one(
        &check(vec![user(json!([{"type": "text", "text": ""}]))]),
        "non-empty `text`",
    );
}

#[test]
fn tool_use_fields_are_checked() {
    let mut messages = valid_messages();
    messages[3]["content"][1]["input"] = json!("{\"a\": 1}");
    assert_one(&check(messages), "`input` is not an object");
    let mut messages = valid_messages();
    messages[3]["content"][1]["name"] = json!("");
    assert_one(&check(messages), "without a non-empty `name`");
}

#[test]
fn tools_tool_choice_and_extra_fields_are_checked() {
    let mut body = request(valid_messages());
    body["tools"][0].as_object_mut().unwrap().remove("input_schema");
    assert_one(&check_anthropic_conversation(None, &body), "`input_schema`");
    let mut body = request(valid_messages());
    body["tools"][0]["name"] = json!("has space");
    assert_eq!(check_anthropic_conversation(None, &body).len(), 1);
    let mut body = request(valid_messages());
    body["tool_choice"] = json!("auto");
    assert_one(&check_anthropic_conversation(None, &body), "`tool_choice`");
    body["tool_choice"] = json!({"type": "tool", "name": "add"});
    assert_one(&check_anthropic_conversation(None, &body), "forces tool use");
    body.as_object_mut().unwrap().remove("thinking");
    assert!(check_anthropic_conversation(None, &body).is_empty());
    body["tool_choice"] = json!({"type": "tool", "name": "sub"});
    assert_one(&check_anthropic_conversation(None, &body), "not in `tools`");
    let mut body = request(valid_messages());
    body["stream_options"] = json!({"include_usage": true});
    assert_one(
        &check_anthropic_conversation(None, &body),
        "unknown top-level field \"stream_options\"",
    );
    let mut body = request(valid_messages());
    body["messages"][0]["name"] = json!("bob");
    assert_one(
        &check_anthropic_conversation(None, &body),
        "unknown field \"name\"",
    );
}

#[test]
fn system_thinking_budget_and_cache_control_are_checked() {
    let mut body = request(valid_messages());
    body["system"] = json!("a string is fine");
    assert!(check_anthropic_conversation(None, &body).is_empty());
    body["system"] = json!([{"type": "image", "text": "x"}]);
    assert_one(&check_anthropic_conversation(None, &body), "system block 0");
    let mut body = request(valid_messages());
    body["thinking"]["budget_tokens"] = json!(4096);
    assert_one(
        &check_anthropic_conversation(None, &body),
        "greater than `thinking.budget_tokens`",
    );
    let mut body = request(valid_messages());
    let cached = json!({"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}});
    body["system"] = json!([cached, cached, cached, cached, cached]);
    assert_one(&check_anthropic_conversation(None, &body), "at most 4");
}
