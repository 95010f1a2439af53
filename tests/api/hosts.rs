//! The `hosts` provisioner and the SSH transport against a real OpenSSH server: nodes at
//! several loopback addresses, a template's services installed and started over SSH, the
//! program run on the master over SSH and re-attached after ebb is killed.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::put_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server};
use crate::support::sshd::Sshd;

/// Keeps the sshd's client key in the secure store of `default` as `ssh-key`.
pub(crate) fn put_key(server: &Server, sshd: &Sshd) {
    let (code, body) = server.put(
        "/v3/namespaces/default/securekeys/ssh-key",
        json!({"description": "the test sshd's client key", "data": sshd.client_key}),
    );
    assert_eq!(code, 200, "{body}");
}

/// Creates USER profile `name` for `hosts` on `sshd`'s addresses; `props` add or replace.
pub(crate) fn hosts_profile(server: &Server, sshd: &Sshd, name: &str, props: &[(&str, &str)]) {
    let hosts = sshd.hosts();
    let remote = sshd.remote_dir();
    let base = [
        ("hosts", hosts.as_str()),
        ("sshPrivateKey", "${secure(ssh-key)}"),
        ("remoteDir", remote.to_str().expect("utf-8")),
    ];
    put_profile(server, name, "hosts", &base, props, None);
}

/// Node directories left under the remote dir (`<run>/<node>`).
pub(crate) fn node_dirs(remote: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for run in std::fs::read_dir(remote).into_iter().flatten().flatten() {
        for node in std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(format!(
                "{}/{}",
                run.file_name().to_string_lossy(),
                node.file_name().to_string_lossy()
            ));
        }
    }
    out
}

fn run_id(path: &str) -> &str {
    path.rsplit('/').next().expect("run id")
}

