//! Capacity on the sim cloud: a zone without room sends nodes to the next zone and the run
//! completes; spot that is out falls back to on-demand; a create that ends with at least
//! `minNodes` goes on with fewer, and below it fails saying why, leaving nothing behind; a
//! SIGKILL of the server in the middle of a failover makes nothing twice.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server};

/// Sets what each zone of the sim cloud in `sim` has room for.
fn set_capacity(sim: &Path, zones: Value) {
    let body = serde_json::to_vec(&json!({ "zones": zones })).expect("json");
    let tmp = sim.join(".capacity.json.tmp");
    std::fs::write(&tmp, body).expect("write");
    std::fs::rename(tmp, sim.join("capacity.json")).expect("rename");
}

/// The instances of `sim`, as (node, zone, market).
fn placed(sim: &Path) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = instances(sim)
        .iter()
        .map(|i| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&i["tags"]["ebb:node"]),
                text(&i["zone"]),
                text(&i["market"]),
            )
        })
        .collect();
    out.sort();
    out
}

/// The creates the sim refused for want of room.
fn refused(sim: &Path) -> usize {
    calls(sim)
        .iter()
        .filter(|c| c["op"] == "create" && c["ok"] == false)
        .filter(|c| {
            c["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("InsufficientInstanceCapacity"))
        })
        .count()
}

#[test]
fn a_full_zone_sends_nodes_to_the_next_and_the_run_completes() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    set_capacity(&sim, json!({"sim-1a": {"onDemand": 1}}));
    sim_profile(
        &server,
        "zoned",
        &sim,
        &[("nodes", "3"), ("zones", "sim-1a, sim-1b")],
        0,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "zoned"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");

    let zones: Vec<String> = placed(&sim).into_iter().map(|(_, z, _)| z).collect();
    assert_eq!(
        zones.iter().filter(|z| *z == "sim-1a").count(),
        1,
        "{zones:?}"
    );
    assert_eq!(
        zones.iter().filter(|z| *z == "sim-1b").count(),
        2,
        "{zones:?}"
    );
    // A zone found full is skipped by the rest of the operation: at most the creates already
    // under way when it was found full asked it again.
    let refusals = refused(&sim);
    assert!((1..=2).contains(&refusals), "{refusals} refusals");
    let ops = operations(&server, &run);
    let create = ops
        .iter()
        .find(|o| o["operation"] == "create")
        .expect("create");
    let blocked = create["blocked"].as_array().expect("blocked list");
    assert_eq!(blocked.len(), 1, "{create}");
    assert_eq!(blocked[0]["zone"], "sim-1a", "{create}");
    assert_eq!(blocked[0]["market"], "on-demand", "{create}");
    let (_, events) = server.get(&format!("{run}/events"));
    assert!(
        events
            .to_string()
            .contains("no room in zone sim-1a, on-demand"),
        "{events}"
    );
    assert_clean(&sim, &[run.as_str()], 3);
}

#[test]
fn spot_with_fallback_buys_on_demand_where_spot_is_out_and_keeps_the_master_on_demand() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    set_capacity(&sim, json!({"sim-1a": {"spot": 1}}));
    sim_profile(
        &server,
        "cheap",
        &sim,
        &[("nodes", "3"), ("marketType", "spot-with-fallback")],
        0,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "cheap"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let markets = placed(&sim);
    assert_eq!(markets[0].0, "master");
    assert_eq!(markets[0].2, "on-demand", "the master stays on-demand");
    let spot = markets.iter().filter(|(_, _, m)| m == "spot").count();
    assert_eq!(
        spot, 1,
        "one worker on spot, the other fell back: {markets:?}"
    );
    assert_clean(&sim, &[run.as_str()], 3);

    // Spot without a fallback: a worker that finds no spot room fails the run, saying so.
    sim_profile(
        &server,
        "spot-only",
        &sim,
        &[
            ("nodes", "3"),
            ("marketType", "spot"),
            ("retryBudget", "1s"),
        ],
        0,
        None,
    );
    let run = start(&server, "a", json!({"system.profile.name": "spot-only"}));
    let failure = failed_and_torn_down(&server, &run);
    assert!(
        !failure.contains("on-demand"),
        "never bought on-demand: {failure}"
    );
    let workers_on_demand = placed(&sim)
        .iter()
        .filter(|(node, _, market)| node != "master" && market == "on-demand")
        .count();
    assert_eq!(
        workers_on_demand,
        1,
        "only the first run's fallback: {:?}",
        placed(&sim)
    );
    for instance in instances(&sim) {
        assert_eq!(instance["state"], "terminated", "left behind: {instance}");
    }
}

/// Waits for run `run` to fail for want of room, tears its cluster down if it was kept, and
/// answers its failure.
#[track_caller]
fn failed_and_torn_down(server: &Server, run: &str) -> String {
    let done = wait_until(server, run, Duration::from_secs(60), |r| {
        r["status"] == "FAILED"
    });
    let failure = done["failure"].to_string();
    assert!(failure.contains("no room"), "{failure}");
    let (code, body) = server.post(&format!("{run}/deprovision"));
    assert!(code == 200 || code == 409, "{code} {body}");
    wait_deprovisioned(server, run);
    failure
}

#[test]
fn a_create_with_at_least_min_nodes_goes_on_and_below_it_fails_leaving_nothing() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    set_capacity(&sim, json!({"sim-1a": {"onDemand": 3}}));
    sim_profile(
        &server,
        "elastic",
        &sim,
        &[("nodes", "5"), ("minNodes", "2"), ("retryBudget", "1s")],
        0,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "elastic"}));
    let done = wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "COMPLETED" || r["status"] == "FAILED"
    });
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let (_, events) = server.get(&format!("{run}/events"));
    let text = events.to_string();
    assert_eq!(text.matches("given up").count(), 2, "{text}");
    assert!(text.contains("goes on with"), "{text}");
    let ops = operations(&server, &run);
    let create = ops
        .iter()
        .find(|o| o["operation"] == "create")
        .expect("create");
    assert_eq!(create["status"], "SUCCEEDED", "{create}");
    assert_eq!(
        create["dropped"].as_array().map(Vec::len),
        Some(2),
        "{create}"
    );
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["cluster"]["numNodes"], 3, "{done}");
    let given_up = done["cluster"]["givenUp"].as_array().expect("givenUp");
    assert_eq!(given_up.len(), 2, "{done}");
    assert!(!given_up.contains(&json!("master")), "{done}");
    assert_clean(&sim, &[run.as_str()], 3);

    // Without minNodes every node must be made: the create fails, naming the lack of room,
    // and nothing is left behind.
    sim_profile(
        &server,
        "rigid",
        &sim,
        &[("nodes", "5"), ("retryBudget", "1s")],
        0,
        None,
    );
    let run = start(&server, "a", json!({"system.profile.name": "rigid"}));
    failed_and_torn_down(&server, &run);
    for instance in instances(&sim) {
        assert_eq!(instance["state"], "terminated", "left behind: {instance}");
    }
}

