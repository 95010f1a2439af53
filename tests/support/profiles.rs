//! Profile bodies, built in one place: tests and benchmarks PUT the same JSON.

use std::path::Path;

use serde_json::{Value, json};

use super::server::Server;

/// A profile body for `provisioner` with `props` as (name, value, editable).
pub fn profile_body(provisioner: &str, props: &[(&str, &str, bool)]) -> Value {
    let props: Vec<Value> = props
        .iter()
        .map(|(n, v, e)| json!({"name": n, "value": v, "isEditable": e}))
        .collect();
    json!({"provisioner": {"name": provisioner, "properties": props}})
}

/// PUTs USER profile `name` in `default`, which must succeed.
#[track_caller]
pub fn put_profile_body(server: &Server, name: &str, body: Value) {
    let (code, reply) = server.put(&format!("/v3/namespaces/default/profiles/{name}"), body);
    assert_eq!(code, 200, "{reply}");
}

/// Editable properties: `base`, then `overrides` added or replacing them.
fn editable<'a>(
    base: &[(&'a str, &'a str)],
    overrides: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str, bool)> {
    let mut all: Vec<(&str, &str)> = base.to_vec();
    for (k, v) in overrides {
        all.retain(|(n, _)| n != k);
        all.push((k, v));
    }
    all.into_iter().map(|(k, v)| (k, v, true)).collect()
}

/// Creates USER profile `name` in `default` for `provisioner`: `base` properties, then
/// `overrides` added or replacing them, all editable; keepalive 0; `timeout` seconds if given.
pub fn put_profile(
    server: &Server,
    name: &str,
    provisioner: &str,
    base: &[(&str, &str)],
    overrides: &[(&str, &str)],
    timeout: Option<u64>,
) {
    let mut body = profile_body(provisioner, &editable(base, overrides));
    body["keepalive"] = json!({"failed": 0, "killed": 0});
    if let Some(t) = timeout {
        body["timeout"] = json!(t);
    }
    put_profile_body(server, name, body);
}

/// Creates USER profile `name` in `default` for the sim provisioner, its cloud kept in
/// `state_dir`: `props` editable, a failed run's cluster kept `keepalive_failed` seconds.
pub fn sim_profile(
    server: &Server,
    name: &str,
    state_dir: &Path,
    props: &[(&str, &str)],
    keepalive_failed: u64,
    timeout: Option<u64>,
) {
    let state_dir = state_dir.to_str().expect("utf-8");
    let mut body = profile_body("sim", &editable(&[("stateDir", state_dir)], props));
    body["keepalive"] = json!({"failed": keepalive_failed, "killed": 60});
    if let Some(t) = timeout {
        body["timeout"] = json!(t);
    }
    put_profile_body(server, name, body);
}

/// Makes the tests' echo template (`tests/fixtures/templates/echo-services.json`: four
/// services in a coordinated cluster's shape whose actions only leave traces) an instance
/// template of `server`, and gives its name. Not shipped: ebb's own templates run real
/// engines, too slow for the tests of ordering, retries and timelines.
#[track_caller]
pub fn echo_services(server: &Server) -> &'static str {
    let body: Value =
        serde_json::from_str(include_str!("../fixtures/templates/echo-services.json"))
            .expect("the fixture is JSON");
    let (code, reply) = server.put("/v3/templates/echo-services", body);
    assert_eq!(code, 200, "{reply}");
    "echo-services"
}
