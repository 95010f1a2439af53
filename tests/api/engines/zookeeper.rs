//! The shipped `zookeeper` template: a real Apache ZooKeeper ensemble (Debian's package) on
//! three `local` nodes elects a leader, publishes its connect string to programs, serves the
//! shipped client example, heals a killed member while the quorum holds, and says what is
//! missing when ZooKeeper is not installed.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;
use crate::support::runs::{deploy, start, wait_until, while_the_test_runs};
use crate::support::server::{Server, assert_error};

const LIMIT: Duration = Duration::from_secs(120);

/// The modes of the ensemble's members (by address), as `srvr` says them.
fn modes(addresses: &[String]) -> Vec<String> {
    addresses
        .iter()
        .map(|a| {
            four_letters(a, "srvr")
                .lines()
                .find_map(|l| l.strip_prefix("Mode: "))
                .unwrap_or("none")
                .to_string()
        })
        .collect()
}

/// Waits until the members at `addresses` are one leader and followers.
#[track_caller]
fn wait_for_a_leader(addresses: &[String], limit: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let now = modes(addresses);
        let leaders = now.iter().filter(|m| *m == "leader").count();
        let followers = now.iter().filter(|m| *m == "follower").count();
        if leaders == 1 && leaders + followers == addresses.len() {
            return now;
        }
        assert!(
            started.elapsed() < limit,
            "no ensemble with one leader at {addresses:?}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A run that holds a 3-member ensemble while the test runs: its path and the members'
/// client addresses, from the endpoint the cluster published.
fn held(server: &Server) -> (String, Vec<String>) {
    local_profile(server, "zk", 3, "zookeeper", &[]);
    deploy(
        server,
        "hold",
        &while_the_test_runs(),
        serde_json::json!({}),
    );
    let run = start(server, "hold", on("zk"));
    let view = wait_until(server, &run, LIMIT, |r| r["status"] == "RUNNING");
    let connect = view["cluster"]["endpoints"]["zookeeper"]
        .as_str()
        .unwrap_or_else(|| panic!("no zookeeper endpoint: {view}"))
        .to_string();
    let addresses: Vec<String> = connect.split(',').map(str::to_string).collect();
    // One member per node, each on its node's own address, master first.
    let nodes: Vec<String> = view["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| format!("{}:2181", n["ipAddress"].as_str().expect("address")))
        .collect();
    assert_eq!(addresses, nodes, "{view}");
    (run, addresses)
}

#[test]
fn an_ensemble_elects_a_leader_heals_a_killed_member_and_the_client_example_sees_its_watch_fire() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (held_run, addresses) = held(&server);
    let found = wait_for_a_leader(&addresses, Duration::from_secs(10));
    assert_eq!(found.len(), 3, "{found:?}");
    // Each member's own log, read from its node.
    let (code, logs) = server.get(&format!("{held_run}/services/zookeeper/logs?node=worker-1"));
    assert_eq!(code, 200, "{logs}");
    assert_eq!(logs["logs"][0]["file"], "zookeeper/zookeeper.log", "{logs}");
    let text = logs["logs"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("QuorumPeer"), "{logs}");
    assert_error(
        server.get(&format!("{held_run}/services/nope/logs?node=worker-1")),
        400,
        "node",
    );
    assert_error(
        server.get(&format!("{held_run}/services/zookeeper/logs")),
        400,
        "node",
    );
    // The run's page links each service on each node to its logs, which read the same.
    let page = crate::ui::run_page(&server, &held_run);
    let link = format!(
        "{}/services/zookeeper/logs?node=worker-1",
        crate::ui::ui_path(&held_run)
    );
    assert!(page.contains(&format!("href=\"{link}\"")), "{page}");
    let (code, logs_page) = crate::ui::ui_get(&server, &link);
    assert_eq!(code, 200, "{logs_page}");
    assert!(
        logs_page.contains("zookeeper/zookeeper.log") && logs_page.contains("QuorumPeer"),
        "{logs_page}"
    );
    let (code, _) = crate::ui::ui_get(
        &server,
        &format!(
            "{}/services/nope/logs?node=worker-1",
            crate::ui::ui_path(&held_run)
        ),
    );
    assert_eq!(code, 400);
    let id = held_run.rsplit('/').next().expect("id");
    let (code, out, err) = crate::support::server::run_ebb(
        &[
            "run",
            "logs",
            &format!("default/hold/p/{id}"),
            "--service",
            "zookeeper",
            "--server",
            &server.url,
        ],
        &[("EBB_TOKEN", server.token().expect("token").as_str())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    for node in ["master", "worker-1", "worker-2"] {
        assert!(
            out.contains(&format!(
                "---- node {node}: zookeeper zookeeper/zookeeper.log"
            )),
            "{out}"
        );
    }

    // The shipped example, on its own cluster, checks its own answer; the test checks it too.
    // It runs while a member of the held ensemble is killed.
    local_profile(&server, "zookeeper", 3, "zookeeper", &[]);
    deploy_example(&server, "zookeeper", "zookeeper.json");
    let (run, id) = start_program(&server, "zookeeper", "znodes");

    // A killed member is healed while the quorum holds.
    // No heal began before the kill (one under way counts too).
    let begun = crate::support::runs::operations(&server, &held_run)
        .into_iter()
        .filter(|o| o["request"]["trigger"].is_object())
        .count();
    assert_eq!(begun, 0, "{}", events(&server, &held_run));
    // Kill the leader's JVM outright.
    let found = wait_for_a_leader(&addresses, Duration::from_secs(10));
    let leader = found.iter().position(|m| m == "leader").expect("a leader");
    let nodes = ["master", "worker-1", "worker-2"];
    let pid =
        kill_by_pid_file(&sandbox(dir.path(), &held_run, nodes[leader]).join("zookeeper/pid"));
    // The member at the leader's address is gone (the pid was the leader's own JVM).
    let started = Instant::now();
    while !four_letters(&addresses[leader], "ruok").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "killing {pid} left {} answering",
            addresses[leader]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The two left elect a leader among them: the quorum holds.
    let others: Vec<String> = addresses
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, a)| a.clone())
        .collect();
    wait_for_a_leader(&others, Duration::from_secs(30));
    // Its check finds it down, the heal restarts it, and it joins again.
    let started = Instant::now();
    loop {
        let (_, view) = server.get(&held_run);
        let heals = heals(&server, &held_run);
        let all_up = view["cluster"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["services"]["zookeeper"] == "up");
        if heals >= 1 && all_up && modes(&addresses).iter().all(|m| m != "none") {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the member was not healed: {view}\n{}",
            events(&server, &held_run)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_for_a_leader(&addresses, Duration::from_secs(30));
    let text = events(&server, &held_run);
    assert!(
        text.contains(&format!("{}: zookeeper is down", nodes[leader])),
        "{text}"
    );

    let done = ended(&server, &run, LIMIT);
    let stdout = completed_output(&server, &run, &done);
    let znode = format!("/ebb-{id}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            format!("Created {znode}").as_str(),
            "hello",
            format!("WatchedEvent state:SyncConnected type:NodeDataChanged path:{znode}").as_str(),
            "changed",
        ],
        "{stdout}"
    );
}

#[test]
fn a_node_without_zookeeper_fails_the_create_saying_what_is_missing() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // A config that is no JSON object is refused with the profile.
    let (code, body) = server.put(
        "/v3/namespaces/default/profiles/bad",
        crate::support::profiles::profile_body(
            "local",
            &[
                ("template", "zookeeper", true),
                ("templateConfig", "[1]", true),
            ],
        ),
    );
    assert_error((code, body), 400, "templateConfig");
    local_profile(
        &server,
        "missing",
        1,
        "zookeeper",
        &[(
            "templateConfig",
            r#"{"zookeeperJar": "/nowhere/zookeeper.jar"}"#,
        )],
    );
    deploy(&server, "a", "true", serde_json::json!({}));
    let run = start(&server, "a", on("missing"));
    let done: Value = wait_until(&server, &run, LIMIT, |r| r["status"] == "FAILED");
    let failure = done["failure"].to_string();
    let text = events(&server, &run);
    assert!(
        text.contains(
            "ZooKeeper is not installed on node master: /nowhere/zookeeper.jar is missing"
        ) && text.contains("apt-get install zookeeper"),
        "{failure}\n{text}"
    );
}

#[test]
fn over_ssh_an_ensemble_on_three_machines_serves_the_client_example() {
    setup();
    // Addresses no `local` node of a test running beside this one claims.
    let sshd = crate::support::sshd::Sshd::start(&["127.0.2.11", "127.0.2.12", "127.0.2.13"]);
    let _daemons = RemoteDaemons(sshd.remote_dir());
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    crate::hosts::put_key(&server, &sshd);
    crate::hosts::hosts_profile(
        &server,
        &sshd,
        "zookeeper",
        &[("template", "zookeeper"), ("sshHostKeyChecking", "no")],
    );
    deploy_example(&server, "zookeeper", "zookeeper.json");
    let (run, id) = start_program(&server, "zookeeper", "znodes");
    let done = deprovisioned(&server, &run, LIMIT);
    let stdout = completed_output(&server, &run, &done);
    assert_eq!(
        done["cluster"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| n["ipAddress"].as_str().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["127.0.2.11", "127.0.2.12", "127.0.2.13"]
    );
    let znode = format!("/ebb-{id}");
    assert!(
        stdout.contains(&format!(
            "WatchedEvent state:SyncConnected type:NodeDataChanged path:{znode}"
        )) && stdout.contains("changed"),
        "{stdout}"
    );
    // The ensemble was stopped with the cluster: nothing answers on its addresses.
    for address in ["127.0.2.11:2181", "127.0.2.12:2181", "127.0.2.13:2181"] {
        assert_eq!(four_letters(address, "ruok"), "", "{address} still answers");
    }
}

/// Asserts, while operation `id` of `run` runs, that the members at `addresses` keep a quorum
/// (a leader and followers among them at least `quorum`), looking every 100 ms; its end.
#[track_caller]
fn quorum_held_through(
    server: &Server,
    run: &str,
    id: u64,
    addresses: &[String],
    quorum: usize,
) -> Value {
    let mut looks = 0;
    loop {
        let (_, op) = server.get(&format!("{run}/operations/{id}"));
        if op["status"] != "RUNNING" {
            assert!(looks > 3, "the operation was looked at {looks} times");
            return op;
        }
        let now = modes(addresses);
        let serving = now
            .iter()
            .filter(|m| *m == "leader" || *m == "follower")
            .count();
        assert!(
            serving >= quorum,
            "the quorum was lost: {now:?}\n{}",
            events(server, run)
        );
        looks += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The members each of `addresses` lists (its `server.N` lines), sorted.
fn membership(address: &str) -> Vec<String> {
    let mut out: Vec<String> = four_letters(address, "conf")
        .lines()
        .filter(|l| l.starts_with("server."))
        .map(str::to_string)
        .collect();
    out.sort();
    out
}

#[test]
fn expand_and_shrink_reconfigure_the_ensemble_member_by_member_keeping_its_quorum() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (run, addresses) = held(&server);
    wait_for_a_leader(&addresses, Duration::from_secs(10));
    // An even ensemble is refused, naming why, and nothing is done.
    assert_error(
        server.post_json(
            &format!("{run}/cluster"),
            serde_json::json!({"operation": "expand", "nodes": 1}),
        ),
        400,
        "odd",
    );
    let id = crate::support::runs::cluster_op(
        &server,
        &run,
        serde_json::json!({"operation": "expand", "nodes": 2}),
    );
    // The three keep their quorum (two of them serving at least) while two join.
    let op = quorum_held_through(&server, &run, id, &addresses, 2);
    assert_eq!(op["status"], "SUCCEEDED", "{op}\n{}", events(&server, &run));
    let (_, view) = server.get(&run);
    let all: Vec<String> = view["cluster"]["endpoints"]["zookeeper"]
        .as_str()
        .expect("zookeeper")
        .split(',')
        .map(str::to_string)
        .collect();
    assert_eq!(all.len(), 5, "{view}");
    let found = wait_for_a_leader(&all, Duration::from_secs(30));
    assert_eq!(found.iter().filter(|m| *m == "follower").count(), 4);
    // Every member votes in the same five: the joiners were added by reconfiguration.
    let five = membership(&all[0]);
    assert_eq!(five.len(), 5, "{five:?}");
    assert!(five.iter().all(|l| l.contains(":participant;")), "{five:?}");
    for a in &all {
        assert_eq!(membership(a), five, "{a}");
    }
    // None of the first three was restarted: each still has its first process.
    let text = events(&server, &run);
    assert_eq!(
        text.matches("start zookeeper done").count(),
        5,
        "one start per member: {text}"
    );

    // Two followers leave: each is removed from the ensemble before it stops, and the three
    // that stay keep serving throughout. (A leader that leaves hands over to another member,
    // which leaves the ensemble without a leader for a moment: the engines chapter says so.)
    let (_, view) = server.get(&run);
    let name_of = |address: &str| -> String {
        view["cluster"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|n| address.starts_with(&format!("{}:", n["ipAddress"].as_str().unwrap_or("?"))))
            .and_then(|n| n["name"].as_str())
            .expect("a node of the cluster")
            .to_string()
    };
    let now = modes(&all);
    let leaving: Vec<usize> = (1..all.len())
        .filter(|i| now[*i] == "follower")
        .take(2)
        .collect();
    assert_eq!(leaving.len(), 2, "{now:?}");
    let remove: Vec<String> = leaving.iter().map(|i| name_of(&all[*i])).collect();
    let id = crate::support::runs::cluster_op(
        &server,
        &run,
        serde_json::json!({"operation": "shrink", "remove": remove}),
    );
    let staying: Vec<String> = (0..all.len())
        .filter(|i| !leaving.contains(i))
        .map(|i| all[i].clone())
        .collect();
    let op = quorum_held_through(&server, &run, id, &staying, 2);
    assert_eq!(op["status"], "SUCCEEDED", "{op}\n{}", events(&server, &run));
    wait_for_a_leader(&staying, Duration::from_secs(30));
    let three = membership(&staying[0]);
    assert_eq!(three.len(), 3, "{three:?}");
    for a in &staying {
        assert_eq!(membership(a), three, "{a}");
    }
    for gone in leaving.iter().map(|i| &all[*i]) {
        assert_eq!(four_letters(gone, "ruok"), "", "{gone} still answers");
        assert!(
            !three.iter().any(|l| l.contains(gone.as_str())),
            "{three:?}"
        );
    }
    // The cluster's secret, which makes the super user the reconfigurations run as, reached
    // no member's command line or environment.
    for node in staying.iter().map(|a| name_of(a)) {
        let pid = std::fs::read_to_string(sandbox(dir.path(), &run, &node).join("zookeeper/pid"))
            .expect("the member's pid");
        let pid = pid.trim();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
        let (cmdline, environ) = (
            String::from_utf8_lossy(&cmdline),
            String::from_utf8_lossy(&environ),
        );
        assert!(
            cmdline.contains("QuorumPeerMain") && !cmdline.contains("superDigest"),
            "{node}: {cmdline}"
        );
        assert!(!environ.contains("EBB_CLUSTER_SECRET"), "{node}");
    }
    // Without the super user, a reconfiguration is refused.
    let refused = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'reconfig -remove 1\\nquit\\n' | java -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar org.apache.zookeeper.ZooKeeperMain -server {}",
            staying[1]
        ))
        .output()
        .expect("the client");
    let said = String::from_utf8_lossy(&refused.stdout).to_string()
        + &String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("Insufficient permission"), "{said}");
    assert_eq!(membership(&staying[0]), three);
}
