//! Cluster reuse: a run that COMPLETED on a profile with `clusterReuse` leaves its cluster
//! IDLE, and the next run that matches takes it over in one store write. A chain of runs makes
//! one cluster; what does not match makes its own; racing starts never share one; a SIGKILL
//! during a claim loses nothing; an idle cluster expires (also across a restart); a cluster
//! whose check fails is deprovisioned and the run makes its own.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::{profile_body, put_profile_body};
use crate::support::runs::*;
use crate::support::server::{Options, Server};

/// A sim profile `name` that reuses clusters (idle `idle`), `nodes` nodes (editable), its
/// cloud in `sim`.
fn reusing_sim(server: &Server, name: &str, sim: &Path, nodes: &str, idle: &str) {
    let mut body = profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", nodes, true),
            ("createLatency", "200ms", false),
        ],
    );
    body["clusterReuse"] = json!(true);
    body["reuseIdle"] = json!(idle);
    put_profile_body(server, name, body);
}

/// The instances the sim cloud made.
fn creates(sim: &Path) -> usize {
    instances(sim).len()
}

/// Waits until run `path`'s program ended and its cluster is `cluster`.
#[track_caller]
fn wait_cluster(server: &Server, path: &str, cluster: &str) -> Value {
    wait_until(server, path, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == cluster
    })
}

#[test]
fn a_chain_of_runs_makes_one_cluster() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    reusing_sim(&server, "warm", &sim, "2", "5m");
    deploy(&server, "a", "pwd; ls -A", json!({}));
    let args = json!({"system.profile.name": "warm"});

    let first = start(&server, "a", args.clone());
    let run = wait_cluster(&server, &first, "IDLE");
    assert_eq!(run["status"], "COMPLETED", "{run}");
    assert_eq!(run["cluster"]["origin"], "fresh", "{run}");
    assert!(run["cluster"]["expiresAt"].as_u64().is_some(), "{run}");
    let first_id = run["runid"].as_str().expect("id").to_string();
    assert_eq!(creates(&sim), 2);

    let mut previous = first.clone();
    for _ in 0..3 {
        let next = start(&server, "a", args.clone());
        let run = wait_cluster(&server, &next, "IDLE");
        assert_eq!(run["status"], "COMPLETED", "{run}");
        assert_eq!(run["cluster"]["origin"], "reused", "{run}");
        assert_eq!(run["cluster"]["id"], first_id.as_str(), "{run}");
        let from = run["cluster"]["reusedFrom"]["from"].as_str().expect("from");
        assert!(previous.ends_with(from), "{run}");
        assert_eq!(run["cluster"]["reusedFrom"]["ready"], true, "{run}");
        assert_eq!(
            run["cluster"]["nodes"].as_array().map(Vec::len),
            Some(2),
            "{run}"
        );
        let left = wait_cluster(&server, &previous, "REUSED");
        let by = left["cluster"]["reusedBy"].as_str().expect("reusedBy");
        assert!(next.ends_with(by), "{left}");
        assert!(
            left["cluster"]["nodes"]
                .as_array()
                .expect("nodes")
                .is_empty()
        );
        // Its program saw a working directory of its own, empty.
        let (code, logs) = server.get(&format!("{next}/logs"));
        assert_eq!(code, 200, "{logs}");
        let out = logs.to_string();
        assert!(
            out.contains(by),
            "the program worked in its own directory: {out}"
        );
        previous = next;
    }
    assert_eq!(creates(&sim), 2, "one cluster for the whole chain");
    // The IDLE cluster holds its nodes: the gauges and the overview count it, as idle.
    let text = crate::metrics::scrape(&server);
    let idle = ["profile=\"USER:warm\"", "state=\"idle\""];
    assert_eq!(
        crate::metrics::total(&text, "ebb_live_clusters", &idle),
        1.0,
        "{text}"
    );
    assert_eq!(
        crate::metrics::total(&text, "ebb_live_nodes", &idle),
        2.0,
        "{text}"
    );
    let (code, page) = crate::ui::ui_get(&server, "/ui");
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("<div class=\"n\">1</div><div>clusters now</div>")
            && page.contains("<div class=\"n\">2</div><div>nodes now</div>")
            && page.contains("<td data-label=\"State\">idle</td>"),
        "{page}"
    );

    // Torn down by hand, the cluster is deleted once.
    let (code, body) = server.post(&format!("{previous}/deprovision"));
    assert_eq!(code, 200, "{body}");
    wait_deprovisioned(&server, &previous);
    let deletes = calls(&sim).iter().filter(|c| c["op"] == "delete").count();
    assert_eq!(deletes, 2);
}

