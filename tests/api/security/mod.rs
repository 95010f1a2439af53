//! Regression tests from an attacker's audit: no single request may abort or stall the
//! server, secrets never reach programs or other users, the open endpoint refuses what
//! other pages and hosts send, and oversized input gets a 4xx naming its limit.

mod disclosure;
mod etcd_writers;
mod exhaustion;
mod grants;
mod host;
mod hostile;
mod leftovers;
mod limits;
mod nodes;
mod overrides;
mod pools;
mod prices;
mod runs;
mod scheduler;
mod sealed;
mod secrets;
mod sessions;
mod shares;
mod web;
mod workdirs;

use serde_json::json;

use crate::support::server::Server;

/// Makes namespace `team` and a token `team-admin` that is its admin; returns the secret.
fn team_with_admin(server: &Server) -> String {
    let (code, ns) = server.put("/v3/namespaces/team", json!({}));
    assert_eq!(code, 200, "{ns}");
    crate::support::server::make_token(
        server,
        "team-admin",
        json!({"namespaces": {"team": "admin"}}),
    )
}

/// The server still answers: it did not abort, and its writer is not stalled.
#[track_caller]
fn assert_alive(server: &Server) {
    let (code, _) = server.get("/v3/health");
    assert_eq!(code, 200, "the server stopped answering");
    let (code, body) = server.put("/v3/namespaces/alive", json!({}));
    assert_eq!(code, 200, "the store's writer does not answer: {body}");
}

/// Sends `head` (request line and headers, without the blank line) and `body` over a plain
/// socket, exactly as written, and returns the status code and the body.
fn raw(server: &Server, head: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    // With the server's token: what is refused here is refused whatever the token.
    let auth = server
        .token()
        .map(|t| format!("\r\nAuthorization: Bearer {t}"))
        .unwrap_or_default();
    let text = format!(
        "{head}{auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(text.as_bytes()).expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    let code = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}
