//! Automator plugins: a template's services configured by the Ansible automator
//! (`examples/plugins/ansible`, ansible-core from PyPI): on three nodes over a real sshd, with
//! a named restart through the automator, and on `local` nodes; what a namespace admin's
//! template may not do with one; a template naming an automator the server lacks.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::hosts::{hosts_profile, put_key};
use crate::plugins::server;
use crate::support::process::python_from;
use crate::support::profiles::put_profile;
use crate::support::runs::*;
use crate::support::server::{Server, make_token};
use crate::support::sshd::Sshd;

const ANSIBLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/plugins/ansible");

/// Waits until the run's cluster is DEPROVISIONED, as long as playbooks take: every action is
/// an ansible-playbook (several seconds each on a loaded machine), and a plan runs several
/// rounds of them one after another.
#[track_caller]
fn wait_playbooks_deprovisioned(server: &Server, run: &str) -> Value {
    wait_until(server, run, PLAYBOOKS, |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    })
}

/// How long the tests wait for an operation made of playbooks.
const PLAYBOOKS: std::time::Duration = std::time::Duration::from_secs(240);

/// A plugin directory in `dir` with the Ansible automator, told where ansible-playbook is
/// (the virtualenv `tests/support/ansible/setup.sh` makes, installing ansible-core once).
fn install_ansible(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = python_from(
        root,
        "tests/support/ansible/setup.sh",
        "python3 with venv and PyPI access to install ansible-core",
    );
    let playbook = python.with_file_name("ansible-playbook");
    let plugins = dir.join("plugins");
    let target = plugins.join("ansible");
    std::fs::create_dir_all(target.join("callback_plugins")).expect("dirs");
    for file in [
        "plugin.json",
        "ansible_automator.py",
        "callback_plugins/ebb_events.py",
        "conformance.json",
    ] {
        std::fs::copy(Path::new(ANSIBLE).join(file), target.join(file)).expect("copy");
    }
    std::fs::write(
        target.join("config.json"),
        json!({"ansiblePlaybook": playbook}).to_string(),
    )
    .expect("config");
    plugins
}

/// The shipped zookeeper-style template whose actions are Ansible playbooks.
fn template() -> Value {
    let text = std::fs::read_to_string(Path::new(ANSIBLE).join("zookeeper-ansible.json"))
        .expect("template");
    let mut t: Value = serde_json::from_str(&text).expect("json");
    // Put under other names by the tests.
    t.as_object_mut().expect("object").remove("name");
    t
}

fn put_template(server: &Server) {
    let (code, body) = server.put("/v3/namespaces/default/templates/zk-ansible", template());
    assert_eq!(code, 200, "{body}");
}