#[test]
fn a_sigkill_in_the_middle_of_a_failover_makes_nothing_twice() {
    for pause_ms in [0, 150, 400] {
        let (_dir, data, sim) = sim_scenario();
        let server = Server::start_at(&data, Options::default());
        set_capacity(
            &sim,
            json!({"sim-1a": {"onDemand": 0}, "sim-1b": {"onDemand": 0}}),
        );
        sim_profile(
            &server,
            "zoned",
            &sim,
            &[
                ("nodes", "3"),
                ("zones", "sim-1a sim-1b sim-1c"),
                ("createLatency", "300ms"),
            ],
            0,
            None,
        );
        deploy(&server, "a", "true", json!({}));
        let run = start(&server, "a", json!({"system.profile.name": "zoned"}));
        wait_for_calls(&sim, 1, "refused create", |c| {
            c["op"] == "create" && c["ok"] == false
        });
        std::thread::sleep(Duration::from_millis(pause_ms));
        server.kill();
        let server = Server::start_at(&data, Options::default());
        let done = wait_deprovisioned(&server, &run);
        assert_eq!(done["status"], "COMPLETED", "pause {pause_ms}: {done}");
        let zones: Vec<String> = placed(&sim).into_iter().map(|(_, z, _)| z).collect();
        assert_eq!(zones, ["sim-1c"; 3], "pause {pause_ms}");
        assert_clean(&sim, &[run.as_str()], 3);
    }
}

