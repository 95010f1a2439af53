//! Runs end to end on the real server: apps, starting, failures by kind, stop, keepalive,
//! extend, deprovision, timeout, concurrency, the local provisioner, usage and history.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::{profile_body, sim_profile};
use crate::support::runs::*;
use crate::support::server::{Options, Server, assert_error, run_ebb};

const LONG: Duration = Duration::from_secs(60);

#[test]
fn apps_deploy_list_get_and_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let app = deploy(
        &server,
        "a",
        "true",
        json!({"env": {"X": "1"}, "maxConcurrentRuns": 2}),
    );
    assert_eq!(app["programs"][0]["maxConcurrentRuns"], 2);
    assert_eq!(
        server
            .get("/v3/namespaces/default/apps")
            .1
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(server.get("/v3/namespaces/default/apps/a").1["name"], "a");
    assert_eq!(server.get(&program("a")).1["command"][0], "sh");
    assert_error(
        server.get("/v3/namespaces/default/apps/nope"),
        404,
        "app 'default/nope' not found",
    );
    assert_error(
        server.get("/v3/namespaces/default/apps/a/workflows/nope/runs"),
        404,
        "program 'nope' not found",
    );
    assert_error(
        server.put(
            "/v3/namespaces/default/apps/b",
            json!({"programs": [{"type": "workflows", "name": "p", "command": []}]}),
        ),
        400,
        "programs[0].command: must not be empty",
    );
    assert_error(
        server.put(
            "/v3/namespaces/default/apps/b",
            json!({"programs": [{"type": "mapreduce", "name": "p", "command": ["x"]}]}),
        ),
        400,
        "programs[0].type",
    );
    assert_error(
        server.put(
            "/v3/namespaces/default/apps/b",
            json!({"config": {"system.profile.name": "USER:ghost"}, "programs": []}),
        ),
        404,
        "ghost",
    );
    assert_error(
        server.put(
            "/v3/namespaces/default/apps/b",
            json!({"programs": [], "extra": 1}),
        ),
        400,
        "extra",
    );
    // App and program preferences: same rules as the other levels, 404 for unknown ones.
    let (code, _) = server.put(
        "/v3/namespaces/default/apps/a/preferences",
        json!({"k": "v"}),
    );
    assert_eq!(code, 200);
    let (code, _) = server.put(
        &format!("{}/preferences", program("a")),
        json!({"k2": "v2"}),
    );
    assert_eq!(code, 200);
    let resolved = server
        .get(&format!("{}/preferences?resolved=true", program("a")))
        .1;
    assert_eq!(
        (resolved["k"].as_str(), resolved["k2"].as_str()),
        (Some("v"), Some("v2"))
    );
    assert_error(
        server.put("/v3/namespaces/default/apps/zz/preferences", json!({})),
        404,
        "app",
    );
    assert_error(
        server.put(
            "/v3/namespaces/default/apps/a/workflows/zz/preferences",
            json!({}),
        ),
        404,
        "program 'zz'",
    );
    assert_error(server.delete("/v3/namespaces/x1/apps/a"), 404, "namespace");
    let (code, _) = server.delete("/v3/namespaces/default/apps/a");
    assert_eq!(code, 200);
    assert_error(
        server.get("/v3/namespaces/default/apps/a/preferences"),
        404,
        "app",
    );
}

