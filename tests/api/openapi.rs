//! The API's contract: `GET /v3/openapi.json` is an OpenAPI 3.1 document a validator
//! accepts (openapi-spec-validator, from PyPI, installed by `tests/support/openapi/setup.sh`),
//! made from the route table, so every route the server answers is in it.

use std::path::Path;
use std::process::Command;

use crate::support::process::python_from;
use crate::support::server::Server;

#[test]
fn the_openapi_document_is_valid_and_covers_every_route() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // Public: a client reads the contract before it has a token.
    let (code, doc) = server.call("GET", "/v3/openapi.json", None, None);
    assert_eq!(code, 200, "{doc}");
    assert_eq!(doc["openapi"], "3.1.0");
    let table = ebb::api::routes::table();
    for route in &table {
        let op = &doc["paths"][route.url()][route.method.as_str().to_ascii_lowercase()];
        assert!(
            op.is_object(),
            "{} {} is not described",
            route.method,
            route.url()
        );
    }
    let python = python_from(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "tests/support/openapi/setup.sh",
        "openapi-spec-validator",
    );
    let file = dir.path().join("openapi.json");
    // Whether the validator accepts `doc`, and what it said.
    let validate = |doc: &serde_json::Value| {
        std::fs::write(&file, doc.to_string()).expect("write the document");
        let out = Command::new(&python)
            .args([
                "-c",
                "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(open(sys.argv[1])))",
            ])
            .arg(&file)
            .output()
            .expect("run the validator");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (valid, said) = validate(&doc);
    assert!(valid, "the document is not valid OpenAPI: {said}");
    // A broken document is refused: the check can fail.
    let mut broken = doc.clone();
    broken["paths"]["/v3/health"]["get"]["responses"] = serde_json::json!("none");
    assert!(!validate(&broken).0, "a broken document passed");
}

#[test]
fn a_query_parameter_the_operation_does_not_take_is_a_400_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, body) = server.get("/v3/namespaces/default/runs?limt=5");
    assert_eq!(code, 400, "{body}");
    let message = body["message"].as_str().expect("message");
    assert!(message.contains("'limt'"), "{message}");
    assert!(
        message.contains("limit"),
        "the parameters it takes: {message}"
    );
    let (code, body) = server.get("/v3/namespaces?x=1");
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("takes none"),
        "{body}"
    );
    // Booleans are `true` or `false`, as the document says.
    let (code, body) = server.get("/v3/profiles?includeSystem=TRUE");
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("includeSystem"),
        "{body}"
    );
    // The documented ones still work, and a token is asked for before the query is read.
    assert_eq!(server.get("/v3/namespaces/default/runs?limit=5").0, 200);
    assert_eq!(
        server
            .request("GET", "/v3/namespaces?x=1", Some("ebb_nobody"))
            .0,
        401
    );
}

#[test]
fn a_wrong_method_is_a_405_naming_the_allowed_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let answer = reqwest::blocking::Client::new()
        .patch(format!("{}/v3/profiles/native", server.url))
        .bearer_auth(server.token().expect("token"))
        .send()
        .expect("send");
    assert_eq!(answer.status().as_u16(), 405);
    let allow = answer.headers()["allow"]
        .to_str()
        .expect("text")
        .to_string();
    for method in ["GET", "PUT", "DELETE"] {
        assert!(allow.contains(method), "{allow}");
    }
}

#[test]
fn the_harness_refuses_an_answer_that_breaks_the_contract() {
    // Every call of the harness is checked against the document; here, that the check can
    // fail.
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (_, doc) = server.get("/v3/openapi.json");
    let contract = crate::support::contract::Contract::new(doc);
    let health = serde_json::json!({"status": "ok"});
    assert!(contract.check("GET", "/v3/health", 200, &health).is_ok());
    let broken = serde_json::json!({"status": 5});
    assert!(contract.check("GET", "/v3/health", 200, &broken).is_err());
    let run = serde_json::json!({"runid": "r"});
    let path = "/v3/namespaces/default/apps/a/workflows/p/runs/r";
    assert!(
        contract.check("GET", path, 200, &run).is_err(),
        "fields are missing"
    );
    // A status the operation does not document.
    assert!(contract.check("GET", "/v3/health", 201, &health).is_err());
    let error = serde_json::json!({"code": 404, "message": "no"});
    assert!(contract.check("GET", path, 404, &error).is_ok());
    assert!(contract.check("GET", path, 404, &health).is_err());
}
