//! Several servers on one etcd (a member started here, its data under `TMPDIR`).
//!
//! 1. Throughput: lifecycles per second of a 3-node `sim` cluster (zero latency, an instant
//!    program) with 1, 2 and 3 servers, the clients' starts spread over the servers; each
//!    client long-polls its run's events on the server it started it on. The servers are set
//!    up as the lifecycle benchmark's (answers not checked against the contract, a log of
//!    warnings and requests), and each round prints per lifecycle the CPU time of the
//!    servers, of the programs they ran and of etcd, and the servers' requests, commits and
//!    round trips to etcd together.
//! 2. Failover: a server owning one run mid-provisioning is SIGKILLed; the failover time is
//!    from the kill to the new owner's first step (its "took the run over" event), over
//!    `EBB_BENCH_KILLS` kills (default 50), with a lease of 2 s (`--lease-ttl`).
//! 3. Fencing: a program on its owner's host beating every 50 ms (a line with its pid and the
//!    time) under a `retry` with no backoff; the owner SIGKILLed: from the kill to the
//!    program's last beat (its launcher stopped it when the lease could end) and to the
//!    retry's first beat (launched by the new owner), over `EBB_BENCH_FENCE_KILLS` kills
//!    (default 20), the same lease.
//!
//! `cargo bench --bench servers` (`EBB_BENCH_RUNS`, default 300 per configuration;
//! `EBB_BENCH_CLIENTS`, default 10; `EBB_BENCH_BIN`, another build's `ebb`).

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use support::bench::{
    bench_server, cpu_of_all, cpu_per_run, env_usize, figures_per_run, percentile, server_figures,
    wait_for_event,
};
use support::etcd::Cluster;
use support::installation::Installation;
use support::profiles::sim_profile;
use support::runs::{beats, deploy, epoch_ns, now_secs, start, wait_for_calls};
use support::server::Server;

const TTL: Duration = Duration::from_secs(2);

fn main() {
    let runs = env_usize("EBB_BENCH_RUNS", 300);
    let clients = env_usize("EBB_BENCH_CLIENTS", 10);
    let kills = env_usize("EBB_BENCH_KILLS", 50);
    let cluster = Cluster::start(1);
    for n in 1..=3 {
        throughput(&cluster, n, runs, clients);
    }
    failover(&cluster, kills);
    fencing(&cluster, env_usize("EBB_BENCH_FENCE_KILLS", 20));
}

fn throughput(cluster: &Cluster, servers: usize, runs: usize, clients: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = dir.path().join("sim");
    let install = Installation::new(
        cluster,
        dir.path(),
        TTL,
        &format!("/ebb-test/bench-{servers}"),
    );
    let up: Vec<Arc<Server>> = (0..servers)
        .map(|i| Arc::new(bench_server(&install, &format!("s{i}"))))
        .collect();
    let cpu = || {
        let servers: Vec<&Server> = up.iter().map(|s| s.as_ref()).collect();
        cpu_of_all(&servers, cluster.member_pid(0))
    };
    sim_profile(&up[0], "p", &sim, &[("nodes", "3")], 0, None);
    deploy(&up[0], "a", "true", json!({}));
    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(runs)));
    // The servers' figures together: requests, commits, round trips to etcd.
    let figures = || {
        let mut all = std::collections::BTreeMap::new();
        for (name, value) in up.iter().flat_map(|s| server_figures(s)) {
            *all.entry(name).or_insert(0.0) += value;
        }
        all
    };
    let (cpu_before, figures_before) = (cpu(), figures());
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let (up, next, latencies) = (up.clone(), Arc::clone(&next), Arc::clone(&latencies));
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= runs {
                        return;
                    }
                    let server = &up[(i + c) % up.len()];
                    let t0 = Instant::now();
                    let run = start(server, "a", json!({"system.profile.name": "p"}));
                    wait_for_event(server, &run, "cluster DEPROVISIONED");
                    latencies.lock().expect("latencies").push(t0.elapsed());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client");
    }
    let elapsed = started.elapsed();
    let used = cpu_per_run(&cpu_before, &cpu(), runs).unwrap_or_default();
    let counted = figures_per_run(&figures_before, &figures(), runs).unwrap_or_default();
    let mut l = latencies.lock().expect("latencies").clone();
    l.sort();
    println!(
        "servers: {servers} server(s), {} runs of a 3-node sim cluster, {clients} clients: {:.0} lifecycles/s; p50 {:.1} ms, p99 {:.1} ms\n  {used}\n  {}",
        l.len(),
        l.len() as f64 / elapsed.as_secs_f64(),
        percentile(&l, 0.50).as_secs_f64() * 1e3,
        percentile(&l, 0.99).as_secs_f64() * 1e3,
        counted.replace('\n', "\n  "),
    );
}

