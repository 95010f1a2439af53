//! Cluster templates over the API: built-ins, USER templates, validation errors.

use serde_json::json;

use crate::support::profiles::echo_services;
use crate::support::server::{Server, assert_error, run_ebb};

#[test]
fn built_in_and_user_templates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, system) = server.get("/v3/templates");
    assert_eq!(code, 200);
    let names: Vec<&str> = system
        .as_array()
        .expect("list")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["dask", "spark", "zookeeper"], "{system}");
    let zookeeper = &system[2];
    assert_eq!(zookeeper["scope"], "SYSTEM");
    assert_eq!(zookeeper["builtin"], true);
    assert!(zookeeper["services"]["zookeeper"]["actions"]["start"]["script"].is_string());
    assert_error(
        server.put("/v3/templates/zookeeper", json!({})),
        405,
        "built in",
    );
    assert_error(server.delete("/v3/templates/zookeeper"), 405, "built in");

    let body = json!({
        "description": "two services",
        "services": {"db": {}, "web": {"dependencies": {"runtime": {"requires": ["db"]}}}}
    });
    let (code, made) = server.put("/v3/namespaces/default/templates/small", body);
    assert_eq!(code, 200, "{made}");
    assert_eq!(
        (made["scope"].as_str(), made["name"].as_str()),
        (Some("USER"), Some("small"))
    );
    let listed = server
        .get("/v3/namespaces/default/templates?includeSystem=true")
        .1;
    let names: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["small", "dask", "spark", "zookeeper"]);
    assert_error(
        server.put(
            "/v3/namespaces/default/templates/loop",
            json!({"services": {"a": {"dependencies": {"install": {"requires": ["b"]}}},
                                "b": {"dependencies": {"install": {"requires": ["a"]}}}}}),
        ),
        400,
        "dependency cycle: a → b → a",
    );
    assert_error(
        server.put(
            "/v3/namespaces/default/templates/bad",
            json!({"services": {"a": {"dependencies": {"runtime": {"requires": ["zk"]}}}}}),
        ),
        400,
        "services.a.dependencies.runtime.requires[0]",
    );
    assert_error(
        server.put(
            "/v3/namespaces/default/templates/bad",
            json!({"servces": {}}),
        ),
        400,
        "servces",
    );
    assert_error(
        server.get("/v3/namespaces/default/templates/nope"),
        404,
        "template 'nope'",
    );
    assert_error(
        server.get("/v3/namespaces/nope/templates"),
        404,
        "namespace 'nope'",
    );
    let (code, _) = server.delete("/v3/namespaces/default/templates/small");
    assert_eq!(code, 200);

    let token = server.token().expect("token");
    let env = [
        ("EBB_SERVER", server.url.as_str()),
        ("EBB_TOKEN", token.as_str()),
    ];
    let (code, out, err) = run_ebb(&["template", "list", "--system"], &env, None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("SYSTEM:spark") && out.contains("spark-master, spark-worker"),
        "{out}"
    );
}

#[test]
fn a_dry_run_shows_the_layout_and_the_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let template = echo_services(&server);
    let (code, plan) = server.post_json(
        "/v3/namespaces/default/plan",
        json!({"template": template, "provisioner": "local", "nodes": 4}),
    );
    assert_eq!(code, 200, "{plan}");
    let layout = plan["layout"].as_array().expect("layout");
    assert_eq!(layout.len(), 4);
    let masters: Vec<&serde_json::Value> = layout
        .iter()
        .filter(|n| {
            n["services"]
                .as_array()
                .is_some_and(|s| s.contains(&json!("master")))
        })
        .collect();
    assert_eq!(masters.len(), 1, "{plan}");
    assert_eq!(masters[0]["hardwareType"], "large");
    let tasks = plan["tasks"].as_array().expect("tasks");
    let find = |action: &str, service: &str| {
        tasks
            .iter()
            .find(|t| t["action"] == action && t["service"] == service)
            .and_then(|t| t["id"].as_u64())
            .unwrap_or_else(|| panic!("no {action} {service}"))
    };
    assert!(find("start", "zookeeper") < find("start", "master"));
    assert!(find("start", "master") < find("start", "worker"));
    let staged: usize = plan["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| s.as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(staged, tasks.len());

    assert_error(
        server.post_json(
            "/v3/namespaces/default/plan",
            json!({"template": template, "provisioner": "sim", "nodes": 5000}),
        ),
        400,
        "constraints.size",
    );
    assert_error(
        server.post_json(
            "/v3/namespaces/default/plan",
            json!({"template": template, "provisioner": "local", "nodes": 3, "hardwareType": "small"}),
        ),
        400,
        "no layout of 3 node(s)",
    );
    assert_error(
        server.post_json(
            "/v3/namespaces/default/plan",
            json!({"template": "ghost", "provisioner": "local", "nodes": 1}),
        ),
        404,
        "ghost",
    );
    let inline = json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": "x"}}}},
                        "hardwareTypes": {"h": {"sim": {}}}, "imageTypes": {"i": {"sim": {}}},
                        "defaults": {"services": ["a"]}});
    let (code, plan) = server.post_json(
        "/v3/namespaces/default/plan",
        json!({"template": inline, "provisioner": "sim", "nodes": 2, "operation": "stop-services"}),
    );
    assert_eq!(code, 200, "{plan}");
    assert_eq!(plan["tasks"], json!([]), "a has no stop action");
}
