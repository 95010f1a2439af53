//! Runs on a cluster template, read back from the audit log of operations: services installed
//! and started across nodes in dependency order and stopped in reverse; a failing service task
//! retried, timed out, and finally rolled back leaving nothing behind; a node that fails to
//! boot deleted and created anew.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::profiles::{echo_services, profile_body, sim_profile};
use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

/// Creates template `name` and a `local` profile of the same name using it on `nodes` nodes.
fn template_profile(server: &Server, name: &str, template: Value, nodes: &str) {
    let (code, body) = server.put(
        &format!("/v3/namespaces/default/templates/{name}"),
        template,
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.put(
        &format!("/v3/namespaces/default/profiles/{name}"),
        profile_body("local", &[("nodes", nodes, true), ("template", name, true)]),
    );
    assert_eq!(code, 200, "{body}");
}

/// Asserts none of the pids listed in `file` still runs.
#[track_caller]
fn assert_dead(file: &std::path::Path) {
    let pids = std::fs::read_to_string(file).unwrap_or_default();
    assert!(!pids.trim().is_empty(), "nothing was started");
    for pid in pids.lines() {
        // Gone, or a zombie waiting for init to reap it: either way it no longer runs.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        assert!(
            matches!(state, None | Some("Z" | "X")),
            "process {pid} outlived its node: {stat}"
        );
    }
}

