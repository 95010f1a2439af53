//! Services added to and removed from a running cluster (issue 40), read from the services'
//! own traces: placed by the template's rules, brought up after what they need, their users
//! reconfigured; and finished once after a SIGKILL of the server.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

/// A `local` cluster of three whose services leave a trace (`<node> <service> <action>`, one
/// line each, in order) in `trace`: db, and app which needs db at run time, uses cache and
/// restarts on configure; cache (anywhere) and api (on one node, needing cache) are not in it
/// yet.
fn traced_run(server: &Server, trace: &Path) -> String {
    traced_run_slow(server, trace, "")
}

/// [`traced_run`], each action starting with `pause` (a shell command).
fn traced_run_slow(server: &Server, trace: &Path, pause: &str) -> String {
    let act = |service: &str, action: &str| {
        let script = format!(
            "{pause}echo \"$EBB_NODE {service} {action}\" >> '{}'",
            trace.display()
        );
        json!({"type": "shell", "script": script})
    };
    let actions = |service: &str| {
        json!({
            "install": act(service, "install"), "configure": act(service, "configure"),
            "start": act(service, "start"), "stop": act(service, "stop"),
            "remove": act(service, "remove")
        })
    };
    let template = json!({
        "services": {
            "db": {"actions": actions("db")},
            "app": {"dependencies": {"runtime": {"requires": ["db"], "uses": ["cache"]}},
                    "restartOnConfigure": true, "actions": actions("app")},
            "cache": {"actions": actions("cache")},
            "api": {"dependencies": {"runtime": {"requires": ["cache"]}}, "actions": actions("api")}
        },
        "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
        "constraints": {"services": {"api": {"quantities": {"min": 1, "max": 1}}}},
        "defaults": {"services": ["db", "app"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/traced", template);
    assert_eq!(code, 200, "{body}");
    let profile = crate::support::profiles::profile_body(
        "local",
        &[("nodes", "3", true), ("template", "traced", true)],
    );
    let (code, body) = server.put("/v3/namespaces/default/profiles/traced", profile);
    assert_eq!(code, 200, "{body}");
    deploy(server, "a", "sleep 300", json!({}));
    let run = start(server, "a", json!({"system.profile.name": "traced"}));
    wait_until(server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    run
}

/// The trace's lines from `from` on.
fn trace_lines(trace: &Path, from: usize) -> Vec<String> {
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .skip(from)
        .map(str::to_string)
        .collect()
}

/// Where `line` is in `lines`; it must be there once.
#[track_caller]
fn at(lines: &[String], line: &str) -> usize {
    let found: Vec<usize> = (0..lines.len()).filter(|i| lines[*i] == line).collect();
    assert_eq!(found.len(), 1, "'{line}' once in {lines:#?}");
    found[0]
}

/// Services added to and removed from a running cluster, each planned in a dry run first:
/// placed by the template's rules, brought up after what they need, and what uses them
/// reconfigured (restarted around it) once they run or are gone, on every node, as the
/// services' own traces show. A remove that would leave a service without what it needs is
/// refused naming it.
#[test]
fn services_are_added_to_and_removed_from_a_running_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let server = Server::start(&dir);
    let run = traced_run(&server, &trace);
    let nodes = ["master", "worker-1", "worker-2"];

    // Planned first: cache on every node, api on one, app reconfigured.
    let add = json!({"operation": "add-services", "services": ["cache", "api"]});
    let (code, plan) = server.post_json(&format!("{run}/cluster/plan"), add.clone());
    assert_eq!(
        code,
        200,
        "{plan} {:#?}",
        server.logs().iter().rev().take(8).collect::<Vec<_>>()
    );
    assert_eq!(tasks(&plan, "start", Some("cache")).len(), 3, "{plan}");
    assert_eq!(tasks(&plan, "start", Some("api")).len(), 1, "{plan}");
    assert_eq!(tasks(&plan, "configure", Some("app")).len(), 3, "{plan}");
    assert!(
        tasks(&plan, "configure", Some("db")).is_empty(),
        "db does not use them: {plan}"
    );

    let from = trace_lines(&trace, 0).len();
    let id = cluster_op(&server, &run, add);
    let op = wait_op(&server, &run, id);
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    let lines = trace_lines(&trace, from);
    let api_node = lines
        .iter()
        .find(|l| l.ends_with(" api start"))
        .and_then(|l| l.split(' ').next())
        .expect("api started")
        .to_string();
    for n in nodes {
        let cache_start = at(&lines, &format!("{n} cache start"));
        assert!(at(&lines, &format!("{n} cache install")) < cache_start);
        // app, which uses cache, restarts around its configure once cache runs everywhere.
        let (stop, configure, start) = (
            at(&lines, &format!("{n} app stop")),
            at(&lines, &format!("{n} app configure")),
            at(&lines, &format!("{n} app start")),
        );
        assert!(stop < configure && configure < start, "{lines:#?}");
        for m in nodes {
            assert!(at(&lines, &format!("{m} cache start")) < stop, "{lines:#?}");
            assert!(
                at(&lines, &format!("{m} cache start"))
                    < at(&lines, &format!("{api_node} api start"))
            );
        }
        assert!(
            !lines.iter().any(|l| l.starts_with(&format!("{n} db "))),
            "{lines:#?}"
        );
    }
    let states = service_states(&server, &run);
    let up = |service: &str| {
        states
            .iter()
            .filter(|(_, s, state)| s == service && state == "up")
            .count()
    };
    assert_eq!(
        (up("cache"), up("api"), up("db"), up("app")),
        (3, 1, 3, 3),
        "{states:?}"
    );

    // cache cannot go while api, which needs it, stays.
    assert_error(
        server.post_json(
            &format!("{run}/cluster"),
            json!({"operation": "remove-services", "services": ["cache"]}),
        ),
        400,
        "'api' requires 'cache'",
    );
    // Both go: api and cache stopped (api first) and removed; app reconfigured after.
    let remove = json!({"operation": "remove-services", "services": ["api", "cache"]});
    let (code, plan) = server.post_json(&format!("{run}/cluster/plan"), remove.clone());
    assert_eq!(code, 200, "{plan}");
    assert_eq!(tasks(&plan, "remove", Some("cache")).len(), 3, "{plan}");
    let from = trace_lines(&trace, 0).len();
    let id = cluster_op(&server, &run, remove);
    assert_eq!(wait_op(&server, &run, id)["status"], "SUCCEEDED");
    let lines = trace_lines(&trace, from);
    let api_stop = at(&lines, &format!("{api_node} api stop"));
    for n in nodes {
        let cache_stop = at(&lines, &format!("{n} cache stop"));
        assert!(api_stop < cache_stop, "api needs cache: {lines:#?}");
        assert!(cache_stop < at(&lines, &format!("{n} cache remove")));
        for m in nodes {
            assert!(
                at(&lines, &format!("{m} cache remove"))
                    < at(&lines, &format!("{n} app configure"))
            );
        }
    }
    let (_, view) = server.get(&run);
    for node in view["cluster"]["nodes"].as_array().expect("nodes") {
        let services = node["services"].as_object().expect("services");
        assert_eq!(services.keys().collect::<Vec<_>>(), ["app", "db"], "{view}");
    }
    let (code, body) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200, "{body}");
    wait_deprovisioned(&server, &run);
}

/// The server SIGKILLed in the middle of an add of services, and again in the middle of
/// their remove: once restarted, each operation finishes, once, and the services end as
/// asked on every node.
#[test]
fn a_kill_during_an_add_or_a_remove_of_services_finishes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace");
    let server = Server::start(&dir);
    let run = traced_run_slow(&server, &trace, "sleep 0.3; ");
    // Waits until some node has done `what`: the operation is under way.
    let mid = |what: &str| {
        let started = std::time::Instant::now();
        while !trace_lines(&trace, 0).iter().any(|l| l.ends_with(what)) {
            assert!(started.elapsed() < Duration::from_secs(60), "no '{what}'");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let id = cluster_op(
        &server,
        &run,
        json!({"operation": "add-services", "services": ["cache"]}),
    );
    mid("cache install");
    server.kill();
    let server = Server::start(&dir);
    let op = wait_op(&server, &run, id);
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    assert_eq!(
        operations(&server, &run).len(),
        2,
        "no operation was added or done twice"
    );
    let states = service_states(&server, &run);
    let on = |service: &str, state: &str| {
        states
            .iter()
            .filter(|(_, s, st)| s == service && st == state)
            .count()
    };
    assert_eq!(on("cache", "up"), 3, "{states:?}");

    let id = cluster_op(
        &server,
        &run,
        json!({"operation": "remove-services", "services": ["cache"]}),
    );
    mid("cache stop");
    server.kill();
    let server = Server::start(&dir);
    let op = wait_op(&server, &run, id);
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    let states = service_states(&server, &run);
    assert!(!states.iter().any(|(_, s, _)| s == "cache"), "{states:?}");
    let (_, view) = server.get(&run);
    assert_eq!(view["cluster"]["numNodes"], 3, "{view}");
    let (code, body) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200, "{body}");
    wait_deprovisioned(&server, &run);
}
