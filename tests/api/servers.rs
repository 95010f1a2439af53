//! Several servers as one installation, on a real etcd whatever `EBB_TEST_STORE` says: each
//! registers under a lease, the server that accepts a start owns the run, and when an owner
//! dies the others take its runs over and finish them with nothing made or deleted twice.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::bench::{server_figures, wait_for_event};
use crate::support::clock::SteppedClock;
use crate::support::etcd::Cluster;
use crate::support::installation::Installation;
use crate::support::profiles::sim_profile;
use crate::support::runs::{
    assert_all_completed, assert_clean, beats, calls, deploy, epoch_ns, now_secs, start, sub,
    wait_deprovisioned, wait_for_beats, wait_for_call, wait_for_calls, wait_for_silence,
    wait_until,
};
use crate::support::server::{Options, Server, make_token, signal};

/// The lease time to live the servers of these tests keep.
const TTL: Duration = Duration::from_secs(3);

/// The names of the servers `server` lists.
fn servers(server: &Server) -> Vec<String> {
    let (code, body) = server.get("/v3/servers");
    assert_eq!(code, 200, "{body}");
    let mut names: Vec<String> = body
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["name"].as_str().expect("name").to_string())
        .collect();
    names.sort();
    names
}

fn events(server: &Server, run: &str) -> Vec<Value> {
    let (code, body) = server.get(&format!("{run}/events"));
    assert_eq!(code, 200, "{body}");
    body.as_array().cloned().unwrap_or_default()
}

/// Three servers; the owner of four runs is SIGKILLed mid-provisioning: the other two take
/// the runs over within the lease's time to live and a few seconds, every run completes, and
/// the sim's call log shows each node created and deleted once.
#[test]
fn a_killed_owners_runs_are_taken_over_mid_provisioning() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/three-servers");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let s2 = install.server("s2");
    assert_eq!(servers(&s1), ["s0", "s1", "s2"]);
    sim_profile(
        &s0,
        "p",
        &sim,
        &[("nodes", "2"), ("createLatency", "1s")],
        0,
        None,
    );
    deploy(&s0, "a", "sleep 0.2", json!({}));
    let runs: Vec<String> = (0..4)
        .map(|_| start(&s0, "a", json!({"system.profile.name": "p"})))
        .collect();
    for run in &runs {
        let (_, view) = s2.get(run);
        assert_eq!(view["owner"], "s0", "{view}");
    }
    wait_for_call(&sim, "create");
    s0.kill();
    let killed = Instant::now();

    // Every run gets a new owner among the two left.
    for run in &runs {
        loop {
            let (_, view) = s1.get(run);
            let owner = view["owner"].as_str().unwrap_or_default().to_string();
            if owner == "s1" || owner == "s2" || view["cluster"]["status"] == "DEPROVISIONED" {
                break;
            }
            assert!(
                killed.elapsed() < TTL + Duration::from_secs(10),
                "run {run} not taken over: {view}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(servers(&s2), ["s1", "s2"]);
    for run in &runs {
        let done = wait_deprovisioned(&s1, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
        assert!(done["owner"].is_null(), "an ended run has no owner: {done}");
        let took = events(&s1, run)
            .iter()
            .filter(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.ends_with("took the run over"))
            })
            .count();
        assert_eq!(took, 1, "run {run} was taken over once");
    }
    let ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    assert_clean(&sim, &ids, 2);
}

/// Runs started on different servers are owned by the server that accepted each; any server
/// answers for any run, and a command sent to a server that does not own the run reaches the
/// owner.
#[test]
fn the_server_that_accepts_a_start_owns_the_run_and_commands_reach_it() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/two-servers");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    deploy(&s0, "a", "sleep 30", json!({}));
    let on0 = start(&s0, "a", json!({"system.profile.name": "p"}));
    let on1 = start(&s1, "a", json!({"system.profile.name": "p"}));
    let (_, v0) = s1.get(&on0);
    let (_, v1) = s0.get(&on1);
    assert_eq!(v0["owner"], "s0", "{v0}");
    assert_eq!(v1["owner"], "s1", "{v1}");
    let (code, list) = s0.get("/v3/servers");
    assert_eq!(code, 200, "{list}");
    for s in list.as_array().expect("list") {
        assert_eq!(s["runs"], 1, "{s}");
        assert!(s["lease"].as_i64().is_some_and(|l| l != 0), "{s}");
        assert!(
            s["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("http://127.0.0.1:")),
            "{s}"
        );
    }
    // Each run is stopped through the server that does not own it.
    for (run, via) in [(&on0, &s1), (&on1, &s0)] {
        wait_until(via, run, Duration::from_secs(30), |r| {
            r["status"] == "RUNNING"
        });
        let (code, body) = via.post(&format!("{run}/stop"));
        assert_eq!(code, 200, "{body}");
        // Accepted: still stopping, or (the owner was quick) already stopped.
        assert!(
            body["stopping"] == true || body["status"] == "KILLED",
            "{body}"
        );
    }
    for run in [&on0, &on1] {
        let done = wait_deprovisioned(&s0, run);
        assert_eq!(done["status"], "KILLED", "{done}");
    }
}

/// A token revoked through one server is refused by that server at once and by every other
/// within a second ([`ebb::service::tokens::REVOKED_WITHIN`]): each checks a request's token
/// on a look at the store no older than that, without a round trip to etcd of its own.
#[test]
fn a_token_revoked_on_one_server_is_refused_by_every_server_within_a_second() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/revoked");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let ci = make_token(&s0, "ci", json!({"namespaces": {"default": "viewer"}}));
    for s in [&s0, &s1] {
        let (code, reply) = s.call("GET", "/v3/namespaces/default", None, Some(&ci));
        assert_eq!(code, 200, "{reply}");
    }
    let (code, revoked) = s0.delete("/v3/tokens/ci");
    assert_eq!(code, 200, "{revoked}");
    let (code, reply) = s0.call("GET", "/v3/namespaces/default", None, Some(&ci));
    assert_eq!(code, 401, "{reply}");
    std::thread::sleep(ebb::service::tokens::REVOKED_WITHIN);
    let (code, reply) = s1.call("GET", "/v3/namespaces/default", None, Some(&ci));
    assert_eq!(code, 401, "{reply}");
}

