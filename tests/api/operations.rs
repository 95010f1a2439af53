//! Cluster operations as transactions (issue 40): an operator's cancel stops an operation
//! and rolls back what it did; a shrink that fails has the nodes it deleted made anew and
//! the one it could not delete taken back, with their services.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

/// A two-service template on the sim: web needs db at run time; every node runs both. On
/// the node named `slow`, db takes two seconds to be removed, so that a shrink deletes the
/// other nodes before it reaches that one's delete. (A stop would not do: web stops on every
/// node before db stops on any, so a slow stop holds back every node alike.)
fn sim_template(server: &Server, slow: Option<&str>) {
    sim_template_failing(server, None, slow);
}

/// [`sim_template`], whose web fails to start (once) while the file `failing` exists.
fn sim_template_failing(server: &Server, failing: Option<&Path>, slow: Option<&str>) {
    let db_remove = match slow {
        Some(node) => {
            format!("if [ \"$EBB_NODE\" = {node} ]; then sleep 2; fi; rm -f db.installed")
        }
        None => "rm -f db.installed".to_string(),
    };
    let web_start = match failing {
        Some(mark) => format!(
            "if [ -e '{}' ]; then exit 1; fi; echo up > web.state",
            mark.display()
        ),
        None => "echo up > web.state".to_string(),
    };
    let template = json!({
        "services": {
            "db": {"actions": {"install": {"type": "shell", "script": "echo db > db.installed"},
                               "remove": {"type": "shell", "script": db_remove},
                               "start": {"type": "shell", "script": "echo up > db.state"},
                               "stop": {"type": "shell", "script": "echo down > db.state"}}},
            "web": {"dependencies": {"runtime": {"requires": ["db"]}},
                    "actions": {"start": {"type": "shell", "script": web_start, "attempts": 1},
                                "stop": {"type": "shell", "script": "echo down > web.state"}}}
        },
        "hardwareTypes": {"any": {"sim": {}}}, "imageTypes": {"any": {"sim": {}}},
        "defaults": {"services": ["db", "web"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/t", template);
    assert_eq!(code, 200, "{body}");
}

/// A run of a long program on `nodes` sim nodes with `props`, once its program runs.
fn live_run(server: &Server, sim: &Path, nodes: &str, props: &[(&str, &str)]) -> String {
    sim_template(server, None);
    live_run_on_template(server, sim, nodes, props)
}

fn live_run_on_template(
    server: &Server,
    sim: &Path,
    nodes: &str,
    props: &[(&str, &str)],
) -> String {
    let mut all = vec![("nodes", nodes), ("template", "t")];
    all.extend_from_slice(props);
    sim_profile(server, "p", sim, &all, 0, None);
    deploy(server, "a", "sleep 300", json!({}));
    let run = start(server, "a", json!({"system.profile.name": "p"}));
    wait_until(server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    run
}

/// Sets or clears termination protection (EC2's `disableApiTermination`) on sim instance
/// `id`, as the cloud's own administrator would.
fn protect(sim: &Path, id: &str, on: bool) {
    let cloud = ebb_sim::cloud::Cloud::open(sim, Default::default()).expect("the sim");
    assert!(
        cloud.protect(id, on).expect("the instance's attribute"),
        "{id} exists"
    );
}

/// The id of the first instance the sim made for `run`'s node `node`.
fn first_instance(sim: &Path, run: &str, node: &str) -> String {
    instances_of(sim, run, node)[0]["id"]
        .as_str()
        .expect("id")
        .to_string()
}

/// The rollback of operation `op` (as `wait_op` answered it), once it has ended.
fn undo_of(server: &Server, run: &str, op: &Value) -> Value {
    wait_op(
        server,
        run,
        op["rolledBackBy"].as_u64().expect("a rollback"),
    )
}

fn live(instance: &Value) -> bool {
    instance["deletedAt"].is_null()
}

/// Stops `run`, waits for its cluster to go, and checks every instance it had was deleted
/// exactly once.
fn stop_and_check_clean(server: &Server, sim: &Path, run: &str) {
    let (code, body) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200, "{body}");
    let done = wait_deprovisioned(server, run);
    assert_eq!(done["cluster"]["status"], "DEPROVISIONED", "{done}");
    let id = run.rsplit('/').next().expect("id");
    for i in instances(sim).iter().filter(|i| i["tags"]["ebb:run"] == id) {
        assert!(!live(i), "left running: {i}");
        assert_eq!(i["deleteCalls"], 1, "deleted once: {i}");
    }
}

/// An operator cancels an expand while its new nodes come up: the operation stops, is
/// recorded CANCELLED with who cancelled it, the new nodes are deleted by its rollback, the
/// old ones are untouched, and the cluster takes operations again.
#[test]
fn a_cancelled_expand_deletes_its_new_nodes_and_leaves_the_old_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    // Instances take 2 s to come up: the expand is still confirming when it is cancelled.
    let run = live_run(&server, &sim, "2", &[("createLatency", "2s")]);
    let before: Vec<Value> = ["master", "worker-1"]
        .iter()
        .flat_map(|n| instances_of(&sim, &run, n))
        .collect();
    assert_eq!(before.len(), 2, "{before:?}");

    let id = cluster_op(&server, &run, json!({"operation": "expand", "nodes": 2}));
    wait_until(&server, &run, Duration::from_secs(30), |_| {
        !instances_of(&sim, &run, "worker-3").is_empty()
    });
    let (code, cancelled) = server.post_json(&format!("{run}/operations/{id}/cancel"), json!({}));
    assert_eq!(code, 200, "{cancelled}");
    assert_eq!(cancelled["id"], id, "{cancelled}");
    let by = cancelled["cancel"]["by"]
        .as_str()
        .expect("who cancelled")
        .to_string();

    let op = wait_op(&server, &run, id);
    assert_eq!(op["status"], "CANCELLED", "{op}");
    assert_eq!(op["error"], format!("cancelled by {by}"), "{op}");
    assert_eq!(op["cancel"]["by"], by.as_str(), "{op}");
    let undo = undo_of(&server, &run, &op);
    assert_eq!(undo["status"], "SUCCEEDED", "{undo}");
    assert_eq!(undo["rollbackOf"], id, "{undo}");
    let mut deleted: Vec<&str> = tasks(&undo, "delete", None)
        .iter()
        .map(|t| t["node"].as_str().expect("node"))
        .collect();
    deleted.sort();
    assert_eq!(deleted, ["worker-2", "worker-3"], "{undo}");

    // The new nodes' instances are gone, each deleted once; the old ones never touched.
    for node in ["worker-2", "worker-3"] {
        let made = instances_of(&sim, &run, node);
        assert_eq!(made.len(), 1, "{node}: {made:?}");
        assert!(
            !live(&made[0]) && made[0]["deleteCalls"] == 1,
            "{node}: {made:?}"
        );
    }
    for old in &before {
        let node = old["tags"]["ebb:node"].as_str().expect("node");
        let now = instances_of(&sim, &run, node);
        assert_eq!(now.len(), 1, "{node}: {now:?}");
        assert!(
            live(&now[0]) && now[0]["deleteCalls"] == 0,
            "{node}: {now:?}"
        );
    }
    // The run keeps its two nodes, says what happened, and takes operations again.
    let view = wait_until(&server, &run, Duration::from_secs(10), |r| {
        r["cluster"]["numNodes"] == 2
    });
    assert_eq!(view["cluster"]["status"], "PROVISIONED", "{view}");
    let (_, events) = server.get(&format!("{run}/events"));
    let said = events.to_string();
    assert!(
        said.contains(&format!("operation {id} (expand) cancelled by {by}")),
        "{said}"
    );
    assert!(said.contains("cluster expand cancelled"), "{said}");
    let again = cluster_op(&server, &run, json!({"operation": "restart-services"}));
    assert_eq!(wait_op(&server, &run, again)["status"], "SUCCEEDED");

    // What cannot be cancelled says why, naming the operation.
    assert_error(
        server.post_json(&format!("{run}/operations/{id}/cancel"), json!({})),
        409,
        &format!("operation {id} of run"),
    );
    assert_error(
        server.post_json(&format!("{run}/operations/1/cancel"), json!({})),
        409,
        "it has ended (SUCCEEDED)",
    );
    assert_error(
        server.post_json(&format!("{run}/operations/99/cancel"), json!({})),
        404,
        "99",
    );
    assert_error(
        server.post_json(&format!("{run}/cluster/operations/x/cancel"), json!({})),
        404,
        "x",
    );
    stop_and_check_clean(&server, &sim, &run);
}

/// A shrink of three nodes whose third delete is refused for good (the instance is
/// protected from termination): the shrink fails, the nodes it deleted are made anew with
/// their services and the one it could not delete is taken back, so the cluster is whole.
#[test]
fn a_shrink_that_cannot_delete_a_node_is_undone_and_the_cluster_is_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    sim_template(&server, Some("worker-3"));
    let run = live_run_on_template(&server, &sim, "4", &[]);
    let protected = first_instance(&sim, &run, "worker-3");
    protect(&sim, &protected, true);

    let id = cluster_op(
        &server,
        &run,
        json!({"operation": "shrink", "remove": ["worker-1", "worker-2", "worker-3"]}),
    );
    let shrink = wait_op(&server, &run, id);
    assert_eq!(shrink["status"], "FAILED", "{shrink}");
    assert!(
        shrink["error"]
            .as_str()
            .unwrap_or_default()
            .contains("OperationNotPermitted"),
        "{shrink}"
    );
    let undo = undo_of(&server, &run, &shrink);
    assert_eq!(undo["status"], "SUCCEEDED", "{undo}");
    // What the shrink deleted is made anew; worker-3, still there, is taken back.
    let replaced: Vec<&str> = tasks(&undo, "replace", None)
        .iter()
        .map(|t| t["node"].as_str().expect("node"))
        .collect();
    assert_eq!(replaced, ["worker-1", "worker-2"], "{undo}");
    for node in &replaced {
        let made = instances_of(&sim, &run, node);
        assert_eq!(
            made.len(),
            2,
            "{node}: the old instance and its new incarnation: {made:?}"
        );
        assert!(!live(&made[0]) && live(&made[1]), "{node}: {made:?}");
    }
    let kept = instances_of(&sim, &run, "worker-3");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(live(&kept[0]), "{kept:?}");
    assert!(
        tasks(&undo, "confirm", None)
            .iter()
            .any(|t| t["node"] == "worker-3"),
        "{undo}"
    );
    // The cluster is whole: four nodes, every service up again.
    let view = wait_until(&server, &run, Duration::from_secs(10), |r| {
        r["cluster"]["numNodes"] == 4
    });
    assert_eq!(view["cluster"]["status"], "PROVISIONED", "{view}");
    assert_states(&server, &run, 4, &[("db", "up"), ("web", "up")]);

    // Once the cloud lets it go, the run ends and leaves nothing.
    protect(&sim, &protected, false);
    stop_and_check_clean(&server, &sim, &run);
}

/// The server is SIGKILLed right after it answered an operator's cancel, and again while a
/// shrink's rollback makes a node anew: once restarted it carries the cancel out (the
/// expand rolled back once) and finishes the rollback; no instance is made or deleted twice.
#[test]
fn a_kill_after_a_cancel_or_during_a_rollback_carries_it_out_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    sim_template(&server, Some("worker-2"));
    let run = live_run_on_template(&server, &sim, "3", &[("createLatency", "2s")]);

    let id = cluster_op(&server, &run, json!({"operation": "expand", "nodes": 1}));
    wait_until(&server, &run, Duration::from_secs(30), |_| {
        !instances_of(&sim, &run, "worker-3").is_empty()
    });
    let (code, body) = server.post_json(&format!("{run}/operations/{id}/cancel"), json!({}));
    assert_eq!(code, 200, "{body}");
    server.kill();
    let server = Server::start(&dir);
    let op = wait_op(&server, &run, id);
    assert_eq!(op["status"], "CANCELLED", "{op}");
    let undo = undo_of(&server, &run, &op);
    assert_eq!(undo["status"], "SUCCEEDED", "{undo}");
    let made = instances_of(&sim, &run, "worker-3");
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(!live(&made[0]) && made[0]["deleteCalls"] == 1, "{made:?}");

    // A shrink of two nodes that cannot delete the second: killed while its rollback waits
    // for worker-1's new incarnation to come up.
    let protected = first_instance(&sim, &run, "worker-2");
    protect(&sim, &protected, true);
    let id = cluster_op(
        &server,
        &run,
        json!({"operation": "shrink", "remove": ["worker-1", "worker-2"]}),
    );
    wait_until(&server, &run, Duration::from_secs(30), |_| {
        instances_of(&sim, &run, "worker-1").len() == 2
    });
    server.kill();
    let server = Server::start(&dir);
    let shrink = wait_op(&server, &run, id);
    assert_eq!(shrink["status"], "FAILED", "{shrink}");
    let undo = undo_of(&server, &run, &shrink);
    assert_eq!(undo["status"], "SUCCEEDED", "{undo}");
    let made = instances_of(&sim, &run, "worker-1");
    assert_eq!(made.len(), 2, "made anew once: {made:?}");
    assert!(!live(&made[0]) && live(&made[1]), "{made:?}");
    let view = wait_until(&server, &run, Duration::from_secs(10), |r| {
        r["cluster"]["numNodes"] == 3
    });
    assert_eq!(view["cluster"]["status"], "PROVISIONED", "{view}");
    assert_states(&server, &run, 3, &[("db", "up"), ("web", "up")]);
    protect(&sim, &protected, false);
    stop_and_check_clean(&server, &sim, &run);
}

/// An expand whose new node fails its service and whose rollback cannot delete that node (it
/// is protected from termination): both fail, and `run`'s cluster needs attention. Returns
/// the protected instance's id.
fn break_cluster(server: &Server, sim: &Path, run: &str, mark: &Path) -> String {
    std::fs::write(mark, "").expect("mark");
    let id = cluster_op(server, run, json!({"operation": "expand", "nodes": 1}));
    // The expand adds worker-2 (the next after worker-1): protect its new instance while it
    // comes up.
    let node = "worker-2";
    let started = std::time::Instant::now();
    let instance = loop {
        let made = instances_of(sim, run, node).into_iter().find(live);
        if let Some(i) = made {
            break i["id"].as_str().expect("id").to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no instance for {node}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    protect(sim, &instance, true);
    let op = wait_op(server, run, id);
    assert_eq!(op["status"], "FAILED", "{op}");
    let undo = undo_of(server, run, &op);
    assert_eq!(undo["status"], "FAILED", "{undo}");
    assert!(
        tasks(&undo, "delete", None)
            .iter()
            .any(|t| t["node"] == node),
        "{undo}"
    );
    std::fs::remove_file(mark).expect("unmark");
    instance
}

/// A rollback that fails leaves the cluster NEEDS ATTENTION, which every surface shows;
/// operations other than a repair are refused; a repair that cannot finish keeps it; one
/// that does clears it; and a cluster that needs attention still goes when its time is up.
#[test]
fn a_failed_rollback_needs_attention_until_a_repair_and_the_deadline_still_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let mark = dir.path().join("web-fails");
    let server = Server::start(&dir);
    sim_template_failing(&server, Some(&mark), None);
    let run = live_run_on_template(&server, &sim, "2", &[("createLatency", "1s")]);
    let protected = break_cluster(&server, &sim, &run, &mark);

    // The run, the list, the metric, the CLI and the UI say so.
    let (_, view) = server.get(&run);
    let reason = view["cluster"]["attention"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("expand failed and so did its rollback"),
        "{view}"
    );
    assert!(reason.contains("OperationNotPermitted"), "{view}");
    assert_eq!(view["cluster"]["status"], "PROVISIONED", "{view}");
    assert_eq!(
        view["cluster"]["numNodes"], 2,
        "the layout is the last good one: {view}"
    );
    let (code, list) =
        server.get("/v3/namespaces/default/apps/a/workflows/p/runs?status=needs_attention");
    assert_eq!(code, 200, "{list}");
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    let metrics = crate::metrics::scrape(&server);
    assert!(
        metrics.contains("ebb_clusters_needing_attention{} 1"),
        "{metrics}"
    );
    let out = cli_run_get(&server, &run);
    assert!(out.contains("NEEDS ATTENTION since"), "{out}");
    let html = crate::ui::run_page(&server, &run);
    assert!(
        html.contains(r#"<span class="badge bad">NEEDS ATTENTION</span>"#),
        "{html}"
    );

    // Only a repair may run; one that cannot delete the stray node fails and keeps the flag.
    assert_error(
        server.post_json(
            &format!("{run}/cluster"),
            json!({"operation": "restart-services"}),
        ),
        409,
        "needs attention",
    );
    let repair = cluster_op(&server, &run, json!({"operation": "repair"}));
    assert_eq!(wait_op(&server, &run, repair)["status"], "FAILED");
    assert!(server.get(&run).1["cluster"]["attention"].is_object());
    // The cause fixed, a repair brings the cluster back to its last good layout.
    protect(&sim, &protected, false);
    let repair = cluster_op(&server, &run, json!({"operation": "repair"}));
    let repaired = wait_op(&server, &run, repair);
    assert_eq!(repaired["status"], "SUCCEEDED", "{repaired}");
    assert_eq!(tasks(&repaired, "delete", None).len(), 1, "{repaired}");
    let view = wait_until(&server, &run, Duration::from_secs(10), |r| {
        r["cluster"]["attention"].is_null()
    });
    assert_eq!(view["cluster"]["numNodes"], 2, "{view}");
    assert_states(&server, &run, 2, &[("db", "up"), ("web", "up")]);
    assert!(crate::metrics::scrape(&server).contains("ebb_clusters_needing_attention{} 0"));
    let again = cluster_op(&server, &run, json!({"operation": "restart-services"}));
    assert_eq!(wait_op(&server, &run, again)["status"], "SUCCEEDED");

    // Broken again, then kept after a stop: its keepalive deadline still tears it down.
    let protected = break_cluster(&server, &sim, &run, &mark);
    let (code, body) = server.post_json(&format!("{run}/stop"), json!({"keepalive": true}));
    assert_eq!(code, 200, "{body}");
    let waiting = wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    assert!(waiting["cluster"]["attention"].is_object(), "{waiting}");
    protect(&sim, &protected, false);
    let soon = now_secs() as u64 + 2;
    let (code, body) = server.post_json(
        &format!("{run}/extend"),
        json!({"expireAt": soon, "shorten": true}),
    );
    assert_eq!(code, 200, "{body}");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["cluster"]["status"], "DEPROVISIONED", "{done}");
    let id = run.rsplit('/').next().expect("id");
    for i in instances(&sim)
        .iter()
        .filter(|i| i["tags"]["ebb:run"] == id)
    {
        assert!(!live(i), "left running: {i}");
    }
}

/// Each operation on a live cluster can be planned first (`POST .../cluster/plan`, `ebb run
/// cluster --dry-run`): the layout after it and its tasks, from the store, touching nothing.
#[test]
fn operations_on_a_live_cluster_are_planned_in_a_dry_run_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    let run = live_run(&server, &sim, "3", &[]);
    let calls_before = calls(&sim).len();
    let ops_before = operations(&server, &run).len();
    let plan = |body: Value| -> Value {
        let (code, plan) = server.post_json(&format!("{run}/cluster/plan"), body);
        assert_eq!(code, 200, "{plan}");
        plan
    };
    let nodes = |plan: &Value| -> Vec<String> {
        plan["layout"]
            .as_array()
            .expect("layout")
            .iter()
            .map(|n| n["node"].as_str().expect("node").to_string())
            .collect()
    };
    let expand = plan(json!({"operation": "expand", "nodes": 1}));
    assert_eq!(
        nodes(&expand),
        ["master", "worker-1", "worker-2", "worker-3"]
    );
    assert_eq!(
        tasks(&expand, "create", None)[0]["node"],
        "worker-3",
        "{expand}"
    );
    assert!(!expand["stages"].as_array().expect("stages").is_empty());
    let shrink = plan(json!({"operation": "shrink", "remove": ["worker-2"]}));
    assert_eq!(nodes(&shrink), ["master", "worker-1"]);
    assert_eq!(
        tasks(&shrink, "delete", None)[0]["node"],
        "worker-2",
        "{shrink}"
    );
    let replace = plan(json!({"operation": "replace-node", "nodes": ["worker-1"]}));
    assert_eq!(
        tasks(&replace, "replace", None)[0]["node"],
        "worker-1",
        "{replace}"
    );
    let restart = plan(json!({"operation": "restart-services", "services": ["db"]}));
    assert_eq!(
        tasks(&restart, "stop", Some("web")).len(),
        3,
        "db's dependents stop first: {restart}"
    );
    let repair = plan(json!({"operation": "repair"}));
    assert_eq!(
        repair["tasks"],
        json!([]),
        "a healthy cluster needs nothing: {repair}"
    );
    assert_error(
        server.post_json(
            &format!("{run}/cluster/plan"),
            json!({"operation": "shrink", "nodes": 3}),
        ),
        400,
        "nodes",
    );
    // Nothing ran, nothing was recorded.
    assert_eq!(calls(&sim).len(), calls_before);
    assert_eq!(operations(&server, &run).len(), ops_before);
    // The CLI shows the same plan.
    let id = run.rsplit('/').next().expect("id");
    let token = server.token().unwrap_or_default();
    let (code, out, err) = crate::support::server::run_ebb(
        &[
            "--server",
            &server.url,
            "run",
            "cluster",
            &format!("default/a/p/{id}"),
            "expand",
            "--nodes",
            "1",
            "--dry-run",
        ],
        &[("EBB_TOKEN", token.as_str())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("worker-3") && out.contains("create worker-3"),
        "{out}"
    );
    stop_and_check_clean(&server, &sim, &run);
}
