//! Schemathesis (from PyPI, installed by `tests/support/schemathesis/setup.sh`) against a
//! live server with a token: every operation of the OpenAPI document, with requests made
//! from its schemas and broken on purpose (the examples, coverage and fuzzing phases), and
//! stateful sequences from the links between operations Schemathesis infers. Any 5xx, any
//! answer outside the document (status, content type, headers, schema), a schema-violating
//! request accepted, a missing token accepted or a wrong answer to an undeclared method
//! fails the test, and so does a server that dies.

use std::path::Path;
use std::process::Command;

use crate::support::process::python_from;
use crate::support::server::Server;

/// The seed of the generated requests: a CI run repeats the last one exactly (a failure
/// here replays with `--seed`).
const SEED: &str = "19";
/// Requests per operation and phase.
const EXAMPLES: &str = "40";

#[test]
fn schemathesis_finds_no_server_error_and_no_answer_outside_the_contract() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let token = server.token().expect("the server's first token");
    let python = python_from(
        root,
        "tests/support/schemathesis/setup.sh",
        "python3 with venv and PyPI access to install schemathesis",
    );
    let schemathesis = python.with_file_name("schemathesis");
    let report = dir.path().join("report.xml");
    let out = Command::new(&schemathesis)
        .arg("--config-file")
        .arg(root.join("tests/support/schemathesis/schemathesis.toml"))
        .arg("run")
        .arg(format!("{}/v3/openapi.json", server.url))
        .args(["--seed", SEED, "--max-examples", EXAMPLES, "--workers", "2"])
        .args(["--no-color", "--report", "junit", "--report-junit-path"])
        .arg(&report)
        .env("EBB_FUZZ_TOKEN", &token)
        .current_dir(dir.path())
        .output()
        .expect("run schemathesis");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    // Shown with the test's output: the figures the README gives.
    let summary = said
        .rsplit_once("SUMMARY")
        .map_or(said.as_str(), |(_, s)| s);
    println!("{summary}");
    assert!(
        out.status.success(),
        "Schemathesis found failures:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It tested every operation of the table, and generated requests for them.
    let operations = ebb::api::routes::table().len();
    assert!(
        said.contains(&format!("Tested: {operations}")),
        "not every one of the {operations} operations was tested:\n{summary}"
    );
    let generated: usize = said
        .lines()
        .find_map(|l| l.trim().split_once(" generated"))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of generated cases:\n{summary}"));
    assert!(generated > 10 * operations, "only {generated} cases:\n{summary}");
    // The server took it all and still answers.
    let (code, health) = server.get("/v3/health");
    assert_eq!(code, 200, "{health}");
    assert!(
        !server.logs().iter().any(|l| l.contains("panicked")),
        "the server panicked"
    );
}
