//! Oversized and malformed ids, queries and bodies sent to every endpoint that takes them.

use serde_json::{Value, json};

use super::{assert_alive, raw};
use crate::support::profiles::profile_body;
use crate::support::runs::*;
use crate::support::server::Server;

/// JSON nested `depth` arrays deep.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Sends raw requests that must each get a 4xx, and counts them.
struct Hostile<'a> {
    server: &'a Server,
    checked: usize,
}

impl Hostile<'_> {
    /// Sends `method path` with `body` (JSON) if given; the answer must be a 4xx.
    #[track_caller]
    fn send(&mut self, method: &str, path: &str, body: Option<&str>) {
        let (code, reply) = match body {
            Some(b) => raw(
                self.server,
                &format!(
                    "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                ),
                b,
            ),
            None => raw(
                self.server,
                &format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1"),
                "",
            ),
        };
        assert!(
            (400..500).contains(&code),
            "{method} {} -> {code}: {}",
            &path[..path.len().min(200)],
            &reply[..reply.len().min(300)]
        );
        self.checked += 1;
    }
}

/// A 5,000-character name.
fn long() -> String {
    "n".repeat(5_000)
}

/// Every id a path carries, oversized or malformed, in every position; `live_id` is a live
/// run's.
fn bad_ids(h: &mut Hostile, live_id: &str) {
    let long = long();
    let ids = [
        long.as_str(),
        "..",
        "%2E%2E",
        "a%00b",
        "%F0%9F%92%A9",
        "a.b",
        "a%20b",
    ];
    let shapes = [
        ("GET", "/v3/namespaces/{x}"),
        ("PUT", "/v3/namespaces/{x}"),
        ("DELETE", "/v3/namespaces/{x}"),
        ("GET", "/v3/provisioners/{x}"),
        ("GET", "/v3/profiles/{x}"),
        ("GET", "/v3/namespaces/{x}/profiles"),
        ("GET", "/v3/namespaces/default/profiles/{x}"),
        ("GET", "/v3/namespaces/default/profiles/{x}/usage"),
        ("GET", "/v3/namespaces/default/profiles/{x}/assignments"),
        ("POST", "/v3/namespaces/default/profiles/{x}/enable"),
        ("DELETE", "/v3/namespaces/default/profiles/{x}"),
        ("GET", "/v3/namespaces/default/templates/{x}"),
        ("DELETE", "/v3/namespaces/default/templates/{x}"),
        ("GET", "/v3/namespaces/default/securekeys/{x}"),
        ("DELETE", "/v3/namespaces/default/securekeys/{x}"),
        ("GET", "/v3/namespaces/default/apps/{x}"),
        ("GET", "/v3/namespaces/default/apps/{x}/preferences"),
        ("GET", "/v3/namespaces/default/apps/a/workflows/{x}"),
        ("POST", "/v3/namespaces/default/apps/a/workflows/{x}/start"),
        ("GET", "/v3/namespaces/default/apps/a/workflows/{x}/runs"),
        ("GET", "/v3/namespaces/default/apps/a/workflows/p/runs/{x}"),
        (
            "GET",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/events?wait=1ms",
        ),
        (
            "GET",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/logs",
        ),
        (
            "GET",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/operations",
        ),
        (
            "POST",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/stop",
        ),
        (
            "POST",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/deprovision",
        ),
        (
            "GET",
            &format!("/v3/namespaces/default/apps/a/workflows/p/runs/{live_id}/operations/{{x}}"),
        ),
    ];
    for (method, shape) in shapes {
        for id in ids {
            h.send(method, &shape.replace("{x}", id), None);
        }
    }
}

/// Query values past every bound, on the runs of `a`'s program and the live run `live`.
fn bad_queries(h: &mut Hostile, live: &str) {
    let long = long();
    let runs = format!("{}/runs", program("a"));
    for query in [
        "limit=18446744073709551616",
        "limit=0",
        "limit=99999999",
        "status=RUNNINGX",
        &format!("before={long}"),
    ] {
        h.send("GET", &format!("{runs}?{query}"), None);
    }
    for query in ["wait=99999999h", "wait=1e400s", "after=-1", "after=1e30"] {
        h.send("GET", &format!("{live}/events?{query}"), None);
    }
    h.send("POST", "/v3/janitor/run?dryRun=maybe", None);
}

/// Bodies too deep, too large, with numbers past every range, or of the wrong type, to every
/// endpoint that takes one.
fn bad_bodies(h: &mut Hostile, live: &str) {
    let deep = nested(100_000);
    let writes = [
        ("PUT", "/v3/namespaces/x".to_string()),
        ("PUT", "/v3/namespaces/default/profiles/x".to_string()),
        ("PUT", "/v3/profiles/x".to_string()),
        ("PUT", "/v3/namespaces/default/preferences".to_string()),
        ("PUT", "/v3/namespaces/default/templates/x".to_string()),
        ("POST", "/v3/namespaces/default/plan".to_string()),
        ("PUT", "/v3/namespaces/default/apps/x".to_string()),
        ("PUT", "/v3/namespaces/default/securekeys/x".to_string()),
        ("POST", format!("{}/start", program("a"))),
        ("POST", format!("{live}/extend")),
        ("POST", format!("{live}/cluster")),
        ("POST", format!("{live}/stop")),
    ];
    for (method, path) in &writes {
        for body in [deep.as_str(), "{\"a\": 1e999999}", "[1, 2]", "\"x\"", "{"] {
            h.send(method, path, Some(body));
        }
    }
}

