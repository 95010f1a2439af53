//! Dependency-driven scheduling against stage barriers: the makespan of a 20-node create of
//! the tests' `echo-services` template (a fixture: four services in a coordinated cluster's
//! shape), with jittered task latencies, simulated over the
//! real plan (`plan::cluster::plan`) in virtual time.
//!
//! Dependency-driven (what ebb's planner does): a task starts as soon as its predecessors are
//! done and its node is free. Stage barriers (the classic view): stage k+1 starts when every
//! task of stage k is done. `cargo bench --bench makespan` prints both over 200 random draws.

use std::collections::BTreeSet;

use ebb::model::builtin;
use ebb::model::plan::{Action, ClusterOperation, ClusterTask, PlanNode};
use ebb::rules::plan::cluster::{plan, stages};
use ebb::rules::solver::{Request, solve};

/// Latency of one task in ms: a base per action, times a jitter of 0.5–2.5 (xorshift).
fn latency(action: Action, rng: &mut u64) -> f64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let jitter = 0.5 + (*rng % 10_000) as f64 / 10_000.0 * 2.0;
    let base = match action {
        Action::Create | Action::Replace => 30_000.0,
        Action::Confirm => 5_000.0,
        Action::Bootstrap => 10_000.0,
        Action::Install => 20_000.0,
        Action::Configure => 2_000.0,
        Action::Initialize => 3_000.0,
        Action::Start | Action::Stop => 4_000.0,
        Action::Remove | Action::Delete => 5_000.0,
    };
    base * jitter
}

/// Makespan when each task starts once its predecessors are done and its node is free
/// (lowest id first among the ready).
fn dependency_driven(tasks: &[ClusterTask], lat: &[f64]) -> f64 {
    let mut finish = vec![f64::NAN; tasks.len()];
    let mut node_free: std::collections::BTreeMap<&str, f64> = Default::default();
    let mut done = BTreeSet::new();
    // Event simulation: repeatedly start the ready task that can start earliest.
    while done.len() < tasks.len() {
        let mut best: Option<(f64, usize)> = None;
        for t in tasks {
            if done.contains(&t.id) || !t.depends_on.iter().all(|d| done.contains(d)) {
                continue;
            }
            let ready = t.depends_on.iter().map(|d| finish[*d]).fold(0.0, f64::max);
            let start = ready.max(*node_free.get(t.node.as_str()).unwrap_or(&0.0));
            if best.is_none_or(|(s, _)| start < s) {
                best = Some((start, t.id));
            }
        }
        let (start, id) = best.expect("a DAG always has a ready task");
        finish[id] = start + lat[id];
        node_free.insert(tasks[id].node.as_str(), finish[id]);
        done.insert(id);
    }
    finish.iter().copied().fold(0.0, f64::max)
}

/// Makespan when each stage waits for the whole previous stage.
fn stage_barriers(tasks: &[ClusterTask], lat: &[f64]) -> f64 {
    stages(tasks)
        .iter()
        .map(|stage| stage.iter().map(|id| lat[*id]).fold(0.0, f64::max))
        .sum()
}

fn main() {
    let (_, template) = builtin::template_file(
        "tests/fixtures/templates",
        "echo-services.json",
        include_str!("../tests/fixtures/templates/echo-services.json"),
    )
    .expect("the echo fixture");
    let layout = solve(
        &template,
        &Request {
            provisioner: "local".into(),
            nodes: 20,
            ..Request::default()
        },
    )
    .expect("a layout");
    let nodes: Vec<PlanNode> = layout
        .iter()
        .enumerate()
        .map(|(i, l)| PlanNode {
            name: format!("node-{}", i + 1),
            services: l.services.clone(),
        })
        .collect();
    let tasks = plan(ClusterOperation::Create, &template, &nodes);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let (mut dep, mut bar) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let lat: Vec<f64> = tasks.iter().map(|t| latency(t.action, &mut rng)).collect();
        dep.push(dependency_driven(&tasks, &lat));
        bar.push(stage_barriers(&tasks, &lat));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64 / 1000.0;
    println!(
        "makespan: 20-node create of echo-services, {} tasks in {} stages, jittered latencies, 200 draws: dependency-driven {:.1} s, stage barriers {:.1} s (mean), {:.0}% shorter",
        tasks.len(),
        stages(&tasks).len(),
        mean(&dep),
        mean(&bar),
        (1.0 - mean(&dep) / mean(&bar)) * 100.0
    );
}
