//! Spot and economical calls on the sim cloud.
//!
//! (a) Reclaims: a cluster of `EBB_BENCH_SPOT_NODES` nodes (default 100) on
//! `spot-with-fallback`, its master on-demand, running a program; while it runs,
//! `EBB_BENCH_RECLAIM` percent of the workers (default 20) are reclaimed by the cloud, one
//! every `EBB_BENCH_RECLAIM_EVERY` ms (default 3,000: about a minute for 19 reclaims). For each: the time from the reclaim until its replacement runs (p50,
//! p99), and the cloud calls the replacements cost per replaced node; then node-hours on spot
//! and on-demand (from the sim's instances).
//!
//! (b) Throttled create and delete: `EBB_BENCH_NODES` nodes (default 1,000) with
//! `createLatency` `EBB_BENCH_CREATE` seconds (default 60) on an account with EC2's request
//! buckets (`throttle: ec2`): cloud calls per node (creates, deletes, lookups, describes,
//! finds), the calls the cloud throttled, and whether any throttling reached the run.
//!
//! `cargo bench --bench capacity`; `EBB_BENCH_DIR` picks the data dir's disk. To measure a
//! build from before the shared lookups side by side: `EBB_BENCH_BIN=<its ebb>
//! EBB_BENCH_PARTS=throttled EBB_BENCH_THROTTLE=none` (a build without spot or the sim's
//! `throttle` knows neither).

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::bench::{env_usize, other_build, percentile};
use support::profiles::sim_profile;
use support::runs::{call_counts, calls, deploy, instances, wait_deprovisioned, wait_until};
use support::server::{Options, Server};

fn start(server: &Server, profile: &str) -> String {
    let program = "/v3/namespaces/default/apps/bench/workflows/p";
    let (code, body) = server.post_json(
        &format!("{program}/start"),
        json!({"system.profile.name": profile}),
    );
    assert_eq!(code, 200, "{body}");
    format!("{program}/runs/{}", body["runId"].as_str().expect("runId"))
}

/// The live instance of `node` of `run`, if any.
fn live_instance(sim: &Path, run: &str, node: &str) -> Option<Value> {
    let id = run.rsplit('/').next().expect("id");
    instances(sim).into_iter().find(|i| {
        i["tags"]["ebb:run"] == id && i["tags"]["ebb:node"] == node && i["state"] == "running"
    })
}

/// Node-seconds of the sim's instances on `market`.
fn node_seconds(sim: &Path, market: &str) -> f64 {
    instances(sim)
        .iter()
        .filter(|i| i["market"] == market)
        .map(|i| {
            let from = i["readyAt"].as_f64().unwrap_or_default();
            let to = i["goneAt"].as_f64().unwrap_or(from);
            (to - from).max(0.0)
        })
        .sum()
}

