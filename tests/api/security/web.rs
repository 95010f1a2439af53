//! The open endpoint refuses what other web pages and rebound host names send.

use serde_json::json;

use super::raw;
use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

/// DNS rebinding: a page on evil.example, its name pointed at 127.0.0.1, reads nothing; the
/// server's own names and the ones the admin allowed do.
fn host_must_be_known(server: &Server, addr: &str) {
    let (code, body) = raw(
        server,
        &format!(
            "GET /v3/namespaces HTTP/1.1\r\nHost: evil.example:{}",
            addr.rsplit(':').next().unwrap_or("80")
        ),
        "",
    );
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("--allowed-host evil.example"), "{body}");
    let (code, _) = raw(
        server,
        &format!("GET /v3/namespaces HTTP/1.1\r\nHost: {addr}"),
        "",
    );
    assert_eq!(code, 200);
    let (code, _) = raw(server, "GET /v3/namespaces HTTP/1.1\r\nHost: localhost", "");
    assert_eq!(code, 200);
    let (code, _) = raw(
        server,
        "GET /v3/namespaces HTTP/1.1\r\nHost: ebb.internal:443",
        "",
    );
    assert_eq!(code, 200, "a name the admin allowed");
}

/// A page's simple requests (no preflight): text/plain, a form, a cross-site fetch. `start`
/// is the request line that starts a run.
fn simple_requests_are_refused(server: &Server, addr: &str, start: &str) {
    let (code, body) = raw(
        server,
        &format!("{start}\r\nHost: {addr}\r\nContent-Type: text/plain"),
        "{}",
    );
    assert_eq!(code, 415, "{body}");
    let (code, body) = raw(
        server,
        &format!(
            "{start}\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nOrigin: http://evil.example"
        ),
        "",
    );
    assert!(code == 403 || code == 415, "{code} {body}");
    let (code, body) = raw(
        server,
        &format!("{start}\r\nHost: {addr}\r\nOrigin: http://evil.example"),
        "",
    );
    assert_eq!(code, 403, "{body}");
    let (code, body) = raw(
        server,
        &format!("{start}\r\nHost: {addr}\r\nSec-Fetch-Site: cross-site"),
        "",
    );
    assert_eq!(code, 403, "{body}");
    let (code, body) = raw(
        server,
        &format!(
            "PUT /v3/namespaces/default/apps/b HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain"
        ),
        r#"{"programs": [{"type": "workflows", "name": "p", "command": ["id"]}]}"#,
    );
    assert_eq!(code, 415, "{body}");
}

#[test]
fn web_pages_and_rebound_names_cannot_use_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(
        dir.path(),
        crate::support::server::Options {
            args: vec!["--allowed-host".into(), "ebb.internal".into()],
            ..Default::default()
        },
    );
    deploy(&server, "a", "true", json!({}));
    let addr = server.url.trim_start_matches("http://").to_string();
    let start = "POST /v3/namespaces/default/apps/a/workflows/p/start HTTP/1.1";
    let runs = |server: &Server| {
        server
            .get(&format!("{}/runs", program("a")))
            .1
            .as_array()
            .map_or(0, Vec::len)
    };

    host_must_be_known(&server, &addr);
    simple_requests_are_refused(&server, &addr, start);
    assert_eq!(runs(&server), 0, "no run was started");
    assert_error(
        server.get("/v3/namespaces/default/apps/b"),
        404,
        "not found",
    );

    // The API's own clients: JSON, no Origin; a page of this server's own origin.
    let (code, body) = raw(
        &server,
        &format!("{start}\r\nHost: {addr}\r\nContent-Type: application/json"),
        "{}",
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = raw(
        &server,
        &format!(
            "{start}\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/json; charset=utf-8"
        ),
        "{}",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(runs(&server), 2);
}
