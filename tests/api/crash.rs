//! Crash safety: SIGKILL the server at each point of a run's life, start it again on the same
//! data dir, and check the run ends right, its program ran once, and the sim cloud saw each
//! instance created once and deleted once.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::harness::{Options, Server};
use super::runs_support::*;

fn marker_script(marker: &Path, then: &str) -> String {
    format!("echo \"$EBB_RUN_ID\" >> '{}'; {then}", marker.display())
}

fn ran(marker: &Path) -> usize {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .count()
}

/// Waits (up to 30 s) for `cond` on the sim's state directory.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never saw: {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn killed_mid_provisioning_resumes_without_creating_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let marker = dir.path().join("ran");
    let server = Server::start_at(&data, Options::default());
    sim_profile(
        &server,
        "slow",
        &sim,
        &[("nodes", "3"), ("createLatency", "1s")],
        0,
        None,
    );
    deploy(&server, "a", &marker_script(&marker, "true"), json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "slow"}));
    wait_for("a first create", || {
        calls(&sim).iter().any(|c| c["op"] == "create")
    });
    server.kill();

    let server = Server::start_at(&data, Options::default());
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(
        status(&done),
        ("COMPLETED".into(), "DEPROVISIONED".into()),
        "{done}"
    );
    assert_eq!(ran(&marker), 1);
    assert_clean(&sim, &[&run], 3);
}

#[test]
fn killed_while_the_program_runs_reattaches_to_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let marker = dir.path().join("ran");
    let server = Server::start_at(&data, Options::default());
    sim_profile(&server, "quick", &sim, &[("nodes", "3")], 0, None);
    deploy(
        &server,
        "a",
        &marker_script(&marker, "sleep 2; exit 0"),
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "quick"}));
    wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    server.kill();

    let server = Server::start_at(&data, Options::default());
    let running = server.get(&run).1;
    assert_eq!(
        running["status"], "RUNNING",
        "the program outlived the server: {running}"
    );
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(
        status(&done),
        ("COMPLETED".into(), "DEPROVISIONED".into()),
        "{done}"
    );
    assert_eq!(done["exit"]["code"], 0);
    assert_eq!(ran(&marker), 1);
    assert_clean(&sim, &[&run], 3);
}

#[test]
fn killed_while_waiting_still_expires_on_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let marker = dir.path().join("ran");
    let server = Server::start_at(&data, Options::default());
    sim_profile(&server, "keep", &sim, &[("nodes", "2")], 3, None);
    deploy(&server, "a", &marker_script(&marker, "exit 7"), json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "keep"}));
    let waiting = wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    assert_eq!(waiting["failure"]["kind"], "program");
    let expires = waiting["cluster"]["expiresAt"].as_u64().expect("expiresAt");
    server.kill();

    let server = Server::start_at(&data, Options::default());
    assert_eq!(server.get(&run).1["cluster"]["status"], "WAITING");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED");
    assert!(
        done["cluster"]["end"].as_u64().expect("end") >= expires,
        "{done}"
    );
    assert_eq!(ran(&marker), 1);
    assert_clean(&sim, &[&run], 2);
}

#[test]
fn killed_mid_deprovisioning_deletes_each_instance_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let marker = dir.path().join("ran");
    let server = Server::start_at(&data, Options::default());
    sim_profile(
        &server,
        "slowdel",
        &sim,
        &[("nodes", "3"), ("deleteLatency", "1s")],
        0,
        None,
    );
    deploy(&server, "a", &marker_script(&marker, "true"), json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "slowdel"}));
    wait_for("a first delete", || {
        calls(&sim).iter().any(|c| c["op"] == "delete")
    });
    server.kill();

    let server = Server::start_at(&data, Options::default());
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(
        status(&done),
        ("COMPLETED".into(), "DEPROVISIONED".into()),
        "{done}"
    );
    assert_eq!(ran(&marker), 1);
    assert_clean(&sim, &[&run], 3);
}

#[test]
fn repeated_kills_across_many_runs_leak_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let marker = dir.path().join("ran");
    let mut server = Server::start_at(&data, Options::default());
    sim_profile(
        &server,
        "flaky",
        &sim,
        &[
            ("nodes", "2"),
            ("createLatency", "200ms"),
            ("deleteLatency", "200ms"),
            ("lostCreateRate", "0.3"),
            ("transientErrorRate", "0.2"),
        ],
        0,
        None,
    );
    deploy(
        &server,
        "a",
        &marker_script(&marker, "sleep 0.3"),
        json!({}),
    );
    let runs: Vec<String> = (0..6)
        .map(|_| start(&server, "a", json!({"system.profile.name": "flaky"})))
        .collect();
    for pause in [150, 400, 250] {
        std::thread::sleep(Duration::from_millis(pause));
        server.kill();
        server = Server::start_at(&data, Options::default());
    }
    for run in &runs {
        let done = wait_deprovisioned(&server, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    assert_eq!(ran(&marker), runs.len(), "each program ran exactly once");
    let ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    assert_clean(&sim, &ids, 2);
}