#[test]
fn what_does_not_match_makes_its_own_cluster() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    reusing_sim(&server, "warm", &sim, "1", "5m");
    deploy(&server, "a", "true", json!({}));
    let (code, body) = server.put("/v3/namespaces/other", json!({}));
    assert_eq!(code, 200, "{body}");
    let mut profile = profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", "1", true),
        ],
    );
    profile["clusterReuse"] = json!(true);
    let (code, body) = server.put("/v3/namespaces/other/profiles/warm", profile);
    assert_eq!(code, 200, "{body}");
    deploy_in(&server, "other", "a", "true", json!({}));

    let first = start(&server, "a", json!({"system.profile.name": "warm"}));
    wait_cluster(&server, &first, "IDLE");
    // Another size, another namespace: a cluster of their own.
    let bigger = start(
        &server,
        "a",
        json!({"system.profile.name": "warm", "system.profile.properties.nodes": "2"}),
    );
    let run = wait_cluster(&server, &bigger, "IDLE");
    assert_eq!(run["cluster"]["origin"], "fresh", "{run}");
    let elsewhere = start_in(
        &server,
        "other",
        "a",
        json!({"system.profile.name": "warm"}),
    );
    let run = wait_cluster(&server, &elsewhere, "IDLE");
    assert_eq!(run["cluster"]["origin"], "fresh", "{run}");
    let (_, first_run) = server.get(&first);
    assert_eq!(first_run["cluster"]["status"], "IDLE", "{first_run}");
    assert_eq!(creates(&sim), 4);
    // The same override value as the profile's own matches.
    let same = start(
        &server,
        "a",
        json!({"system.profile.name": "warm", "system.profile.properties.nodes": "1"}),
    );
    let run = wait_cluster(&server, &same, "IDLE");
    assert_eq!(run["cluster"]["origin"], "reused", "{run}");
    assert_eq!(creates(&sim), 4);
}

/// 20 starts, spread over `servers`, race for the IDLE clusters runs `first` left: each goes
/// to exactly one of them, and the others make their own.
fn race(servers: &[&Server], first: &[String], sim: &Path) {
    let args = json!({"system.profile.name": "warm"});
    let racers: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let (server, args) = (servers[i % servers.len()], args.clone());
                scope.spawn(move || start(server, "a", args))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("start"))
            .collect()
    });
    let mut reused = Vec::new();
    for run in &racers {
        let done = wait_cluster(servers[0], run, "IDLE");
        assert_eq!(done["status"], "COMPLETED", "{done}");
        if done["cluster"]["origin"] == "reused" {
            let from = done["cluster"]["reusedFrom"]["from"].as_str();
            reused.push(from.expect("from").to_string());
        }
    }
    reused.sort();
    let mut makers: Vec<String> = first
        .iter()
        .map(|p| p.rsplit('/').next().expect("id").to_string())
        .collect();
    makers.sort();
    assert_eq!(reused, makers, "each IDLE cluster went to exactly one run");
    assert_eq!(creates(sim), first.len() + 20 - makers.len());
}

#[test]
fn racing_starts_never_share_a_cluster() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    reusing_sim(&server, "warm", &sim, "1", "5m");
    // Every racer starts before any ends: none takes over another racer's cluster.
    deploy(&server, "a", "sleep 3", json!({}));
    let args = json!({"system.profile.name": "warm"});
    let first: Vec<String> = (0..3).map(|_| start(&server, "a", args.clone())).collect();
    for run in &first {
        wait_cluster(&server, run, "IDLE");
    }
    assert_eq!(creates(&sim), 3);

    race(&[&server], &first, &sim);
}