fn statuses(task: &Value) -> Vec<&str> {
    task["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["status"].as_str().unwrap_or("open"))
        .collect()
}

#[test]
fn a_template_run_starts_services_in_order_and_stops_them_in_reverse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let template = echo_services(&server);
    let (code, _) = server.put(
        "/v3/namespaces/default/profiles/zk",
        profile_body(
            "local",
            &[("nodes", "4", true), ("template", template, true)],
        ),
    );
    assert_eq!(code, 200);
    deploy(&server, "a", "cat ../*/*.state | sort | uniq -c", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "zk"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let logs = server.get(&format!("{run}/logs")).1;
    let stdout = logs["stdout"].as_str().expect("stdout");
    assert!(
        stdout.contains("started"),
        "services were started before the program: {stdout}"
    );

    let ops = operations(&server, &run);
    assert_eq!(ops.len(), 2, "{ops:?}");
    let (create, delete) = (&ops[0], &ops[1]);
    assert_eq!(
        (create["operation"].as_str(), create["status"].as_str()),
        (Some("create"), Some("SUCCEEDED"))
    );
    assert_eq!(
        (delete["operation"].as_str(), delete["status"].as_str()),
        (Some("delete"), Some("SUCCEEDED"))
    );
    for op in &ops {
        for t in op["tasks"].as_array().expect("tasks") {
            assert_eq!(t["status"], "SUCCEEDED", "{t}");
            assert_eq!(statuses(t), ["SUCCEEDED"], "{t}");
        }
    }
    // Up: every node created before any install; zookeeper everywhere before the master
    // starts; the master before the workers.
    assert_before(
        &tasks(create, "confirm", None),
        &tasks(create, "install", Some("zookeeper")),
    );
    let zk = tasks(create, "start", Some("zookeeper"));
    let master = tasks(create, "start", Some("master"));
    let workers = tasks(create, "start", Some("worker"));
    assert_eq!((zk.len(), master.len(), workers.len()), (3, 1, 3));
    assert_before(&zk, &master);
    assert_before(&master, &workers);
    assert_eq!(create["after"]["nodes"].as_array().map(Vec::len), Some(4));
    // Down, in reverse, then the nodes go.
    let stop = |s| tasks(delete, "stop", Some(s));
    assert_before(&stop("worker"), &stop("master"));
    assert_before(&stop("master"), &stop("zookeeper"));
    let deletes = tasks(delete, "delete", None);
    assert_eq!(deletes.len(), 4);
    for d in &deletes {
        let on_node: Vec<&Value> = delete["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .filter(|t| t["node"] == d["node"] && t["action"] == "stop")
            .collect();
        if !on_node.is_empty() {
            assert_before(&on_node, &[d]);
        }
    }
    assert_eq!(delete["after"]["nodes"], json!([]));
    // The dry run showed the very plan the run executed.
    let (code, dry) = server.post_json(
        "/v3/namespaces/default/plan",
        json!({"template": template, "provisioner": "local", "nodes": 4}),
    );
    assert_eq!(code, 200, "{dry}");
    let shape = |tasks: &Value| -> Vec<Value> {
        tasks
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| {
                json!([
                    t["id"],
                    t["node"],
                    t["action"],
                    t["service"],
                    t["dependsOn"]
                ])
            })
            .collect()
    };
    assert_eq!(shape(&dry["tasks"]), shape(&create["tasks"]));
    // One operation by id.
    let (code, one) = server.get(&format!("{run}/operations/2"));
    assert_eq!(code, 200);
    assert_eq!(one["operation"], "delete");
    assert_eq!(server.get(&format!("{run}/operations/9")).0, 404);
    assert_eq!(server.get(&format!("{run}/operations/x")).0, 404);
    assert_no_sandboxes(dir.path());
}

#[test]
fn a_failing_service_is_retried_then_rolled_back_leaving_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    template_profile(
        &server,
        "broken",
        json!({
            "services": {
                "db": {"actions": {"install": {"type": "shell", "script": "echo db > installed"},
                                   "start": {"type": "shell", "script": "sleep 300 & echo \"$!\" >> ../../db.pids"},
                                   "stop": {"type": "shell", "script": "exit 1"}}},
                "web": {"dependencies": {"runtime": {"requires": ["db"]}},
                        "actions": {"start": {"type": "shell", "script": "echo 'web: no luck' >&2; exit 9"}}}
            },
            "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
            "defaults": {"services": ["db", "web"]}
        }),
        "2",
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "broken"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    assert_eq!(done["failure"]["kind"], "provisioning");
    let message = done["failure"]["message"].as_str().expect("message");
    assert!(
        message.contains("start web") && message.contains("rolled back by operation 2"),
        "{message}"
    );
    let ops = operations(&server, &run);
    let (create, undo) = (&ops[0], &ops[1]);
    assert_eq!(create["status"], "FAILED");
    assert_eq!(create["rolledBackBy"], 2);
    let web = tasks(create, "start", Some("web"));
    assert_eq!(
        statuses(web[0]),
        ["FAILED", "FAILED", "FAILED"],
        "{}",
        web[0]
    );
    assert_eq!(web[0]["status"], "FAILED");
    assert!(
        web[0]["attempts"][0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("no luck"))
    );
    // The rollback undid what completed: db stopped (its failure passed over, the node goes
    // anyway) and both nodes deleted; web never started, so nothing stops it.
    assert_eq!(undo["rollbackOf"], 1);
    assert_eq!(undo["status"], "SUCCEEDED", "{undo}");
    assert_eq!(tasks(undo, "stop", Some("db")).len(), 2);
    assert!(tasks(undo, "stop", Some("web")).is_empty());
    assert_eq!(tasks(undo, "delete", None).len(), 2);
    assert_eq!(undo["after"]["nodes"], json!([]));
    // The lifecycle's delete found nothing left to do.
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert_eq!(ops[2]["tasks"], json!([]));
    assert_dead(&crate::support::server::work_dir(dir.path()).join("local/db.pids"));
    assert_no_sandboxes(dir.path());
}

#[test]
fn a_flaky_action_is_retried_and_a_hung_one_times_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    template_profile(
        &server,
        "flaky",
        json!({
            "services": {
                "once": {"actions": {"install": {"type": "shell",
                    "script": "if [ ! -f tried ]; then touch tried; echo first time >&2; exit 1; fi; echo port=2181 > \"$EBB_RESULT_FILE\""}}},
                "slow": {"dependencies": {"install": {"requires": ["once"]}},
                         "actions": {"install": {"type": "shell", "timeout": "1s", "attempts": 2,
                    "script": "if [ ! -f hung ]; then touch hung; sleep 60 & echo $! >> ../../hung.pids; wait; fi; echo \"port was $port\" > seen"}}}
            },
            "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
            "defaults": {"services": ["once", "slow"]}
        }),
        "1",
    );
    deploy(&server, "a", "cat seen", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "flaky"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let ops = operations(&server, &run);
    let create = &ops[0];
    assert_eq!(create["status"], "SUCCEEDED");
    let once = tasks(create, "install", Some("once"));
    assert_eq!(statuses(once[0]), ["FAILED", "SUCCEEDED"]);
    assert_eq!(once[0]["attempts"][1]["result"]["port"], "2181");
    let slow = tasks(create, "install", Some("slow"));
    assert_eq!(statuses(slow[0]), ["TIMED_OUT", "SUCCEEDED"]);
    assert!(
        slow[0]["attempts"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("timed out"))
    );
    // The timed-out attempt's processes were killed with it.
    assert_dead(&crate::support::server::work_dir(dir.path()).join("local/hung.pids"));
    assert_no_sandboxes(dir.path());
}

#[test]
fn a_node_that_fails_to_boot_is_created_anew() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let state = sub(&dir, "sim");
    sim_profile(
        &server,
        "boot",
        &state,
        &[("nodes", "2"), ("bootFailures", "1")],
        0,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "boot"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let ops = operations(&server, &run);
    let confirms = tasks(&ops[0], "confirm", None);
    let retried: Vec<&&Value> = confirms.iter().filter(|t| statuses(t).len() > 1).collect();
    assert_eq!(retried.len(), 1, "{confirms:?}");
    assert_eq!(statuses(retried[0]), ["FAILED", "SUCCEEDED"]);
    // Marked with the attempt whose failure replaced it.
    assert_eq!(retried[0]["attempts"][1]["result"]["recreated"], "1");
    // Three instances: the one that failed to boot, its replacement, the other node's; all
    // terminated now, each deleted exactly once.
    let all = instances(&state);
    assert_eq!(all.len(), 3, "{all:?}");
    for i in &all {
        assert_eq!(i["state"], "terminated", "{i}");
        assert_eq!(i["deleteCalls"], 1, "{i}");
    }
}

/// Asserts that on each node, `service`'s `first` task finished before its `then` task began.
#[track_caller]
fn assert_per_node(op: &Value, (first, then): (&str, &str), service: &str) {
    let later = tasks(op, then, Some(service));
    assert!(!later.is_empty(), "no {then} {service}");
    for t in later {
        let before: Vec<&Value> = tasks(op, first, Some(service))
            .into_iter()
            .filter(|f| f["node"] == t["node"])
            .collect();
        assert_before(&before, &[t]);
    }
}

/// Expands live run `run` by one node: the new node comes up, the old ones are reconfigured
/// after it exists.
fn expand_by_one(server: &Server, run: &str, sandbox: &impl Fn(&str) -> PathBuf) {
    let id = cluster_op(server, run, json!({"operation": "expand", "nodes": 1}));
    assert_error(
        server.post_json(
            &format!("{run}/cluster"),
            json!({"operation": "restart-services"}),
        ),
        409,
        "a expand operation is running",
    );
    let expand = wait_op(server, run, id);
    assert_eq!(expand["status"], "SUCCEEDED", "{expand}");
    assert_eq!(tasks(&expand, "create", None).len(), 1);
    assert_eq!(tasks(&expand, "create", None)[0]["node"], "worker-2");
    assert_before(
        &tasks(&expand, "confirm", None),
        &tasks(&expand, "configure", Some("svc")),
    );
    // svc restarts on configure: on the nodes there already, it is stopped once the new node
    // exists, configured, and started again.
    let stops = tasks(&expand, "stop", Some("svc"));
    assert_eq!(stops.len(), 2, "{expand}");
    assert!(stops.iter().all(|t| t["node"] != "worker-2"), "{expand}");
    assert_before(&tasks(&expand, "confirm", None), &stops);
    for node in ["master", "worker-1"] {
        let on = |action: &str| -> Vec<&Value> {
            tasks(&expand, action, Some("svc"))
                .into_iter()
                .filter(|t| t["node"] == node)
                .collect()
        };
        assert_before(&on("stop"), &on("configure"));
        assert_before(&on("configure"), &on("start"));
    }
    assert_eq!(
        std::fs::read_to_string(sandbox("master").join("state")).expect("state"),
        "up\n"
    );
    // The run takes the cluster's new shape once the operation has ended.
    wait_until(server, run, std::time::Duration::from_secs(10), |r| {
        r["cluster"]["numNodes"] == 3
    });
    let conf = std::fs::read_to_string(sandbox("master").join("conf")).expect("conf");
    assert!(
        conf.contains("worker-2"),
        "the master knows the new node: {conf}"
    );
}

/// Configures `run`'s cluster: svc stops, takes the new config and starts again, on every
/// node.
fn configure_everywhere(server: &Server, run: &str, sandbox: &impl Fn(&str) -> PathBuf) {
    let id = cluster_op(
        server,
        run,
        json!({"operation": "configure", "config": {"v": 2}}),
    );
    let configure = wait_op(server, run, id);
    assert_eq!(configure["status"], "SUCCEEDED", "{configure}");
    assert_eq!(tasks(&configure, "configure", Some("svc")).len(), 3);
    assert_per_node(&configure, ("stop", "configure"), "svc");
    assert_per_node(&configure, ("configure", "start"), "svc");
    let conf = std::fs::read_to_string(sandbox("worker-1").join("conf")).expect("conf");
    assert!(conf.contains(r#"{"v":2}"#), "{conf}");
}

/// Shrinks `run`'s cluster by one: the newest node goes, the rest learn of it.
fn shrink_by_one(server: &Server, run: &str, sandbox: &impl Fn(&str) -> PathBuf) {
    let id = cluster_op(server, run, json!({"operation": "shrink", "nodes": 1}));
    let shrink = wait_op(server, run, id);
    assert_eq!(shrink["status"], "SUCCEEDED", "{shrink}");
    assert_eq!(tasks(&shrink, "delete", None)[0]["node"], "worker-2");
    let (going, staying): (Vec<&Value>, Vec<&Value>) = tasks(&shrink, "stop", Some("svc"))
        .into_iter()
        .partition(|t| t["node"] == "worker-2");
    assert_eq!((going.len(), staying.len()), (1, 2), "{shrink}");
    assert_before(&going, &tasks(&shrink, "delete", None));
    // The nodes that stay restart svc around its configure once worker-2 is gone.
    assert_before(&tasks(&shrink, "delete", None), &staying);
    assert_before(
        &tasks(&shrink, "delete", None),
        &tasks(&shrink, "configure", Some("svc")),
    );
    assert_per_node(&shrink, ("configure", "start"), "svc");
    assert!(!sandbox("worker-2").exists());
    wait_until(server, run, std::time::Duration::from_secs(10), |r| {
        r["cluster"]["numNodes"] == 2
    });
}

#[test]
fn admins_expand_configure_shrink_and_restart_a_live_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    template_profile(
        &server,
        "live",
        json!({
            "services": {
                "base": {"actions": {"install": {"type": "shell", "script": "echo base > installed"}}},
                "svc": {"dependencies": {"install": {"requires": ["base"]}},
                        "restartOnConfigure": true,
                        "actions": {"configure": {"type": "shell", "script": "sleep 0.5; echo \"$EBB_CONFIG $EBB_NODES\" > conf"},
                                    "start": {"type": "shell", "script": "echo up > state"},
                                    "stop": {"type": "shell", "script": "echo down > state"}}}
            },
            "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
            "defaults": {"services": ["base", "svc"], "config": {"v": 1}}
        }),
        "2",
    );
    deploy(&server, "a", "sleep 60", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "live"}));
    wait_until(&server, &run, std::time::Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    let sandbox = |node: &str| {
        let id = run.rsplit('/').next().expect("id");
        crate::support::server::work_dir(dir.path())
            .join("local")
            .join(id)
            .join(node)
    };

    // Bad requests name the field; nothing starts.
    for (body, field) in [
        (json!({"operation": "expand"}), "nodes"),
        (json!({"operation": "create"}), "operation"),
        (json!({"operation": "grow"}), "operation"),
        (json!({"operation": "configure", "config": "v=2"}), "config"),
        (
            json!({"operation": "shrink", "remove": ["master"]}),
            "remove",
        ),
    ] {
        assert_error(
            server.post_json(&format!("{run}/cluster"), body),
            400,
            field,
        );
    }
    assert_eq!(operations(&server, &run).len(), 1);

    expand_by_one(&server, &run, &sandbox);
    configure_everywhere(&server, &run, &sandbox);
    shrink_by_one(&server, &run, &sandbox);

    let id = cluster_op(&server, &run, json!({"operation": "restart-services"}));
    assert_eq!(wait_op(&server, &run, id)["status"], "SUCCEEDED");

    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["cluster"]["status"], "DEPROVISIONED");
    assert_error(
        server.post_json(
            &format!("{run}/cluster"),
            json!({"operation": "start-services"}),
        ),
        409,
        "DEPROVISIONED",
    );
    assert_no_sandboxes(dir.path());
}