/// Well-formed templates and plan requests past the limits on services, types, timeouts,
/// attempts and nodes.
fn oversized_templates(h: &mut Hostile) {
    let huge_services: serde_json::Map<String, Value> =
        (0..5_000).map(|i| (format!("s{i}"), json!({}))).collect();
    let huge_types: serde_json::Map<String, Value> = (0..5_000)
        .map(|i| (format!("t{i}"), json!({"local": {}})))
        .collect();
    let specific: Vec<(&str, String, Value)> = vec![
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": huge_services}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": {"a": {}}, "hardwareTypes": huge_types}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": "x", "timeout": "99999999999999h"}}}}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": "x", "attempts": 4294967295u64}}}}}),
        ),
        (
            "POST",
            "/v3/namespaces/default/plan".into(),
            json!({"template": "spark", "provisioner": "local", "nodes": 18446744073709551615u64}),
        ),
        (
            "POST",
            "/v3/namespaces/default/plan".into(),
            json!({"template": "spark", "provisioner": "sim", "nodes": 10000}),
        ),
        (
            "POST",
            "/v3/namespaces/default/plan".into(),
            json!({"template": {"services": huge_services}, "provisioner": "local", "nodes": 3}),
        ),
    ];
    for (method, path, body) in &specific {
        h.send(method, path, Some(&body.to_string()));
    }
}

/// Well-formed profiles, apps, starts and cluster requests whose sizes, counts and durations
/// are past their limits.
fn oversized_requests(h: &mut Hostile, live: &str) {
    let long = long();
    let specific: Vec<(&str, String, Value)> = vec![
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "local", "properties": [{"name": "nodes", "value": "99999999999999999999"}]}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "local", "properties": []}, "timeout": 18446744073709551615u64}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "local", "properties": []}, "keepalive": {"failed": "99999999999999h"}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "sim", "properties": [{"name": "createLatency", "value": "99999999h"}]}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/apps/x".into(),
            json!({"programs": [{"type": "workflows", "name": long, "command": ["true"]}]}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/apps/x".into(),
            json!({"programs": [{"type": "workflows", "name": "p", "command": []}]}),
        ),
        (
            "POST",
            format!("{}/start", program("a")),
            json!({"system.profile.name": "keep", "system.profile.properties.nodes": "4294967296"}),
        ),
        (
            "POST",
            format!("{}/start", program("a")),
            json!({"system.profile.name": long}),
        ),
        (
            "POST",
            format!("{live}/extend"),
            json!({"expireAt": 18446744073709551615u64}),
        ),
        ("POST", format!("{live}/extend"), json!({"expireAt": -1})),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "expand", "nodes": 4294967295u64}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "expand", "nodes": 18446744073709551615u64}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "shrink", "nodes": 4294967295u64}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "shrink", "remove": vec!["worker-1"; 50_000]}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "configure", "config": "x"}),
        ),
    ];
    for (method, path, body) in &specific {
        h.send(method, path, Some(&body.to_string()));
    }
}

#[test]
fn hostile_input_to_every_endpoint_gets_a_4xx_and_the_server_stays_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // A real WAITING cluster, so run-level endpoints see a live run too.
    let mut profile = profile_body("local", &[("nodes", "2", true)]);
    profile["keepalive"] = json!({"failed": 600});
    assert_eq!(
        server
            .put("/v3/namespaces/default/profiles/keep", profile)
            .0,
        200
    );
    deploy(&server, "a", "exit 3", json!({}));
    let live = start(&server, "a", json!({"system.profile.name": "keep"}));
    wait_until(&server, &live, std::time::Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    let live_id = live.rsplit('/').next().expect("id").to_string();

    let mut h = Hostile {
        server: &server,
        checked: 0,
    };
    bad_ids(&mut h, &live_id);
    bad_queries(&mut h, &live);
    bad_bodies(&mut h, &live);
    oversized_templates(&mut h);
    oversized_requests(&mut h, &live);
    let checked = h.checked;
    assert!(checked > 250, "{checked} requests");
    assert_alive(&server);
    let after = server.get(&live).1;
    assert_eq!(after["cluster"]["status"], "WAITING", "{after}");
    assert_eq!(after["cluster"]["nodes"].as_array().map(Vec::len), Some(2));
    let (code, _) = server.post(&format!("{live}/deprovision"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &live);
}
