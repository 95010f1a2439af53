//! A cluster one run leaves to the next keeps nothing of the first run's program: a process
//! it detached (setsid) is stopped when the program ends, and what it wrote in its node's
//! directory is removed before the next run takes the cluster over; what the services made
//! stays.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::runs::{deploy, start, wait_until};
use crate::support::server::Server;

#[test]
fn a_reused_cluster_keeps_no_process_or_file_of_the_last_runs_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, body) = server.put(
        "/v3/namespaces/default/templates/svc",
        json!({
            "hardwareTypes": {"any": {"local": {}}},
            "imageTypes": {"any": {"local": {}}},
            "defaults": {"services": ["svc"], "hardwareType": "any", "imageType": "any"},
            "services": {"svc": {"actions": {"install": {"type": "shell", "script": "echo made > service.conf"}}}}
        }),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.put(
        "/v3/namespaces/default/profiles/warm",
        json!({
            "provisioner": {"name": "local", "properties": [
                {"name": "nodes", "value": "1"},
                {"name": "template", "value": "svc"},
            ]},
            "clusterReuse": true,
            "reuseIdle": "5m",
        }),
    );
    assert_eq!(code, 200, "{body}");
    // The first run's program leaves a process of its own session writing into the node's
    // directory, and a file there.
    deploy(
        &server,
        "leaky",
        "setsid sh -c 'while :; do date > ../../leak.txt; sleep 0.1; done' > /dev/null 2>&1 < /dev/null & \
         echo $! > ../../leaker.pid; echo left > ../../left.txt; sleep 0.3",
        json!({}),
    );
    deploy(&server, "next", "true", json!({}));
    let args = json!({"system.profile.name": "warm"});
    let first = start(&server, "leaky", args.clone());
    let done = wait_until(&server, &first, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "IDLE"
    });
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let node_dir = PathBuf::from(
        done["cluster"]["nodes"][0]["properties"]["workDir"]
            .as_str()
            .unwrap_or_else(|| panic!("the node's directory: {done}")),
    );
    let leaker: i32 = std::fs::read_to_string(node_dir.join("leaker.pid"))
        .expect("the leaker's pid")
        .trim()
        .parse()
        .expect("a pid");
    // Stopped with the program: no process of the first run lives on.
    let alive = || std::path::Path::new(&format!("/proc/{leaker}")).exists();
    let waited = std::time::Instant::now();
    while alive() && waited.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(), "the detached process outlived its run");

    let second = start(&server, "next", args);
    let run: Value = wait_until(&server, &second, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "IDLE"
    });
    assert_eq!(run["cluster"]["origin"], "reused", "{run}");
    assert!(
        node_dir.join("service.conf").exists(),
        "the service's file went"
    );
    for left in ["left.txt", "leak.txt", "leaker.pid"] {
        assert!(
            !node_dir.join(left).exists(),
            "{left} of the first run's program is still there"
        );
    }
}
