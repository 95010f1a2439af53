//! Program retries: a failed program runs again on the same cluster under its program's (or
//! profile's) `retry` policy, each attempt with `EBB_RUN_ATTEMPT`; across a SIGKILL between
//! attempts; and a program lost with its server, launched again by the run's new owner.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server, assert_error};

const LONG: Duration = Duration::from_secs(60);

/// The lines the program appended to `marker`: `<run id> <attempt>`.
fn attempts_made(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn creates(sim: &Path) -> usize {
    calls(sim)
        .iter()
        .filter(|c| c["op"] == "create" && c["ok"] == true)
        .count()
}

/// A program that records its attempt, then runs `then`.
fn script(marker: &Path, then: &str) -> String {
    format!(
        "echo \"$EBB_RUN_ID $EBB_RUN_ATTEMPT\" >> '{}'; {then}",
        marker.display()
    )
}

#[test]
fn a_program_failing_twice_then_succeeding_completes_on_one_cluster_in_three_attempts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("attempts");
    sim_profile(&server, "p", &sim, &[("nodes", "2")], 0, None);
    deploy(
        &server,
        "a",
        &script(
            &marker,
            "echo attempt $EBB_RUN_ATTEMPT; [ \"$EBB_RUN_ATTEMPT\" -ge 3 ]",
        ),
        json!({"retry": {"maxAttempts": 3, "backoff": "1s"}}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["attempt"], 3, "{done}");
    let tried = done["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(tried.len(), 2, "{done}");
    for (i, a) in tried.iter().enumerate() {
        assert_eq!(a["attempt"], i + 1, "{a}");
        assert_eq!(a["exit"]["code"], 1, "{a}");
        assert_eq!(a["failure"]["kind"], "program", "{a}");
    }
    let id = run.rsplit('/').next().expect("id");
    assert_eq!(
        attempts_made(&marker),
        [1, 2, 3].map(|n| format!("{id} {n}")),
        "each attempt once, numbered"
    );
    // One cluster: its two nodes made once.
    assert_eq!(creates(&sim), 2);
    assert_clean(&sim, &[id], 2);
    let events = server.get(&format!("{run}/events")).1.to_string();
    assert!(events.contains("attempt 1 of 3 failed"), "{events}");
    assert!(events.contains("launching attempt 3 of 3"), "{events}");
    // The output is the attempt's own.
    let logs = server.get(&format!("{run}/logs")).1;
    assert!(
        logs["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("attempt 3") && !s.contains("attempt 1")),
        "{logs}"
    );
    // An earlier attempt's output is kept, and read by its number.
    let first = server.get(&format!("{run}/logs?attempt=1")).1;
    assert!(
        first["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("attempt 1") && !s.contains("attempt 3")),
        "{first}"
    );
    assert_error(server.get(&format!("{run}/logs?attempt=4")), 400, "attempt");
}

#[test]
fn only_the_named_exit_codes_are_tried_again_and_a_bad_policy_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("attempts");
    sim_profile(&server, "p", &sim, &[("nodes", "1")], 0, None);
    for (bad, field) in [
        (json!({"maxAttempts": 0}), "programs[0].retry.maxAttempts"),
        (
            json!({"maxAttempts": 2, "onExitCodes": [0]}),
            "programs[0].retry.onExitCodes",
        ),
        (
            json!({"maxAttempts": 2, "backoff": "2h"}),
            "programs[0].retry.backoff",
        ),
    ] {
        let (code, body) = server.put(
            "/v3/namespaces/default/apps/bad",
            json!({"programs": [{"type": "workflows", "name": "p", "command": ["true"], "retry": bad}]}),
        );
        assert_error((code, body), 400, field);
    }
    // The profile's policy applies when the program has none; the program's comes first.
    let mut profile = crate::support::profiles::profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", "1", false),
        ],
    );
    profile["retry"] = json!({"maxAttempts": 3, "onExitCodes": [75]});
    crate::support::profiles::put_profile_body(&server, "r", profile);
    deploy(&server, "one", &script(&marker, "exit 1"), json!({}));
    deploy(&server, "tmp", &script(&marker, "exit 75"), json!({}));
    let one = start(&server, "one", json!({"system.profile.name": "r"}));
    let tmp = start(&server, "tmp", json!({"system.profile.name": "r"}));
    let one = wait_deprovisioned(&server, &one);
    assert_eq!(one["status"], "FAILED", "{one}");
    assert_eq!(one["attempt"], 1, "exit 1 is not among the codes: {one}");
    let tmp = wait_deprovisioned(&server, &tmp);
    assert_eq!(tmp["status"], "FAILED", "{tmp}");
    assert_eq!(
        tmp["attempt"], 3,
        "75 is tried until the attempts run out: {tmp}"
    );
    assert_eq!(tmp["exit"]["code"], 75, "{tmp}");
}

#[test]
fn a_run_stopped_between_attempts_ends_killed_and_is_not_tried_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("attempts");
    sim_profile(&server, "p", &sim, &[("nodes", "1")], 0, None);
    deploy(
        &server,
        "a",
        &script(&marker, "exit 1"),
        json!({"retry": {"maxAttempts": 5, "backoff": "30s"}}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    wait_until(&server, &run, LONG, |r| r["relaunchAt"].is_u64());
    let (code, body) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200, "{body}");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "KILLED", "{done}");
    assert_eq!(attempts_made(&marker).len(), 1);
}

