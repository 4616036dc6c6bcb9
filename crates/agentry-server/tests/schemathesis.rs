//! schemathesis (a third-party OpenAPI fuzzer) against the served document: every operation
//! with generated valid and invalid input, checked for undocumented statuses, bodies that do not
//! match their schema, server errors and valid requests refused. The event stream is left out:
//! it never ends, which schemathesis cannot test.

use std::time::Duration;

use crate::common::Harness;
use agentry_testkit::peers::peers_dir;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_against_the_openapi_document() {
    let schemathesis = peers_dir().join("venv/bin/schemathesis");
    assert!(
        schemathesis.exists(),
        "schemathesis is missing: run scripts/install-test-peers"
    );
    let server = Harness::start().await;
    let mut run = tokio::process::Command::new(&schemathesis);
    run.args([
        "run",
        &format!("{}/openapi.json", server.base),
        "--checks",
        "all",
        "--max-examples",
        "40",
        "--exclude-path",
        "/v1/sessions/{id}/events",
        "--no-color",
    ])
    .current_dir(server.dir.path());
    let said = crate::common::run_peer(run, Duration::from_secs(300)).await;
    assert!(said.contains("passed"), "{said}");
    // The replies schemathesis started asked a model with no scripted answer: they failed, as
    // a dead model server makes them fail; that is not what this test is about.
    server.fake.take_violations();
}