/// Long polls and token checks cost no round trip to etcd of their own: a poll finds news in
/// the copy the server keeps (the history of a run that just ended too), and a token is
/// checked on a look no older than a second. Thirty polls of an ended run's events, each a
/// request of its own, once cost sixty round trips (a revision request for the token and a
/// read of the history each).
#[test]
fn long_polls_and_token_checks_need_no_round_trip_of_their_own() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/polls");
    let s0 = install.server("s0");
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    deploy(&s0, "a", "true", json!({}));
    let run = start(&s0, "a", json!({"system.profile.name": "p"}));
    wait_for_event(&s0, &run, "cluster DEPROVISIONED");
    let looks = |s: &Server| {
        let trips = server_figures(s);
        assert!(
            trips.get("trip commit").is_some_and(|n| *n > 0.0),
            "the server counts its round trips: {trips:?}"
        );
        ["trip probe", "trip read"]
            .iter()
            .map(|k| trips.get(*k).copied().unwrap_or(0.0))
            .sum::<f64>()
    };
    let before = looks(&s0);
    for _ in 0..30 {
        let (code, events) = s0.get(&format!("{run}/events?after=0&wait=10s"));
        assert_eq!(code, 200, "{events}");
        assert!(!events.as_array().expect("list").is_empty(), "{events}");
    }
    // The servers' own rounds (the queue, the scheduler, the usage ledger) may look meanwhile.
    let spent = looks(&s0) - before;
    assert!(
        spent < 15.0,
        "30 polls cost {spent} revision requests and reads"
    );
}

/// What another server asks of a run it does not own is answered from the owner's side: the
/// program's output (from the owner while the run lives, from the server that launched it
/// once it has ended), and a long poll that hears the owner's news through the store's watch
/// (its fallback look comes only every 5 s).
#[test]
fn a_non_owner_reads_the_owners_output_and_hears_its_news_at_once() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/non-owner");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    deploy(
        &s0,
        "a",
        "echo out-of-the-program; echo on-stderr >&2; sleep 2",
        json!({}),
    );
    let run = start(&s0, "a", json!({"system.profile.name": "p"}));
    wait_until(&s1, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let last = events(&s1, &run)
        .last()
        .and_then(|e| e["seq"].as_u64())
        .expect("events");
    // The next event (the program's end) reaches a long poll on s1 as soon as s0 records it.
    let (code, news) = s1.get(&format!("{run}/events?after={last}&wait=30s"));
    let heard = crate::support::runs::now_secs();
    assert_eq!(code, 200, "{news}");
    let first = &news.as_array().expect("events")[0];
    let late = heard - first["time"].as_f64().expect("time");
    assert!(
        late < 2.5,
        "the news came {late:.1} s after it was recorded: {first}"
    );
    for (when, server) in [("live", &s1), ("live", &s0)] {
        let (code, logs) = server.get(&format!("{run}/logs"));
        assert_eq!(code, 200, "{logs}");
        assert!(
            logs["stdout"]
                .as_str()
                .is_some_and(|o| o.contains("out-of-the-program")),
            "{when}: {logs}"
        );
    }
    assert_eq!(wait_deprovisioned(&s1, &run)["status"], "COMPLETED");
    let (code, logs) = s1.get(&format!("{run}/logs"));
    assert_eq!(code, 200, "{logs}");
    assert!(
        logs["stdout"]
            .as_str()
            .is_some_and(|o| o.contains("out-of-the-program")),
        "ended: {logs}"
    );
    assert!(
        logs["stderr"]
            .as_str()
            .is_some_and(|o| o.contains("on-stderr")),
        "ended: {logs}"
    );
}

/// Commands with bodies, and the web UI's, reach the run's owner through any server: a stop
/// that keeps the cluster and an extend through the API, then a deprovision through the UI
/// with a session made on the server that does not own the run.
#[test]
fn commands_with_bodies_and_the_uis_reach_the_owner_through_any_server() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/forwarded");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    deploy(&s0, "a", "sleep 30", json!({}));
    let run = start(&s0, "a", json!({"system.profile.name": "p"}));
    wait_until(&s1, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let (code, body) = s1.post_json(&format!("{run}/stop"), json!({"keepalive": true}));
    assert_eq!(code, 200, "{body}");
    let waiting = wait_until(&s1, &run, Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    assert_eq!(waiting["status"], "KILLED", "{waiting}");
    let until = waiting["cluster"]["expiresAt"].as_u64().expect("expiresAt") + 3600;
    let (code, body) = s1.post_json(&format!("{run}/extend"), json!({ "expireAt": until }));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["cluster"]["expiresAt"], until, "{body}");
    assert_eq!(body["owner"], "s0", "{body}");

    let cookie = crate::ui::cookie_of(&crate::ui::sign_in(&s1, &s1.token().expect("token")));
    let id = run.rsplit('/').next().expect("run id");
    let reply = crate::ui::raw()
        .post(format!(
            "{}/ui/ns/default/apps/a/p/runs/{id}/deprovision",
            s1.url
        ))
        .header("Cookie", &cookie)
        .form(&[("x", "")])
        .send()
        .expect("deprovision");
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.headers()["hx-trigger"], "ebb-run-changed");
    let done = wait_deprovisioned(&s1, &run);
    let (_, events) = s0.get(&format!("{run}/events"));
    assert!(
        events.to_string().contains("deprovision requested"),
        "{events}"
    );
    assert_eq!(done["status"], "KILLED", "{done}");
    assert_clean(&sim, &[id], 1);
}

