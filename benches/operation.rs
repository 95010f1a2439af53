//! One large cluster operation end to end: a create of 334 bare nodes on the zero-latency
//! `sim` cloud, 1,002 tasks (create, confirm, bootstrap per node), against a real `ebb serve`
//! whose store and audit log are durable on disk: every task attempt is written when it
//! starts and when it ends, and every node's resource state before and after each call.
//!
//! `cargo bench --bench operation` runs it `EBB_BENCH_REPEAT` times (default 5) and prints,
//! for the create and for the delete that follows, the operation's own time from the audit
//! log (planned → last task recorded) and the client's time from the start request to the
//! `cluster PROVISIONED` event. `EBB_BENCH_NODES` changes the size, `EBB_BENCH_DIR` the disk.

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use serde_json::{Value, json};

use support::bench::{Bench, env_usize, wait_for_event};
use support::runs::{operations, start};

fn seconds(op: &Value) -> f64 {
    op["finished"].as_f64().expect("finished") - op["created"].as_f64().expect("created")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let nodes = env_usize("EBB_BENCH_NODES", 334);
    let repeat = env_usize("EBB_BENCH_REPEAT", 5);
    let bench = Bench::start(nodes);
    let server = &bench.server;
    let (mut creates, mut deletes, mut clients) = (Vec::new(), Vec::new(), Vec::new());
    let mut tasks = 0;
    for _ in 0..repeat {
        let t0 = Instant::now();
        let run = start(server, "bench", json!({}));
        wait_for_event(server, &run, "cluster PROVISIONED; launching the program");
        clients.push(t0.elapsed().as_secs_f64());
        wait_for_event(server, &run, "cluster DEPROVISIONED");
        let ops = operations(server, &run);
        assert_eq!(ops[0]["status"], "SUCCEEDED", "{}", ops[0]["error"]);
        tasks = ops[0]["tasks"].as_array().expect("tasks").len();
        creates.push(seconds(&ops[0]));
        deletes.push(seconds(&ops[1]));
    }
    println!(
        "operation: create of {nodes} sim nodes, {tasks} tasks, durable audit log: median {:.3} s (min {:.3}, max {:.3}); start request → PROVISIONED median {:.3} s; the delete that follows ({nodes} tasks) median {:.3} s; {repeat} runs",
        median(creates.clone()),
        creates.iter().copied().fold(f64::MAX, f64::min),
        creates.iter().copied().fold(f64::MIN, f64::max),
        median(clients),
        median(deletes),
    );
}