#[test]
fn a_native_run_completes_with_its_environment_and_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(
        &server,
        "a",
        "echo \"run=$EBB_RUN_ID ns=$EBB_NAMESPACE app=$EBB_APP program=$EBB_PROGRAM args=$EBB_ARGS greeting=$GREETING\"; test -f \"$EBB_CLUSTER_FILE\"; echo \"launcher=$(cat /proc/$PPID/comm)\"; echo oops >&2",
        json!({"env": {"GREETING": "hi"}}),
    );
    let run = start(&server, "a", json!({"color": "blue", "apiToken": "s3cret"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["profile"], "SYSTEM:native");
    assert_eq!(
        done["properties"]["apiToken"], "***",
        "secrets are redacted"
    );
    assert_eq!(done["cluster"]["numNodes"], 0);
    let id = done["runid"].as_str().expect("runid");
    let logs = server.get(&format!("{run}/logs")).1;
    let stdout = logs["stdout"].as_str().expect("stdout");
    assert!(
        stdout.contains(&format!("run={id} ns=default app=a program=p")),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#""color":"blue""#) && stdout.contains("greeting=hi"),
        "{stdout}"
    );
    assert_eq!(logs["stderr"], "oops\n");
    // Started by the small launcher built beside `ebb`, not by the whole `ebb`.
    assert!(stdout.contains("launcher=ebb-shim\n"), "{stdout}");
    let events = server.get(&format!("{run}/events")).1;
    let messages: Vec<&str> = events
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        messages.iter().any(|m| m.starts_with("run PENDING")),
        "{messages:?}"
    );
    assert_eq!(messages.last(), Some(&"cluster DEPROVISIONED"));
    let listed = server
        .get(&format!("{}/runs?status=completed", program("a")))
        .1;
    assert_eq!(listed[0]["runid"], id);
    assert_eq!(
        server
            .get(&format!("{}/runs?status=RUNNING", program("a")))
            .1,
        json!([])
    );
    assert_error(
        server.get(&format!("{}/runs?status=BOGUS", program("a"))),
        400,
        "status",
    );
    assert_eq!(
        server.get("/v3/namespaces/default/runs?limit=1").1[0]["runid"],
        id
    );
    assert_error(
        server.get(&format!("{}/runs/nope", program("a"))),
        404,
        "run 'nope' not found",
    );
    assert_error(server.post(&format!("{run}/stop")), 409, "already ended");
}

#[test]
fn a_local_cluster_gives_each_node_a_sandbox_and_removes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(
        &server,
        "a",
        "pwd > \"$EBB_WORK_DIR/../../seen\"; echo \"$EBB_NODE_ADDRESS\" >> \"$EBB_WORK_DIR/../../seen\"; sleep 30 & sleep 0.2",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "SYSTEM:local"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let nodes = done["cluster"]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    let mut addresses: Vec<&str> = nodes
        .iter()
        .map(|n| n["ipAddress"].as_str().expect("ip"))
        .collect();
    addresses.dedup();
    assert_eq!(addresses.len(), 3, "distinct loopback addresses");
    assert!(
        addresses.iter().all(|a| a.starts_with("127.")),
        "{addresses:?}"
    );
    assert!(nodes.iter().all(|n| n["status"] == "DELETED"), "{nodes:?}");
    let seen =
        std::fs::read_to_string(crate::support::server::work_dir(dir.path()).join("local/seen"))
            .expect("the program wrote");
    assert!(
        seen.contains("/master") && seen.contains(addresses[0]),
        "{seen}"
    );
    assert_no_sandboxes(dir.path());
}

#[test]
fn a_relative_data_dir_still_gives_programs_a_readable_cluster_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = crate::support::server::Options {
        cwd: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let server = Server::start_at(std::path::Path::new("./data"), options);
    deploy(&server, "a", "test -s \"$EBB_CLUSTER_FILE\"", json!({}));
    for profile in ["SYSTEM:local", "SYSTEM:native"] {
        let run = start(&server, "a", json!({"system.profile.name": profile}));
        let done = wait_deprovisioned(&server, &run);
        assert_eq!(done["status"], "COMPLETED", "{profile}: {done}");
    }
}

#[test]
fn a_fatal_create_fails_provisioning_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    sim_profile(
        &server,
        "broken",
        &sim,
        &[("nodes", "3"), ("failCreate", "true")],
        3600,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "broken"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED");
    assert_eq!(done["failure"]["kind"], "provisioning", "{done}");
    assert!(
        done["failure"]["message"]
            .as_str()
            .expect("message")
            .contains("failCreate")
    );
    assert!(done["start"].is_null(), "the program never started");
    assert!(instances(&sim).is_empty());
}

#[test]
fn transient_errors_and_lost_responses_are_retried_without_duplicates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    let props = [
        ("nodes", "3"),
        ("transientErrorRate", "0.4"),
        ("lostCreateRate", "0.5"),
    ];
    sim_profile(&server, "flaky", &sim, &props, 0, None);
    deploy(&server, "a", "true", json!({}));
    let runs: Vec<String> = (0..4)
        .map(|_| start(&server, "a", json!({"system.profile.name": "flaky"})))
        .collect();
    for run in &runs {
        assert_eq!(wait_deprovisioned(&server, run)["status"], "COMPLETED");
    }
    let log = calls(&sim);
    assert!(log.iter().any(|c| c["ok"] == false), "faults were injected");
    let ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    assert_clean(&sim, &ids, 3);
    // Faults are drawn at random: some run, not necessarily the first, met one.
    let events: Vec<String> = runs
        .iter()
        .map(|run| server.get(&format!("{run}/events")).1.to_string())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e.contains("retrying in") || e.contains("found")),
        "{events:?}"
    );
}

