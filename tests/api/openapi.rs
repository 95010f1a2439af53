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
