//! The admission queue: starts a limit would refuse wait as QUEUED runs and start, once
//! each, in order, as the limit allows; its bounds; stopping a queued run; a SIGKILL with
//! runs queued.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server, assert_error};

const LONG: Duration = Duration::from_secs(60);

/// A server with a zero-latency sim profile `p` of `nodes` nodes and app `a` in `ns` whose
/// program appends its run id to `marker`, then runs `then`.
fn setup(server: &Server, sim: &Path, marker: &Path, ns: &str, nodes: &str, extra: Value) {
    if ns != "default" {
        let (code, body) = server.put(&format!("/v3/namespaces/{ns}"), json!({}));
        assert_eq!(code, 200, "{body}");
    }
    let _ = std::fs::create_dir_all(sim);
    sim_profile_in(server, ns, sim, nodes);
    let then = extra["then"].as_str().unwrap_or("true").to_string();
    let mut extra = extra;
    if let Some(o) = extra.as_object_mut() {
        o.remove("then");
    }
    let script = format!("echo \"$EBB_RUN_ID\" >> '{}'; {then}", marker.display());
    deploy_in(server, ns, "a", &script, extra);
}

/// Profile `p` in `ns` (the default namespace's is made by `sim_profile`).
fn sim_profile_in(server: &Server, ns: &str, sim: &Path, nodes: &str) {
    if ns == "default" {
        sim_profile(server, "p", sim, &[("nodes", nodes)], 0, None);
        return;
    }
    let body = crate::support::profiles::profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", nodes, true),
        ],
    );
    let (code, answer) = server.put(&format!("/v3/namespaces/{ns}/profiles/p"), body);
    assert_eq!(code, 200, "{answer}");
}

fn queued_start(server: &Server, ns: &str, args: Value) -> String {
    let mut args = args;
    args["system.profile.name"] = json!("p");
    start_in(server, ns, "a", args)
}

fn status(server: &Server, run: &str) -> Value {
    let (code, body) = server.get(run);
    assert_eq!(code, 200, "{body}");
    body
}

fn ran(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn id(run: &str) -> String {
    run.rsplit('/').next().expect("id").to_string()
}

struct Place {
    _dir: tempfile::TempDir,
    sim: PathBuf,
    marker: PathBuf,
}

fn place() -> Place {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = dir.path().join("sim");
    let marker = dir.path().join("ran");
    Place {
        _dir: dir,
        sim,
        marker,
    }
}

#[test]
fn starts_over_a_program_limit_wait_and_start_once_each_in_order_of_arrival() {
    let p = place();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    setup(
        &server,
        &p.sim,
        &p.marker,
        "default",
        "1",
        json!({"maxConcurrentRuns": 1, "then": "sleep 0.3"}),
    );
    let runs: Vec<String> = (0..6)
        .map(|_| queued_start(&server, "default", json!({"system.run.queue": "true"})))
        .collect();
    // One runs; the others wait in order, each saying on what and where it stands.
    for (i, run) in runs.iter().enumerate().skip(1) {
        let r = status(&server, run);
        if r["status"] != "QUEUED" {
            // The first may already have ended and let the next in.
            assert!(i == 1, "{r}");
            continue;
        }
        assert!(
            r["queue"]["reason"]
                .as_str()
                .is_some_and(|s| s.contains("maxConcurrentRuns")),
            "{r}"
        );
        assert!(r["queue"]["position"].as_u64().is_some(), "{r}");
        assert!(r["cluster"]["status"].is_null(), "{r}");
    }
    let last = status(&server, &runs[5]);
    assert_eq!(last["status"], "QUEUED", "{last}");
    assert_eq!(last["queue"]["position"], 5, "{last}");
    let listed = server
        .get(&format!("{}/runs?status=QUEUED", program("a")))
        .1;
    assert!(listed.as_array().is_some_and(|a| a.len() >= 4), "{listed}");
    let events = server.get(&format!("{}/events", runs[5])).1.to_string();
    assert!(events.contains("run QUEUED"), "{events}");
    let mut admitted = Vec::new();
    for run in &runs {
        let done = wait_until(&server, run, LONG, |r| {
            r["cluster"]["status"] == "DEPROVISIONED"
        });
        assert_eq!(done["status"], "COMPLETED", "{done}");
        admitted.push(done);
    }
    // In order of arrival, never two at once, each once.
    for pair in admitted.windows(2).skip(1) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a["queue"]["admitted"].as_u64() <= b["queue"]["admitted"].as_u64(),
            "{a} {b}"
        );
        assert!(
            b["start"].as_u64() >= a["cluster"]["end"].as_u64().map(|e| e.saturating_sub(1)),
            "{a} {b}"
        );
    }
    let ids: Vec<String> = runs.iter().map(|r| id(r)).collect();
    assert_eq!(ran(&p.marker), ids);
    assert_clean(
        &p.sim,
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
        1,
    );
}