#[test]
fn stop_while_provisioning_leaks_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    sim_profile(
        &server,
        "slow",
        &sim,
        &[("nodes", "3"), ("createLatency", "2s")],
        3600,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "slow"}));
    wait_until(&server, &run, LONG, |r| {
        r["cluster"]["nodes"]
            .as_array()
            .is_some_and(|n| !n.is_empty())
    });
    let (code, stopping) = server.post_json(&format!("{run}/stop"), json!({"keepalive": true}));
    assert_eq!(code, 200, "{stopping}");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "KILLED", "{done}");
    assert!(done["start"].is_null());
    assert_clean(&sim, &[&run], instances(&sim).len().min(3));
    assert!(instances(&sim).iter().all(|i| i["state"] == "terminated"));
}

#[test]
fn stop_with_keepalive_keeps_the_cluster_then_deprovision_and_extend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    sim_profile(&server, "keep", &sim, &[("nodes", "2")], 3600, Some(7200));
    deploy(&server, "a", "sleep 60", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "keep"}));
    wait_until(&server, &run, LONG, |r| r["status"] == "RUNNING");
    assert_error(
        server.post(&format!("{run}/deprovision")),
        409,
        "only a WAITING or IDLE cluster",
    );
    assert_error(
        server.post_json(&format!("{run}/extend"), json!({"expireAt": 1})),
        409,
        "only a WAITING",
    );
    let (code, _) = server.post_json(&format!("{run}/stop"), json!({"keepalive": true}));
    assert_eq!(code, 200);
    let waiting = wait_until(&server, &run, LONG, |r| r["cluster"]["status"] == "WAITING");
    assert_eq!(waiting["status"], "KILLED");
    assert!(
        waiting["failure"].is_null(),
        "a requested stop is not a failure: {waiting}"
    );
    let expires = waiting["cluster"]["expiresAt"].as_u64().expect("expiresAt");
    let starting = waiting["starting"].as_u64().expect("starting");
    assert!(
        (starting + 59..starting + 120).contains(&expires),
        "keepalive.killed is 60s: {waiting}"
    );

    assert_error(
        server.post_json(&format!("{run}/extend"), json!({"expireAt": 10})),
        400,
        "expireAt: must be in the future",
    );
    assert_error(
        server.post_json(
            &format!("{run}/extend"),
            json!({"expireAt": starting + 7201}),
        ),
        400,
        "timeout",
    );
    assert_error(
        server.post_json(&format!("{run}/extend"), json!({})),
        400,
        "expireAt",
    );
    let (code, extended) = server.post_json(
        &format!("{run}/extend"),
        json!({"expireAt": starting + 7000}),
    );
    assert_eq!(code, 200, "{extended}");
    assert_eq!(extended["cluster"]["expiresAt"], starting + 7000);
    // An earlier time would shorten the keepalive: refused, naming both times.
    let refused = server.post_json(
        &format!("{run}/extend"),
        json!({"expireAt": starting + 6000}),
    );
    assert_error(
        refused.clone(),
        409,
        &format!("before the cluster's deadline {}", starting + 7000),
    );
    assert!(
        refused.1["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("{}", starting + 6000))
    );
    // `by` moves the deadline later by that much, from the deadline; not both, not nonsense.
    let (code, later) = server.post_json(&format!("{run}/extend"), json!({"by": "1m"}));
    assert_eq!(code, 200, "{later}");
    assert_eq!(later["cluster"]["expiresAt"], starting + 7060, "{later}");
    assert_error(
        server.post_json(
            &format!("{run}/extend"),
            json!({"by": "1m", "expireAt": starting + 7100}),
        ),
        400,
        "by",
    );
    assert_error(
        server.post_json(&format!("{run}/extend"), json!({"by": "soon"})),
        400,
        "by",
    );
    assert_error(
        server.post_json(
            &format!("{run}/extend"),
            json!({"by": "1m", "shorten": true}),
        ),
        400,
        "shorten",
    );
    // Asked for, it shortens.
    let (code, shorter) = server.post_json(
        &format!("{run}/extend"),
        json!({"expireAt": starting + 7000, "shorten": true}),
    );
    assert_eq!(code, 200, "{shorter}");
    assert_eq!(shorter["cluster"]["expiresAt"], starting + 7000);
    assert_error(
        server.post(&format!("{run}/stop")),
        409,
        "deprovision the WAITING cluster instead",
    );
    assert_error(
        server.post(&format!("{run}/deprovision?force=true")),
        409,
        "force applies",
    );
    let (code, _) = server.post(&format!("{run}/deprovision"));
    assert_eq!(code, 200);
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "KILLED");
    assert_clean(&sim, &[&run], 2);
}

