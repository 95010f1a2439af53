//! What runs on a node does not steer ebb: not its memory by printing gigabytes, not its SSH
//! by reporting facts of ebb's own. Against the tests' real sshd.

use serde_json::json;

use crate::hosts::{hosts_profile, put_key};
use crate::support::runs::*;
use crate::support::server::{Options, Server};
use crate::support::sshd::Sshd;

/// The most memory the server ever held (`VmHWM`), in MiB.
fn peak_mib(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("VmHWM")
        / 1024
}

/// A one-service template whose install script runs `script`.
fn put_template(server: &Server, script: &str) {
    let template = json!({
        "services": {"noisy": {"actions": {"install": {"type": "shell", "script": script}}}},
        "hardwareTypes": {"any": {"hosts": {}}}, "imageTypes": {"any": {"hosts": {}}},
        "defaults": {"services": ["noisy"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/noisy", template);
    assert_eq!(code, 200, "{body}");
}

#[test]
fn a_node_that_prints_gigabytes_costs_the_server_no_memory() {
    let sshd = Sshd::start(&["127.0.1.91"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_key(&server, &sshd);
    // A service script and a program that each print 200 MB.
    put_template(&server, "head -c 200000000 /dev/zero; echo install-done");
    hosts_profile(&server, &sshd, "noisy", &[("template", "noisy")]);
    deploy(&server, "a", "head -c 200000000 /dev/zero; echo", json!({}));
    let before = peak_mib(&server);
    let run = start(&server, "a", json!({"system.profile.name": "noisy"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done:#}");
    let peak = peak_mib(&server);
    eprintln!("the server's peak memory: {before} MiB before, {peak} MiB after");
    assert!(
        peak < before + 100,
        "the server held {peak} MiB (from {before})"
    );
    // The program's output kept here is capped, and says so.
    let id = run.rsplit('/').next().expect("id");
    let stdout = data.join("runs").join(id).join("stdout.log");
    let kept = std::fs::metadata(&stdout).expect("stdout.log").len();
    assert!(kept <= (64 << 20) + 1024, "{kept} bytes kept");
    let tail = std::fs::read(&stdout).expect("read");
    let tail = String::from_utf8_lossy(&tail[tail.len().saturating_sub(200)..]).to_string();
    assert!(tail.contains("not kept"), "{tail}");
    // The script's output in the audit log is its end.
    let ops = operations(&server, &run);
    let install = ops[0]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["action"] == "install")
        .expect("install")
        .clone();
    let output = install["attempts"][0]["output"]
        .as_str()
        .unwrap_or_default();
    assert!(
        output.ends_with("install-done"),
        "{}",
        &output[output.len().saturating_sub(100)..]
    );
}

#[test]
fn a_script_on_a_node_cannot_point_ebbs_ssh_elsewhere() {
    let sshd = Sshd::start(&["127.0.1.93"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_key(&server, &sshd);
    // The install script reports facts of ebb's own: another host, another directory.
    put_template(
        &server,
        "printf 'ssh=intruder@127.0.1.94:22\\nsshHostKey=SHA256:forged\\nremoteDir=/etc\\nworkDir=/\\nport=2181\\n' > \"$EBB_RESULT_FILE\"",
    );
    hosts_profile(&server, &sshd, "steer", &[("template", "noisy")]);
    deploy(
        &server,
        "a",
        "echo \"ran via $SSH_CONNECTION in $PWD\"",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "steer"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done:#}");
    let (_, view) = server.get(&run);
    let node = &view["cluster"]["nodes"][0]["properties"];
    assert_eq!(
        node["port"], "2181",
        "a fact of the script's own is kept: {view:#}"
    );
    for reserved in ["remoteDir", "workDir"] {
        assert_ne!(
            node[reserved],
            json!(if reserved == "remoteDir" { "/etc" } else { "/" })
        );
    }
    assert!(
        !node["ssh"]
            .as_str()
            .unwrap_or_default()
            .contains("intruder"),
        "{node:#}"
    );
    // The program ran on the node the profile names, in its own directory.
    let id = run.rsplit('/').next().expect("id");
    let out =
        std::fs::read_to_string(data.join("runs").join(id).join("stdout.log")).expect("stdout.log");
    assert!(
        out.contains(" 127.0.1.93 ") && !out.contains("in /etc"),
        "{out}"
    );
}