#[test]
fn a_namespace_that_queues_runs_waits_on_its_quota_and_a_run_too_big_is_still_refused() {
    let p = place();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, body) = server.put(
        "/v3/namespaces/team",
        json!({"maxLiveRuns": 1, "maxLiveNodes": 3, "maxNodesPerRun": 3, "queueRuns": true}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["queueRuns"], true, "{body}");
    setup(
        &server,
        &p.sim,
        &p.marker,
        "team",
        "2",
        json!({"then": "sleep 60"}),
    );
    let first = queued_start(&server, "team", json!({}));
    wait_until(&server, &first, LONG, |r| r["status"] == "RUNNING");
    // maxLiveRuns holds the second.
    let second = queued_start(&server, "team", json!({}));
    let r = status(&server, &second);
    assert_eq!(r["status"], "QUEUED", "{r}");
    assert!(
        r["queue"]["reason"].to_string().contains("maxLiveRuns"),
        "{r}"
    );
    // A run larger than the namespace allows one run never fits: refused, not queued.
    let (code, body) = server.post_json(
        &format!("{}/start", program_in("team", "a")),
        json!({"system.profile.name": "p", "system.profile.properties.nodes": "4"}),
    );
    assert_error((code, body), 409, "maxNodesPerRun");
    // A run that asks not to queue is refused as before.
    assert_error(
        server.post_json(
            &format!("{}/start", program_in("team", "a")),
            json!({"system.profile.name": "p", "system.run.queue": "false"}),
        ),
        409,
        "maxLiveRuns",
    );
    // With room for two runs, maxLiveNodes (3) still holds a second run of 2 nodes.
    let (code, body) = server.put("/v3/namespaces/team", json!({"maxLiveRuns": 5}));
    assert_eq!(code, 200, "{body}");
    std::thread::sleep(Duration::from_millis(1500));
    let r = status(&server, &second);
    assert_eq!(r["status"], "QUEUED", "{r}");
    let (code, _) = server.post(&format!("{first}/stop"));
    assert_eq!(code, 200);
    wait_until(&server, &second, LONG, |r| r["status"] == "RUNNING");
    let events = server.get(&format!("{second}/events")).1.to_string();
    assert!(events.contains("admitted after"), "{events}");
    let (code, _) = server.post(&format!("{second}/stop"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &second);
}

#[test]
fn a_queued_run_stopped_is_killed_with_no_cluster_and_the_bounds_reject() {
    let p = place();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, body) = server.put(
        "/v3/namespaces/default",
        json!({"queueRuns": true, "maxQueued": 2, "maxQueueTime": "2s"}),
    );
    assert_eq!(code, 200, "{body}");
    for (bad, field) in [
        (json!({"maxQueued": 100_001}), "maxQueued"),
        (json!({"maxQueueTime": "31 days"}), "maxQueueTime"),
        (json!({"maxQueueTime": 0}), "maxQueueTime"),
    ] {
        assert_error(server.put("/v3/namespaces/default", bad), 400, field);
    }
    setup(
        &server,
        &p.sim,
        &p.marker,
        "default",
        "1",
        json!({"maxConcurrentRuns": 1, "then": "sleep 60"}),
    );
    let first = queued_start(&server, "default", json!({}));
    let waiting = queued_start(&server, "default", json!({}));
    let stopped = queued_start(&server, "default", json!({}));
    // The queue is full: the next start is REJECTED, naming the bound.
    assert_error(
        server.post_json(
            &format!("{}/start", program("a")),
            json!({"system.profile.name": "p"}),
        ),
        409,
        "maxQueued",
    );
    let (code, body) = server.post(&format!("{stopped}/stop"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"], "KILLED", "{body}");
    assert_eq!(body["cluster"]["status"], "DEPROVISIONED", "{body}");
    // Past maxQueueTime, the one still waiting is REJECTED with the reason.
    let r = wait_until(&server, &waiting, LONG, |r| r["status"] != "QUEUED");
    assert_eq!(r["status"], "REJECTED", "{r}");
    let why = r["failure"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("maxQueueTime") && why.contains("maxConcurrentRuns"),
        "{r}"
    );
    // Neither ever made a cluster or ran.
    assert_eq!(ran(&p.marker), vec![id(&first)]);
    let (code, _) = server.post(&format!("{first}/stop"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &first);
    assert_clean(&p.sim, &[&id(&first)], 1);
}

#[test]
fn one_namespaces_long_queue_does_not_hold_up_anothers_run() {
    let (a, b) = (place(), place());
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    for ns in ["big", "small"] {
        let (code, body) = server.put(
            &format!("/v3/namespaces/{ns}"),
            json!({"maxLiveRuns": 1, "queueRuns": true}),
        );
        assert_eq!(code, 200, "{body}");
    }
    setup(
        &server,
        &a.sim,
        &a.marker,
        "big",
        "1",
        json!({"then": "sleep 0.2"}),
    );
    // small's runs hold their cluster until the test opens the gate: its second run is sure
    // to queue behind its first, however slow the machine is.
    let gate = b.marker.with_file_name("go");
    let hold = format!("while [ ! -e '{}' ]; do sleep 0.05; done", gate.display());
    setup(
        &server,
        &b.sim,
        &b.marker,
        "small",
        "1",
        json!({ "then": hold }),
    );
    let small_first = queued_start(&server, "small", json!({}));
    wait_until(&server, &small_first, LONG, |r| r["status"] == "RUNNING");
    // big's 60 runs take 0.2 s each, one at a time: over 12 s in all.
    let big: Vec<String> = (0..60)
        .map(|_| queued_start(&server, "big", json!({})))
        .collect();
    let small_next = queued_start(&server, "small", json!({}));
    assert_eq!(status(&server, &small_next)["status"], "QUEUED");
    std::fs::write(&gate, "").expect("open the gate");
    // small's second run starts as soon as its first lets go, while big's queue is long.
    let started = wait_until(&server, &small_next, LONG, |r| r["status"] != "QUEUED");
    let admitted = started["queue"]["admitted"].as_u64().expect("admitted");
    let big_left = big
        .iter()
        .filter(|r| {
            let r = status(&server, r);
            r["queue"]["admitted"].as_u64().is_none_or(|t| t > admitted)
        })
        .count();
    assert!(big_left > 10, "only {big_left} of big's runs were behind");
    for run in big.iter().chain([&small_first, &small_next]) {
        let done = wait_deprovisioned(&server, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    assert_eq!(ran(&a.marker).len(), 60);
}

#[test]
fn a_server_killed_with_runs_queued_starts_each_once_after_a_restart() {
    let p = place();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data");
    let server = Server::start_at(&data, Options::default());
    setup(
        &server,
        &p.sim,
        &p.marker,
        "default",
        "1",
        json!({"maxConcurrentRuns": 2, "then": "sleep 0.5"}),
    );
    let runs: Vec<String> = (0..8)
        .map(|_| queued_start(&server, "default", json!({"system.run.queue": "true"})))
        .collect();
    assert_eq!(status(&server, &runs[7])["status"], "QUEUED");
    server.kill();
    let server = Server::start_at(&data, Options::default());
    for run in &runs {
        let done = wait_deprovisioned(&server, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    let mut ran = ran(&p.marker);
    ran.sort();
    let mut ids: Vec<String> = runs.iter().map(|r| id(r)).collect();
    ids.sort();
    assert_eq!(ran, ids, "each program ran once");
    assert_clean(
        &p.sim,
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
        1,
    );
}

/// Three servers on etcd: 300 runs queued through all of them under a limit of 5. Every
/// run starts once, whichever server takes it from the queue, and the sim's instances
/// (made after a run leaves the queue, deleted before it lets go of its slot) never number
/// more than 5 at once.
/// Three servers `s0`..`s2` of one installation on etcd (leases of `ttl`), app `a` with
/// `extra`, and `count` runs queued through the servers in turn.
struct Three {
    _cluster: crate::support::etcd::Cluster,
    _dir: tempfile::TempDir,
    p: Place,
    store: ebb::store::Store,
    servers: Vec<Option<Server>>,
    runs: Vec<String>,
}

const NAMES: [&str; 3] = ["s0", "s1", "s2"];

fn three(prefix: &str, ttl: Duration, extra: Value, count: usize) -> Three {
    use crate::support::installation::Installation;
    let cluster = crate::support::etcd::Cluster::start(1);
    let p = place();
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), ttl, prefix);
    let servers: Vec<Option<Server>> = NAMES.iter().map(|n| Some(install.server(n))).collect();
    let up = |i: usize| servers[i % NAMES.len()].as_ref().expect("up");
    setup(up(0), &p.sim, &p.marker, "default", "1", extra);
    let runs = (0..count)
        .map(|i| queued_start(up(i), "default", json!({"system.run.queue": "true"})))
        .collect();
    let store = ebb::store::Store::open_at(&install.location).expect("store");
    Three {
        _cluster: cluster,
        _dir: dir,
        p,
        store,
        servers,
        runs,
    }
}

impl Three {
    /// The server holding the queue duty, read from the store itself.
    fn queue_holder(&self) -> Option<String> {
        use ebb::store::Read;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(
            self.store
                .read(|r| r.get::<ebb::model::server::Owner>(ebb::store::Table::Duties, "queue")),
        )
        .expect("read")
        .map(|o| o.server)
    }

    /// A server still up that is not `name`.
    fn other_than(&self, name: &str) -> &Server {
        NAMES
            .iter()
            .zip(&self.servers)
            .find_map(|(n, s)| s.as_ref().filter(|_| *n != name))
            .expect("another server")
    }
}

#[test]
fn three_servers_start_300_queued_runs_under_a_limit_of_5_once_each() {
    let t = three(
        "/ebb-test/queue",
        Duration::from_secs(3),
        json!({"maxConcurrentRuns": 5}),
        300,
    );
    let (p, runs) = (&t.p, &t.runs);
    let first = t.servers[0].as_ref().expect("s0");
    for run in runs {
        let done = wait_until(first, run, Duration::from_secs(180), |r| {
            r["cluster"]["status"] == "DEPROVISIONED"
        });
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    let mut ran = ran(&p.marker);
    ran.sort();
    let mut ids: Vec<String> = runs.iter().map(|r| id(r)).collect();
    ids.sort();
    assert_eq!(ran, ids, "each program ran once");
    assert_clean(
        &p.sim,
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
        1,
    );
    // The most instances alive at once: each lives from its create to its delete.
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for i in instances(&p.sim) {
        let (made, gone) = (i["createdAt"].as_f64(), i["deletedAt"].as_f64());
        let (Some(made), Some(gone)) = (made, gone) else {
            panic!("instance without its times: {i}");
        };
        edges.push((made, 1));
        edges.push((gone, -1));
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut live, mut most) = (0, 0);
    for (_, d) in edges {
        live += d;
        most = most.max(live);
    }
    assert!(most <= 5, "{most} instances at once");
    assert!(most >= 2, "the runs never overlapped ({most})");
}

/// A profile's `queueRuns` makes its runs wait; a runtime argument still has the last word.
#[test]
fn a_profile_that_queues_runs_makes_its_starts_wait() {
    let p = place();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let _ = std::fs::create_dir_all(&p.sim);
    let mut body = crate::support::profiles::profile_body(
        "sim",
        &[
            ("stateDir", p.sim.to_str().expect("utf-8"), false),
            ("nodes", "1", false),
        ],
    );
    body["queueRuns"] = json!(true);
    crate::support::profiles::put_profile_body(&server, "q", body);
    let script = format!("echo \"$EBB_RUN_ID\" >> '{}'; sleep 60", p.marker.display());
    deploy(&server, "a", &script, json!({"maxConcurrentRuns": 1}));
    let start = |args: Value| server.post_json(&format!("{}/start", program("a")), args);
    let (code, first) = start(json!({"system.profile.name": "q"}));
    assert_eq!(code, 200, "{first}");
    let (code, second) = start(json!({"system.profile.name": "q"}));
    assert_eq!(code, 200, "{second}");
    let second = format!(
        "{}/runs/{}",
        program("a"),
        second["runId"].as_str().expect("id")
    );
    assert_eq!(status(&server, &second)["status"], "QUEUED");
    assert_error(
        start(json!({"system.profile.name": "q", "system.run.queue": "false"})),
        409,
        "maxConcurrentRuns",
    );
    let first = format!(
        "{}/runs/{}",
        program("a"),
        first["runId"].as_str().expect("id")
    );
    for run in [&second, &first] {
        let (code, body) = server.post(&format!("{run}/stop"));
        assert_eq!(code, 200, "{body}");
        wait_deprovisioned(&server, run);
    }
}

/// The server that starts queued runs is SIGKILLed with runs still queued: another takes the
/// duty over (its record goes with the dead server's lease) and starts the rest, each once,
/// under the limit.
#[test]
fn the_dispatching_server_dies_and_another_starts_the_rest_of_the_queue() {
    let mut t = three(
        "/ebb-test/queue-failover",
        Duration::from_secs(3),
        json!({"maxConcurrentRuns": 2, "then": "sleep 0.3"}),
        30,
    );
    let holder = t.queue_holder().expect("a server holds the queue");
    let victim = NAMES
        .iter()
        .position(|n| *n == holder)
        .expect("a known server");
    t.servers[victim].take().expect("up").kill();
    let survivor = t.other_than(&holder);
    let (p, runs) = (&t.p, &t.runs);
    let mut completed = 0;
    for run in runs {
        let done = wait_until(survivor, run, Duration::from_secs(120), |r| {
            r["cluster"]["status"] == "DEPROVISIONED"
        });
        // A run the dead server carried when it died may end FAILED (its program was on that
        // server's host, or about to be); none is left queued, and no program ran twice.
        let times = ran(&p.marker).iter().filter(|l| **l == id(run)).count();
        if done["status"] == "COMPLETED" {
            completed += 1;
            assert_eq!(times, 1, "{done}");
        } else {
            assert_eq!(done["failure"]["kind"], "server-lost", "{done}");
            assert!(times <= 1, "{done}");
        }
    }
    // The dead server carried at most two runs (the limit): the rest completed.
    assert!(completed >= 28, "{completed} of 30 completed");
    let now = t.queue_holder().expect("a server holds the queue");
    assert_ne!(now, holder);
}

/// The server that starts queued runs is drained (asked through another): it gives the duty
/// up at once, and another server starts the rest of the queue while it drains.
#[test]
fn a_drained_dispatcher_gives_the_queue_to_another_server() {
    let t = three(
        "/ebb-test/queue-drain",
        Duration::from_secs(30),
        json!({"maxConcurrentRuns": 1, "then": "sleep 0.2"}),
        12,
    );
    let first = t.queue_holder().expect("a server holds the queue");
    let other = t.other_than(&first);
    let (code, body) = other.post(&format!("/v3/servers/{first}/drain"));
    assert_eq!(code, 202, "{body}");
    // With a 30 s lease, only giving the duty up lets the queue go on this soon.
    for run in &t.runs {
        let done = wait_until(other, run, Duration::from_secs(25), |r| {
            r["cluster"]["status"] == "DEPROVISIONED"
        });
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    assert_ne!(t.queue_holder().as_deref(), Some(first.as_str()));
    assert_eq!(ran(&t.p.marker).len(), 12);
}