/// The tasks of `op` for `service`'s `action`.
fn outputs(op: &Value, action: &str, service: &str) -> Vec<String> {
    op["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|t| t["action"] == action && t["service"] == service)
        .map(|t| {
            t["attempts"]
                .as_array()
                .and_then(|a| a.last())
                .map(|a| a["output"].as_str().unwrap_or_default().to_string())
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn ansible_configures_three_nodes_over_ssh_and_restarts_a_service_by_name() {
    let sshd = Sshd::start(&["127.0.1.21", "127.0.1.22", "127.0.1.23"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_ansible(dir.path());
    let server = server(dir.path(), &plugins);
    put_key(&server, &sshd);
    put_template(&server);
    hosts_profile(&server, &sshd, "zk", &[("template", "zk-ansible")]);
    let release = dir.path().join("release");
    deploy(
        &server,
        "a",
        &format!("while [ ! -e '{}' ]; do sleep 0.2; done", release.display()),
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "zk"}));
    let running = wait_until(&server, &run, PLAYBOOKS, |r| {
        r["status"] == "RUNNING" || r["status"] == "FAILED"
    });
    assert_eq!(running["status"], "RUNNING", "{running}");

    // Each node's directory holds what its playbooks did, over SSH.
    let remote = sshd
        .remote_dir()
        .join(run.rsplit('/').next().expect("run id"));
    let nodes = running["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .clone();
    assert_eq!(nodes.len(), 3);
    let mut zookeepers = 0;
    for node in &nodes {
        let name = node["name"].as_str().expect("name");
        let node_dir = remote.join(name);
        assert!(node_dir.join("data").is_dir(), "base installed on {name}");
        if let Ok(conf) = std::fs::read_to_string(node_dir.join("zookeeper.conf")) {
            zookeepers += 1;
            assert!(conf.contains("clientPort=2181"), "{conf}");
            assert!(conf.contains("server.1=127.0.1.2"), "{conf}");
            let state = std::fs::read_to_string(node_dir.join("zookeeper.state")).expect("state");
            assert_eq!(state, "started\n");
            assert_eq!(node["properties"]["zookeeper_port"], "2181", "{node}");
        }
    }
    assert!(zookeepers % 2 == 1, "an odd quorum: {zookeepers}");
    let create = &operations(&server, &run)[0];
    let installs = outputs(create, "install", "base");
    assert_eq!(installs.len(), 3);
    for out in &installs {
        assert!(
            out.contains("ok (changed): make the node's directories") && out.contains("failed=0"),
            "{out}"
        );
    }

    // A named restart: zookeeper's stop and start playbooks run again, through the plugin.
    let id = cluster_op(
        &server,
        &run,
        json!({"operation": "restart-services", "services": ["zookeeper"]}),
    );
    // Six rounds of playbooks, one after another (stop the workers, the master, zookeeper; start
    // zookeeper, the master, the workers): over SSH on a loaded machine each has taken 15 s.
    let restart = wait_op_within(&server, &run, id, PLAYBOOKS);
    assert_eq!(restart["status"], "SUCCEEDED", "{restart}");
    for node in &nodes {
        let name = node["name"].as_str().expect("name");
        if let Ok(state) = std::fs::read_to_string(remote.join(name).join("zookeeper.state")) {
            assert_eq!(state, "started\nstopped\nstarted\n", "{name}");
        }
    }

    std::fs::write(&release, "").expect("release");
    let done = wait_playbooks_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    // The automator keeps nothing of an attempt (the node's key included) once it ends.
    let attempts = dir.path().join("data/work/plugins/ansible/attempts");
    let left: Vec<_> = walk(&attempts)
        .into_iter()
        .filter(|p| p.is_file())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn ansible_configures_local_nodes_and_a_failing_playbook_fails_the_operation_with_its_task() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_ansible(dir.path());
    let server = server(dir.path(), &plugins);
    put_template(&server);
    put_profile(
        &server,
        "zk",
        "local",
        &[("nodes", "2"), ("template", "zk-ansible")],
        &[],
        None,
    );
    deploy(
        &server,
        "a",
        "cat zookeeper.conf 2>/dev/null; true",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "zk"}));
    let done = wait_playbooks_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let create = &operations(&server, &run)[0];
    for out in outputs(create, "configure", "zookeeper") {
        assert!(out.contains("write the quorum's configuration"), "{out}");
    }

    // A playbook whose task fails: the attempt fails naming the task and what it said.
    let mut broken = template();
    broken["services"]["master"]["actions"]["start"]["playbook"] = json!(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: refuse to start\n      ansible.builtin.fail:\n        msg: no quorum today\n"
    );
    broken["services"]["master"]["actions"]["start"]["attempts"] = json!(1);
    let (code, body) = server.put("/v3/namespaces/default/templates/zk-broken", broken);
    assert_eq!(code, 200, "{body}");
    put_profile(
        &server,
        "zk-broken",
        "local",
        &[("nodes", "2"), ("template", "zk-broken")],
        &[],
        None,
    );
    let run = start(&server, "a", json!({"system.profile.name": "zk-broken"}));
    let done = wait_playbooks_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    let message = done["failure"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("task 'refuse to start' failed") && message.contains("no quorum today"),
        "{message}"
    );
}

#[test]
fn templates_naming_automators_are_checked_and_a_namespace_admins_may_not_run_on_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_ansible(dir.path());
    let server = server(dir.path(), &plugins);
    let mut t = template();
    // An automator the server does not have, and a field the plugin does not take.
    t["services"]["base"]["actions"]["install"]["type"] = json!("chef");
    let (code, body) = server.put("/v3/namespaces/default/templates/bad", t);
    assert_eq!(code, 400, "{body}");
    let said = body.to_string();
    assert!(
        said.contains("services.base.actions.install.type") && said.contains("ansible, shell")
            || said.contains("shell, ansible"),
        "{body}"
    );
    // A dry run of an inline template is held to the same check.
    let mut t = template();
    t["services"]["base"]["actions"]["install"]["type"] = json!("chef");
    let (code, body) = server.post_json(
        "/v3/namespaces/default/plan",
        json!({"template": t, "provisioner": "local", "nodes": 2}),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("no automator 'chef'"), "{body}");
    let mut t = template();
    t["services"]["base"]["actions"]["install"]["hosts"] = json!("everything");
    let (code, body) = server.put("/v3/namespaces/default/templates/bad", t);
    assert_eq!(code, 400, "{body}");
    assert!(
        body.to_string()
            .contains("services.base.actions.install.hosts"),
        "{body}"
    );
    let mut t = template();
    t["services"]["base"]["actions"]["check"] =
        json!({"type": "ansible", "playbook": "- hosts: all"});
    let (code, body) = server.put("/v3/namespaces/default/templates/bad", t);
    assert_eq!(code, 400, "{body}");
    assert!(
        body.to_string().contains("a check is a shell script"),
        "{body}"
    );

    // A namespace admin's template with Ansible actions: its playbooks would run in the
    // plugin's process on the server's host (lookups, local tasks), so its runs are refused,
    // even on nodes reached over SSH.
    let admin = make_token(
        &server,
        "ns-admin",
        json!({"namespaces": {"default": "admin"}}),
    );
    let (code, body) = server.call(
        "PUT",
        "/v3/namespaces/default/templates/theirs",
        Some(template()),
        Some(&admin),
    );
    assert_eq!(code, 200, "{body}");
    put_profile(
        &server,
        "theirs",
        "hosts",
        &[
            ("hosts", "nobody@127.0.1.99:22"),
            ("sshPrivateKey", "${secure(none)}"),
            ("template", "theirs"),
        ],
        &[],
        None,
    );
    let (code, body) = server.put(
        "/v3/namespaces/default/securekeys/none",
        json!({"data": "not a key"}),
    );
    assert_eq!(code, 200, "{body}");
    deploy(&server, "a", "true", json!({}));
    let (code, body) = server.post_json(
        &format!("{}/start", program("a")),
        json!({"system.profile.name": "theirs"}),
    );
    let said = body.to_string();
    assert!(
        code == 403 || (code == 200 && said.contains("runId")),
        "{code} {body}"
    );
    if code == 200 {
        let run = format!(
            "{}/runs/{}",
            program("a"),
            body["runId"].as_str().expect("id")
        );
        let done = wait_deprovisioned(&server, &run);
        assert_eq!(done["status"], "REJECTED", "{done}");
        assert!(done.to_string().contains("automator plugin"), "{done}");
    } else {
        assert!(said.contains("automator plugin"), "{body}");
    }
    // Nothing ran: no attempt of the automator was made.
    assert_eq!(server.get("/v3/plugins").1["plugins"][0]["calls"], 0);
}

#[test]
fn the_conformance_kit_passes_the_ansible_automator() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_ansible(dir.path());
    let plugin = plugins.join("ansible");
    let plugin = plugin.to_str().expect("utf-8");
    let (code, out, err) = crate::support::server::run_ebb(&["plugin", "test", plugin], &[], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("5 of 5 cases hold"), "{out}");
    // The slow action's sleep was stopped with its plugin's tool, not left running.
    let left = std::process::Command::new("pgrep")
        .args(["-f", "sleep 59.75"])
        .output()
        .expect("pgrep");
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// What ebb hands a playbook of operator data (the run's `config`, which `configure`
/// replaces; the nodes and their facts, which programs on SSH nodes can write) is marked
/// unsafe: Ansible never renders it as a template, so a lookup in it runs nothing on the
/// server's host (the controller). The template's own `vars` stay templates.
#[test]
fn operator_data_reaches_a_playbook_as_text_never_as_a_template() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_ansible(dir.path());
    let descriptor = ebb_plugin::descriptor::load(&plugins.join("ansible")).expect("descriptor");
    let automator = ebb_plugin::PluginAutomator::new(descriptor);
    let node_dir = dir.path().join("node");
    std::fs::create_dir_all(&node_dir).expect("node dir");
    let marker = dir.path().join("pwned");
    let hostile = format!("{{{{ lookup('pipe', 'touch {}') }}}}", marker.display());
    let playbook = "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.copy:\n        dest: \"{{ ebb.dir }}/seen\"\n        content: \"{{ ebb.config.greeting }}|{{ ebb.nodes[0].properties.fact }}|{{ own }}\\n\"\n";
    let call = ebb_plugin::automator::ActionCall {
        work_dir: dir.path(),
        action: json!({"service": "svc", "action": "configure", "fields": {
            "playbook": playbook,
            "vars": {"own": "{{ 6 * 7 }}"},
        }}),
        node: json!({
            "name": "master", "id": "n1", "address": "127.0.0.1", "facts": {"fact": hostile},
            "workDir": node_dir.display().to_string(),
        }),
        cluster: json!({
            "run": "r1", "config": {"greeting": hostile},
            "nodes": [{"name": "master", "id": "n1", "ipAddress": "127.0.0.1",
                       "properties": {"fact": hostile}, "services": ["svc"]}],
        }),
        timeout: std::time::Duration::from_secs(120),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = rt.block_on(automator.run(call, &|t: &str| t.to_string()));
    assert!(result.is_ok(), "{result:?}");
    assert!(
        !marker.exists(),
        "operator data ran a lookup on the controller"
    );
    let seen = std::fs::read_to_string(node_dir.join("seen")).expect("the playbook's file");
    assert_eq!(seen, format!("{hostile}|{hostile}|42\n"));
}
