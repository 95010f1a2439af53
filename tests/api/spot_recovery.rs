//! Spot nodes taken back, at the worst moments: a SIGKILL of the server while a reclaimed node
//! is being made anew, and a reclaimed master, whose program ends as with a lost server and
//! runs again per the run's retry policy.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server};

/// The cloud takes back the live instance of `node`; answers its id.
fn reclaim(sim: &Path, run: &str, node: &str) -> String {
    let live = instances_of(sim, run, node)
        .into_iter()
        .rfind(|i| i["state"] == "running")
        .expect("a live instance");
    let id = live["id"].as_str().expect("id").to_string();
    assert!(
        ebb_sim::cloud::Cloud::reclaim(sim, &id).expect("reclaim"),
        "{live}"
    );
    id
}

/// Waits (up to 60 s) until `node` of `run` runs on an instance other than `old`.
fn wait_replaced(sim: &Path, run: &str, node: &str, old: &str) {
    let started = std::time::Instant::now();
    while !instances_of(sim, run, node)
        .iter()
        .any(|i| i["id"] != old && i["state"] == "running")
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{node} never replaced: {:?}",
            instances_of(sim, run, node)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_sigkill_while_a_reclaimed_node_is_made_anew_makes_nothing_twice() {
    for pause_ms in [0, 400] {
        let (dir, data, sim) = sim_scenario();
        let server = Server::start_at(&data, Options::default());
        sim_profile(
            &server,
            "spot",
            &sim,
            &[
                ("nodes", "3"),
                ("marketType", "spot"),
                ("createLatency", "800ms"),
            ],
            0,
            None,
        );
        let gate = dir.path().join("done");
        let ran = dir.path().join("ran");
        let run = gated_run(
            &server,
            "spot",
            &gate,
            &format!("echo ran >> '{}'", ran.display()),
        );
        let creates_before = call_counts(&sim).creates;
        let old = reclaim(&sim, &run, "worker-1");
        // The replacement's create is under way (its instance pending): kill the server.
        wait_for_calls(&sim, creates_before + 1, "replacement create", |c| {
            c["op"] == "create" && c["ok"] == true
        });
        std::thread::sleep(Duration::from_millis(pause_ms));
        server.kill();

        let server = Server::start_at(&data, Options::default());
        wait_replaced(&sim, &run, "worker-1", &old);
        std::fs::write(&gate, "").expect("gate");
        let done = wait_deprovisioned(&server, &run);
        assert_eq!(done["status"], "COMPLETED", "pause {pause_ms}: {done}");
        // worker-1: the reclaimed instance and one replacement, never two.
        let made = instances_of(&sim, &run, "worker-1");
        assert_eq!(made.len(), 2, "pause {pause_ms}: {made:?}");
        assert_eq!(instances_of(&sim, &run, "worker-2").len(), 1);
        assert_eq!(instances_of(&sim, &run, "master").len(), 1);
        for instance in instances(&sim) {
            assert_eq!(instance["state"], "terminated", "left behind: {instance}");
        }
        let ran = std::fs::read_to_string(&ran).expect("ran");
        assert_eq!(ran.lines().count(), 1, "the program ran once");
        let (_, events) = server.get(&format!("{run}/events"));
        assert_eq!(
            events
                .to_string()
                .matches("was reclaimed by the cloud")
                .count(),
            1,
            "pause {pause_ms}: {events}"
        );
    }
}

#[test]
fn a_reclaimed_master_ends_the_attempt_and_the_retry_runs_on_its_replacement() {
    let (dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    sim_profile(
        &server,
        "spot",
        &sim,
        &[
            ("nodes", "2"),
            ("marketType", "spot"),
            ("spotWorkersOnly", "false"),
            // The new master takes longer to make than the retry's backoff.
            ("createLatency", "2500ms"),
        ],
        0,
        None,
    );
    let attempts = dir.path().join("attempts");
    let seen = dir.path().join("cluster-2.json");
    // Attempt 1 runs until it is killed; attempt 2 keeps the cluster it saw and ends.
    let script = format!(
        "echo $EBB_RUN_ATTEMPT >> {}; [ \"$EBB_RUN_ATTEMPT\" -ge 2 ] || exec sleep 600; \
         cp \"$EBB_CLUSTER_FILE\" {}",
        attempts.display(),
        seen.display()
    );
    deploy(
        &server,
        "a",
        &script,
        json!({"retry": {"maxAttempts": 2, "backoff": "1s"}}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "spot"}));
    wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    let master = instances_of(&sim, &run, "master");
    assert_eq!(master[0]["market"], "spot", "{master:?}");
    let old = reclaim(&sim, &run, "master");

    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    let first = &done["attempts"][0];
    assert!(
        first["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("reclaimed the master")),
        "{done}"
    );
    let tried = std::fs::read_to_string(&attempts).expect("attempts");
    assert_eq!(tried.lines().collect::<Vec<_>>(), ["1", "2"]);
    // The master was made anew, once; nothing is left.
    let made = instances_of(&sim, &run, "master");
    assert_eq!(made.len(), 2, "{made:?}");
    let new = made.iter().find(|i| i["id"] != old.as_str()).expect("new");
    // Attempt 2 ran once the master was made anew, and saw the new one.
    let cluster: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&seen).expect("cluster-2.json"))
            .expect("cluster file");
    let text = cluster.to_string();
    assert!(
        text.contains(new["address"].as_str().expect("address")),
        "{text} does not name {new}"
    );
    for instance in instances(&sim) {
        assert_eq!(instance["state"], "terminated", "left behind: {instance}");
    }
}

#[test]
fn spot_nodes_the_cloud_takes_back_at_its_own_pace_are_made_anew_until_the_run_ends() {
    let (dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    // About one reclaim every 4 s for each spot worker.
    sim_profile(
        &server,
        "churn",
        &sim,
        &[
            ("nodes", "4"),
            ("marketType", "spot"),
            ("spotReclaimRate", "900"),
        ],
        0,
        None,
    );
    let gate = dir.path().join("done");
    let run = gated_run(&server, "churn", &gate, "");
    let started = std::time::Instant::now();
    let healed = loop {
        let (_, events) = server.get(&format!("{run}/events"));
        let text = events.to_string();
        let reclaimed = text.matches("was reclaimed by the cloud").count();
        let replaced = operations(&server, &run)
            .iter()
            .filter(|o| o["operation"] == "replace-node" && o["status"] == "SUCCEEDED")
            .count();
        if reclaimed >= 2 && replaced >= 2 {
            break replaced;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{reclaimed} reclaims, {replaced} replaced: {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    std::fs::write(&gate, "").expect("gate");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert!(healed >= 2);
    // The master stayed on-demand and was made once; every instance is gone.
    assert_eq!(instances_of(&sim, &run, "master").len(), 1);
    for instance in instances(&sim) {
        assert_eq!(instance["state"], "terminated", "left behind: {instance}");
    }
}
