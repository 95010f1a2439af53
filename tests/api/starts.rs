//! Idempotent starts: a start repeated with its `Idempotency-Key` (racing, after a cut
//! connection, or with the key in the body) starts one run.

use serde_json::json;

use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

/// A start sent with an `Idempotency-Key` header to the program `once`: its status and body.
fn start_once(server: &Server, key: &str, args: serde_json::Value) -> (u16, serde_json::Value) {
    let res = reqwest::blocking::Client::new()
        .post(format!(
            "{}/v3/namespaces/default/apps/once/workflows/p/start",
            server.url
        ))
        .bearer_auth(server.token().expect("token"))
        .header("Idempotency-Key", key)
        .json(&args)
        .send()
        .expect("start");
    let code = res.status().as_u16();
    (code, res.json().expect("json"))
}

#[test]
fn a_start_repeated_with_its_idempotency_key_starts_nothing_more() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "once", "true", json!({}));
    // Twenty racing requests with one key: one run, every answer its id.
    let ids: Vec<String> = std::thread::scope(|s| {
        let racers: Vec<_> = (0..20)
            .map(|_| {
                s.spawn(|| {
                    let (code, body) =
                        start_once(&server, "nightly-2026-11-26", json!({"day": "26"}));
                    assert_eq!(code, 200, "{body}");
                    body["runId"].as_str().expect("runId").to_string()
                })
            })
            .collect();
        racers
            .into_iter()
            .map(|r| r.join().expect("racer"))
            .collect()
    });
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let (code, runs) = server.get("/v3/namespaces/default/apps/once/workflows/p/runs");
    assert_eq!(code, 200, "{runs}");
    assert_eq!(runs.as_array().expect("runs").len(), 1, "{runs}");
    // A retry (its first answer lost) gets the same run.
    let (code, again) = start_once(&server, "nightly-2026-11-26", json!({"day": "26"}));
    assert_eq!(code, 200, "{again}");
    assert_eq!(again["runId"], ids[0].as_str());
    // The same key with other arguments is refused, naming the run it started.
    let (code, other) = start_once(&server, "nightly-2026-11-26", json!({"day": "27"}));
    assert_eq!(code, 409, "{other}");
    let message = other["message"].as_str().expect("message");
    assert!(
        message.contains("Idempotency-Key") && message.contains(&ids[0]),
        "{message}"
    );
    // Another key is another start.
    let (code, fresh) = start_once(&server, "nightly-2026-11-27", json!({"day": "27"}));
    assert_eq!(code, 200, "{fresh}");
    assert_ne!(fresh["runId"], ids[0].as_str());
    // A key that is not one is a 400 naming the header.
    assert_error(
        start_once(&server, &"k".repeat(300), json!({})),
        400,
        "Idempotency-Key",
    );
}

/// A start whose connection is cut before the answer (the client cannot tell whether it
/// went through), sent again with its key, starts one run; the key may also come in the
/// body, where it is no runtime argument.
#[test]
fn a_start_cut_off_and_sent_again_with_its_key_starts_one_run() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "once", "true", json!({}));
    let body = json!({"day": "26"}).to_string();
    let address = server.url.trim_start_matches("http://").to_string();
    for _ in 0..3 {
        let mut conn = std::net::TcpStream::connect(&address).expect("connect");
        write!(
            conn,
            "POST /v3/namespaces/default/apps/once/workflows/p/start HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nIdempotency-Key: cut-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            server.token().expect("token"),
            body.len()
        )
        .expect("send");
        // Cut off before the answer.
        conn.shutdown(std::net::Shutdown::Both).expect("cut");
    }
    let (code, answer) = start_once(&server, "cut-1", json!({"day": "26"}));
    assert_eq!(code, 200, "{answer}");
    let (_, runs) = server.get("/v3/namespaces/default/apps/once/workflows/p/runs");
    let runs = runs.as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["runid"], answer["runId"]);
    // The key in the body.
    let path = format!("{}/start", program("once"));
    let (code, first) = server.post_json(&path, json!({"idempotencyKey": "body-1", "day": "27"}));
    assert_eq!(code, 200, "{first}");
    let (code, again) = server.post_json(&path, json!({"idempotencyKey": "body-1", "day": "27"}));
    assert_eq!(code, 200, "{again}");
    assert_eq!(first["runId"], again["runId"]);
    let run = server
        .get(&format!(
            "{}/runs/{}",
            program("once"),
            first["runId"].as_str().expect("id")
        ))
        .1;
    assert!(run["properties"].get("idempotencyKey").is_none(), "{run}");
    assert_error(
        server.post_json(&path, json!({"idempotencyKey": ""})),
        400,
        "idempotencyKey",
    );
}