#[test]
fn the_profile_timeout_kills_the_program_and_tears_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    sim_profile(&server, "short", &sim, &[("nodes", "1")], 3600, Some(2));
    deploy(&server, "a", "sleep 60", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "short"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "KILLED", "{done}");
    assert_eq!(done["failure"]["kind"], "timeout");
    assert_clean(&sim, &[&run], 1);
}

#[test]
fn a_stuck_deprovision_is_orphaned_and_can_be_forced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    let props = [
        ("nodes", "2"),
        ("deleteLatency", "1h"),
        ("retryBudget", "1s"),
    ];
    sim_profile(&server, "stuck", &sim, &props, 0, None);
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "stuck"}));
    let orphaned = wait_until(&server, &run, LONG, |r| {
        r["cluster"]["status"] == "ORPHANED"
    });
    assert_eq!(orphaned["status"], "COMPLETED");
    assert_eq!(orphaned["failure"]["kind"], "deprovisioning", "{orphaned}");
    let (code, forced) = server.post(&format!("{run}/deprovision?force=true"));
    assert_eq!(code, 200, "{forced}");
    assert_eq!(forced["cluster"]["status"], "DEPROVISIONED");
    let events = server.get(&format!("{run}/events")).1.to_string();
    assert!(
        events.contains("may have been left behind: master"),
        "{events}"
    );
}

#[test]
fn the_concurrency_limit_rejects_and_records_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "sleep 60", json!({"maxConcurrentRuns": 1}));
    let first = start(&server, "a", json!({}));
    let (code, body) = server.post_json(&format!("{}/start", program("a")), json!({}));
    assert_error((code, body), 409, "maxConcurrentRuns");
    let rejected = server
        .get(&format!("{}/runs?status=REJECTED", program("a")))
        .1;
    assert_eq!(rejected.as_array().map(Vec::len), Some(1), "{rejected}");
    assert_error(
        server.delete("/v3/namespaces/default/apps/a"),
        409,
        "still hold a cluster",
    );
    let (code, _) = server.post(&format!("{first}/stop"));
    assert_eq!(code, 200);
    assert_eq!(wait_deprovisioned(&server, &first)["status"], "KILLED");
    let again = start(&server, "a", json!({}));
    let (code, _) = server.post(&format!("{again}/stop"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &again);
}

