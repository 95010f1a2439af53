//! Node counts and template sizes past what the server can plan: a 4xx, never an abort or
//! a stalled writer.

use serde_json::{Value, json};

use super::assert_alive;
use crate::support::profiles::profile_body;
use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

/// A template whose `count` services all sit in one `cantCoexist` group (so every one is
/// constrained), each allowed on any number of nodes.
fn exclusive_services(count: usize) -> Value {
    let names: Vec<String> = (0..count).map(|i| format!("s{i}")).collect();
    let services: serde_json::Map<String, Value> =
        names.iter().map(|n| (n.clone(), json!({}))).collect();
    json!({
        "services": services,
        "hardwareTypes": {"h": {"local": {}}},
        "imageTypes": {"i": {"local": {}}},
        "defaults": {"services": names},
        "constraints": {"layout": {"cantCoexist": [names]}}
    })
}

/// A template of `count` services, each on at most one node: every subset of them is a
/// candidate node, 2^count of them (15 made the old recursive search overflow the stack).
fn optional_services(count: usize) -> Value {
    let names: Vec<String> = (0..count).map(|i| format!("s{i}")).collect();
    let services: serde_json::Map<String, Value> =
        names.iter().map(|n| (n.clone(), json!({}))).collect();
    let constraints: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| (n.clone(), json!({"quantities": {"min": 0, "max": 1}})))
        .collect();
    json!({
        "services": services,
        "hardwareTypes": {"h": {"local": {}}},
        "imageTypes": {"i": {"local": {}}},
        "defaults": {"services": names},
        "constraints": {"services": constraints}
    })
}

/// The layout search over constrained services ends within its budget, on a plan and on a
/// run's start.
fn layout_search_is_bounded(server: &Server, plan: &str) {
    // 15 constrained services made the layout search recurse 2^15 deep; 40 in one group made
    // it enumerate 2^40 sets. Both now end with a 400 naming the limit or the budget.
    let (code, body) = server.post_json(
        plan,
        json!({"template": exclusive_services(15), "provisioner": "local", "nodes": 20}),
    );
    assert!(code == 200 || code == 400, "{code} {body}");
    for count in [15, 16] {
        let (code, body) = server.post_json(
            plan,
            json!({"template": optional_services(count), "provisioner": "local", "nodes": 20}),
        );
        assert!(code == 200 || code == 400, "{code} {body}");
        if code == 400 {
            assert!(
                body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("steps")),
                "{body}"
            );
        }
        assert_alive(server);
    }
    // A run whose template needs that search: refused or started, the writer answers.
    let (code, body) = server.put(
        "/v3/namespaces/default/templates/optional",
        optional_services(15),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.put(
        "/v3/namespaces/default/profiles/optional",
        profile_body(
            "local",
            &[("nodes", "20", true), ("template", "optional", true)],
        ),
    );
    assert_eq!(code, 200, "{body}");
    deploy(server, "opt", "true", json!({}));
    let (code, body) = server.post_json(
        &format!("{}/start", program("opt")),
        json!({"system.profile.name": "optional"}),
    );
    assert!(code == 200 || code == 400, "{code} {body}");
    assert_alive(server);
    if code == 200 {
        let run = format!(
            "{}/runs/{}",
            program("opt"),
            body["runId"].as_str().expect("id")
        );
        wait_deprovisioned(server, &run);
    }
    assert_error(
        server.post_json(
            plan,
            json!({"template": exclusive_services(40), "provisioner": "local", "nodes": 20}),
        ),
        400,
        "40 constrained services",
    );
    assert_alive(server);
}

/// Node counts past the provisioner's maximum, or plans too large, are refused up front.
fn node_counts_are_bounded(server: &Server, plan: &str) {
    // A node count past the provisioner's maximum is refused before anything is sized by it.
    assert_error(
        server.post_json(
            plan,
            json!({"template": "spark", "provisioner": "local", "nodes": 4294967295u64}),
        ),
        400,
        "allows at most 64 nodes",
    );
    assert_error(
        server.post_json(
            plan,
            json!({"template": "spark", "provisioner": "sim", "nodes": 4294967295u64}),
        ),
        400,
        "nodes",
    );
    assert_error(
        server.post_json(
            plan,
            json!({"template": "spark", "provisioner": "local", "nodes": -1}),
        ),
        400,
        "nodes",
    );
    // A plan that fits the provisioner but would be quadratic in size gets a 400 too.
    let wide = json!({
        "services": {"a": {}, "b": {"dependencies": {"install": {"requires": ["a"]}}}},
        "hardwareTypes": {"h": {"sim": {}}}, "imageTypes": {"i": {"sim": {}}},
        "defaults": {"services": ["a", "b"]}
    });
    assert_error(
        server.post_json(
            plan,
            json!({"template": wide, "provisioner": "sim", "nodes": 10000}),
        ),
        400,
        "more than the limit",
    );
}

/// Dependency chains are bounded by size and checked without recursion.
fn dependency_chains_are_bounded(server: &Server) {
    // An 8,500-service dependency chain overflowed the stack in the cycle check; it is now
    // refused by its size, and a chain at the limit is checked without recursion.
    let chain = |count: usize| {
        let services: serde_json::Map<String, Value> = (0..count)
            .map(|i| {
                let deps = if i == 0 {
                    json!({})
                } else {
                    json!({"dependencies": {"runtime": {"requires": [format!("s{}", i - 1)]}}})
                };
                (format!("s{i}"), deps)
            })
            .collect();
        json!({ "services": services })
    };
    assert_error(
        server.put("/v3/namespaces/default/templates/chain", chain(8_500)),
        400,
        "more than the limit of 128",
    );
    let (code, body) = server.put("/v3/namespaces/default/templates/chain", chain(128));
    assert_eq!(code, 200, "{body}");
    assert_alive(server);
}

#[test]
fn no_plan_request_aborts_or_stalls_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let plan = "/v3/namespaces/default/plan";
    layout_search_is_bounded(&server, plan);
    node_counts_are_bounded(&server, plan);
    dependency_chains_are_bounded(&server);
}

#[test]
fn expand_stops_at_the_provisioners_node_maximum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let mut profile = profile_body("local", &[("nodes", "2", true)]);
    profile["keepalive"] = json!({"failed": 600});
    let (code, body) = server.put("/v3/namespaces/default/profiles/two", profile);
    assert_eq!(code, 200, "{body}");
    deploy(&server, "a", "exit 3", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "two"}));
    wait_until(&server, &run, std::time::Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });

    let cluster = format!("{run}/cluster");
    assert_error(
        server.post_json(
            &cluster,
            json!({"operation": "expand", "nodes": 4294967295u64}),
        ),
        400,
        "allows at most 64",
    );
    // `local` allows 64 nodes: 2 + 63 is one too many; the audit found 71 made.
    assert_error(
        server.post_json(&cluster, json!({"operation": "expand", "nodes": 63})),
        400,
        "allows at most 64",
    );
    let run_now = server.get(&run).1;
    assert_eq!(
        run_now["cluster"]["nodes"].as_array().map(Vec::len),
        Some(2),
        "{run_now}"
    );
    assert_eq!(operations(&server, &run).len(), 1, "only the create ran");
    assert_alive(&server);
    let (code, _) = server.post(&format!("{run}/deprovision"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
}
