//! Warm pools: a namespace's profile with a `pool` keeps `min` clusters ready ahead of
//! demand, refilled as runs take them over, at most `max` IDLE in all; a DISABLED profile
//! drains its pool; a SIGKILL during a refill leaks nothing; on three servers one tends the
//! pools and a dead server's pool clusters are taken over.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::profiles::{profile_body, put_profile_body};
use crate::support::runs::*;
use crate::support::server::{Options, Server};

const POOL: &str = "/v3/namespaces/default/profiles/warm/pool";

/// A sim profile `warm` of one node with pool `pool`, its cloud in `sim`.
fn pooled_sim(server: &Server, sim: &Path, pool: Value) {
    let mut body = profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", "1", false),
            ("createLatency", "300ms", false),
        ],
    );
    body["pool"] = pool;
    put_profile_body(server, "warm", body);
}

/// Polls the pool until `done` holds (or panics after 60 s); returns it.
#[track_caller]
pub(crate) fn wait_pool(server: &Server, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (code, pool) = server.get(POOL);
        assert_eq!(code, 200, "{pool}");
        if done(&pool) {
            return pool;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the pool never got {what}: {pool}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn count(pool: &Value, part: &str) -> usize {
    pool[part].as_array().map_or(0, Vec::len)
}

/// Instances of the sim cloud that are not terminated.
fn live_instances(sim: &Path) -> usize {
    instances(sim)
        .iter()
        .filter(|i| i["state"] != "terminated")
        .count()
}

#[test]
fn a_pool_keeps_its_clusters_ready_and_refills_after_a_run_takes_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, Options::default());
    pooled_sim(&server, &sim, json!({"min": 2, "max": 3, "idle": "5m"}));
    // The program holds its cluster until the test lets it go.
    let go = dir.path().join("go");
    let script = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
        go.display()
    );
    deploy(&server, "a", &script, json!({}));
    let ready = wait_pool(&server, "2 ready", |p| count(p, "ready") == 2);
    assert_eq!(ready["pool"]["min"], 2, "{ready}");
    assert!(
        ready["ready"]
            .as_array()
            .expect("ready")
            .iter()
            .all(|c| c["pooled"] == true)
    );
    assert_eq!(instances(&sim).len(), 2);

    let run = start(&server, "a", json!({"system.profile.name": "warm"}));
    let running = wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    assert_eq!(running["cluster"]["origin"], "pooled", "{running}");
    assert_eq!(
        running["cluster"]["reusedFrom"]["pooled"], true,
        "{running}"
    );
    // While the run holds one, the pool makes another.
    let refilled = wait_pool(&server, "2 ready and 1 held", |p| {
        count(p, "ready") == 2 && p["claimed"] == 1
    });
    assert_eq!(instances(&sim).len(), 3, "{refilled}");
    std::fs::write(&go, "").expect("go");
    // The run's cluster comes back when it completes: 3 ready, its max, nothing more made.
    let done = wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "IDLE"
    });
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let full = wait_pool(&server, "3 ready", |p| count(p, "ready") == 3);
    assert_eq!(count(&full, "creating"), 0, "{full}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(instances(&sim).len(), 3);
    // Ready clusters hold their nodes: the gauges count them, the pool's as `pool`, the one
    // the run left as `idle`.
    let text = crate::metrics::scrape(&server);
    let warm = ["profile=\"USER:warm\""];
    assert_eq!(
        crate::metrics::total(&text, "ebb_live_clusters", &warm),
        3.0,
        "{text}"
    );
    assert_eq!(
        crate::metrics::total(&text, "ebb_live_nodes", &warm),
        3.0,
        "{text}"
    );
    assert!(
        crate::metrics::total(&text, "ebb_live_clusters", &["state=\"pool\""]) >= 2.0,
        "{text}"
    );

    // A pool's runs are runs: listed, with their history.
    let (code, runs) = server.get("/v3/namespaces/default/runs?limit=100");
    assert_eq!(code, 200, "{runs}");
    assert!(runs.to_string().contains("_pool"), "{runs}");
    // No app may take the pool's name.
    let (code, body) = server.put("/v3/namespaces/default/apps/_pool", json!({"programs": []}));
    assert_eq!(code, 400, "{body}");
}

