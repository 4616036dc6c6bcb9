//! `agentry eval` end to end: the built binary, a tiny evaluation set, and a scripted model
//! behind the fake OpenAI-compatible server that answers some prompts right and some wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use agentry_testkit::{Call, FakeLlm, Reply};
use serde_json::{Value, json};

use crate::common::program::Program;
use crate::common::{agentry, text};

/// Six prompts: right; a wrong argument; a call where none is wanted; a model error; a right
/// follow-up; right calls with a wrong answer.
fn tiny_set() -> Value {
    json!({
        "system": "You are a test agent working in {workdir}.",
        "fixture": {"notes.txt": "buy milk\n"},
        "prompts": [
            {"id": "right", "category": "single", "prompt": "What is 6*7?",
             "calls": [{"tool": "calculate", "args": {"expression": {"expr": 42}}}],
             "answer": {"number": 42}},
            {"id": "wrong-arg", "category": "typed", "prompt": "What is the status of order 1042?",
             "calls": [{"tool": "get_order_status", "args": {"order_id": 1042}}],
             "answer": {"any_of": ["shipped"]}},
            {"id": "needless-call", "category": "no_tool", "prompt": "What is the capital of France?",
             "calls": [],
             "answer": {"any_of": ["Paris"]}},
            {"id": "model-error", "category": "single", "prompt": "What does notes.txt say?",
             "calls": [{"tool": "read_file", "args": {"path": "notes.txt"}}],
             "answer": {"any_of": ["milk"]}},
            {"id": "follow", "category": "follow_up",
             "turns": ["What's the price of AAPL stock?", "How much are 12 shares? Use the calculator."],
             "calls": [{"tool": "get_stock_price", "args": {"symbol": "AAPL"}},
                       {"tool": "calculate", "args": {"expression": {"expr": 2247}}}],
             "answer": {"number": 2247}},
            {"id": "wrong-answer", "category": "sequence", "prompt": "Where is the parcel of order 1042?",
             "calls": [{"tool": "get_order_status", "args": {"order_id": 1042}},
                       {"tool": "track_shipment", "args": {"tracking_number": "ZX-88231"}}],
             "answer": {"any_of": ["Leipzig"]}}
        ]
    })
}

fn call(id: &str, name: &str, args: Value) -> Reply {
    Reply::tool_calls([Call::new(id, name, args.to_string())])
}

