//! The janitor on the sim cloud: a store lost in a crash leaves nothing invisible, another
//! server's resources are left alone, a dry run only reports, and the schedule acts.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server, run_ebb};

fn named(name: &str) -> Options {
    Options {
        args: vec!["--server-name".into(), name.into()],
        ..Options::default()
    }
}

fn running(server: &Server, run: &str) {
    wait_until(server, run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
}

/// The sim instances of run `path`, by whether the janitor (or anyone) deleted them.
fn deletes(sim: &std::path::Path, path: &str) -> Vec<u64> {
    let id = path.rsplit('/').next().expect("run id");
    instances(sim)
        .iter()
        .filter(|i| i["tags"]["ebb:run"] == id)
        .map(|i| i["deleteCalls"].as_u64().unwrap_or(0))
        .collect()
}

fn orphans(sweep: &Value) -> Vec<Value> {
    sweep["orphans"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_lost_store_leaves_nothing_invisible_and_another_servers_resources_are_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");

    // Another ebb server shares the cloud account and holds a live cluster.
    let other = Server::start_at(&sub(&dir, "other"), named("other"));
    sim_profile(&other, "p", &sim, &[("nodes", "2")], 0, None);
    deploy(&other, "a", "sleep 60", json!({}));
    let theirs = start(&other, "a", json!({"system.profile.name": "p"}));
    running(&other, &theirs);

    // This server makes a cluster, then dies and its store is lost.
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    sim_profile(&server, "p", &sim, &[("nodes", "3")], 0, None);
    deploy(&server, "a", "sleep 60", json!({}));
    let lost = start(&server, "a", json!({"system.profile.name": "p"}));
    running(&server, &lost);
    server.kill();
    crate::support::server::lose_store(&data);

    // A new store with the same profile: its janitor finds the lost cluster.
    let server = Server::start_at(&data, Options::default());
    let (code, status) = server.get("/v3/janitor");
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["last"], Value::Null);
    assert_eq!(
        status["settings"],
        json!({"interval": 600, "delete": false})
    );
    sim_profile(&server, "p", &sim, &[("nodes", "3")], 0, None);

    let (code, sweep) = server.post("/v3/janitor/run?dryRun=true");
    assert_eq!(code, 200, "{sweep}");
    let found = orphans(&sweep);
    assert_eq!(
        found.len(),
        3,
        "the lost cluster, not the other server's: {sweep:#}"
    );
    for o in &found {
        assert_eq!(o["run"], lost.rsplit('/').next().expect("id"));
        assert_eq!(o["action"], "reported");
        assert!(
            o["reason"]
                .as_str()
                .is_some_and(|r| r.contains("not in the store")),
            "{o}"
        );
    }
    let accounts = sweep["accounts"].as_array().expect("accounts");
    let sim_account = accounts
        .iter()
        .find(|a| a["provisioner"] == "sim")
        .expect("the sim account was listed");
    assert_eq!(sim_account["listed"], 3, "{sweep:#}");
    assert_eq!(deletes(&sim, &lost), [0, 0, 0], "a dry run deletes nothing");

    // Acting, from the CLI.
    let token = server.token().expect("token");
    let (code, out, err) = run_ebb(
        &["--server", &server.url, "janitor", "run"],
        &[("EBB_TOKEN", token.as_str())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("deleted").count(), 3, "{out}");
    assert_eq!(deletes(&sim, &lost), [1, 1, 1]);
    assert_eq!(
        deletes(&sim, &theirs),
        [0, 0],
        "another server's cluster is left alone"
    );

    let (_, status) = server.get("/v3/janitor");
    assert_eq!(status["last"]["dryRun"], false, "{status:#}");
    assert_eq!(orphans(&status["last"]).len(), 3);
    let (_, again) = server.post("/v3/janitor/run?dryRun=true");
    assert!(orphans(&again).is_empty(), "{again:#}");

    let (code, body) = server.post("/v3/janitor/run?dryRun=maybe");
    assert_eq!(code, 400, "{body}");
    let (code, _) = other.post(&format!("{theirs}/stop"));
    assert_eq!(code, 200);
    wait_deprovisioned(&other, &theirs);
}

#[test]
fn a_scheduled_sweep_acts_on_its_own_and_leaves_live_runs_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    sim_profile(&server, "p", &sim, &[("nodes", "2")], 0, None);
    deploy(&server, "a", "sleep 60", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    running(&server, &run);
    let (_, sweep) = server.post("/v3/janitor/run?dryRun=true");
    assert!(orphans(&sweep).is_empty(), "a live run's nodes: {sweep:#}");
    assert_eq!(sweep["accounts"][0]["listed"], 2, "{sweep:#}");
    server.kill();
    crate::support::server::lose_store(&data);

    let server = Server::start_at(
        &data,
        Options {
            args: vec![
                "--janitor-interval".into(),
                "1s".into(),
                "--janitor-delete".into(),
            ],
            ..Options::default()
        },
    );
    let (_, status) = server.get("/v3/janitor");
    assert_eq!(status["settings"], json!({"interval": 1, "delete": true}));
    sim_profile(&server, "p", &sim, &[("nodes", "2")], 0, None);
    let started = std::time::Instant::now();
    let last = loop {
        let (_, status) = server.get("/v3/janitor");
        let last = status["last"].clone();
        if last["trigger"] == "schedule" && orphans(&last).len() == 2 {
            break last;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no scheduled sweep found the orphans: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        orphans(&last).iter().all(|o| o["action"] == "deleted"),
        "{last:#}"
    );
    assert_eq!(deletes(&sim, &run), [1, 1]);
}

/// A delete the cloud keeps refusing (retryably) ends: within its retry budget the node is
/// given up on and the cluster recorded ORPHANED, the run ends, and the janitor deletes the
/// instance once the cloud lets it.
#[test]
fn a_delete_that_keeps_failing_ends_orphaned_and_the_janitor_deletes_it_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    let stuck = [
        ("nodes", "1"),
        ("deleteErrorRate", "1"),
        ("retryBudget", "2s"),
    ];
    sim_profile(&server, "p", &sim, &stuck, 0, None);
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    let ended = wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "ORPHANED"
    });
    assert_eq!(ended["status"], "COMPLETED", "{ended}");
    let refused = calls(&sim)
        .iter()
        .filter(|c| c["op"] == "delete" && c["ok"] == false)
        .count();
    assert!(refused >= 2, "the delete was tried again: {refused}");
    // The cloud lets it go now: the janitor deletes what the run left.
    sim_profile(
        &server,
        "p",
        &sim,
        &[("nodes", "1"), ("retryBudget", "2s")],
        0,
        None,
    );
    let (code, sweep) = server.post("/v3/janitor/run");
    assert_eq!(code, 200, "{sweep}");
    assert_eq!(orphans(&sweep).len(), 1, "{sweep}");
    assert_eq!(deletes(&sim, &run), [1]);
}