/// The owner dies while one run's program runs on its host and another run's cluster is
/// WAITING after a failure: the program is recorded lost (`server-lost`, never started
/// again) and its cluster deprovisioned as the profile's keepalive says; the WAITING cluster
/// still expires on time under its new owner.
#[test]
fn a_program_on_a_dead_servers_host_is_lost_and_waiting_clusters_still_expire() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("started");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/lost-program");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let _s2 = install.server("s2");
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    sim_profile(&s0, "w", &sim, &[("nodes", "1")], 4, None);
    let script = format!("echo x >> {}; sleep 6", marker.display());
    deploy(&s0, "long", &script, json!({}));
    deploy(&s0, "fail", "exit 3", json!({}));
    let long = start(&s0, "long", json!({"system.profile.name": "p"}));
    let failed = start(&s0, "fail", json!({"system.profile.name": "w"}));
    wait_until(&s1, &long, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    wait_until(&s1, &failed, Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    s0.kill();

    let done = wait_deprovisioned(&s1, &long);
    assert_eq!(done["status"], "FAILED", "{done}");
    assert_eq!(done["failure"]["kind"], "server-lost", "{done}");
    assert!(
        done["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("s0")),
        "{done}"
    );
    let starts = std::fs::read_to_string(&marker).expect("marker");
    assert_eq!(starts.lines().count(), 1, "the program started once");

    let expired = wait_deprovisioned(&s1, &failed);
    assert_eq!(expired["status"], "FAILED", "{expired}");
    assert_eq!(expired["failure"]["kind"], "program", "{expired}");
    assert_clean(&sim, &[long.as_str(), failed.as_str()], 1);
}

/// An owner paused (SIGSTOP) past its lease while it provisions loses its runs to the others;
/// woken again (SIGCONT), it makes no cloud call for them and writes nothing: every node is
/// created and deleted once, each program runs once, and the runs finish under their new
/// owners. (It is paused once every create was made: a process paused between its last
/// check and a call makes that one call when it wakes, which only a cloud's own idempotency,
/// such as EC2's client token, can answer; the sim has none.)
#[test]
fn a_paused_owner_that_wakes_after_losing_its_lease_does_nothing_for_its_old_runs() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("programs");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/paused-owner");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let _s2 = install.server("s2");
    sim_profile(
        &s0,
        "p",
        &sim,
        &[("nodes", "3"), ("createLatency", "2s")],
        0,
        None,
    );
    deploy(
        &s0,
        "a",
        &format!("echo x >> {}", marker.display()),
        json!({}),
    );
    let runs: Vec<String> = (0..3)
        .map(|_| start(&s0, "a", json!({"system.profile.name": "p"})))
        .collect();
    wait_for_calls(&sim, 9, "create", |c| c["op"] == "create");
    signal(s0.pid(), "STOP");
    for run in &runs {
        wait_until(&s1, run, TTL + Duration::from_secs(10), |r| {
            r["owner"] == "s1" || r["owner"] == "s2" || r["cluster"]["status"] == "DEPROVISIONED"
        });
    }
    let woken = now_secs();
    signal(s0.pid(), "CONT");
    for run in &runs {
        let done = wait_deprovisioned(&s1, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    // Give the woken server time to try anything it still had in mind.
    std::thread::sleep(Duration::from_secs(2));
    let late: Vec<Value> = calls(&sim)
        .into_iter()
        .filter(|c| {
            c["time"].as_f64() > Some(woken)
                && c["op"] == "create"
                && c["tags"]["ebb:server"] == "s0"
        })
        .collect();
    assert!(
        late.is_empty(),
        "the woken server called the cloud: {late:?}"
    );
    let ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    assert_clean(&sim, &ids, 3);
    let programs = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(programs.lines().count(), 3, "each run's program ran once");
    // It learnt its lease had ended and let its runs go (or had a write refused first).
    let logs = s0.logs();
    let said = |what: &str| logs.iter().any(|l| l.contains(what));
    assert!(said("lease ended"), "{logs:#?}");
    assert!(
        said("run abandoned") || said("no longer owned"),
        "{logs:#?}"
    );
}

/// The janitor's schedule runs on one server of the installation at a time, and moves to
/// another when that one dies.
#[test]
fn one_server_sweeps_on_schedule_and_another_takes_over_when_it_dies() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/one-janitor");
    let every = ["--janitor-interval", "1s"];
    let s0 = install.server_with("s0", &every);
    let s1 = install.server_with("s1", &every);
    let sweeps = |s: &Server| {
        s.logs()
            .iter()
            .filter(|l| l.contains("janitor sweep done"))
            .count()
    };
    std::thread::sleep(Duration::from_millis(3500));
    let (n0, n1) = (sweeps(&s0), sweeps(&s1));
    assert!(
        (n0 > 0) != (n1 > 0),
        "exactly one server sweeps: s0 {n0}, s1 {n1}"
    );
    let (leader, other) = if n0 > 0 { (s0, s1) } else { (s1, s0) };
    leader.kill();
    let before = sweeps(&other);
    let killed = Instant::now();
    while sweeps(&other) <= before {
        assert!(
            killed.elapsed() < TTL + Duration::from_secs(10),
            "no other server took the janitor's schedule over"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server drained under load (asked through another server) hands every run to the other
/// without failing one, waits for the program it launched to end, and exits; every run
/// completes with each node made and deleted once.
#[test]
fn a_drain_under_load_hands_every_run_over_and_loses_none() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/drain");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    sim_profile(
        &s0,
        "p",
        &sim,
        &[
            ("nodes", "2"),
            ("createLatency", "300ms"),
            ("deleteLatency", "300ms"),
        ],
        0,
        None,
    );
    deploy(&s0, "a", "sleep 1", json!({}));
    let runs: Vec<String> = (0..6)
        .map(|i| {
            std::thread::sleep(Duration::from_millis(150 * i));
            start(&s0, "a", json!({"system.profile.name": "p"}))
        })
        .collect();
    let (code, body) = s1.post("/v3/servers/s0/drain");
    assert_eq!(code, 202, "{body}");
    // A draining server takes no new run.
    let (code, body) = s0.post_json(
        "/v3/namespaces/default/apps/a/workflows/p/start",
        json!({"system.profile.name": "p"}),
    );
    assert_eq!(code, 503, "{body}");
    let status = s0.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{status:?}");
    for run in &runs {
        let done = wait_deprovisioned(&s1, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    assert_eq!(servers(&s1), ["s1"]);
    let taken = runs
        .iter()
        .filter(|run| {
            events(&s1, run)
                .iter()
                .any(|e| e["message"] == "server s1 took the run over")
        })
        .count();
    assert!(taken > 0, "no run was handed over");
    let ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    assert_clean(&sim, &ids, 2);
}

/// The owner dies while the run's program runs on a remote master over SSH: the program
/// keeps running there, the new owner re-attaches to it (never launching it again) and
/// records its exit status, and the nodes are cleaned.
#[test]
fn a_remote_program_keeps_running_and_is_reattached_by_the_new_owner() {
    let sshd = crate::support::sshd::Sshd::start(&["127.0.1.81", "127.0.1.82"]);
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/remote-program");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let s2 = install.server("s2");
    crate::hosts::put_key(&s0, &sshd);
    crate::hosts::hosts_profile(&s0, &sshd, "machines", &[]);
    let starts = dir.path().join("starts");
    let gate = dir.path().join("gate");
    deploy(
        &s0,
        "a",
        &format!(
            "echo started >> '{}'; echo before; while [ ! -e '{}' ]; do sleep 0.1; done; echo after; exit 3",
            starts.display(),
            gate.display()
        ),
        json!({}),
    );
    let run = start(&s0, "a", json!({"system.profile.name": "machines"}));
    wait_until(&s1, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    // Until the program has surely started on the master.
    let started = Instant::now();
    while !starts.exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "not started");
        std::thread::sleep(Duration::from_millis(20));
    }
    s0.kill();
    let taken = wait_until(&s1, &run, TTL + Duration::from_secs(10), |r| {
        r["owner"] == "s1" || r["owner"] == "s2"
    });
    let owner = if taken["owner"] == "s1" { &s1 } else { &s2 };
    std::fs::write(&gate, "").expect("gate");
    let done = wait_deprovisioned(&s1, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    assert_eq!(done["exit"]["code"], 3, "{done}");
    assert_eq!(done["failure"]["kind"], "program", "{done}");
    let launched = std::fs::read_to_string(&starts).unwrap_or_default();
    assert_eq!(launched.lines().count(), 1, "launched once");
    // Its output flows on to the new owner, whole (kept in the owner's data dir).
    let (code, logs) = owner.get(&format!("{run}/logs"));
    assert_eq!(code, 200, "{logs}");
    assert!(logs.to_string().contains("before\\nafter\\n"), "{logs}");
    assert_eq!(
        crate::hosts::node_dirs(&sshd.remote_dir()),
        Vec::<String>::new()
    );
}

/// A program on a node whose run no server holds any more is stopped by its guard there: its
/// only server SIGKILLed (no other can take the run over and move its fence on), the program
/// outlives the lease by the grace a takeover would have had (three times its time to live)
/// and then stops; the server started again finds it stopped by its guard, counts it lost,
/// and its retry starts on the node after it, never beside it.
#[test]
fn a_remote_program_no_server_holds_is_stopped_by_its_guard_and_its_retry_runs_after() {
    let sshd = crate::support::sshd::Sshd::start(&["127.0.1.84"]);
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/remote-fence");
    let s0 = install.server("s0");
    crate::hosts::put_key(&s0, &sshd);
    crate::hosts::hosts_profile(&s0, &sshd, "machines", &[]);
    let file = dir.path().join("beats");
    deploy(
        &s0,
        "beat",
        &format!(
            "while :; do echo \"$$ $(date +%s%N)\" >> '{}'; sleep 0.1; done",
            file.display()
        ),
        json!({"retry": {"maxAttempts": 2, "backoff": "1s"}}),
    );
    let run = start(&s0, "beat", json!({"system.profile.name": "machines"}));
    wait_for_beats(&file, 0, Duration::from_secs(60));

    let killed = epoch_ns();
    s0.kill();
    // Until it has not beaten for a second (the program beats on with no server otherwise).
    let last = wait_for_silence(&file, TTL * 4 + Duration::from_secs(10))[0].2;
    let lived = Duration::from_nanos(u64::try_from(last.saturating_sub(killed)).unwrap_or(0));
    assert!(
        lived > TTL * 3 && lived < TTL * 4 + Duration::from_millis(1500),
        "the program beat {lived:?} after its only server was killed (lease {TTL:?}, grace three leases)"
    );

    let s0 = install.server("s0");
    let seen = wait_for_beats(&file, 1, Duration::from_secs(60));
    let (first, second) = (&seen[0], &seen[1]);
    assert!(first.2 < second.1, "two copies at once: {seen:?}");
    let (_, view) = s0.get(&run);
    assert_eq!(view["attempt"], 2, "{view}");
    assert!(
        events(&s0, &run).iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("its guard on the node stopped it"))),
        "{:?}",
        events(&s0, &run)
    );
    let (code, _) = s0.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
    let done = wait_deprovisioned(&s0, &run);
    assert_eq!(done["status"], "KILLED", "{done}");
    assert_eq!(beats(&file).len(), 2, "each attempt ran once");
    assert_eq!(
        crate::hosts::node_dirs(&sshd.remote_dir()),
        Vec::<String>::new()
    );
}

/// During a rolling upgrade a server never takes over a run whose record a newer build wrote:
/// the run waits for a server of that build (here: until its record is set back).
#[test]
fn a_run_recorded_by_a_newer_build_is_never_taken_over_by_an_older_server() {
    use ebb::store::{Read, Store, Table};
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/upgrade");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 60, None);
    deploy(&s0, "a", "exit 1", json!({}));
    let run = start(&s0, "a", json!({"system.profile.name": "p"}));
    wait_until(&s1, &run, Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    s0.kill();
    // Marked as written by a newer build (which has the installation's key), before s0's
    // lease ends.
    let key = ebb::store::secure::Cipher::load_or_create(&dir.path().join("secure.key"))
        .expect("the installation's key");
    let store = Store::open_at(&install.location)
        .expect("store")
        .sealed(std::sync::Arc::new(key));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let id = run.rsplit('/').next().expect("id").to_string();
    let set_format = |format: u32| {
        let id = id.clone();
        rt.block_on(store.write(move |tx| {
            let key = format!("default/a/p/{id}");
            let mut record: Value = tx.get(Table::Runs, &key)?.expect("the run's record");
            record["format"] = json!(format);
            tx.put(Table::Runs, &key, &record)
        }))
        .expect("write");
    };
    set_format(999);
    std::thread::sleep(TTL + Duration::from_secs(3));
    let (_, view) = s1.get(&run);
    assert!(view["owner"].is_null(), "an older server took it: {view}");
    assert_eq!(view["cluster"]["status"], "WAITING", "{view}");
    // A server of its build (here: the record set back) takes it.
    set_format(1);
    wait_until(&s1, &run, TTL + Duration::from_secs(10), |r| {
        r["owner"] == "s1"
    });
    let (code, body) = s1.post(&format!("{run}/deprovision"));
    assert_eq!(code, 200, "{body}");
    let done = wait_deprovisioned(&s1, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
}

/// Chaos: 100 runs through a flaky sim on three servers and three etcd members, each server in
/// a network namespace of its own, while random servers are, in turns, SIGKILLed and started
/// again, paused (SIGSTOP) for twice their lease and woken, or cut off (their link down) for
/// twice their lease and joined again. In the end no run is stuck, no instance is left or
/// made twice, and no program ran twice.
#[test]
fn chaos_of_killed_paused_cut_and_restarted_servers_leaks_nothing_and_runs_nothing_twice() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let mut network = crate::support::netns::Network::new();
    let spaces: Vec<_> = (0..3).map(|_| network.space()).collect();
    let network = Arc::new(network);
    let spaces = Arc::new(spaces);
    let cluster = Cluster::start_also_on(3, &network.host());
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let marker = dir.path().join("programs");
    let install = Arc::new(Installation::new(
        &cluster,
        dir.path(),
        TTL,
        "/ebb-test/chaos",
    ));
    let names = ["s0", "s1", "s2"];
    let servers: Arc<Mutex<Vec<Option<Server>>>> = Arc::new(Mutex::new(
        names
            .iter()
            .zip(spaces.iter())
            .map(|(n, space)| Some(install.server_in(n, space)))
            .collect(),
    ));
    {
        let up = servers.lock().expect("servers");
        let s0 = up[0].as_ref().expect("s0");
        sim_profile(
            s0,
            "p",
            &sim,
            &[
                ("nodes", "2"),
                ("createLatency", "300ms"),
                ("deleteLatency", "200ms"),
                ("transientErrorRate", "0.1"),
            ],
            0,
            None,
        );
        let script = format!("echo $EBB_RUN_ID >> {}; sleep 0.5", marker.display());
        deploy(s0, "a", &script, json!({}));
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The server paused or cut off now (none: usize::MAX): starts go to the others meanwhile.
    let away = Arc::new(AtomicUsize::new(usize::MAX));
    // Kills, pauses and cuts made so far.
    let faults = Arc::new(AtomicUsize::new(0));
    let chaos = {
        let (servers, install, stop, away, faults, network, spaces) = (
            Arc::clone(&servers),
            Arc::clone(&install),
            Arc::clone(&stop),
            Arc::clone(&away),
            Arc::clone(&faults),
            Arc::clone(&network),
            Arc::clone(&spaces),
        );
        std::thread::spawn(move || {
            let (mut kills, mut pauses, mut cuts) = (0, 0, 0);
            while !stop.load(Ordering::SeqCst) {
                faults.store(kills + pauses + cuts, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1500));
                let i = fastrand::usize(..names.len());
                match (kills + pauses + cuts) % 3 {
                    1 => {
                        let pid = servers.lock().expect("servers")[i]
                            .as_ref()
                            .map(Server::pid);
                        if let Some(pid) = pid {
                            away.store(i, Ordering::SeqCst);
                            signal(pid, "STOP");
                            std::thread::sleep(TTL * 2);
                            signal(pid, "CONT");
                            away.store(usize::MAX, Ordering::SeqCst);
                            pauses += 1;
                        }
                    }
                    2 => {
                        away.store(i, Ordering::SeqCst);
                        network.cut(&spaces[i]);
                        std::thread::sleep(TTL * 2);
                        network.heal(&spaces[i]);
                        away.store(usize::MAX, Ordering::SeqCst);
                        cuts += 1;
                    }
                    _ => {
                        let victim = servers.lock().expect("servers")[i].take();
                        if let Some(victim) = victim {
                            victim.kill();
                            kills += 1;
                        }
                        std::thread::sleep(Duration::from_millis(700));
                        let restarted = install.server_in(names[i], &spaces[i]);
                        servers.lock().expect("servers")[i] = Some(restarted);
                    }
                }
            }
            (kills, pauses, cuts)
        })
    };
    let start_path = "/v3/namespaces/default/apps/a/workflows/p/start";
    let mut started = 0;
    let mut refused = Vec::new();
    while started < 100 {
        assert!(
            refused.len() < 1000,
            "starts keep failing: {:?}",
            &refused[..5]
        );
        let answer = {
            let up = servers.lock().expect("servers");
            let asleep = away.load(Ordering::SeqCst);
            let live: Vec<&Server> = up
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != asleep)
                .filter_map(|(_, s)| s.as_ref())
                .collect();
            let server = live[fastrand::usize(..live.len())];
            server.try_post_json(start_path, json!({"system.profile.name": "p"}))
        };
        match answer {
            Some((200, _)) => started += 1,
            // A start cut off by a kill may or may not be recorded: the runs are counted
            // from the store at the end.
            other => {
                refused.push(other);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    // The runs go on while the chaos does: at least two kills, two pauses and two cuts.
    while faults.load(Ordering::SeqCst) < 6 {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    let (kills, pauses, cuts) = chaos.join().expect("chaos");
    assert!(
        kills >= 2 && pauses >= 2 && cuts >= 2,
        "only {kills} kills, {pauses} pauses and {cuts} cuts"
    );
    let up = servers.lock().expect("servers");
    let s = up[0].as_ref().expect("s0 is up");
    // Every run ends, whoever owns it.
    let deadline = Instant::now() + Duration::from_secs(180);
    let runs = loop {
        let (code, runs) = s.get("/v3/namespaces/default/runs?limit=1000");
        assert_eq!(code, 200, "{runs}");
        let runs = runs.as_array().cloned().unwrap_or_default();
        let stuck: Vec<&Value> = runs
            .iter()
            .filter(|r| r["cluster"]["status"] != "DEPROVISIONED")
            .collect();
        if stuck.is_empty() {
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "{} runs stuck: {:?}",
            stuck.len(),
            stuck
                .iter()
                .map(|r| (
                    &r["runid"],
                    &r["status"],
                    &r["cluster"]["status"],
                    &r["owner"]
                ))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(runs.len() >= 100, "{} runs", runs.len());
    let ids: Vec<String> = runs
        .iter()
        .map(|r| r["runid"].as_str().expect("id").to_string())
        .collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert!(id_refs.len() >= 100);
    // No node of any run was made twice; a completed run made both.
    let mut made: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for i in crate::support::runs::instances(&sim) {
        let run = i["tags"]["ebb:run"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let node = i["tags"]["ebb:node"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *made.entry((run, node)).or_default() += 1;
    }
    let twice: Vec<_> = made.iter().filter(|(_, n)| **n > 1).collect();
    if let Some(((run, _), _)) = twice.first() {
        // What the cloud was asked and what the run recorded, to tell why.
        let asked = crate::support::runs::calls(&sim);
        let ids: Vec<String> = crate::support::runs::instances(&sim)
            .iter()
            .filter(|i| i["tags"]["ebb:run"] == run.as_str())
            .map(|i| i["id"].as_str().unwrap_or_default().to_string())
            .collect();
        let asked: Vec<&Value> = asked
            .iter()
            .filter(|c| {
                c["tags"]["ebb:run"] == run.as_str() || ids.iter().any(|id| c["id"] == id.as_str())
            })
            .collect();
        let (_, events) = s.get(&format!(
            "/v3/namespaces/default/apps/a/workflows/p/runs/{run}/events"
        ));
        panic!("made twice: {twice:?}\ncalls: {asked:#?}\nevents: {events:#}");
    }
    for run in runs.iter().filter(|r| r["status"] == "COMPLETED") {
        assert_clean(&sim, &[run["runid"].as_str().expect("id")], 2);
    }
    // Every instance of every run was deleted exactly once (assert_clean's check of the
    // whole cloud).
    assert_clean(&sim, &[], 0);
    let programs = std::fs::read_to_string(&marker).unwrap_or_default();
    for id in &id_refs {
        let times = programs.lines().filter(|l| l == id).count();
        assert!(times <= 1, "run {id}'s program ran {times} times");
    }
    let completed = runs.iter().filter(|r| r["status"] == "COMPLETED").count();
    assert!(completed > 0, "no run completed");
}

/// A `local` run whose owner dies: its sandboxes are on that server's host, out of reach of
/// the new owner, and the run's events say so; the program is recorded lost and the run
/// still ends. The daemon its service started runs on there until that server is started
/// again on its data dir, which deletes the sandboxes no run accounts for any more.
#[test]
fn a_local_runs_sandboxes_on_a_dead_server_are_reported_out_of_reach_and_swept_at_its_restart() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/local-sandboxes");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let beats_file = dir.path().join("beats");
    let daemon = format!(
        "while [ -d '{}' ]; do echo \"$$ $(date +%s%N)\" >> '{}'; sleep 0.1; done",
        dir.path().display(),
        beats_file.display()
    );
    let template = json!({
        "services": {"svc": {"actions": {
            "start": {"type": "shell", "script": format!(
                "nohup sh -c '{}' > /dev/null 2>&1 &", daemon.replace('\'', "'\\''"))}
        }}},
        "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
        "defaults": {"services": ["svc"]}
    });
    let (code, body) = s0.put("/v3/namespaces/default/templates/daemon", template);
    assert_eq!(code, 200, "{body}");
    let profile = crate::support::profiles::profile_body(
        "local",
        &[("nodes", "1", true), ("template", "daemon", true)],
    );
    let (code, body) = s0.put("/v3/namespaces/default/profiles/daemon", profile);
    assert_eq!(code, 200, "{body}");
    deploy(&s0, "a", "sleep 30", json!({}));
    let run = start(&s0, "a", json!({"system.profile.name": "daemon"}));
    wait_until(&s1, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    wait_for_beats(&beats_file, 0, Duration::from_secs(10));
    s0.kill();
    let done = wait_deprovisioned(&s1, &run);
    assert_eq!(done["failure"]["kind"], "server-lost", "{done}");
    let said = events(&s1, &run).iter().any(|e| {
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("out of this server's reach"))
    });
    assert!(said, "{:?}", events(&s1, &run));
    // The daemon runs on, out of reach.
    std::thread::sleep(Duration::from_secs(1));
    let last = beats(&beats_file)[0].2;
    assert!(
        epoch_ns().saturating_sub(last) < 500_000_000,
        "the daemon stopped by itself"
    );

    let restarted = epoch_ns();
    let s0 = install.server("s0");
    // The daemon in the dead server's sandbox stops soon after its restart.
    let seen = wait_for_silence(&beats_file, Duration::from_secs(20));
    assert!(seen[0].2 < restarted + 10_000_000_000, "{seen:?}");
    assert!(
        s0.logs()
            .iter()
            .any(|l| l.contains("local sandboxes no run accounts for were deleted")),
        "{:#?}",
        s0.logs()
    );
}

/// The owner dies mid-deprovisioning: another server takes the runs over and finishes the
/// deletes, each instance deleted exactly once.
#[test]
fn a_killed_owners_runs_are_taken_over_mid_deprovisioning() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/mid-delete");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let _s2 = install.server("s2");
    sim_profile(
        &s0,
        "p",
        &sim,
        &[("nodes", "2"), ("deleteLatency", "2s")],
        0,
        None,
    );
    deploy(&s0, "a", "true", json!({}));
    let runs: Vec<String> = (0..3)
        .map(|_| start(&s0, "a", json!({"system.profile.name": "p"})))
        .collect();
    for run in &runs {
        wait_until(&s1, run, Duration::from_secs(30), |r| {
            r["cluster"]["status"] == "DEPROVISIONING"
        });
    }
    wait_for_call(&sim, "delete");
    s0.kill();
    assert_all_completed(&s1, &runs, &sim, 2);
}

/// SIGTERM to a server started with `--drain` hands its runs over before it exits 0.
#[test]
fn sigterm_with_drain_hands_the_runs_over_first() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/sigterm-drain");
    let s0 = install.server_with("s0", &["--drain"]);
    let s1 = install.server("s1");
    sim_profile(
        &s0,
        "p",
        &sim,
        &[("nodes", "1"), ("createLatency", "1s")],
        0,
        None,
    );
    deploy(&s0, "a", "true", json!({}));
    let run = start(&s0, "a", json!({"system.profile.name": "p"}));
    let status = s0.terminate();
    assert!(status.success(), "{status:?}");
    let done = wait_deprovisioned(&s1, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let taken = events(&s1, &run)
        .iter()
        .any(|e| e["message"] == "server s1 took the run over");
    assert!(taken, "{:?}", events(&s1, &run));
    assert_clean(&sim, &[run.as_str()], 1);
}

/// Schedules fire on one server of the installation at a time; when it is SIGKILLed another
/// takes over within the lease's time to live and a few seconds, carries on from the last
/// recorded fire, and no fire time runs twice.
#[test]
fn the_scheduling_server_dies_and_another_fires_on_without_doubling_a_time() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/scheduler");
    // Fire times missed in the failover are late, not missed: all of them run.
    let grace = ["--schedule-grace", "60s"];
    let s0 = install.server_with("s0", &grace);
    let s1 = install.server_with("s1", &grace);
    let s2 = install.server_with("s2", &grace);
    deploy(&s0, "tick", "true", json!({}));
    let schedule = "/v3/namespaces/default/apps/tick/schedules/s";
    let (code, body) = s0.put(
        schedule,
        json!({"program": {"programName": "p", "programType": "WORKFLOW"},
               "trigger": {"type": "TIME", "cronExpression": "* * * * * *"},
               "status": "SCHEDULED"}),
    );
    assert_eq!(code, 200, "{body}");
    let fires = |s: &Server| -> Vec<Value> {
        let (code, body) = s.get(&format!("{schedule}/fires?limit=1000"));
        assert_eq!(code, 200, "{body}");
        body.as_array().expect("fires").clone()
    };
    let started = Instant::now();
    let firer = loop {
        if let Some(f) = fires(&s1).first() {
            break f["server"].as_str().expect("server").to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(15), "nothing fired");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut live = vec![("s0", s0), ("s1", s1), ("s2", s2)];
    let at = live
        .iter()
        .position(|(n, _)| *n == firer)
        .expect("a server fires");
    let (_, dead) = live.remove(at);
    dead.kill();
    let killed = Instant::now();
    let other = &live[0].1;
    let taken_over = loop {
        let newest = fires(other);
        if let Some(f) = newest.first()
            && f["server"] != firer.as_str()
        {
            break f["server"].as_str().expect("server").to_string();
        }
        assert!(
            killed.elapsed() < TTL + Duration::from_secs(10),
            "no other server fired after {:?}",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_ne!(taken_over, firer);
    std::thread::sleep(Duration::from_secs(2));
    let (code, _) = other.post(&format!("{schedule}/disable"));
    assert_eq!(code, 200);
    std::thread::sleep(Duration::from_millis(500));
    let all = fires(other);
    let mut times: Vec<u64> = all
        .iter()
        .map(|f| {
            assert_eq!(f["outcome"]["status"], "STARTED", "{f}");
            f["time"].as_u64().expect("time")
        })
        .collect();
    times.sort_unstable();
    let every: Vec<u64> = (times[0]..=*times.last().expect("fired"))
        .step_by(1000)
        .collect();
    assert_eq!(
        times, every,
        "each second fired exactly once across the failover"
    );
    let (code, runs) = other.get("/v3/namespaces/default/apps/tick/workflows/p/runs?limit=1000");
    assert_eq!(code, 200, "{runs}");
    assert_eq!(
        runs.as_array().expect("runs").len(),
        every.len(),
        "one run per fire"
    );
}

/// A run that ends while no server fires schedules (the one that did was SIGKILLed) still
/// fires the program-status triggers that name it, once, when another server takes the duty.
#[test]
fn a_run_end_while_no_server_fires_schedules_fires_its_trigger_once_after() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/ends");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    deploy(&s0, "a", "sleep 2", json!({}));
    deploy(&s0, "b", "true", json!({}));
    let on = |app: &str, name: &str, trigger: Value| {
        let (code, body) = s0.put(
            &format!("/v3/namespaces/default/apps/{app}/schedules/{name}"),
            json!({"program": {"programName": "p", "programType": "WORKFLOW"},
                   "trigger": trigger, "status": "SCHEDULED"}),
        );
        assert_eq!(code, 200, "{body}");
    };
    // A cron schedule tells which server fires schedules.
    on(
        "a",
        "tick",
        json!({"type": "TIME", "cronExpression": "0 0 4 1 1 *"}),
    );
    on(
        "b",
        "after-a",
        json!({"type": "PROGRAM_STATUS", "programStatuses": ["COMPLETED"],
               "programId": {"application": "a", "program": "p"}}),
    );
    let (code, _) = s0.post("/v3/namespaces/default/apps/a/schedules/tick/disable");
    assert_eq!(code, 200);
    let b_runs = |s: &Server| -> Vec<Value> {
        let (code, body) = s.get("/v3/namespaces/default/apps/b/workflows/p/runs");
        assert_eq!(code, 200, "{body}");
        body.as_array().expect("runs").clone()
    };
    // Find the scheduler: the server whose run of a fires b at once.
    let warm = start(&s0, "a", json!({}));
    wait_until(&s0, &warm, Duration::from_secs(30), |r| {
        r["status"] == "COMPLETED"
    });
    let started = Instant::now();
    let firer = loop {
        if let Some(run) = b_runs(&s0).first() {
            let (_, fires) = s0.get("/v3/namespaces/default/apps/b/schedules/after-a/fires");
            assert_eq!(fires[0]["outcome"]["run"], run["runid"], "{fires}");
            break fires[0]["server"].as_str().expect("server").to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "b never fired");
        std::thread::sleep(Duration::from_millis(100));
    };
    let (firer, other) = if firer == "s0" { (s0, s1) } else { (s1, s0) };
    // A run of a on the other server; the scheduler dies while it runs.
    let run = start(&other, "a", json!({}));
    let run_id = run.rsplit('/').next().expect("id").to_string();
    firer.kill();
    wait_until(&other, &run, Duration::from_secs(30), |r| {
        r["status"] == "COMPLETED"
    });
    let ended = Instant::now();
    let fired = loop {
        let found: Vec<Value> = b_runs(&other)
            .into_iter()
            .filter(|r| r["properties"]["triggering.run.id"] == run_id.as_str())
            .collect();
        if !found.is_empty() {
            break found;
        }
        assert!(
            ended.elapsed() < TTL + Duration::from_secs(15),
            "the end of {run_id} never fired b"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    let again: Vec<Value> = b_runs(&other)
        .into_iter()
        .filter(|r| r["properties"]["triggering.run.id"] == run_id.as_str())
        .collect();
    assert_eq!(fired.len(), 1);
    assert_eq!(again.len(), 1, "the end fired b twice: {again:?}");
}

/// A program on its owner's host lives only while the owner surely holds the run: the owner
/// SIGKILLed, its program stops within the lease's time to live (its launcher stops it), and
/// the retry the next owner launches starts only after; that owner paused (SIGSTOP) for twice
/// the lease, its program stops the same way while it sleeps, and once it is woken nothing of
/// it runs on. Two copies of one program never beat at once.
#[test]
fn a_program_lives_only_while_its_owner_holds_the_run_and_a_retry_never_runs_beside_it() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let file = dir.path().join("beats");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/fenced-programs");
    let mut servers: Vec<Option<Server>> = ["s0", "s1", "s2"]
        .iter()
        .map(|n| Some(install.server(n)))
        .collect();
    let any = |servers: &[Option<Server>]| -> usize {
        servers.iter().position(Option::is_some).expect("a server")
    };
    let s0 = servers[0].as_ref().expect("s0");
    sim_profile(s0, "p", &sim, &[("nodes", "1")], 0, None);
    let script = format!(
        "while :; do echo \"$$ $(date +%s%N)\" >> {}; sleep 0.1; done",
        file.display()
    );
    deploy(
        s0,
        "beat",
        &script,
        json!({"retry": {"maxAttempts": 3, "backoff": "1s"}}),
    );
    let run = start(s0, "beat", json!({"system.profile.name": "p"}));
    wait_for_beats(&file, 0, Duration::from_secs(30));

    // The owner killed: its program stops within the lease, and the retry starts after it.
    let killed = epoch_ns();
    servers[0].take().expect("s0").kill();
    let seen = wait_for_beats(&file, 1, TTL + Duration::from_secs(20));
    let (first, second) = (&seen[0], &seen[1]);
    assert!(first.2 < second.1, "two copies at once: {seen:?}");
    let lived = Duration::from_nanos(u64::try_from(first.2.saturating_sub(killed)).unwrap_or(0));
    assert!(
        lived < TTL + Duration::from_millis(1500),
        "the first copy beat {lived:?} after its owner was killed"
    );
    let viewer = servers[any(&servers)].as_ref().expect("a server");
    let (_, view) = viewer.get(&run);
    assert_eq!(view["attempt"], 2, "{view}");
    let attempts = view["attempts"].to_string();
    assert!(attempts.contains("server-lost"), "{view}");

    // Its new owner paused past its lease: its program stops while it sleeps; the third
    // attempt starts after; woken, the paused server runs nothing of the run.
    let owner = view["owner"].as_str().expect("owner").to_string();
    let index = if owner == "s1" { 1 } else { 2 };
    let paused = servers[index].as_ref().expect("the owner").pid();
    let stopped = epoch_ns();
    signal(paused, "STOP");
    let seen = wait_for_beats(&file, 2, TTL + Duration::from_secs(20));
    let (second, third) = (&seen[1], &seen[2]);
    assert!(second.2 < third.1, "two copies at once: {seen:?}");
    let lived = Duration::from_nanos(u64::try_from(second.2.saturating_sub(stopped)).unwrap_or(0));
    assert!(
        lived < TTL + Duration::from_millis(1500),
        "the second copy beat {lived:?} after its owner was paused"
    );
    std::thread::sleep(TTL);
    signal(paused, "CONT");
    std::thread::sleep(Duration::from_secs(2));
    let now = beats(&file);
    assert_eq!(now.len(), 3, "{now:?}");
    assert_eq!(
        now[1].2, second.2,
        "the paused owner's copy beat again: {now:?}"
    );
    let other = servers[3 - index].as_ref().expect("the third owner");
    let (code, _) = other.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
    let done = wait_deprovisioned(other, &run);
    assert_eq!(done["status"], "KILLED", "{done}");
    assert_eq!(beats(&file).len(), 3, "each attempt ran once");
}

/// Waits until run `run`'s cluster is no longer WAITING on `server` and answers how long after
/// `since` that was seen (up to a minute).
fn kept_for(server: &Server, run: &str, since: Instant) -> Duration {
    wait_until(server, run, Duration::from_secs(60), |r| {
        r["cluster"]["status"] != "WAITING"
    });
    since.elapsed()
}

/// A wall-clock step of ten minutes on one server breaks no deadline: the owner's clock
/// stepped back while a failed run's cluster waits out its keepalive, the cluster still goes
/// when the keepalive ends (not ten minutes late); another server's clock stepped forward, it
/// takes a waiting cluster over from a killed owner and keeps it until the keepalive ends
/// (not at once). libfaketime moves each server's wall clock alone, as `date -s` would.
#[test]
fn a_wall_clock_step_either_way_fires_no_deadline_early_or_late() {
    const KEEP: Duration = Duration::from_secs(12);
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/clock-steps");
    let clocks: Vec<SteppedClock> = ["s0", "s1"]
        .iter()
        .map(|n| SteppedClock::new(dir.path(), n))
        .collect();
    let on_clock = |name: &str, clock: &SteppedClock| {
        install.server_with_options(
            name,
            &[],
            Options {
                env: clock.env(),
                ..Options::default()
            },
        )
    };
    let s0 = on_clock("s0", &clocks[0]);
    let s1 = on_clock("s1", &clocks[1]);
    sim_profile(&s0, "w", &sim, &[("nodes", "1")], KEEP.as_secs(), None);
    deploy(&s0, "fail", "exit 3", json!({}));
    let waiting = |server: &Server| {
        let run = start(server, "fail", json!({"system.profile.name": "w"}));
        wait_until(server, &run, Duration::from_secs(30), |r| {
            r["cluster"]["status"] == "WAITING"
        });
        (run, Instant::now())
    };

    // Backwards on the owner, while its timer runs.
    let (first, since) = waiting(&s0);
    clocks[0].step("-10m");
    let kept = kept_for(&s1, &first, since);
    assert!(
        kept > KEEP - Duration::from_secs(2) && kept < KEEP + Duration::from_secs(3),
        "kept {kept:?} for a keepalive of {KEEP:?} after the owner's clock stepped back"
    );

    // Forwards on the server that takes the run over from its killed owner.
    clocks[1].step("+10m");
    // Let the stepped server read its clock a while (the step seen, the gap logged).
    std::thread::sleep(Duration::from_secs(2));
    let (second, since) = waiting(&s0);
    s0.kill();
    wait_until(&s1, &second, TTL + Duration::from_secs(10), |r| {
        r["owner"] == "s1"
    });
    let kept = kept_for(&s1, &second, since);
    assert!(
        kept > KEEP - Duration::from_secs(2) && kept < KEEP + Duration::from_secs(3),
        "kept {kept:?} for a keepalive of {KEEP:?} by a server whose clock stepped forward"
    );
    for run in [&first, &second] {
        let done = wait_deprovisioned(&s1, run);
        assert_eq!(done["status"], "FAILED", "{done}");
    }
    assert_clean(&sim, &[first.as_str(), second.as_str()], 1);
    assert!(
        s1.logs()
            .iter()
            .any(|l| l.contains("the system's wall clock stepped")),
        "the step was not logged"
    );
}

/// The owner SIGKILLed while a service's start runs over SSH on a machine: the start goes on
/// without its server; the next owner runs the task again only once that start has ended (it
/// waits, and says so), finds the daemon and starts no second one.
#[test]
fn a_start_a_killed_owner_began_on_a_machine_ends_before_the_next_owner_runs_it_again() {
    use crate::crash::{Halt, put_slow_start_template, said_in, wait_for_lines};
    let sshd = crate::support::sshd::Sshd::start(&["127.0.1.85"]);
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/slow-start");
    let s0 = install.server("s0");
    let s1 = install.server("s1");
    let (trace, beats_file) = (dir.path().join("trace"), dir.path().join("beats"));
    let halt = Halt(dir.path().join("halt"));
    put_slow_start_template(&s0, "hosts", &trace, &beats_file, &halt.0);
    crate::hosts::put_key(&s0, &sshd);
    crate::hosts::hosts_profile(&s0, &sshd, "slow", &[("template", "slow-start")]);
    deploy(&s0, "a", "true", json!({}));
    let run = start(&s0, "a", json!({"system.profile.name": "slow"}));
    wait_for_lines(&trace, 1);
    s0.kill();

    let done = wait_deprovisioned(&s1, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let seen = beats(&beats_file);
    assert_eq!(seen.len(), 1, "two daemons: {seen:?}");
    assert!(
        said_in(dir.path(), "waiting for it to end"),
        "the next owner did not say it waited"
    );
    assert_eq!(
        crate::hosts::node_dirs(&sshd.remote_dir()),
        Vec::<String>::new()
    );
}

/// The installation's duties and the server holding each, read from the store.
fn duty_holders(install: &Installation, dir: &std::path::Path) -> BTreeMap<String, String> {
    use ebb::store::{Read, Store, Table};
    let key = ebb::store::secure::Cipher::load_or_create(&dir.join("secure.key"))
        .expect("the installation's key");
    let store = Store::open_at(&install.location)
        .expect("store")
        .sealed(std::sync::Arc::new(key));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(store.read(|r| r.scan::<Value>(Table::Duties, "")))
        .expect("read")
        .into_iter()
        .map(|(duty, holder)| {
            (
                duty,
                holder["server"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A duty whose tick panics is not lost with its task: its server resigns it and another takes
/// it over within the lease's time to live. A draining server that still runs a program (so
/// it keeps its lease) resigns every duty it holds at once, and another takes each.
#[test]
fn a_panicked_duty_is_taken_over_and_a_draining_server_resigns_every_duty() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/duties");
    let s0 = install.server_with_options(
        "s0",
        &[],
        Options {
            env: vec![("EBB_TEST_PANIC_DUTY".into(), "scheduler".into())],
            ..Options::default()
        },
    );
    // s0 alone takes every duty; its scheduler panics at its first tick.
    let began = Instant::now();
    while !s0.logs().iter().any(|l| l.contains("a duty panicked")) {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "{:#?}",
            s0.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let s1 = install.server("s1");
    let joined = Instant::now();
    loop {
        let holders = duty_holders(&install, dir.path());
        if holders.get("scheduler").map(String::as_str) == Some("s1") {
            break;
        }
        assert!(
            joined.elapsed() < TTL,
            "the panicked duty was not taken over: {holders:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let holders = duty_holders(&install, dir.path());
    for duty in ["queue", "pools", "usage"] {
        assert_eq!(
            holders.get(duty).map(String::as_str),
            Some("s0"),
            "{holders:?}"
        );
    }

    // Draining with a program still running on its host: it keeps its lease, and resigns.
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    deploy(&s0, "a", "sleep 30", json!({}));
    let run = start(&s0, "a", json!({"system.profile.name": "p"}));
    wait_until(&s0, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let (code, body) = s0.post("/v3/servers/s0/drain");
    assert!(code == 200 || code == 202, "{code} {body}");
    let asked = Instant::now();
    loop {
        let holders = duty_holders(&install, dir.path());
        if !holders.is_empty() && holders.values().all(|h| h == "s1") {
            break;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "the draining server kept a duty: {holders:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        servers(&s1).contains(&"s0".to_string()),
        "s0 let its lease go: the test shows nothing of resigning"
    );
    let (code, _) = s1.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
}