#[test]
fn a_pool_holds_at_most_its_max_and_a_disabled_profile_drains_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, Options::default());
    pooled_sim(&server, &sim, json!({"min": 1, "max": 1, "idle": "5m"}));
    deploy(&server, "a", "sleep 0.5", json!({}));
    wait_pool(&server, "1 ready", |p| count(p, "ready") == 1);
    // Two runs: one takes the pool's cluster, one makes its own; both leave theirs IDLE,
    // and the pool keeps one.
    let args = json!({"system.profile.name": "warm"});
    let runs = [start(&server, "a", args.clone()), start(&server, "a", args)];
    for run in &runs {
        wait_until(&server, run, Duration::from_secs(60), |r| {
            r["status"] == "COMPLETED"
        });
    }
    wait_pool(&server, "1 ready and none made", |p| {
        count(p, "ready") == 1 && count(p, "creating") == 0
    });
    wait_instances(&sim, 1);

    let (code, body) = server.post("/v3/namespaces/default/profiles/warm/disable");
    assert_eq!(code, 200, "{body}");
    wait_pool(&server, "drained", |p| {
        count(p, "ready") == 0 && count(p, "creating") == 0
    });
    wait_instances(&sim, 0);
}

/// Waits (up to 30 s) until the sim cloud holds `n` instances that are not terminated.
#[track_caller]
fn wait_instances(sim: &Path, n: usize) {
    let started = Instant::now();
    while live_instances(sim) != n {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} live instances, not {n}",
            live_instances(sim)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_sigkill_during_a_refill_leaks_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, Options::default());
    pooled_sim(&server, &sim, json!({"min": 2, "max": 2}));
    // Killed while the pool's clusters are being made.
    wait_pool(&server, "clusters being made", |p| count(p, "creating") > 0);
    server.kill();
    let server = Server::start_at(&data, Options::default());
    wait_pool(&server, "2 ready", |p| count(p, "ready") == 2);
    std::thread::sleep(Duration::from_secs(3));
    let (_, pool) = server.get(POOL);
    assert_eq!(count(&pool, "ready"), 2, "{pool}");
    assert_eq!(count(&pool, "creating"), 0, "{pool}");
    assert_eq!(
        instances(&sim).len(),
        2,
        "one instance per pool cluster: {pool}"
    );
}

#[test]
fn on_three_servers_one_tends_the_pool_and_a_dead_servers_clusters_are_taken_over() {
    let cluster = crate::support::etcd::Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = crate::support::installation::Installation::new(
        &cluster,
        dir.path(),
        Duration::from_secs(3),
        "/ebb-test/pools",
    );
    let servers = vec![
        install.server("s0"),
        install.server("s1"),
        install.server("s2"),
    ];
    pooled_sim(&servers[0], &sim, json!({"min": 2, "max": 2}));
    deploy(&servers[0], "a", "true", json!({}));
    let pool = wait_pool(&servers[1], "2 ready", |p| count(p, "ready") == 2);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(instances(&sim).len(), 2, "one server filled it: {pool}");
    // The owner of the pool's runs dies: another takes them over; a run still gets one.
    let run_path = |c: &Value| {
        format!(
            "/v3/namespaces/default/apps/_pool/workflows/warm/runs/{}",
            c["run"].as_str().expect("run")
        )
    };
    let (_, first) = servers[0].get(&run_path(&pool["ready"][0]));
    let owner = first["owner"].as_str().expect("owner").to_string();
    let mut servers: Vec<Server> = servers;
    let dead = ["s0", "s1", "s2"]
        .iter()
        .position(|s| *s == owner)
        .expect("owner among the servers");
    servers.remove(dead).kill();
    let alive = &servers[0];
    let started = Instant::now();
    loop {
        let (_, run) = alive.get(&run_path(&pool["ready"][0]));
        if run["owner"].as_str().is_some_and(|o| o != owner) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not taken over: {run}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let run = start(alive, "a", json!({"system.profile.name": "warm"}));
    let done = wait_until(alive, &run, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "IDLE"
    });
    assert_eq!(done["cluster"]["reusedFrom"]["pooled"], true, "{done}");
}