#[test]
fn a_server_killed_between_attempts_launches_the_next_once_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("attempts");
    let server = Server::start_at(&data, Options::default());
    sim_profile(&server, "p", &sim, &[("nodes", "1")], 0, None);
    deploy(
        &server,
        "a",
        &script(&marker, "[ \"$EBB_RUN_ATTEMPT\" -ge 2 ]"),
        json!({"retry": {"maxAttempts": 3, "backoff": "3s"}}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    let waiting = wait_until(&server, &run, LONG, |r| r["relaunchAt"].is_u64());
    assert_eq!(waiting["status"], "RUNNING", "{waiting}");
    server.kill();
    let server = Server::start_at(&data, Options::default());
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    let id = run.rsplit('/').next().expect("id");
    assert_eq!(
        attempts_made(&marker),
        [format!("{id} 1"), format!("{id} 2")]
    );
    assert_eq!(creates(&sim), 1);
    assert_clean(&sim, &[id], 1);
}

/// The issue-16 case with a retry policy: a program on the host of a server that dies is
/// lost with it; its run's new owner launches it again on the surviving cluster, and the run
/// completes.
#[test]
fn a_program_lost_with_its_server_runs_again_on_the_new_owner() {
    use crate::support::etcd::Cluster;
    use crate::support::installation::Installation;
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("attempts");
    let install = Installation::new(
        &cluster,
        dir.path(),
        Duration::from_secs(3),
        "/ebb-test/lost-retried",
    );
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let _s2 = install.server("s2");
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    // The first attempt outlives its server; the second ends at once.
    deploy(
        &s0,
        "long",
        &script(&marker, "[ \"$EBB_RUN_ATTEMPT\" -ge 2 ] || sleep 30"),
        json!({"retry": {"maxAttempts": 2}}),
    );
    let run = start(&s0, "long", json!({"system.profile.name": "p"}));
    wait_until(&s1, &run, LONG, |r| r["status"] == "RUNNING");
    s0.kill();
    let done = wait_deprovisioned(&s1, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    let lost: &Value = &done["attempts"][0];
    assert_eq!(lost["failure"]["kind"], "server-lost", "{done}");
    let id = run.rsplit('/').next().expect("id");
    assert_eq!(
        attempts_made(&marker),
        [format!("{id} 1"), format!("{id} 2")]
    );
    assert_eq!(creates(&sim), 1, "the cluster survived: no new one");
    assert_clean(&sim, &[id], 1);
}