#[test]
fn a_failed_create_on_sim_is_rolled_back_and_every_instance_deleted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let state = sub(&dir, "sim");
    let template = json!({
        "services": {
            "db": {"actions": {"start": {"type": "shell", "script": "true"}, "stop": {"type": "shell", "script": "true"}}},
            "web": {"dependencies": {"runtime": {"requires": ["db"]}},
                    "actions": {"start": {"type": "shell", "script": "exit 1", "attempts": 2}}}
        },
        "hardwareTypes": {"any": {"sim": {}}}, "imageTypes": {"any": {"sim": {}}},
        "defaults": {"services": ["db", "web"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/t", template);
    assert_eq!(code, 200, "{body}");
    sim_profile(
        &server,
        "p",
        &state,
        &[("nodes", "3"), ("template", "t")],
        0,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    let ops = operations(&server, &run);
    let web = tasks(&ops[0], "start", Some("web"));
    assert!(
        web.iter().all(|t| statuses(t) == ["FAILED", "FAILED"]),
        "{web:?}"
    );
    assert_eq!(ops[1]["rollbackOf"], 1);
    assert_eq!(ops[1]["status"], "SUCCEEDED");
    assert_eq!(tasks(&ops[1], "delete", None).len(), 3);
    assert_eq!(tasks(&ops[1], "stop", Some("db")).len(), 3);
    assert_clean(&state, &[&run], 3);
}

#[test]
fn service_states_follow_the_operations_on_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    template_profile(
        &server,
        "states",
        json!({
            "services": {
                "db": {"actions": {"configure": {"type": "shell", "script": "echo \"$EBB_CONFIG\" > db.conf"},
                                   "start": {"type": "shell", "script": "echo up > db.state"},
                                   "stop": {"type": "shell", "script": "echo down > db.state"}}},
                "web": {"restartOnConfigure": true,
                        "actions": {"configure": {"type": "shell", "script": "echo \"$EBB_CONFIG\" > web.conf"},
                                    "start": {"type": "shell", "script": "echo up > web.state"},
                                    "stop": {"type": "shell", "script": "echo down > web.state"}}}
            },
            "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
            "defaults": {"services": ["db", "web"], "config": {"v": 1}}
        }),
        "2",
    );
    deploy(&server, "a", "sleep 60", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "states"}));
    wait_until(&server, &run, std::time::Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    assert_states(&server, &run, 2, &[("db", "up"), ("web", "up")]);
    // A new config: db keeps running the old one; web restarts on configure.
    let id = cluster_op(
        &server,
        &run,
        json!({"operation": "configure", "config": {"v": 2}}),
    );
    assert_eq!(wait_op(&server, &run, id)["status"], "SUCCEEDED");
    assert_states(&server, &run, 2, &[("db", "outdated"), ("web", "up")]);
    // The CLI shows them beside each node.
    let out = cli_run_get(&server, &run);
    assert!(out.contains("SERVICES"), "{out}");
    assert!(out.contains("db:outdated web:up"), "{out}");
    // And the web UI, beside each node.
    let html = crate::ui::run_page(&server, &run);
    assert!(
        html.contains(r#">db</a> <span class="badge wait">outdated</span>"#),
        "{html}"
    );
    assert!(
        html.contains(r#">web</a> <span class="badge ok">up</span>"#),
        "{html}"
    );
    let id = cluster_op(&server, &run, json!({"operation": "stop-services"}));
    assert_eq!(wait_op(&server, &run, id)["status"], "SUCCEEDED");
    assert_states(&server, &run, 2, &[("db", "down"), ("web", "down")]);
    let id = cluster_op(&server, &run, json!({"operation": "start-services"}));
    assert_eq!(wait_op(&server, &run, id)["status"], "SUCCEEDED");
    assert_states(&server, &run, 2, &[("db", "up"), ("web", "up")]);
    // Deprovisioned: the nodes are gone, and their services with them.
    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["cluster"]["status"], "DEPROVISIONED");
    assert_eq!(service_states(&server, &run), []);
}