/// A template whose services leave evidence of where they ran: `$SSH_CONNECTION` names the
/// address sshd answered on, so a script that ran on the server's host would show nothing.
fn put_template(server: &Server, provisioner: &str) {
    let step = |action: &str| {
        json!({"type": "shell", "script": format!(
            "echo \"{action} $EBB_SERVICE on $EBB_NODE via ${{SSH_CONNECTION:-none}}\" | tee -a \"$EBB_WORK_DIR/trace\"; \
             echo \"{action}_at=$(echo $SSH_CONNECTION | cut -d' ' -f3)\" >> \"$EBB_RESULT_FILE\"")})
    };
    let template = json!({
        "services": {
            "base": {"actions": {"install": step("install")}},
            "kv": {
                "dependencies": {"install": {"requires": ["base"]}},
                "actions": {
                    "install": step("install"),
                    "configure": step("configure"),
                    "start": {"type": "shell", "script":
                        "nohup sh -c 'while :; do sleep 1; done' > kv.out 2>&1 & echo $! > kv.pid; \
                         test -s \"$EBB_CLUSTER_FILE\" && echo \"kv started, pid $(cat kv.pid)\""},
                    "stop": {"type": "shell", "script": "kill $(cat kv.pid) && echo kv stopped"}
                }
            }
        },
        "hardwareTypes": {"any": {provisioner: {}}}, "imageTypes": {"any": {provisioner: {}}},
        "defaults": {"services": ["base", "kv"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/remote", template);
    assert_eq!(code, 200, "{body}");
}

/// Asserts every kv action of operation `create` ran on its own node's address, over SSH.
#[track_caller]
fn assert_ran_on_each_node(create: &Value) {
    for (node, address) in [
        ("master", "127.0.1.11"),
        ("worker-1", "127.0.1.12"),
        ("worker-2", "127.0.1.13"),
    ] {
        let install = create["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .find(|t| t["node"] == node && t["action"] == "install" && t["service"] == "kv")
            .unwrap_or_else(|| panic!("no kv install on {node}: {create}"));
        let output = install["attempts"][0]["output"]
            .as_str()
            .unwrap_or_default();
        assert!(
            output.contains(&format!("install kv on {node} via")) && output.contains(address),
            "{node}: {install}"
        );
        let start = create["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .find(|t| t["node"] == node && t["action"] == "start" && t["service"] == "kv")
            .expect("kv start");
        assert!(
            start["attempts"][0]["output"]
                .as_str()
                .unwrap_or_default()
                .contains("kv started, pid"),
            "{start}"
        );
    }
}

#[test]
fn services_come_up_over_ssh_and_the_program_runs_on_the_master() {
    let sshd = Sshd::start(&["127.0.1.11", "127.0.1.12", "127.0.1.13"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_key(&server, &sshd);
    put_template(&server, "hosts");
    let known = sshd.known_hosts();
    hosts_profile(
        &server,
        &sshd,
        "machines",
        &[
            ("template", "remote"),
            ("sshHostKeyChecking", "yes"),
            ("sshKnownHosts", &known),
        ],
    );
    deploy(
        &server,
        "a",
        "echo \"program on $EBB_NODE via $SSH_CONNECTION in $PWD\"; \
         grep -c '\"name\"' \"$EBB_CLUSTER_FILE\"; echo oops >&2; exit 0",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "machines"}));
    let running = wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] != "PENDING" && r["status"] != "STARTING"
    });
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done} (was {running})");

    // Every service action ran on its own node's address, over SSH.
    let ops = operations(&server, &run);
    let create = &ops[0];
    assert_eq!(create["status"], "SUCCEEDED", "{create}");
    assert_ran_on_each_node(create);
    assert!(
        sshd.log().contains("Accepted publickey for"),
        "sshd let ebb in with its key: {}",
        sshd.log()
    );
    // The program ran on the master, over SSH, and its output is the run's log.
    let (code, logs) = server.get(&format!("{run}/logs"));
    assert_eq!(code, 200, "{logs}");
    let text = logs.to_string();
    assert!(
        text.contains("program on master via") && text.contains("127.0.1.11"),
        "{text}"
    );
    assert!(text.contains("oops"), "stderr is kept: {text}");
    // The run's node logs on this host hold the scripts' output.
    let node_log = std::fs::read_to_string(
        data.join("runs")
            .join(run_id(&run))
            .join("nodes/worker-2.log"),
    )
    .expect("worker-2's log");
    assert!(
        node_log.contains("configure kv on worker-2 via"),
        "{node_log}"
    );
    // Delete removed each node's directory and nothing else; the daemons were stopped.
    assert_eq!(node_dirs(&sshd.remote_dir()), Vec::<String>::new());
    assert!(sshd.remote_dir().exists(), "the remote dir itself stays");
    let stops = ops[1]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|t| t["action"] == "stop" && t["status"] == "SUCCEEDED")
        .count();
    assert_eq!(stops, 3, "{}", ops[1]);
    // The key never reached the data dir.
    let marker = sshd
        .client_key
        .lines()
        .nth(2)
        .expect("a line of the key body");
    for (path, bytes) in files(&data) {
        let found = bytes.windows(marker.len()).any(|w| w == marker.as_bytes());
        assert!(!found, "{} holds the private key", path.display());
    }
}

/// SIGKILL of ebb while the program runs on the remote master: the restarted ebb finds it
/// still running there, does not launch it again, copies the rest of its output and records
/// its exit status.
#[test]
fn a_remote_program_is_reattached_after_ebb_is_killed() {
    let sshd = Sshd::start(&["127.0.1.21", "127.0.1.22"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_key(&server, &sshd);
    hosts_profile(&server, &sshd, "machines", &[]);
    let starts = dir.path().join("starts");
    let gate = dir.path().join("gate");
    deploy(
        &server,
        "a",
        &format!(
            "echo started >> '{}'; echo before; while [ ! -e '{}' ]; do sleep 0.1; done; echo after; exit 3",
            starts.display(),
            gate.display()
        ),
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "machines"}));
    wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    // Until its first output has been copied here.
    let stdout = data.join("runs").join(run_id(&run)).join("stdout.log");
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&stdout)
        .unwrap_or_default()
        .contains("before")
    {
        assert!(started.elapsed() < Duration::from_secs(30), "no output");
        std::thread::sleep(Duration::from_millis(20));
    }
    // accept-new pinned each node's host key in its record.
    let (_, body) = server.get(&run);
    server.kill();
    let pinned = body.to_string();
    let fingerprint_count = pinned.matches("SHA256:").count();
    assert!(fingerprint_count >= 2, "host keys pinned: {pinned}");

    std::fs::write(&gate, "").expect("gate");
    let server = Server::start_at(&data, Options::default());
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    assert_eq!(done["exit"]["code"], 3, "{done}");
    assert_eq!(
        std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .count(),
        1,
        "launched once"
    );
    let out = std::fs::read_to_string(&stdout).expect("stdout");
    assert_eq!(out, "before\nafter\n", "copied once, in order");
    assert_eq!(node_dirs(&sshd.remote_dir()), Vec::<String>::new());
}

/// A host key that `sshKnownHosts` does not list is refused: the create fails at once,
/// naming the key, and nothing runs on the machine.
#[test]
fn an_unlisted_host_key_is_refused() {
    let sshd = Sshd::start(&["127.0.1.31"]);
    let other = Sshd::start(&["127.0.1.32"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    put_key(&server, &sshd);
    // The other server's key, listed for this address.
    let wrong = format!("[127.0.1.31]:{} {}\n", sshd.port, other.host_key);
    hosts_profile(
        &server,
        &sshd,
        "strict",
        &[("sshHostKeyChecking", "yes"), ("sshKnownHosts", &wrong)],
    );
    deploy(&server, "a", "echo ran", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "strict"}));
    let done = wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "FAILED"
    });
    let (_, events) = server.get(&format!("{run}/events"));
    let text = events.to_string();
    assert!(
        text.contains("showed host key SHA256:") && text.contains("sshKnownHosts does not list"),
        "{text} {done}"
    );
    assert_eq!(node_dirs(&sshd.remote_dir()), Vec::<String>::new());
    let create = &operations(&server, &run)[0];
    let attempts = create["tasks"][0]["attempts"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(attempts, 1, "a refused host key is not retried: {create}");
}

