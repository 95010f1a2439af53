//! Lifecycle throughput and latency: drives many runs of a 3-node `sim` cluster (zero
//! latency, an instant program) through start → PROVISIONED → RUNNING → COMPLETED →
//! DEPROVISIONED against a real `ebb serve` with its durable store on disk.
//!
//! `cargo bench --bench lifecycle` (defaults: 1000 runs, 10 clients). Override with
//! `EBB_BENCH_RUNS` and `EBB_BENCH_CLIENTS`, the data dir's disk with `EBB_BENCH_DIR`
//! (default: the target directory) and the sim cloud's with `EBB_BENCH_SIM_DIR` (default:
//! inside the data dir). Each client starts a run, then long-polls its
//! events until `cluster DEPROVISIONED`; latency is measured by the client from the start
//! request to that event's arrival.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runs = env_usize("EBB_BENCH_RUNS", 1000);
    let clients = env_usize("EBB_BENCH_CLIENTS", 10);
    let base =
        std::env::var("EBB_BENCH_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").into());
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let data = dir.path().join("data");
    // The simulated cloud's files are the cloud, not ebb's: they may live elsewhere.
    let sim_base = std::env::var("EBB_BENCH_SIM_DIR").ok();
    let sim_dir = sim_base.map(|b| tempfile::tempdir_in(b).expect("sim tempdir"));
    let sim = sim_dir
        .as_ref()
        .map_or_else(|| dir.path().join("sim"), |d| d.path().to_path_buf());

    let server = support::Server::start(&data, clients);
    server.put(
        "/v3/namespaces/default/profiles/bench",
        json!({"provisioner": {"name": "sim", "properties": [
            {"name": "nodes", "value": "3"},
            {"name": "stateDir", "value": sim.to_str().expect("utf-8")}
        ]}}),
    );
    server.put(
        "/v3/namespaces/default/apps/bench",
        json!({"config": {"system.profile.name": "bench"},
               "programs": [{"type": "workflows", "name": "p", "command": ["true"]}]}),
    );
    let server = Arc::new(server);

    let program = "/v3/namespaces/default/apps/bench/workflows/p".to_string();
    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(runs)));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (server, program, next, latencies) = (
                Arc::clone(&server),
                program.clone(),
                Arc::clone(&next),
                Arc::clone(&latencies),
            );
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::SeqCst) < runs {
                    let t0 = Instant::now();
                    let res = server.post(&format!("{program}/start"), json!({}));
                    let id = res["runId"].as_str().expect("runId");
                    support::wait_for_event(&server, &program, id, "cluster DEPROVISIONED");
                    latencies.lock().expect("latencies").push(t0.elapsed());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client thread");
    }
    let elapsed = started.elapsed();
    drop(server);

    let mut l = latencies.lock().expect("latencies").clone();
    l.sort();
    let pct = |p: f64| l[((l.len() as f64 * p).ceil() as usize).clamp(1, l.len()) - 1];
    println!(
        "lifecycle: {} runs of a 3-node sim cluster, {} clients: {:.0} lifecycles/s; start→DEPROVISIONED p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({:.2} s in all)",
        l.len(),
        clients,
        l.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        l.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        elapsed.as_secs_f64()
    );
}
