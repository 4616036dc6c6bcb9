//! The conversation rules the fake server enforces on every request.

use serde_json::Value;

/// Checks a chat-completions request body; returns one description per violation.
///
/// 1. `messages` is a non-empty array.
/// 2. Every assistant message with `tool_calls` is followed immediately by exactly one
///    `role: "tool"` message per call, in call order, with the call's id.
/// 3. No tool message stands outside such a block (orphan, duplicate, unknown id).
/// 4. An assistant message with `tool_calls` does not have `"content": null`.
/// 5. Every tool call has `type: "function"`, a non-empty `id`, a `function.name` and string
///    `function.arguments`.
pub fn check_conversation(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return vec!["`messages` is missing or not an array".to_owned()];
    };
    if messages.is_empty() {
        return vec!["`messages` is empty".to_owned()];
    }
    let mut i = 0;
    while i < messages.len() {
        let msg = &messages[i];
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "tool" {
            let id = msg.get("tool_call_id").and_then(Value::as_str).unwrap_or("?");
            problems.push(format!(
                "message {i}: tool result for {id:?} answers no pending call"
            ));
            i += 1;
            continue;
        }
        let calls = msg
            .get("tool_calls")
            .and_then(Value::as_array)
            .filter(|c| !c.is_empty());
        let Some(calls) = calls.filter(|_| role == "assistant") else {
            i += 1;
            continue;
        };
        if msg.get("content").is_some_and(Value::is_null) {
            problems.push(format!(
                "message {i}: assistant message with tool_calls has \"content\": null"
            ));
        }
        let start = i;
        i += 1;
        for (n, call) in calls.iter().enumerate() {
            let id = call.get("id").and_then(Value::as_str).unwrap_or("");
            if id.is_empty() {
                problems.push(format!("message {start}: tool call {n} has no id"));
            }
            if call.get("type").and_then(Value::as_str) != Some("function") {
                problems.push(format!(
                    "message {start}: tool call {n} is not of type \"function\""
                ));
            }
            if call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                problems.push(format!("message {start}: tool call {n} has no function.name"));
            }
            if !call.pointer("/function/arguments").is_some_and(Value::is_string) {
                problems.push(format!(
                    "message {start}: tool call {n} has non-string function.arguments"
                ));
            }
            let answer = messages
                .get(i)
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"));
            match answer {
                Some(answer) => {
                    let answered = answer.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                    if answered != id {
                        problems.push(format!(
                            "message {i}: expected the result of call {id:?} (call {n} of message {start}), got \
                             the result of {answered:?}"
                        ));
                    }
                    i += 1;
                }
                None => {
                    problems.push(format!(
                        "message {start}: tool call {id:?} has no result right after it"
                    ));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "add", "arguments": "{}"}})
    }

    fn assistant(ids: &[&str]) -> Value {
        json!({"role": "assistant", "content": "", "tool_calls": ids.iter().map(|i| call(i)).collect::<Vec<_>>()})
    }

    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "1"})
    }

    fn check(messages: Vec<Value>) -> Vec<String> {
        check_conversation(&json!({ "messages": messages }))
    }

    #[test]
    fn valid_conversation_passes() {
        let user = json!({"role": "user", "content": "hi"});
        let answer = json!({"role": "assistant", "content": "done"});
        let messages = vec![user, assistant(&["a", "b"]), result("a"), result("b"), answer];
        assert!(check(messages).is_empty());
    }

    #[test]
    fn missing_wrong_order_orphan_and_null_content_are_violations() {
        assert_eq!(check(vec![assistant(&["a", "b"]), result("a")]).len(), 1);
        assert_eq!(
            check(vec![assistant(&["a", "b"]), result("b"), result("a")]).len(),
            2
        );
        let orphan = check(vec![json!({"role": "user", "content": "x"}), result("z")]);
        assert!(orphan[0].contains("\"z\""), "{orphan:?}");
        let duplicate = check(vec![assistant(&["a"]), result("a"), result("a")]);
        assert_eq!(duplicate.len(), 1);
        let mut null_content = assistant(&["a"]);
        null_content["content"] = Value::Null;
        let problems = check(vec![null_content, result("a")]);
        assert!(problems[0].contains("null"), "{problems:?}");
        let mut bad_args = assistant(&["a"]);
        bad_args["tool_calls"][0]["function"]["arguments"] = json!({});
        assert_eq!(check(vec![bad_args, result("a")]).len(), 1);
        assert_eq!(check(vec![]).len(), 1);
        assert_eq!(check_conversation(&json!({})).len(), 1);
    }
}