#[test]
fn bad_capacity_properties_are_refused_naming_the_property() {
    let (_dir, data, _sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    for (props, property) in [
        (json!([{"name": "zones", "value": "a/b"}]), "zones"),
        (
            json!([{"name": "nodes", "value": "3"}, {"name": "minNodes", "value": "4"}]),
            "minNodes",
        ),
        (
            json!([{"name": "maxSpotPrice", "value": "0.2"}]),
            "maxSpotPrice",
        ),
        (
            json!([{"name": "marketType", "value": "cheap"}]),
            "marketType",
        ),
    ] {
        let body = json!({"provisioner": {"name": "sim", "properties": props}});
        let (code, reply) = server.put("/v3/namespaces/default/profiles/bad", body);
        assert_eq!(code, 400, "{reply}");
        assert!(reply.to_string().contains(property), "{property}: {reply}");
    }
}

/// Reclaims `node`'s live instance as the cloud would, and waits until ebb made a new one
/// and it runs; answers the new one.
#[track_caller]
fn reclaim_and_wait(sim: &Path, run: &str, node: &str) -> Value {
    let before = instances_of(sim, run, node);
    let live = before.last().expect("an instance");
    let id = live["id"].as_str().expect("id");
    assert!(
        ebb_sim::cloud::Cloud::reclaim(sim, id).expect("reclaim"),
        "{live}"
    );
    let started = std::time::Instant::now();
    loop {
        let now = instances_of(sim, run, node);
        if now.len() > before.len() && now.last().is_some_and(|i| i["state"] == "running") {
            return now.last().cloned().expect("the new one");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never replaced: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reclaimed_spot_nodes_are_made_anew_while_the_program_runs_then_on_demand() {
    let (dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    sim_profile(
        &server,
        "spot",
        &sim,
        &[
            ("nodes", "3"),
            ("marketType", "spot-with-fallback"),
            ("spotRetries", "2"),
        ],
        0,
        None,
    );
    let done = dir.path().join("done");
    let ran = format!("echo ran >> '{}'", dir.path().join("ran").display());
    let run = gated_run(&server, "spot", &done, &ran);

    // Reclaimed once: made anew on spot. Reclaimed again (spotRetries 2): on-demand.
    let first = reclaim_and_wait(&sim, &run, "worker-1");
    assert_eq!(first["market"], "spot", "{first}");
    let second = reclaim_and_wait(&sim, &run, "worker-1");
    assert_eq!(second["market"], "on-demand", "{second}");
    let (_, events) = server.get(&format!("{run}/events"));
    assert_eq!(
        events
            .to_string()
            .matches("was reclaimed by the cloud")
            .count(),
        2,
        "{events}"
    );
    let replaced = operations(&server, &run)
        .into_iter()
        .filter(|o| o["operation"] == "replace-node" && o["status"] == "SUCCEEDED")
        .count();
    assert_eq!(replaced, 2);
    // The program went on undisturbed, and ran once.
    let (_, now) = server.get(&run);
    assert_eq!(now["status"], "RUNNING", "{now}");
    std::fs::write(&done, "").expect("done");
    let ended = wait_deprovisioned(&server, &run);
    assert_eq!(ended["status"], "COMPLETED", "{ended}");
    let ran = std::fs::read_to_string(dir.path().join("ran")).expect("ran");
    assert_eq!(ran.lines().count(), 1);
    // Nothing left behind, and no node made twice at once.
    for instance in instances(&sim) {
        assert_eq!(instance["state"], "terminated", "left behind: {instance}");
    }
    assert_eq!(instances_of(&sim, &run, "worker-1").len(), 3);
    assert_eq!(instances_of(&sim, &run, "worker-2").len(), 1);
}

#[test]
fn a_clusters_polls_share_lookups_and_throttling_is_waited_out() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    // Another client of the account spent its create bucket: the cloud refuses creates
    // until it refills (2 a second).
    std::fs::write(
        sim.join("throttle.json"),
        json!({"create": {"tokens": 0.0, "at": now_secs()}}).to_string(),
    )
    .expect("throttle.json");
    sim_profile(
        &server,
        "busy",
        &sim,
        &[
            ("nodes", "20"),
            ("createLatency", "2s"),
            ("throttle", "ec2"),
            // Well past createLatency: on a loaded machine a 2 s budget could run out while
            // a node boots, and the node would be made anew (correctly, but not this test's
            // subject).
            ("retryBudget", "6s"),
        ],
        0,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "busy"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let counts = call_counts(&sim);
    assert!(counts.throttled > 0, "the cloud never throttled");
    let (_, events) = server.get(&format!("{run}/events"));
    assert!(
        !events.to_string().contains("RequestLimitExceeded"),
        "throttling reached the run's history: {events}"
    );
    // The nodes' polls: no describe of its own, a few shared lookups for the whole cluster
    // (a list by the run's tag alone; a node's `find` names the node too).
    assert_eq!(counts.describes, 0);
    let lookups = counts.lookups;
    assert!(lookups <= 2 * 20, "{lookups} lookups for 20 nodes");
    assert_eq!(
        counts.finds, 0,
        "a throttled create made nothing to look for"
    );
    assert_clean(&sim, &[run.as_str()], 20);
}