#[test]
fn refusals_name_their_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "true", json!({}));
    let (code, _) = server.put(
        "/v3/namespaces/default/profiles/fixed",
        profile_body("local", &[("nodes", "2", false)]),
    );
    assert_eq!(code, 200);
    let start_path = format!("{}/start", program("a"));
    assert_error(
        server.post_json(
            &start_path,
            json!({"system.profile.name": "fixed", "system.profile.properties.nodes": "5"}),
        ),
        400,
        "property 'nodes'",
    );
    assert_error(
        server.post_json(
            &start_path,
            json!({"system.profile.name": "fixed", "system.profile.properties.bogus": "1"}),
        ),
        400,
        "bogus",
    );
    assert_error(
        server.post_json(&start_path, json!({"system.profile.name": "ghost"})),
        404,
        "ghost",
    );
    // The template's services a run asks for: each must be the template's, with what it needs.
    let (code, _) = server.put(
        "/v3/namespaces/default/profiles/sparks",
        profile_body(
            "local",
            &[
                ("nodes", "2", false),
                ("template", "spark", false),
                ("templateServices", "spark-master,spark-worker", true),
            ],
        ),
    );
    assert_eq!(code, 200);
    for (services, says) in [
        (
            "spark-master,flink",
            "property 'templateServices': service 'flink' is not in the template",
        ),
        (
            "spark-worker",
            "property 'templateServices': service 'spark-worker' requires 'spark-master'",
        ),
        (
            " , ",
            "property 'templateServices': the cluster has no services",
        ),
    ] {
        assert_error(
            server.post_json(
                &start_path,
                json!({"system.profile.name": "sparks", "system.profile.properties.templateServices": services}),
            ),
            400,
            says,
        );
    }
    let many: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
    assert_error(
        server.post_json(
            &start_path,
            json!({"system.profile.name": "sparks", "system.profile.properties.templateServices": many.join(",")}),
        ),
        400,
        "property 'templateServices': names more than the limit of 64 services",
    );
    assert_error(server.post_json(&start_path, json!({"n": 1})), 400, "n");
    assert_error(
        server.post("/v3/namespaces/default/apps/a/workflows/zz/start"),
        404,
        "program 'zz'",
    );
    let (code, _) = server.post("/v3/namespaces/default/profiles/fixed/disable");
    assert_eq!(code, 200);
    assert_error(
        server.post_json(&start_path, json!({"system.profile.name": "fixed"})),
        409,
        "disabled",
    );
}

#[test]
fn profile_usage_assignments_and_delete_while_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    sim_profile(&server, "p1", &sim, &[("nodes", "2")], 0, None);
    let (code, _) = server.put(
        "/v3/namespaces/default/apps/a",
        json!({"config": {"system.profile.name": "p1"}, "programs": [{"type": "workflows", "name": "p", "command": ["sleep", "60"]}]}),
    );
    assert_eq!(code, 200);
    let (code, _) = server.put(
        &format!("{}/preferences", program("a")),
        json!({"system.profile.name": "USER:p1"}),
    );
    assert_eq!(code, 200);
    let places = server
        .get("/v3/namespaces/default/profiles/p1/assignments")
        .1;
    let levels: Vec<&str> = places
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|p| p["level"].as_str())
        .collect();
    assert_eq!(levels, ["program", "app"], "{places}");

    let run = start(&server, "a", json!({}));
    wait_until(&server, &run, LONG, |r| r["status"] == "RUNNING");
    let usage = server.get("/v3/namespaces/default/profiles/p1/usage").1;
    assert_eq!(usage["nodesNow"], 2, "{usage}");
    assert_eq!(usage["activeRuns"].as_array().map(Vec::len), Some(1));
    let (code, _) = server.post("/v3/namespaces/default/profiles/p1/disable");
    assert_eq!(code, 200);
    let (code, _) = server.delete(&format!("{}/preferences", program("a")));
    assert_eq!(code, 200);
    let (code, _) = server.put(
        "/v3/namespaces/default/apps/a",
        json!({"programs": [{"type": "workflows", "name": "p", "command": ["true"]}]}),
    );
    assert_eq!(code, 200);
    assert_error(
        server.delete("/v3/namespaces/default/profiles/p1"),
        409,
        "active runs",
    );
    let (code, _) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
    let usage = server.get("/v3/namespaces/default/profiles/p1/usage").1;
    assert_eq!(
        (usage["nodesNow"].as_u64(), usage["runs"]["KILLED"].as_u64()),
        (Some(0), Some(1)),
        "{usage}"
    );
    let (code, _) = server.delete("/v3/namespaces/default/profiles/p1");
    assert_eq!(code, 200);
}

#[test]
fn events_long_poll_returns_as_soon_as_something_happens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "sleep 1", json!({}));
    let run = start(&server, "a", json!({}));
    let mut after = 0u64;
    let mut seen: Vec<Value> = Vec::new();
    while !seen.iter().any(|e| e["message"] == "cluster DEPROVISIONED") {
        let (code, batch) = server.get(&format!("{run}/events?after={after}&wait=20s"));
        assert_eq!(code, 200, "{batch}");
        let batch = batch.as_array().cloned().expect("list");
        assert!(
            !batch.is_empty(),
            "a long poll on a live run returns only with news"
        );
        after = batch.last().and_then(|e| e["seq"].as_u64()).expect("seq");
        seen.extend(batch);
    }
    let seqs: Vec<u64> = seen.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "ordered, no repeats");
    assert_error(server.get(&format!("{run}/events?wait=2h")), 400, "wait");
}

