//! The admission queue at scale: `EBB_BENCH_RUNS` runs (default 10,000) started at once
//! against a program's `maxConcurrentRuns` of `EBB_BENCH_LIMIT` (default 50), on the
//! zero-latency sim with one node per run, on one `ebb serve`. It reports whether every run
//! completed, the most runs live at once (sampled every 20 ms from the namespace's usage),
//! the time from a slot freeing to the next queued run starting (p50, p99; read from the
//! runs' histories afterwards), and the throughput.
//!
//! Which slot a start took: with the limit reached, the k-th run to leave the queue can only
//! go once `direct + k - limit` runs have let go of their clusters (`direct` runs started
//! without queueing), so its lag is its admission time minus that release's time.
//!
//! `cargo bench --bench queue`; `EBB_BENCH_DIR` picks the data dir's disk.

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::bench::{Bench, env_usize, percentile};
use support::server::Server;

const PROGRAM: &str = "/v3/namespaces/default/apps/bench/workflows/p";

/// The namespace's live runs now.
fn live(server: &Server) -> u64 {
    let (_, ns) = server.get("/v3/namespaces/default");
    ns["usage"]["liveRuns"].as_u64().unwrap_or(0)
}

fn queued(server: &Server) -> usize {
    let (_, runs) = server.get(&format!("{PROGRAM}/runs?status=QUEUED&limit=1"));
    runs.as_array().map_or(0, Vec::len)
}

/// Run `id`'s history: when it left the queue (if it waited) and when its cluster was gone.
fn times(server: &Server, id: &str) -> (Option<f64>, Option<f64>) {
    let (code, events) = server.get(&format!("{PROGRAM}/runs/{id}/events"));
    assert_eq!(code, 200, "{events}");
    let mut out = (None, None);
    for e in events.as_array().expect("events") {
        let message = e["message"].as_str().unwrap_or_default();
        if message.starts_with("run PENDING: admitted after") {
            out.0 = e["time"].as_f64();
        }
        if message == "cluster DEPROVISIONED" {
            out.1 = e["time"].as_f64();
        }
    }
    out
}

fn main() {
    let runs = env_usize("EBB_BENCH_RUNS", 10_000);
    let limit = env_usize("EBB_BENCH_LIMIT", 50);
    let bench = Bench::start(1);
    let server = &bench.server;
    let (code, body) = server.put(
        "/v3/namespaces/default/apps/bench",
        json!({"config": {"system.profile.name": "bench"},
               "programs": [{"type": "workflows", "name": "p", "command": ["true"],
                             "maxConcurrentRuns": limit}]}),
    );
    assert_eq!(code, 200, "{body}");
    // The queue holds them all; a quota that never binds makes the namespace show its usage.
    let (code, body) = server.put(
        "/v3/namespaces/default",
        json!({"queueRuns": true, "maxQueued": runs, "maxLiveRuns": 1_000_000}),
    );
    assert_eq!(code, 200, "{body}");

    let done = AtomicBool::new(false);
    let most = AtomicU64::new(0);
    let began = Instant::now();
    let ids: Vec<String> = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                most.fetch_max(live(server), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let starters: Vec<_> = (0..8)
            .map(|part| {
                scope.spawn(move || {
                    (0..runs)
                        .filter(|i| i % 8 == part)
                        .map(|_| {
                            let (code, body) =
                                server.post_json(&format!("{PROGRAM}/start"), json!({}));
                            assert_eq!(code, 200, "{body}");
                            body["runId"].as_str().expect("runId").to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let ids: Vec<String> = starters
            .into_iter()
            .flat_map(|s| s.join().expect("starter"))
            .collect();
        let started = began.elapsed();
        println!("{runs} runs started in {:.1}s", started.as_secs_f64());
        while live(server) > 0 || queued(server) > 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        done.store(true, Ordering::SeqCst);
        ids
    });
    let took = began.elapsed();

    // Every run completed, once.
    let ended: Vec<Value> = ids
        .chunks(500)
        .flat_map(|chunk| {
            chunk
                .iter()
                .map(|id| server.get(&format!("{PROGRAM}/runs/{id}")).1)
                .collect::<Vec<_>>()
        })
        .collect();
    let completed = ended.iter().filter(|r| r["status"] == "COMPLETED").count();
    let histories: Vec<(Option<f64>, Option<f64>)> = std::thread::scope(|scope| {
        let parts: Vec<_> = ids
            .chunks(ids.len().div_ceil(4).max(1))
            .map(|chunk| {
                scope.spawn(move || chunk.iter().map(|id| times(server, id)).collect::<Vec<_>>())
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("histories"))
            .collect::<Vec<_>>()
    });
    let mut admitted: Vec<f64> = histories.iter().filter_map(|h| h.0).collect();
    let mut freed: Vec<f64> = histories.iter().filter_map(|h| h.1).collect();
    admitted.sort_by(f64::total_cmp);
    freed.sort_by(f64::total_cmp);
    let direct = ids.len() - admitted.len();
    let mut lags: Vec<Duration> = Vec::new();
    let mut at_once = 0;
    for (k, at) in admitted.iter().enumerate() {
        // The release the (k+1)-th admission waited for (1-based), if it waited for one.
        match (direct + k + 1).checked_sub(limit) {
            Some(n) if n >= 1 => {
                let free = freed[n - 1];
                lags.push(Duration::from_secs_f64((at - free).max(0.0)));
            }
            _ => at_once += 1,
        }
    }
    lags.sort();
    println!(
        "{completed} of {runs} runs COMPLETED in {:.1}s ({:.0} runs/s); at most {} live at once (limit {limit})",
        took.as_secs_f64(),
        runs as f64 / took.as_secs_f64(),
        most.load(Ordering::SeqCst)
    );
    println!(
        "{} started without waiting, {} left the queue ({at_once} as soon as queued); slot freed -> next queued run started: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        direct,
        admitted.len(),
        percentile(&lags, 0.5).as_secs_f64() * 1000.0,
        percentile(&lags, 0.99).as_secs_f64() * 1000.0,
        lags.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
    );
    if std::env::var_os("EBB_BENCH_METRICS").is_some() {
        let text = reqwest::blocking::Client::new()
            .get(format!("{}/metrics", server.url))
            .bearer_auth(server.token().expect("token"))
            .send()
            .and_then(|r| r.text())
            .expect("metrics");
        for line in text
            .lines()
            .filter(|l| l.contains("queue") || l.contains("store_write"))
        {
            println!("{line}");
        }
    }
    assert_eq!(completed, runs, "every run completes");
    assert!(
        most.load(Ordering::SeqCst) <= limit as u64,
        "the limit was passed"
    );
}
