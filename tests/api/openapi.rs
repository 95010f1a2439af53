//! The API's contract: `GET /v3/openapi.json` is an OpenAPI 3.1 document a validator
//! accepts (openapi-spec-validator, from PyPI, installed by `tests/support/openapi/setup.sh`),
//! made from the route table, so every route the server answers is in it.

use std::path::PathBuf;
use std::process::Command;

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
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("tests/support/openapi/setup.sh"))
        .output()
        .expect("run tests/support/openapi/setup.sh");
    assert!(
        out.status.success(),
        "the contract's test needs openapi-spec-validator: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let python = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, doc.to_string()).expect("write the document");
    let check = Command::new(python)
        .args([
            "-c",
            "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(open(sys.argv[1])))\nprint('valid')",
        ])
        .arg(&file)
        .output()
        .expect("run the validator");
    assert!(
        check.status.success(),
        "the document is not valid OpenAPI: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    // A broken document is refused: the check can fail.
    let mut broken = doc.clone();
    broken["paths"]["/v3/health"]["get"]["responses"] = serde_json::json!("none");
    std::fs::write(&file, broken.to_string()).expect("write");
    let refused = Command::new(String::from_utf8_lossy(&out.stdout).trim())
        .args([
            "-c",
            "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(open(sys.argv[1])))",
        ])
        .arg(&file)
        .output()
        .expect("run the validator");
    assert!(!refused.status.success(), "a broken document passed");
}