#[test]
fn the_cli_follows_a_run_and_exits_with_its_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let app = dir.path().join("hello.json");
    std::fs::write(
        &app,
        json!({"programs": [
            {"type": "workflows", "name": "ok", "command": ["sh", "-c", "echo hello from $EBB_PROGRAM"]},
            {"type": "workflows", "name": "bad", "command": ["sh", "-c", "exit 4"]}
        ]})
        .to_string(),
    )
    .expect("write");
    // The CLI finds the first token in the data dir, as in the README's first run.
    let data_dir = dir.path().to_str().expect("utf-8");
    let env = [
        ("EBB_SERVER", server.url.as_str()),
        ("EBB_DATA_DIR", data_dir),
    ];
    let (code, out, err) = run_ebb(&["app", "deploy", app.to_str().expect("utf-8")], &env, None);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run_ebb(&["run", "start", "default/hello/ok", "--wait"], &env, None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("hello from ok") && out.contains("cluster DEPROVISIONED"),
        "{out}"
    );
    let (code, out, _) = run_ebb(&["run", "start", "default/hello/bad", "--wait"], &env, None);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("run FAILED (program: the program exited with code 4)"),
        "{out}"
    );
    let (code, out, _) = run_ebb(
        &["run", "list", "-n", "default", "--status", "FAILED"],
        &env,
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains("default/hello/bad/"), "{out}");
    let (code, _, err) = run_ebb(&["run", "get", "default/hello/ok"], &env, None);
    assert_eq!(code, 1);
    assert!(err.contains("NAMESPACE/APP/PROGRAM/RUN"), "{err}");
}

/// With `--history-retention 2s`, an ended run's record, events and audit log are compacted
/// away, while its profile's usage still counts it (status and node-seconds); a live run is
/// left alone. Compaction survives a restart in the middle.
#[test]
fn ended_runs_are_compacted_after_the_retention_and_usage_keeps_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let retention = Options {
        args: vec!["--history-retention".into(), "2s".into()],
        ..Options::default()
    };
    let server = Server::start_at(&data, Options::default());
    sim_profile(&server, "p", &sim, &[("nodes", "2")], 0, None);
    deploy(&server, "a", "sleep 0.3", json!({}));
    deploy(&server, "b", "sleep 60", json!({}));
    let ended = start(&server, "a", json!({"system.profile.name": "p"}));
    assert_eq!(wait_deprovisioned(&server, &ended)["status"], "COMPLETED");
    let live = start(&server, "b", json!({"system.profile.name": "p"}));
    wait_until(&server, &live, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let before = server.get("/v3/namespaces/default/profiles/p/usage").1;
    assert_eq!(before["runs"]["COMPLETED"], 1, "{before}");
    let node_seconds = before["nodeSeconds"].as_u64().expect("nodeSeconds");
    drop(server);

    let server = Server::start_at(&data, retention);
    let started = std::time::Instant::now();
    while server.get(&ended).0 != 404 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never compacted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.get(&format!("{ended}/events")).0, 404);
    let (code, listed) = server.get(&format!("{}/runs", program("a")));
    assert_eq!(code, 200);
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    assert_eq!(
        server.get(&live).1["status"],
        "RUNNING",
        "a live run is kept"
    );
    // The audit log of changes is kept as long: the ended run's start goes too.
    let id = ended.rsplit('/').next().expect("run id").to_string();
    let started = std::time::Instant::now();
    loop {
        let (code, audit) = server.get("/v3/audit?namespace=default&limit=1000");
        assert_eq!(code, 200, "{audit}");
        let entries = audit.as_array().expect("audit");
        if !entries.iter().any(|e| e["target"] == id.as_str()) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{audit}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = server.get("/v3/namespaces/default/profiles/p/usage").1;
    assert_eq!(after["runs"]["COMPLETED"], 1, "{after}");
    assert_eq!(after["compactedRuns"], 1, "{after}");
    assert!(
        after["nodeSeconds"].as_u64().expect("nodeSeconds") >= node_seconds,
        "{after} lost node-seconds of {before}"
    );
}