/// The model's side of the six prompts of [`tiny_set`], request by request.
fn script(fake: &FakeLlm) {
    // right: the same call twice (the repeat is answered from the first result), then 42.
    fake.push(call("c1", "calculate", json!({"expression": "6*7"})));
    fake.push(call("c2", "calculate", json!({"expression": "6*7"})));
    fake.push(Reply::text("6 times 7 is 42."));
    // wrong-arg: the wrong order number, a right-sounding answer anyway.
    fake.push(call("c4", "get_order_status", json!({"order_id": 1043})));
    fake.push(Reply::text("Order 1042 has shipped."));
    // needless-call: a tool for a question that needs none.
    fake.push(call("c5", "calculate", json!({"expression": "1+1"})));
    fake.push(Reply::text("Paris."));
    // model-error: the right call, then the server fails (no retries).
    fake.push(call("c10", "read_file", json!({"path": "notes.txt"})));
    fake.push(Reply::status(500).body(r#"{"error": {"message": "the model crashed"}}"#));
    // follow: two turns, each with its call.
    fake.push(call("c6", "get_stock_price", json!({"symbol": "aapl"})));
    fake.push(Reply::text("AAPL is at 187.25 USD."));
    fake.push(call("c7", "calculate", json!({"expression": "12 * 187.25"})));
    fake.push(Reply::text("12 shares cost 2,247 USD."));
    // wrong-answer: the right calls in order, then a wrong place.
    fake.push(call("c8", "get_order_status", json!({"order_id": 1042})));
    fake.push(call(
        "c9",
        "track_shipment",
        json!({"tracking_number": "ZX-88231"}),
    ));
    fake.push(Reply::text("It is in Berlin."));
}

fn write_set(dir: &Path, set: &Value) -> PathBuf {
    let path = dir.join("set.json");
    std::fs::write(&path, serde_json::to_string_pretty(set).unwrap()).unwrap();
    path
}

fn eval_args(url: &str, set: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "eval",
        "--base-url",
        url,
        "--model",
        "test-model",
        "--max-retries",
        "0",
        "--set",
        &set.display().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_scores_each_prompt_and_sums_up_per_category() {
    let dir = tempfile::tempdir().unwrap();
    let set = write_set(dir.path(), &tiny_set());
    let out_file = dir.path().join("out.jsonl");
    let fake = FakeLlm::start().await;
    script(&fake);
    let out = agentry(
        eval_args(
            &fake.base_url(),
            &set,
            &["--json", "--out", &out_file.display().to_string()],
        ),
        dir.path(),
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert_eq!(fake.remaining(), 0, "every scripted reply was used\n{stderr}");
    fake.assert_no_violations();

    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |category: &str| -> (u64, u64, u64, u64, u64) {
        let row = if category == "total" {
            summary["total"].clone()
        } else {
            summary["categories"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["category"] == category)
                .unwrap_or_else(|| panic!("no row for {category}: {summary}"))
                .clone()
        };
        let n = |key: &str| row[key].as_u64().unwrap();
        (n("n"), n("calls_ok"), n("answers_ok"), n("ok"), n("errors"))
    };
    assert_eq!(row("single"), (2, 1, 1, 1, 1), "{summary}");
    assert_eq!(row("typed"), (1, 0, 1, 0, 0), "{summary}");
    assert_eq!(row("no_tool"), (1, 0, 1, 0, 0), "{summary}");
    assert_eq!(row("follow_up"), (1, 1, 1, 1, 0), "{summary}");
    assert_eq!(row("sequence"), (1, 1, 0, 0, 0), "{summary}");
    assert_eq!(row("total"), (6, 3, 4, 2, 1), "{summary}");
    assert_eq!(summary["total"]["ok_pct"], 33.3);
    assert_eq!(summary["total"]["repeated_calls"], 1);
    assert_eq!(summary["model"], "test-model");
    assert!(
        summary["command"]
            .as_str()
            .unwrap()
            .starts_with("agentry eval --base-url http://127.0.0.1:"),
        "{summary}"
    );

    let records: Vec<Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let ids: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "right",
            "wrong-arg",
            "needless-call",
            "model-error",
            "follow",
            "wrong-answer"
        ]
    );
    let scores: Vec<(bool, bool, bool)> = records
        .iter()
        .map(|r| {
            let b = |key: &str| r[key].as_bool().unwrap();
            (b("call_ok"), b("answer_ok"), b("ok"))
        })
        .collect();
    assert_eq!(
        scores,
        [
            (true, true, true),
            (false, true, false),
            (false, true, false),
            (false, false, false),
            (true, true, true),
            (true, false, false)
        ]
    );
    let right = &records[0];
    assert_eq!(right["answer"], "6 times 7 is 42.");
    assert_eq!(right["repeated_calls"], 1);
    assert_eq!(right["stop_reason"], "answered");
    assert_eq!(right["calls"].as_array().unwrap().len(), 2);
    assert_eq!(
        right["calls"][0],
        json!({"tool": "calculate", "args": {"expression": "6*7"}, "failed": false, "from_text": false})
    );
    let wrong_arg = &records[1];
    assert_eq!(wrong_arg["calls"][0]["args"], json!({"order_id": 1043}));
    assert_eq!(
        wrong_arg["calls"][0]["failed"], true,
        "no such order: the tool said so"
    );
    assert_eq!(records[2]["extra_calls"], 1);
    let error = &records[3];
    assert!(
        error["error"].as_str().unwrap().contains("the model crashed"),
        "{error}"
    );
    assert_eq!(
        error["calls"],
        json!([{"tool": "read_file", "args": {"path": "notes.txt"}, "failed": false, "from_text": false}]),
        "the right call, but the prompt failed: wrong all the same"
    );
    assert_eq!(error["answer"], "");
    let follow = &records[4];
    assert_eq!(follow["earlier_answers"], json!(["AAPL is at 187.25 USD."]));
    assert_eq!(follow["answer"], "12 shares cost 2,247 USD.");
    assert!(records.iter().all(|r| r["seconds"].as_f64().unwrap() >= 0.0));

    // Each prompt starts a fresh conversation: its first request holds the system prompt and
    // its own user message only; later turns of a follow-up keep the earlier ones.
    let requests = fake.requests();
    let firsts: Vec<&Value> = [0, 3, 5, 7, 9, 13].iter().map(|&i| &requests[i].body).collect();
    for first in &firsts {
        let messages = first["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2, "{first}");
        let system = messages[0]["content"].as_str().unwrap();
        assert!(
            system.starts_with("You are a test agent working in /"),
            "{system}"
        );
        assert!(!system.contains("{workdir}"));
    }
    let second_turn = requests[11].body["messages"].as_array().unwrap();
    assert_eq!(second_turn.len(), 6, "system, user, call, result, answer, user");
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"get_weather") && tools.contains(&"read_file"),
        "{tools:?}"
    );
    assert!(!tools.contains(&"write_file"), "{tools:?}");

    // Progress: one line per prompt, what went wrong under the wrong ones.
    assert_eq!(stderr.matches("/6] ").count(), 6, "{stderr}");
    assert!(stderr.contains("[4/6] model-error"), "{stderr}");
    assert!(
        stderr.contains("error: ") && stderr.contains("the model crashed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("get_order_status({\"order_id\":1043})"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_prints_a_table_for_the_selected_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let set = write_set(dir.path(), &tiny_set());
    let fake = FakeLlm::start().await;
    // Only wrong-arg and needless-call run.
    fake.push(call("c4", "get_order_status", json!({"order_id": 1043})));
    fake.push(Reply::text("Order 1042 has shipped."));
    fake.push(call("c5", "calculate", json!({"expression": "1+1"})));
    fake.push(Reply::text("Paris."));
    let out = agentry(
        eval_args(
            &fake.base_url(),
            &set,
            &["--category", "no_tool", "--category", "typed", "--limit", "2"],
        ),
        dir.path(),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(fake.remaining(), 0);
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            ["category", "typed", "no_tool", "total"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    assert_eq!(
        rows[0], "category      n   calls  answers    both  median s  errors",
        "{stdout}"
    );
    assert!(
        rows[1].starts_with("typed         1    0.0%   100.0%    0.0%"),
        "{stdout}"
    );
    assert!(
        rows[2].starts_with("no_tool       1    0.0%   100.0%    0.0%"),
        "{stdout}"
    );
    assert!(
        rows[3].starts_with("total         2    0.0%   100.0%    0.0%"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reproduce: agentry eval --base-url")
            && stdout.contains("--category no_tool --category typed --limit 2"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_naming_a_missing_tool_is_refused_before_the_model_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = tiny_set();
    bad["prompts"][0]["calls"][0]["tool"] = json!("write_file");
    let set = write_set(dir.path(), &bad);
    let fake = FakeLlm::start().await;
    let out = agentry(eval_args(&fake.base_url(), &set, &[]), dir.path()).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("right: no tool named \"write_file\""), "{stderr}");
    assert_eq!(fake.request_count(), 0);

    let out = agentry(
        eval_args(
            &fake.base_url(),
            &write_set(dir.path(), &tiny_set()),
            &["--id", "nope"],
        ),
        dir.path(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no prompt with id \"nope\""));
}

/// What small models often do: the call as JSON in the text instead of a real call.
const CALL_AS_TEXT: &str =
    "```json\n{\"name\": \"calculate\", \"arguments\": {\"expression\": \"6*7\"}}\n```";

/// Runs the tiny set's first prompt alone against `replies`, with `flags` added: the summary,
/// the prompt's record, and the fake server.
async fn eval_first_prompt(replies: Vec<Reply>, flags: &[&str]) -> (Value, Value, FakeLlm) {
    let dir = tempfile::tempdir().unwrap();
    let mut set = tiny_set();
    set["prompts"] = json!([set["prompts"][0].clone()]);
    let set = write_set(dir.path(), &set);
    let out_file = dir.path().join("out.jsonl");
    let fake = FakeLlm::start().await;
    for reply in replies {
        fake.push(reply);
    }
    let out_flag = out_file.display().to_string();
    let mut extra = vec!["--json", "--out", &out_flag];
    extra.extend_from_slice(flags);
    let out = agentry(eval_args(&fake.base_url(), &set, &extra), dir.path()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let record: Value = serde_json::from_str(std::fs::read_to_string(&out_file).unwrap().trim()).unwrap();
    (summary, record, fake)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_written_as_text_are_recovered_and_counted() {
    let (summary, record, _fake) =
        eval_first_prompt(vec![Reply::text(CALL_AS_TEXT), Reply::text("It is 42.")], &[]).await;
    assert_eq!(summary["total"]["ok"], 1, "{summary}");
    assert_eq!(summary["total"]["calls"], 1, "{summary}");
    assert_eq!(summary["total"]["text_calls"], 1, "{summary}");
    assert_eq!(
        record["calls"],
        json!([{"tool": "calculate", "args": {"expression": "6*7"}, "failed": false, "from_text": true}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_tool_shim_a_call_written_as_text_stays_the_answer() {
    let (summary, record, fake) =
        eval_first_prompt(vec![Reply::text(CALL_AS_TEXT)], &["--no-tool-shim"]).await;
    assert_eq!(summary["total"]["calls"], 0, "{summary}");
    assert_eq!(summary["total"]["ok"], 0, "{summary}");
    assert_eq!(record["calls"], json!([]));
    assert_eq!(record["answer"], CALL_AS_TEXT);
    assert_eq!(fake.requests().len(), 1, "one request: the text was the answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_run_sums_up_the_prompts_done_and_removes_the_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let mut set = tiny_set();
    set["prompts"] = json!([
        set["prompts"][2].clone(),
        set["prompts"][0].clone(),
        set["prompts"][1].clone()
    ]);
    let set = write_set(dir.path(), &set);
    let out_file = dir.path().join("out.jsonl");
    let fake = FakeLlm::start().await;
    fake.push(Reply::text("Paris."));
    // The second prompt's answer never ends.
    fake.push(Reply::text("Let me think").hang_after(1));
    let program = Program::start(
        &eval_args(
            &fake.base_url(),
            &set,
            &["--json", "--out", &out_file.display().to_string()],
        ),
        dir.path(),
    );
    program.stderr_has("[1/3] needless-call").await;
    fake.wait_for_requests(2).await;
    program.interrupt();
    let (status, stdout, stderr) = program.finish().await;
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted: the summary covers the 1 of 3 prompts done"),
        "{stderr}"
    );
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["selected"], 3, "{summary}");
    assert_eq!(summary["total"]["n"], 1, "{summary}");
    assert_eq!(summary["total"]["ok"], 1, "{summary}");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap().lines().count(), 1);
    let system = fake.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let workdir = system
        .strip_prefix("You are a test agent working in ")
        .and_then(|rest| rest.strip_suffix('.'))
        .unwrap();
    assert!(
        workdir.contains("agentry-eval-") && !Path::new(workdir).exists(),
        "the fixture {workdir} is left behind"
    );
}