fn reclaims(server: &Server, dir: &Path) {
    let nodes = env_usize("EBB_BENCH_SPOT_NODES", 100);
    let share = env_usize("EBB_BENCH_RECLAIM", 20);
    let every = Duration::from_millis(env_usize("EBB_BENCH_RECLAIM_EVERY", 3000) as u64);
    let sim = dir.join("sim-spot");
    std::fs::create_dir_all(&sim).expect("sim");
    let n = nodes.to_string();
    sim_profile(
        server,
        "spot",
        &sim,
        &[("nodes", &n), ("marketType", "spot-with-fallback")],
        0,
        None,
    );
    let run = start(server, "spot");
    wait_until(server, &run, Duration::from_secs(600), |r| {
        r["status"] == "RUNNING"
    });
    let before = calls(&sim).len();
    let victims: Vec<String> = (1..nodes)
        .take((nodes - 1) * share / 100)
        .map(|i| format!("worker-{i}"))
        .collect();
    let mut healed = Vec::new();
    for node in &victims {
        let instance = live_instance(&sim, &run, node).expect("a live worker");
        let id = instance["id"].as_str().expect("id").to_string();
        let reclaimed = Instant::now();
        assert!(ebb_sim::cloud::Cloud::reclaim(&sim, &id).expect("reclaim"));
        loop {
            if let Some(new) = live_instance(&sim, &run, node)
                && new["id"] != id.as_str()
            {
                healed.push(reclaimed.elapsed());
                break;
            }
            assert!(
                reclaimed.elapsed() < Duration::from_secs(120),
                "{node} never replaced"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(every.saturating_sub(reclaimed.elapsed()));
    }
    let spent = calls(&sim).len() - before;
    std::fs::write(dir.join("done"), "").expect("done");
    let done = wait_deprovisioned(server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    healed.sort();
    println!(
        "reclaims: {nodes} nodes, {} reclaimed while the program ran: whole again p50 {:.2} s, p99 {:.2} s; {:.1} cloud calls per replaced node (the reclaim watch's lookups included)",
        victims.len(),
        percentile(&healed, 0.50).as_secs_f64(),
        percentile(&healed, 0.99).as_secs_f64(),
        spent as f64 / victims.len().max(1) as f64,
    );
    let (spot, on_demand) = (node_seconds(&sim, "spot"), node_seconds(&sim, "on-demand"));
    println!(
        "reclaims: node-hours spot {:.2}, on-demand {:.2}",
        spot / 3600.0,
        on_demand / 3600.0
    );
}

fn throttled(server: &Server, dir: &Path) {
    let nodes = env_usize("EBB_BENCH_NODES", 1000);
    let latency = format!("{}s", env_usize("EBB_BENCH_CREATE", 60));
    let throttle = std::env::var("EBB_BENCH_THROTTLE").unwrap_or_else(|_| "ec2".into());
    let sim = dir.join("sim-throttled");
    std::fs::create_dir_all(&sim).expect("sim");
    let n = nodes.to_string();
    sim_profile(
        server,
        "throttled",
        &sim,
        &[
            ("nodes", n.as_str()),
            ("createLatency", latency.as_str()),
            ("deleteLatency", "5s"),
            ("throttle", throttle.as_str()),
        ]
        .into_iter()
        .filter(|(k, v)| *k != "throttle" || *v != "none")
        .collect::<Vec<_>>(),
        0,
        None,
    );
    let began = Instant::now();
    let run = start(server, "throttled");
    let done = wait_until(server, &run, Duration::from_secs(1800), |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    });
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let counts = call_counts(&sim);
    let throttled = counts.throttled;
    let (_, events) = server.get(&format!("{run}/events"));
    let reached = events.to_string().contains("RequestLimitExceeded");
    let per = |k: usize| k as f64 / nodes as f64;
    println!(
        "throttled: {nodes} nodes, createLatency {latency}, throttle {throttle}: create and delete in {:.0} s; per node {:.2} creates, {:.2} deletes, {:.3} lookups, {:.2} describes, {:.2} finds; {throttled} calls throttled by the cloud; throttling reached the run: {reached}",
        began.elapsed().as_secs_f64(),
        per(counts.creates),
        per(counts.deletes),
        per(counts.lookups),
        per(counts.describes),
        per(counts.finds),
    );
}

fn main() {
    let base = std::env::var_os("EBB_BENCH_DIR").map(std::path::PathBuf::from);
    let dir = match &base {
        Some(b) => tempfile::tempdir_in(b),
        None => tempfile::tempdir(),
    }
    .expect("tempdir");
    let options = Options {
        binary: other_build(),
        ..Options::default()
    };
    let parts = std::env::var("EBB_BENCH_PARTS").unwrap_or_else(|_| "reclaims,throttled".into());
    let server = Server::start_at(&dir.path().join("data"), options);
    if parts.contains("reclaims") {
        let done = dir.path().join("done");
        let script = format!("while [ ! -e {} ]; do sleep 0.2; done", done.display());
        deploy(&server, "bench", &script, json!({}));
        reclaims(&server, dir.path());
    }
    if parts.contains("throttled") {
        deploy(&server, "bench", "true", json!({}));
        throttled(&server, dir.path());
    }
}
