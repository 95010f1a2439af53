//! No one takes what the server shares: one viewer's event streams, or one tenant's hung
//! checks, leave the others their room.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::runs::{deploy_in, start_in, wait_until, while_the_test_runs};
use crate::support::server::{Server, make_token};
use crate::ui::{cookie_of, raw, sign_in};

/// Opens run `run`'s event stream with `cookie`; the answer is streaming.
fn stream(server: &Server, run: &str, cookie: &str) -> reqwest::blocking::Response {
    let path = run
        .trim_start_matches("/v3/namespaces/")
        .replace("/workflows/", "/");
    let reply = raw()
        .get(format!("{}/ui/ns/{path}/events", server.url))
        .header("Cookie", cookie)
        .send()
        .expect("events");
    assert_eq!(reply.status(), 200);
    reply
}

#[test]
fn one_viewers_streams_leave_others_theirs_and_its_own_page_polls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy_in(&server, "default", "a", &while_the_test_runs(), json!({}));
    let run = start_in(&server, "default", "a", json!({}));
    let viewer = make_token(&server, "v", json!({"namespaces": {"default": "viewer"}}));
    let greedy = cookie_of(&sign_in(&server, &viewer));
    // The viewer holds every stream its share gives it, open.
    let held: Vec<_> = (0..16).map(|_| stream(&server, &run, &greedy)).collect();
    // One more page of its own is answered at once, as a poll: what it has not seen, and
    // when to come back, and the answer ends.
    let started = Instant::now();
    let mut poll = String::new();
    stream(&server, &run, &greedy)
        .read_to_string(&mut poll)
        .expect("the poll ends");
    assert!(poll.starts_with("retry: 5000"), "{poll}");
    assert!(poll.contains("event: events"), "{poll}");
    assert!(started.elapsed() < Duration::from_secs(15), "a poll waited");
    // Another signed-in user gets a live stream.
    let other = cookie_of(&sign_in(&server, &server.token().expect("token")));
    let mut live = stream(&server, &run, &other);
    let mut first = [0u8; 64];
    let n = live.read(&mut first).expect("read");
    assert!(
        String::from_utf8_lossy(&first[..n]).starts_with("retry: 2000"),
        "a live stream"
    );
    drop(held);
    let (code, _) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
}

/// A one-node template whose `count` services each have a check: `check`.
fn template(count: usize, check: &str) -> Value {
    let services: serde_json::Map<String, Value> = (0..count)
        .map(|i| {
            (
                format!("s{i}"),
                json!({
                    "actions": {
                        "start": {"type": "shell", "script": "true"},
                        "check": {"type": "shell", "script": check, "timeout": "10m"}
                    },
                    "checkInterval": "1s"
                }),
            )
        })
        .collect();
    let list: Vec<&String> = services.keys().collect();
    json!({
        "services": services,
        "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
        "defaults": {"services": list}
    })
}

/// Namespace `ns` with template and profile `watched` of `count` services checked by
/// `check`, and app `a` running on it for as long as the test does.
fn tenant(server: &Server, ns: &str, count: usize, check: &str) {
    let (code, body) = server.put(&format!("/v3/namespaces/{ns}"), json!({}));
    assert_eq!(code, 200, "{body}");
    let base = format!("/v3/namespaces/{ns}");
    let (code, body) = server.put(&format!("{base}/templates/watched"), template(count, check));
    assert_eq!(code, 200, "{body}");
    let profile = json!({"provisioner": {"name": "local", "properties": [
        {"name": "nodes", "value": "1"}, {"name": "template", "value": "watched"}
    ]}});
    let (code, body) = server.put(&format!("{base}/profiles/watched"), profile);
    assert_eq!(code, 200, "{body}");
    deploy_in(server, ns, "a", &while_the_test_runs(), json!({}));
}

#[test]
fn one_tenants_hung_checks_leave_the_others_checks_their_turns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // 5 runs of 16 checks that hang: 80, more than the server's 64 places.
    tenant(&server, "greedy", 16, "sleep 600");
    let args = json!({"system.profile.name": "watched"});
    let greedy: Vec<String> = (0..5)
        .map(|_| start_in(&server, "greedy", "a", args.clone()))
        .collect();
    for run in &greedy {
        wait_until(&server, run, Duration::from_secs(60), |r| {
            r["status"] == "RUNNING"
        });
    }
    // Long enough for every hung check to have begun.
    std::thread::sleep(Duration::from_secs(3));
    // Another tenant's service that is down is still seen down.
    tenant(&server, "quiet", 1, "exit 3");
    let run = start_in(&server, "quiet", "a", args);
    let seen = wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["cluster"]["nodes"][0]["services"]["s0"] == "down"
    });
    assert_eq!(seen["status"], "RUNNING", "{seen:#}");
    for run in greedy.iter().chain([&run]) {
        let (code, _) = server.post(&format!("{run}/stop"));
        assert_eq!(code, 200);
    }
}
