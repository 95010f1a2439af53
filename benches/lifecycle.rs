//! Lifecycle throughput and latency: drives many runs of a 3-node `sim` cluster (zero
//! latency, an instant program) through start → PROVISIONED → RUNNING → COMPLETED →
//! DEPROVISIONED against a real `ebb serve` with its durable store on disk.
//!
//! `cargo bench --bench lifecycle` (defaults: 1000 runs, 10 clients). Override with
//! `EBB_BENCH_RUNS` and `EBB_BENCH_CLIENTS`, the data dir's disk with `EBB_BENCH_DIR`
//! (default: the target directory) and the sim cloud's with `EBB_BENCH_SIM_DIR` (default:
//! inside the data dir). Each client starts a run, then long-polls its
//! events until `cluster DEPROVISIONED`; latency is measured by the client from the start
//! request to that event's arrival. It also prints the CPU time per lifecycle of the server
//! (and of the programs it ran) and, on etcd, of etcd: on a shared machine a rate moves with
//! the neighbours' load, CPU time much less.

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

use support::bench::{
    Bench, cpu_now, cpu_per_run, env_usize, figures_per_run, percentile, server_figures,
    wait_for_event,
};
use support::runs::start;

fn main() {
    let runs = env_usize("EBB_BENCH_RUNS", 1000);
    let clients = env_usize("EBB_BENCH_CLIENTS", 10);
    let bench = Bench::start(3);
    let server = Arc::new(bench.server);

    let figures_before = server_figures(&server);
    let cpu_before = cpu_now(&server);
    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(runs)));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (server, next, latencies) = (
                Arc::clone(&server),
                Arc::clone(&next),
                Arc::clone(&latencies),
            );
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::SeqCst) < runs {
                    let t0 = Instant::now();
                    let run = start(&server, "bench", json!({}));
                    wait_for_event(&server, &run, "cluster DEPROVISIONED");
                    latencies.lock().expect("latencies").push(t0.elapsed());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client thread");
    }
    let elapsed = started.elapsed();
    let figures = figures_per_run(&figures_before, &server_figures(&server), runs);
    let cpu = cpu_per_run(&cpu_before, &cpu_now(&server), runs);
    drop(server);

    let mut l = latencies.lock().expect("latencies").clone();
    l.sort();
    let pct = |p: f64| percentile(&l, p);
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
    if let Some(figures) = figures {
        println!("{figures}");
    }
    if let Some(cpu) = cpu {
        println!("{cpu}");
    }
}