/// The janitor lists the run directories on every host: one left by a run this server does
/// not know is removed over SSH; another server's is left alone.
#[test]
fn the_janitor_removes_a_stray_run_directory_over_ssh() {
    let sshd = Sshd::start(&["127.0.1.41", "127.0.1.42"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    put_key(&server, &sshd);
    hosts_profile(&server, &sshd, "machines", &[]);
    for (run, owner) in [("0190-lost", "ebb"), ("0190-theirs", "other")] {
        let node = sshd.remote_dir().join(run).join("worker-1");
        std::fs::create_dir_all(&node).expect("node dir");
        std::fs::write(
            node.join(".ebb-node"),
            format!("ebb:run={run}\nebb:node=worker-1\nebb:server={owner}\n"),
        )
        .expect("marker");
    }
    let (code, sweep) = server.post("/v3/janitor/run");
    assert_eq!(code, 200, "{sweep}");
    // Both addresses are this one machine here, so each of them shows the stray directory.
    let orphans = sweep["orphans"].as_array().cloned().unwrap_or_default();
    assert!(!orphans.is_empty(), "{sweep}");
    assert!(
        orphans
            .iter()
            .all(|o| o["run"] == "0190-lost" && o["action"] == "deleted"),
        "{sweep}"
    );
    assert_eq!(node_dirs(&sshd.remote_dir()), ["0190-theirs/worker-1"]);
}

/// Stopping a run whose program runs on a remote master signals it there: it ends by SIGTERM
/// (the wrapper records 128+15), the run is KILLED and the node's directory is removed.
#[test]
fn stopping_a_run_stops_its_remote_program() {
    let sshd = Sshd::start(&["127.0.1.51"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    put_key(&server, &sshd);
    hosts_profile(&server, &sshd, "machines", &[]);
    deploy(&server, "a", "echo up; exec sleep 300", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "machines"}));
    wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    let (code, body) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200, "{body}");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "KILLED", "{done}");
    assert_eq!(done["exit"]["signal"], 15, "{done}");
    assert_eq!(node_dirs(&sshd.remote_dir()), Vec::<String>::new());
}

/// Cloud nodes use the same transport: gcp-compute instances whose external addresses are
/// where a real sshd listens (the stand-in hands out 127.0.1.71 and .72) get the template's
/// services and the program over SSH as `sshUser`, on `sshPort`.
#[cfg(feature = "gcp")]
#[test]
fn gcp_compute_nodes_run_services_and_the_program_over_ssh() {
    use crate::support::gcp::{Gcp, gcp_profile};
    let sshd = Sshd::start(&["127.0.1.71", "127.0.1.72"]);
    let gcp = Gcp::start();
    gcp.config(json!({"natPrefix": "127.0.1.", "natStart": 71}));
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    put_key(&server, &sshd);
    put_template(&server, "gcp-compute");
    let port = sshd.port.to_string();
    gcp_profile(
        &server,
        &gcp,
        "gcp-compute",
        "gce",
        &[
            ("nodes", "2"),
            ("template", "remote"),
            ("sshUser", &sshd.user),
            ("sshPort", &port),
            ("sshPrivateKey", "${secure(ssh-key)}"),
        ],
        None,
    );
    deploy(
        &server,
        "a",
        "echo \"program via $SSH_CONNECTION\"",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "gce"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    // Which node got which address depends on the order the inserts landed in.
    let address = |node: &str| {
        done["cluster"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|n| n["name"] == node)
            .and_then(|n| n["ipAddress"].as_str())
            .expect("an address")
            .to_string()
    };
    let (_, logs) = server.get(&format!("{run}/logs"));
    let master = address("master");
    assert!(master.starts_with("127.0.1.7"), "{done}");
    assert!(
        logs.to_string().contains(&format!("{master} {port}")),
        "{logs}"
    );
    let create = &operations(&server, &run)[0];
    let install = create["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["node"] == "worker-1" && t["action"] == "install" && t["service"] == "kv")
        .expect("kv install on worker-1");
    assert!(
        install["attempts"][0]["output"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("{} {port}", address("worker-1"))),
        "{install}"
    );
    // A VM is deleted with its disk; here the "VM" is this machine, so tidy up.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let _ = std::fs::remove_dir_all(std::path::Path::new(&home).join(".ebb").join(run_id(&run)));
}

/// What a program on an SSH node detached (its own session, beyond its process group) ends
/// with it: every process carrying its mark is stopped when it exits.
#[test]
fn what_a_remote_program_detached_ends_with_it() {
    let sshd = Sshd::start(&["127.0.1.52"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    put_key(&server, &sshd);
    hosts_profile(&server, &sshd, "machines", &[]);
    // A number no other test sleeps for, to find it by.
    deploy(
        &server,
        "a",
        "setsid sh -c 'sleep 291.25' < /dev/null > /dev/null 2>&1 & \
         setsid sleep 291.5 < /dev/null > /dev/null 2>&1 & sleep 0.3; echo left",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "machines"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let left = std::process::Command::new("pgrep")
        .args(["-f", "sleep 291\\.(25|5)"])
        .output()
        .expect("pgrep");
    assert!(
        left.stdout.is_empty(),
        "the program's detached processes outlived it: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