#[test]
fn an_idle_cluster_expires_also_across_a_restart() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    reusing_sim(&server, "warm", &sim, "1", "3s");
    deploy(&server, "a", "true", json!({}));
    let args = json!({"system.profile.name": "warm"});
    let run = start(&server, "a", args.clone());
    let idle = wait_cluster(&server, &run, "IDLE");
    let expires = idle["cluster"]["expiresAt"].as_u64().expect("expiresAt");
    let end = idle["end"].as_u64().expect("end");
    assert!((3..=4).contains(&(expires - end)), "{idle}");
    let gone = wait_deprovisioned(&server, &run);
    let at = gone["cluster"]["end"].as_u64().expect("end");
    assert!(at >= expires && at <= expires + 2, "{gone}");
    // What the idle time cost is its own figure in the profile's usage.
    let (code, usage) = server.get("/v3/namespaces/default/profiles/warm/usage");
    assert_eq!(code, 200, "{usage}");
    let idle = usage["idleNodeSeconds"].as_u64().expect("idleNodeSeconds");
    assert!((3..=4).contains(&idle), "{usage}");
    assert!(
        usage["nodeSeconds"].as_u64().expect("nodeSeconds") >= idle,
        "{usage}"
    );

    // Kept across a SIGKILL: the restarted server expires it on time.
    let second = start(&server, "a", args);
    let idle = wait_cluster(&server, &second, "IDLE");
    assert_eq!(idle["cluster"]["origin"], "fresh", "{idle}");
    let expires = idle["cluster"]["expiresAt"].as_u64().expect("expiresAt");
    server.kill();
    let server = Server::start_at(&data, Options::default());
    let gone = wait_deprovisioned(&server, &second);
    let at = gone["cluster"]["end"].as_u64().expect("end");
    assert!(at >= expires && at <= expires + 2, "{gone}");
    let deletes = calls(&sim).iter().filter(|c| c["op"] == "delete").count();
    assert_eq!(deletes, 2);
}

#[test]
fn a_sigkill_during_a_claim_leaves_the_cluster_with_one_run() {
    for pause_ms in [0, 20, 60, 150] {
        let (_dir, data, sim) = sim_scenario();
        let server = Server::start_at(&data, Options::default());
        reusing_sim(&server, "warm", &sim, "2", "5m");
        deploy(&server, "a", "true", json!({}));
        let args = json!({"system.profile.name": "warm"});
        let left = start(&server, "a", args.clone());
        wait_cluster(&server, &left, "IDLE");
        let taker = start(&server, "a", args);
        std::thread::sleep(Duration::from_millis(pause_ms));
        server.kill();
        let server = Server::start_at(&data, Options::default());
        let done = wait_cluster(&server, &taker, "IDLE");
        assert_eq!(done["status"], "COMPLETED", "{done}");
        let (_, before) = server.get(&left);
        match done["cluster"]["origin"].as_str() {
            Some("reused") => {
                assert_eq!(before["cluster"]["status"], "REUSED", "{before}");
                assert_eq!(creates(&sim), 2, "pause {pause_ms} ms");
            }
            _ => {
                assert_eq!(before["cluster"]["status"], "IDLE", "{before}");
                assert_eq!(creates(&sim), 4, "pause {pause_ms} ms");
            }
        }
        // No instance was made twice for one node.
        let mut made: Vec<String> = instances(&sim)
            .iter()
            .map(|i| i["tags"].to_string())
            .collect();
        let all = made.len();
        made.sort();
        made.dedup();
        assert_eq!(made.len(), all, "pause {pause_ms} ms");
    }
}