fn failover(cluster: &Cluster, kills: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = dir.path().join("sim");
    let install = Installation::new(cluster, dir.path(), TTL, "/ebb-test/bench-failover");
    let keeper = install.server("keeper");
    sim_profile(
        &keeper,
        "p",
        &sim,
        &[("nodes", "1"), ("createLatency", "30s")],
        0,
        None,
    );
    deploy(&keeper, "a", "true", json!({}));
    let mut times = Vec::with_capacity(kills);
    for k in 0..kills {
        let victim = install.server(&format!("victim{k}"));
        let run = start(&victim, "a", json!({"system.profile.name": "p"}));
        let id = run.rsplit('/').next().expect("id").to_string();
        wait_for_calls(&sim, 1, "create", |c| {
            c["op"] == "create" && c["tags"]["ebb:run"] == id.as_str()
        });
        let killed = now_secs();
        victim.kill();
        let took = took_over_at(&keeper, &run);
        times.push(Duration::from_secs_f64((took - killed).max(0.0)));
        // The run ends at once: nothing more to measure on it.
        let _ = keeper.post(&format!("{run}/stop"));
    }
    times.sort();
    println!(
        "failover: {} kills of the owner mid-provisioning, lease {} s: kill → new owner's first step p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        times.len(),
        TTL.as_secs(),
        percentile(&times, 0.50).as_secs_f64(),
        percentile(&times, 0.99).as_secs_f64(),
        times.last().copied().unwrap_or_default().as_secs_f64(),
    );
}

fn fencing(cluster: &Cluster, kills: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = dir.path().join("sim");
    let install = Installation::new(cluster, dir.path(), TTL, "/ebb-test/bench-fencing");
    let keeper = install.server("keeper");
    sim_profile(&keeper, "p", &sim, &[("nodes", "1")], 0, None);
    let (mut deaths, mut retries) = (Vec::with_capacity(kills), Vec::with_capacity(kills));
    for k in 0..kills {
        let file = dir.path().join(format!("beats-{k}"));
        deploy(
            &keeper,
            &format!("beat{k}"),
            &format!(
                "while :; do echo \"$$ $(date +%s%N)\" >> '{}'; sleep 0.05; done",
                file.display()
            ),
            json!({"retry": {"maxAttempts": 2, "backoff": "0s"}}),
        );
        let victim = install.server(&format!("victim{k}"));
        let run = start(
            &victim,
            &format!("beat{k}"),
            json!({"system.profile.name": "p"}),
        );
        let copies = |n: usize| {
            let limit = Instant::now() + Duration::from_secs(60);
            loop {
                let seen = beats(&file);
                if seen.len() >= n {
                    return seen;
                }
                assert!(Instant::now() < limit, "copy {n} of {run} did not beat");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        copies(1);
        let killed = epoch_ns();
        victim.kill();
        let seen = copies(2);
        // The first copy's last beat: a second after the second began, it has surely stopped.
        std::thread::sleep(Duration::from_secs(1));
        let seen = {
            let now = beats(&file);
            assert_eq!(now.len(), 2, "a third copy: {now:?}");
            assert!(now[0].2 < seen[1].1, "two copies at once: {now:?}");
            now
        };
        let ms =
            |at: u128| Duration::from_nanos(u64::try_from(at.saturating_sub(killed)).unwrap_or(0));
        deaths.push(ms(seen[0].2));
        retries.push(ms(seen[1].1));
        let _ = keeper.post(&format!("{run}/stop"));
    }
    deaths.sort();
    retries.sort();
    println!(
        "fencing: {} kills of the owner of a running program, lease {} s: kill → the program's last beat p50 {:.2} s, p99 {:.2} s, max {:.2} s; kill → the retry's first beat p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        deaths.len(),
        TTL.as_secs(),
        percentile(&deaths, 0.50).as_secs_f64(),
        percentile(&deaths, 0.99).as_secs_f64(),
        deaths.last().copied().unwrap_or_default().as_secs_f64(),
        percentile(&retries, 0.50).as_secs_f64(),
        percentile(&retries, 0.99).as_secs_f64(),
        retries.last().copied().unwrap_or_default().as_secs_f64(),
    );
}

/// When (epoch seconds) run `path`'s events say a server took it over.
fn took_over_at(server: &Server, path: &str) -> f64 {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, events) = server.get(&format!("{path}/events"));
        let took = events.as_array().and_then(|events| {
            events.iter().find_map(|e| {
                let message = e["message"].as_str()?;
                message
                    .ends_with("took the run over")
                    .then(|| e["time"].as_f64())?
            })
        });
        if let Some(time) = took {
            return time;
        }
        assert!(Instant::now() < limit, "run {path} was not taken over");
        std::thread::sleep(Duration::from_millis(20));
    }
}
