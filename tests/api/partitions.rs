//! Partitions, made in network namespaces of the tests' own (`support::netns`): a server cut
//! from etcd, and a machine reached over SSH cut from its server, each then joined again. On a
//! real etcd whatever `EBB_TEST_STORE` says.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::etcd::Cluster;
use crate::support::installation::Installation;
use crate::support::netns::Network;
use crate::support::profiles::sim_profile;
use crate::support::runs::{
    assert_clean, beats, calls, deploy, epoch_ns, start, sub, wait_deprovisioned, wait_for_beats,
    wait_for_calls, wait_for_silence, wait_until,
};
use crate::support::sshd::Sshd;

/// The lease time to live the servers of these tests keep.
const TTL: Duration = Duration::from_secs(3);

/// A program that appends `<pid> <epoch ns>` to `file` every 0.1 s.
fn beating(file: &std::path::Path) -> String {
    format!(
        "while :; do echo \"$$ $(date +%s%N)\" >> '{}'; sleep 0.1; done",
        file.display()
    )
}

fn nanos(d: u128) -> Duration {
    Duration::from_nanos(u64::try_from(d).unwrap_or(u64::MAX))
}

/// A server cut from etcd (its namespace's link down) while it owns a program running on its
/// host, a cluster waiting out its keepalive and runs mid-provisioning: within its lease it
/// stops acting for them (its program stops, it makes no cloud call), the other server takes
/// them over (the program's retry starts after the first copy, the waiting cluster goes, the
/// provisioning runs complete); joined again, it does nothing for them: every node is created
/// and deleted once, and each attempt of the program ran once.
#[test]
fn a_server_cut_from_etcd_stops_acting_for_its_runs_and_does_nothing_twice_when_back() {
    let mut network = Network::new();
    let away = network.space();
    let cluster = Cluster::start_also_on(1, &network.host());
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let file = dir.path().join("beats");
    let marker = dir.path().join("programs");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/cut-from-etcd");
    let s0 = install.server_in("s0", &away);
    let s1 = install.server_on("s1", &network.host());
    sim_profile(&s0, "p", &sim, &[("nodes", "1")], 0, None);
    sim_profile(&s0, "w", &sim, &[("nodes", "1")], 8, None);
    sim_profile(
        &s0,
        "slow",
        &sim,
        &[("nodes", "2"), ("createLatency", "1s")],
        0,
        None,
    );
    deploy(
        &s0,
        "beat",
        &beating(&file),
        json!({"retry": {"maxAttempts": 2, "backoff": "1s"}}),
    );
    deploy(&s0, "fail", "exit 3", json!({}));
    deploy(
        &s0,
        "a",
        &format!("echo x >> '{}'", marker.display()),
        json!({}),
    );
    let beat = start(&s0, "beat", json!({"system.profile.name": "p"}));
    let failed = start(&s0, "fail", json!({"system.profile.name": "w"}));
    wait_for_beats(&file, 0, Duration::from_secs(30));
    wait_until(&s1, &failed, Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    let slow: Vec<String> = (0..2)
        .map(|_| start(&s0, "a", json!({"system.profile.name": "slow"})))
        .collect();
    let slow_ids: Vec<&str> = slow
        .iter()
        .map(|r| r.rsplit('/').next().expect("id"))
        .collect();
    wait_for_calls(&sim, 2, "a create of the slow runs", |c| {
        c["op"] == "create"
            && slow_ids
                .iter()
                .any(|id| c["tags"]["ebb:run"].as_str() == Some(id))
    });

    let cut = epoch_ns();
    network.cut(&away);
    // The program on the cut server's host stops within its lease; the retry, on the other
    // server, starts after it.
    let seen = wait_for_beats(&file, 1, TTL + Duration::from_secs(20));
    let (first, second) = (&seen[0], &seen[1]);
    assert!(first.2 < second.1, "two copies at once: {seen:?}");
    let lived = nanos(first.2.saturating_sub(cut));
    assert!(
        lived < TTL + Duration::from_millis(1500),
        "the first copy beat {lived:?} after its server was cut from etcd"
    );
    for run in slow.iter().chain([&beat, &failed]) {
        wait_until(&s1, run, TTL + Duration::from_secs(15), |r| {
            r["owner"] == "s1" || r["cluster"]["status"] == "DEPROVISIONED"
        });
    }
    // Whatever the cut server called the cloud for, it did while it held its lease.
    let fenced_from = cut as f64 / 1e9 + TTL.as_secs_f64() + 0.5;
    let late = |from: f64| -> Vec<serde_json::Value> {
        calls(&sim)
            .into_iter()
            .filter(|c| c["time"].as_f64() > Some(from) && c["tags"]["ebb:server"] == "s0")
            .collect()
    };
    assert_eq!(late(fenced_from), Vec::<serde_json::Value>::new());

    // Joined again: it learns its lease ended and lets the runs be.
    let healed = epoch_ns();
    network.heal(&away);
    for run in &slow {
        let done = wait_deprovisioned(&s1, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    let expired = wait_deprovisioned(&s1, &failed);
    assert_eq!(expired["status"], "FAILED", "{expired}");
    let (code, _) = s1.post(&format!("{beat}/stop"));
    assert_eq!(code, 200);
    let done = wait_deprovisioned(&s1, &beat);
    assert_eq!(done["status"], "KILLED", "{done}");
    assert_eq!(done["attempt"], 2, "{done}");
    assert!(
        done["attempts"].to_string().contains("server-lost"),
        "{done}"
    );
    let started = Instant::now();
    while !s0.logs().iter().any(|l| l.contains("lease ended")) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the server joined again never learnt its lease ended: {:#?}",
            s0.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(late(healed as f64 / 1e9), Vec::<serde_json::Value>::new());
    let seen = wait_for_silence(&file, Duration::from_secs(10));
    assert_eq!(seen.len(), 2, "each attempt ran once: {seen:?}");
    let slow: Vec<&str> = slow.iter().map(String::as_str).collect();
    assert_clean(&sim, &slow, 2);
    assert_clean(&sim, &[beat.as_str(), failed.as_str()], 1);
    let programs = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(
        programs.lines().count(),
        2,
        "each slow run's program ran once"
    );
}

/// A machine reached over SSH cut from its server (the tests' sshd in a namespace of its own,
/// its link down), then joined again. Cut for a lease's time to live, its program runs on and
/// nothing happens. Cut for longer than the lease and the grace a takeover would have, the
/// program's guard stops it (no server could move its fence on); joined again, the server
/// finds it stopped, counts it lost and starts its retry after it, never beside it.
#[test]
fn a_machine_cut_from_its_server_runs_its_program_on_or_stops_it_and_never_two_copies() {
    let mut network = Network::new();
    let machine = network.space();
    let sshd = Sshd::start_in(Some(&machine.name), &[machine.address.as_str()]);
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let install = Installation::new(&cluster, dir.path(), TTL, "/ebb-test/cut-machine");
    let s0 = install.server("s0");
    crate::hosts::put_key(&s0, &sshd);
    crate::hosts::hosts_profile(&s0, &sshd, "machines", &[]);
    let file = dir.path().join("beats");
    deploy(
        &s0,
        "beat",
        &beating(&file),
        json!({"retry": {"maxAttempts": 2, "backoff": "1s"}}),
    );
    let run = start(&s0, "beat", json!({"system.profile.name": "machines"}));
    wait_for_beats(&file, 0, Duration::from_secs(60));

    // A short cut: the program beats on, one copy, the run RUNNING.
    network.cut(&machine);
    std::thread::sleep(TTL);
    network.heal(&machine);
    std::thread::sleep(TTL);
    let seen = beats(&file);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        epoch_ns().saturating_sub(seen[0].2) < 1_000_000_000,
        "the program stopped: {seen:?}"
    );
    let (_, view) = s0.get(&run);
    assert_eq!(view["status"], "RUNNING", "{view}");
    assert_eq!(view["attempt"], 1, "{view}");

    // A long cut: the guard stops it between the lease and the lease and the grace.
    let cut = epoch_ns();
    network.cut(&machine);
    let seen = wait_for_silence(&file, TTL * 5 + Duration::from_secs(10));
    let lived = nanos(seen[0].2.saturating_sub(cut));
    assert!(
        lived > TTL * 3 && lived < TTL * 4 + Duration::from_millis(2500),
        "the program beat {lived:?} after its machine was cut off (lease {TTL:?}, grace three leases)"
    );
    let (_, view) = s0.get(&run);
    assert_eq!(view["status"], "RUNNING", "{view}");
    network.heal(&machine);
    let seen = wait_for_beats(&file, 1, Duration::from_secs(30));
    let (first, second) = (&seen[0], &seen[1]);
    assert!(first.2 < second.1, "two copies at once: {seen:?}");
    let (_, view) = s0.get(&run);
    assert_eq!(view["attempt"], 2, "{view}");
    let (code, events) = s0.get(&format!("{run}/events"));
    assert_eq!(code, 200);
    assert!(
        events
            .to_string()
            .contains("its guard on the node stopped it"),
        "{events}"
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