/// A `local` template whose one service's check fails once `broken` exists in the service's
/// own directory (`state`, which its install makes: what a program writes beside it in the
/// node's directory is removed before the next run, what it writes in it stays).
fn breakable(server: &Server) {
    let template = json!({
        "services": {"db": {
            "actions": {
                "install": {"type": "shell", "script": "mkdir -p state"},
                "check": {"type": "shell", "script": "[ ! -f state/broken ]"}
            },
            "checkInterval": "1h"
        }},
        "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
        "defaults": {"services": ["db"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/breakable", template);
    assert_eq!(code, 200, "{body}");
    let mut profile = profile_body(
        "local",
        &[("nodes", "1", false), ("template", "breakable", false)],
    );
    profile["clusterReuse"] = json!(true);
    let (code, body) = server.put("/v3/namespaces/default/profiles/breakable", profile);
    assert_eq!(code, 200, "{body}");
}

#[test]
fn a_cluster_whose_check_fails_is_replaced_and_the_run_completes() {
    let (_dir, data, _sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    breakable(&server);
    // The first run leaves a file in its own directory and breaks the service; the next
    // finds its own directory empty.
    deploy(
        &server,
        "a",
        "ls -A; touch left-behind; case \"$EBB_ARGS\" in *BREAK*) touch \"$EBB_WORK_DIR/state/broken\";; esac; true",
        json!({}),
    );
    let args = json!({"system.profile.name": "breakable"});
    let first = start(&server, "a", args.clone());
    let run = wait_cluster(&server, &first, "IDLE");
    let maker = run["runid"].as_str().expect("id").to_string();
    let node_dir = run["cluster"]["nodes"][0]["properties"]["workDir"]
        .as_str()
        .expect("workDir")
        .to_string();
    assert!(
        Path::new(&node_dir)
            .join("runs")
            .join(&maker)
            .join("left-behind")
            .exists()
    );

    let second = start(
        &server,
        "a",
        json!({"system.profile.name": "breakable", "BREAK": "1"}),
    );
    let run = wait_cluster(&server, &second, "IDLE");
    assert_eq!(run["cluster"]["origin"], "reused", "{run}");
    let (_, logs) = server.get(&format!("{second}/logs"));
    assert!(
        !logs.to_string().contains("left-behind"),
        "a clean directory: {logs}"
    );
    assert!(
        !Path::new(&node_dir).join("runs").join(&maker).exists(),
        "the last run's directory is gone"
    );

    let third = start(&server, "a", args);
    let run = wait_cluster(&server, &third, "IDLE");
    assert_eq!(run["status"], "COMPLETED", "{run}");
    assert_eq!(run["cluster"]["origin"], "fresh", "{run}");
    let (_, events) = server.get(&format!("{third}/events"));
    assert!(events.to_string().contains("cannot be used"), "{events}");
    assert!(
        !Path::new(&node_dir).exists(),
        "the broken cluster was deprovisioned"
    );
}

/// 20 starts spread over three servers on etcd race for 3 IDLE clusters: 3 take one over
/// (each a different one), 17 make their own.
#[test]
fn racing_starts_on_three_servers_never_share_a_cluster() {
    let cluster = crate::support::etcd::Cluster::start(1);
    let (dir, _data, sim) = sim_scenario();
    let install = crate::support::installation::Installation::new(
        &cluster,
        dir.path(),
        Duration::from_secs(3),
        "/ebb-test/reuse-race",
    );
    let servers = [
        install.server("s0"),
        install.server("s1"),
        install.server("s2"),
    ];
    reusing_sim(&servers[0], "warm", &sim, "1", "5m");
    deploy(&servers[0], "a", "sleep 3", json!({}));
    let args = json!({"system.profile.name": "warm"});
    let first: Vec<String> = servers
        .iter()
        .map(|s| start(s, "a", args.clone()))
        .collect();
    for (s, run) in servers.iter().zip(&first) {
        wait_cluster(s, run, "IDLE");
    }
    race(&servers.iter().collect::<Vec<_>>(), &first, &sim);
}

/// An IDLE cluster's run holds no slot of a program's `maxConcurrentRuns` or the namespace's
/// `maxLiveRuns`, and the nodes of the cluster a run takes over count once against
/// `maxLiveNodes`: a chain of runs on a namespace with room for one run of two nodes reuses
/// its cluster, where a run that needs its own is refused.
#[test]
fn the_limits_count_an_idle_cluster_once() {
    let (_dir, data, sim) = sim_scenario();
    let server = Server::start_at(&data, Options::default());
    let (code, body) = server.put(
        "/v3/namespaces/default",
        json!({"maxLiveRuns": 1, "maxLiveNodes": 2}),
    );
    assert_eq!(code, 200, "{body}");
    reusing_sim(&server, "warm", &sim, "2", "5m");
    deploy(&server, "a", "true", json!({"maxConcurrentRuns": 1}));
    let args = json!({"system.profile.name": "warm"});
    let mut previous = start(&server, "a", args.clone());
    wait_cluster(&server, &previous, "IDLE");
    for _ in 0..3 {
        let next = start(&server, "a", args.clone());
        let run = wait_cluster(&server, &next, "IDLE");
        assert_eq!(run["cluster"]["origin"], "reused", "{run}");
        wait_cluster(&server, &previous, "REUSED");
        previous = next;
    }
    assert_eq!(creates(&sim), 2);
    // A run that needs a cluster of its own (another size) finds the nodes taken.
    let (code, body) = server.post_json(
        &format!("{}/start", program("a")),
        json!({"system.profile.name": "warm", "system.profile.properties.nodes": "1"}),
    );
    assert_eq!(code, 409, "{body}");
    assert!(body.to_string().contains("maxLiveNodes"), "{body}");
}
