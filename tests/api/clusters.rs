//! Runs on a cluster template: services installed and started across nodes in dependency
//! order, stopped in reverse, and a failing service task retried and then torn down.

use serde_json::{Value, json};

use super::harness::{Server, profile_body};
use super::runs_support::*;

/// Positions of the events whose message starts with `message`.
fn at(events: &[Value], message: &str) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn a_template_run_starts_services_in_order_and_stops_them_in_reverse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, _) = server.put(
        "/v3/namespaces/default/profiles/zk",
        profile_body(
            "local",
            &[
                ("nodes", "4", true),
                ("template", "zookeeper-cluster", true),
            ],
        ),
    );
    assert_eq!(code, 200);
    deploy(&server, "a", "cat ../*/*.state | sort | uniq -c", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "zk"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let logs = server.get(&format!("{run}/logs")).1;
    let stdout = logs["stdout"].as_str().expect("stdout");
    assert!(
        stdout.contains("started"),
        "services were started before the program: {stdout}"
    );

    let events = server
        .get(&format!("{run}/events"))
        .1
        .as_array()
        .cloned()
        .expect("events");
    let zk_started = at(&events, "start zookeeper done");
    let master_start = at(&events, "start master started");
    let master_started = at(&events, "start master done");
    let workers_start = at(&events, "start worker started");
    assert_eq!(
        (zk_started.len(), master_started.len(), workers_start.len()),
        (3, 1, 3),
        "{events:?}"
    );
    assert!(
        zk_started.iter().all(|z| *z < master_start[0]),
        "zookeeper everywhere before master"
    );
    assert!(
        workers_start.iter().all(|w| *w > master_started[0]),
        "master before workers"
    );
    let workers_stopped = at(&events, "stop worker done");
    let master_stop = at(&events, "stop master started");
    let zk_stop = at(&events, "stop zookeeper started");
    assert!(
        workers_stopped.iter().all(|w| *w < master_stop[0]),
        "workers stop before master"
    );
    assert!(
        zk_stop.iter().all(|z| *z > master_stop[0]),
        "master stops before zookeeper"
    );
    assert_no_sandboxes(dir.path());
}

#[test]
fn a_failing_service_is_retried_then_the_cluster_is_torn_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let template = json!({
        "services": {
            "db": {"actions": {"start": {"type": "shell", "script": "sleep 300 & echo \"$!\" >> ../../db.pids"},
                               "stop": {"type": "shell", "script": "exit 1"}}},
            "web": {"dependencies": {"runtime": {"requires": ["db"]}},
                    "actions": {"start": {"type": "shell", "script": "echo 'web: no luck' >&2; exit 9"}}}
        },
        "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
        "defaults": {"services": ["db", "web"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/broken", template);
    assert_eq!(code, 200, "{body}");
    let (code, _) = server.put(
        "/v3/namespaces/default/profiles/broken",
        profile_body(
            "local",
            &[("nodes", "2", true), ("template", "broken", true)],
        ),
    );
    assert_eq!(code, 200);
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "broken"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    assert_eq!(done["failure"]["kind"], "provisioning");
    let message = done["failure"]["message"].as_str().expect("message");
    assert!(
        message.contains("start web failed 3 times") && message.contains("no luck"),
        "{message}"
    );
    let events = server.get(&format!("{run}/events")).1.to_string();
    assert!(events.contains("attempt 2 of 3"), "{events}");
    assert!(
        events.contains("stop db failed; deleting the node anyway"),
        "{events}"
    );
    // The db daemon the template started died with its node.
    let pids = std::fs::read_to_string(dir.path().join("local/db.pids")).unwrap_or_default();
    assert!(!pids.trim().is_empty(), "db was started");
    for pid in pids.lines() {
        // Gone, or a zombie waiting for init to reap it: either way it no longer runs.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        assert!(
            matches!(state, None | Some("Z" | "X")),
            "process {pid} outlived its node: {stat}"
        );
    }
}
