//! Cluster reuse: start → program RUNNING on the sim cloud with `createLatency` 30 s
//! (`EBB_BENCH_CREATE`), 2 nodes, for (a) runs that make their own cluster
//! (`EBB_BENCH_FRESH` runs, default 5, started together) and (b) a chain of runs on a profile
//! with `clusterReuse`, each started when the one before completed (`EBB_BENCH_CHAIN`, default
//! 50), so each takes over the cluster the one before left IDLE, and (c) a warm pool of 5
//! (`EBB_BENCH_POOL`) under a stream of 100 runs (`EBB_BENCH_STREAM`) from 5 clients, each
//! starting its next run when its last completed. Each latency is from just before the start
//! request to the run's `RUNNING` event (milliseconds, the server's clock, which is this
//! host's).
//!
//! `cargo bench --bench reuse`; `EBB_BENCH_DIR` picks the data dir's disk.

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use support::bench::{env_usize, percentile};
use support::profiles::{profile_body, put_profile_body};
use support::server::{Options, Server};

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Starts a run of program `p` on profile `profile`; its path and when it was asked for.
fn start(server: &Server, profile: &str) -> (String, f64) {
    let asked = now();
    let program = "/v3/namespaces/default/apps/bench/workflows/p";
    let (code, body) = server.post_json(
        &format!("{program}/start"),
        json!({"system.profile.name": profile}),
    );
    assert_eq!(code, 200, "{body}");
    let id = body["runId"].as_str().expect("runId");
    (format!("{program}/runs/{id}"), asked)
}

/// Waits until run `path`'s cluster is `cluster`, or REUSED (another run took it over as
/// soon as it was IDLE).
fn wait(server: &Server, path: &str, cluster: &str) -> Value {
    loop {
        let (code, run) = server.get(path);
        assert_eq!(code, 200, "{run}");
        if run["cluster"]["status"] == cluster || run["cluster"]["status"] == "REUSED" {
            return run;
        }
        assert!(run["status"] != "FAILED", "{run}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// From `asked` to the run's RUNNING event.
fn to_running(server: &Server, path: &str, asked: f64) -> Duration {
    let (code, events) = server.get(&format!("{path}/events"));
    assert_eq!(code, 200, "{events}");
    let running = events
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["message"] == "run RUNNING")
        .and_then(|e| e["time"].as_f64())
        .expect("a RUNNING event");
    Duration::from_secs_f64((running - asked).max(0.0))
}

fn report(what: &str, mut lat: Vec<Duration>) {
    lat.sort();
    println!(
        "{what}: {} runs, start → RUNNING p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        lat.len(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

fn main() {
    let create = std::env::var("EBB_BENCH_CREATE").unwrap_or_else(|_| "30s".into());
    let fresh_runs = env_usize("EBB_BENCH_FRESH", 5);
    let chain = env_usize("EBB_BENCH_CHAIN", 50);
    let base =
        std::env::var("EBB_BENCH_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").into());
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let sim = dir.path().join("sim");
    let options = Options {
        env: vec![("EBB_LOG".into(), "warn,ebb::server=info".into())],
        unchecked: true,
        ..Options::default()
    };
    let server = Server::start_at(&dir.path().join("data"), options);
    let sim = sim.to_str().expect("utf-8");
    let props = [
        ("nodes", "2", false),
        ("stateDir", sim, false),
        ("createLatency", create.as_str(), false),
    ];
    put_profile_body(&server, "fresh", profile_body("sim", &props));
    let mut warm = profile_body("sim", &props);
    warm["clusterReuse"] = json!(true);
    warm["reuseIdle"] = json!("10m");
    put_profile_body(&server, "warm", warm);
    let pool_size = env_usize("EBB_BENCH_POOL", 5);
    let mut pooled = profile_body("sim", &props);
    pooled["pool"] = json!({"min": pool_size, "max": pool_size, "idle": "10m"});
    put_profile_body(&server, "pooled", pooled);
    let (code, body) = server.put(
        "/v3/namespaces/default/apps/bench",
        json!({"programs": [{"type": "workflows", "name": "p", "command": ["true"]}]}),
    );
    assert_eq!(code, 200, "{body}");

    // (a) Each run makes its own cluster.
    let runs: Vec<(String, f64)> = (0..fresh_runs).map(|_| start(&server, "fresh")).collect();
    let lat = runs
        .iter()
        .map(|(path, asked)| {
            wait(&server, path, "DEPROVISIONED");
            to_running(&server, path, *asked)
        })
        .collect();
    report(&format!("(a) no reuse, createLatency {create}"), lat);

    // (b) A chain: the first run makes the cluster, each next one takes it over.
    let (first, _) = start(&server, "warm");
    wait(&server, &first, "IDLE");
    let mut lat = Vec::with_capacity(chain);
    let mut claims = Vec::with_capacity(chain);
    for _ in 0..chain {
        let (path, asked) = start(&server, "warm");
        let run = wait(&server, &path, "IDLE");
        assert_eq!(run["cluster"]["origin"], "reused", "{run}");
        claims.push(Duration::from_millis(
            run["cluster"]["reusedFrom"]["claimMs"]
                .as_u64()
                .unwrap_or(0),
        ));
        lat.push(to_running(&server, &path, asked));
    }
    report("(b) reuse of the previous run's cluster", lat);
    claims.sort();
    println!(
        "    the claim itself: p50 {:.1} ms, p99 {:.1} ms",
        percentile(&claims, 0.50).as_secs_f64() * 1e3,
        percentile(&claims, 0.99).as_secs_f64() * 1e3,
    );

    // (c) A warm pool under a stream of runs from 5 clients.
    let stream = env_usize("EBB_BENCH_STREAM", 100);
    let pool_path = "/v3/namespaces/default/profiles/pooled/pool";
    loop {
        let (_, pool) = server.get(pool_path);
        if pool["ready"].as_array().map_or(0, Vec::len) >= pool_size {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let clients = 5;
    let results: Vec<(Duration, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let server = &server;
                scope.spawn(move || {
                    let mut out = Vec::new();
                    for _ in (c..stream).step_by(clients) {
                        let (path, asked) = start(server, "pooled");
                        let run = wait(server, &path, "IDLE");
                        let hit = run["cluster"]["origin"] != "fresh";
                        out.push((to_running(server, &path, asked), hit));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client"))
            .collect()
    });
    let hits = results.iter().filter(|(_, hit)| *hit).count();
    report(
        &format!(
            "(c) a pool of {pool_size}, {stream} runs from {clients} clients ({hits} took a pooled or returned cluster)"
        ),
        results.into_iter().map(|(d, _)| d).collect(),
    );
}
