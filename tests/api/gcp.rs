//! gcp-compute and gcp-dataproc through Google's Rust SDK against the local stand-in: full
//! lifecycles, a SIGKILL mid-provisioning, errors inside DONE operations.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::gcp::*;
use crate::support::runs::*;
use crate::support::server::{Options, Server};

fn of_run(gcp: &Gcp, key: &str, run: &str) -> Vec<Value> {
    gcp.of_run(&[key], run)
}

/// Holds back the create answers (`hold`), kills the server once all `count` resources of
/// the run exist, restarts it, and checks the run completes with exactly `count` resources
/// ever made (`kinds`: the stand-in's live and deleted lists), none left live.
fn killed_mid_create(hold: Value, provisioner: &str, kinds: (&str, &str), count: usize) {
    let (live, deleted) = kinds;
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    gcp.fault(hold);
    gcp_profile(&server, &gcp, provisioner, "p", &[], None);
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    let id = run_id(&run).to_string();
    let started = std::time::Instant::now();
    while of_run(&gcp, live, &id).len() < count {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            gcp.resources()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    let server = Server::start_at(&data, Options::default());
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    gcp.wait_deleted();
    let all = [of_run(&gcp, live, &id), of_run(&gcp, deleted, &id)].concat();
    assert_eq!(all.len(), count, "one resource per node: {all:?}");
    assert!(of_run(&gcp, live, &id).is_empty());
}

fn run_id(path: &str) -> &str {
    path.rsplit('/').next().expect("run id")
}

#[test]
fn a_three_node_compute_cluster_is_labelled_run_and_deleted() {
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    gcp_profile(
        &server,
        &gcp,
        "gcp-compute",
        "gce",
        &[("labels", "team=data")],
        Some(3600),
    );
    deploy(
        &server,
        "a",
        "test \"$(grep -c '\"ipAddress\": \"34.70' \"$EBB_CLUSTER_FILE\")\" = 3",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "gce"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let id = run_id(&run);
    assert_eq!(gcp.count("POST", "/instances"), 3);
    gcp.wait_deleted();
    let gone = of_run(&gcp, "deletedInstances", id);
    assert_eq!(gone.len(), 3, "{}", gcp.resources());
    assert!(of_run(&gcp, "instances", id).is_empty());
    for i in &gone {
        assert_eq!(i["labels"]["ebb-server"], "ebb", "{i}");
        assert_eq!(i["labels"]["team"], "data", "{i}");
        assert!(
            i["name"].as_str().is_some_and(|n| n.starts_with("ebb-")),
            "{i}"
        );
        assert_eq!(
            i["scheduling"]["instanceTerminationAction"], "DELETE",
            "{i}"
        );
        let seconds = i["scheduling"]["maxRunDuration"]["seconds"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .or_else(|| i["scheduling"]["maxRunDuration"]["seconds"].as_u64())
            .expect("maxRunDuration");
        assert!((3600..=4300).contains(&seconds), "{seconds}");
    }
    let inserts: Vec<Value> = gcp
        .calls()
        .into_iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/instances"))
        })
        .collect();
    assert!(
        inserts
            .iter()
            .all(|c| c["requestId"].as_str().is_some_and(|r| r.len() == 36)),
        "{inserts:?}"
    );
}

/// SIGKILL while the inserts' answers are held back (the instances were made): the restarted
/// server finds them by their labels or adopts them on "already exists", makes no second one,
/// and deletes all three.
#[test]
fn a_compute_cluster_survives_a_kill_mid_provisioning_without_a_duplicate() {
    let hold = json!({"api": "compute", "op": "insert", "kind": "hold", "seconds": 60, "times": 3});
    killed_mid_create(hold, "gcp-compute", ("instances", "deletedInstances"), 3);
}

/// Errors inside a DONE operation: capacity is retried (with a fresh request id, since the
/// first one is spent); quota fails the run at once and leaves nothing.
#[test]
fn errors_inside_done_operations_are_retried_or_fatal() {
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    gcp_profile(&server, &gcp, "gcp-compute", "gce", &[("nodes", "1")], None);
    deploy(&server, "a", "true", json!({}));
    gcp.fault(
        json!({"api": "compute", "op": "insert", "kind": "op_error", "times": 1,
                     "code": "ZONE_RESOURCE_POOL_EXHAUSTED", "status": 503}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "gce"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let ids: std::collections::BTreeSet<String> = gcp
        .calls()
        .iter()
        .filter(|c| {
            c["method"] == "POST"
                && c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/instances"))
        })
        .filter_map(|c| c["requestId"].as_str().map(str::to_string))
        .collect();
    assert_eq!(ids.len(), 2, "the spent request id was not reused: {ids:?}");

    gcp.fault(json!({"api": "compute", "op": "insert", "kind": "op_error", "times": 1,
                     "code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded.  Limit: 8.0", "status": 403}));
    let run = start(&server, "a", json!({"system.profile.name": "gce"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    let (_, events) = server.get(&format!("{run}/events"));
    assert!(
        events
            .to_string()
            .contains("QUOTA_EXCEEDED: Quota 'CPUS' exceeded"),
        "{events}"
    );
    assert!(of_run(&gcp, "instances", run_id(&run)).is_empty());
}

/// A Dataproc managed cluster: one resource, made with CDAP's properties, its lifecycle
/// fail-safes set, the program told its master, and deleted afterwards.
#[test]
fn a_dataproc_cluster_is_made_with_its_lifecycle_settings_and_deleted() {
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    gcp_profile(
        &server,
        &gcp,
        "gcp-dataproc",
        "dp",
        &[
            ("masterMachineType", "n2-standard-4"),
            ("workerMachineType", "n1-standard-2"),
            ("workerNumNodes", "3"),
            ("imageVersion", "2.2-debian12"),
            ("idleTTL", "30"),
            ("subnet", "regions/us-central1/subnetworks/ebb"),
        ],
        Some(3600),
    );
    deploy(
        &server,
        "a",
        "grep -q 'ebb-.*-m' \"$EBB_CLUSTER_FILE\"",
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "dp"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let id = run_id(&run);
    assert_eq!(gcp.count("POST", "/clusters"), 1);
    let gone = of_run(&gcp, "deletedClusters", id);
    assert_eq!(gone.len(), 1, "{}", gcp.resources());
    assert!(of_run(&gcp, "clusters", id).is_empty());
    let c = &gone[0];
    let config = &c["config"];
    assert_eq!(
        config["masterConfig"]["machineTypeUri"], "n2-standard-4",
        "{c}"
    );
    assert_eq!(
        config["workerConfig"]["machineTypeUri"], "n1-standard-2",
        "{c}"
    );
    assert_eq!(config["workerConfig"]["numInstances"], 3, "{c}");
    assert_eq!(
        config["softwareConfig"]["imageVersion"], "2.2-debian12",
        "{c}"
    );
    assert_eq!(
        config["gceClusterConfig"]["subnetworkUri"], "regions/us-central1/subnetworks/ebb",
        "{c}"
    );
    assert_eq!(config["lifecycleConfig"]["idleDeleteTtl"], "1800s", "{c}");
    let ttl = config["lifecycleConfig"]["autoDeleteTtl"]
        .as_str()
        .and_then(|s| s.trim_end_matches('s').parse::<u64>().ok())
        .expect("autoDeleteTtl");
    assert!((3600..=4300).contains(&ttl), "{ttl}");
    assert_eq!(c["labels"]["ebb-node"], "cluster", "{c}");
}

/// SIGKILL while the create's answer is held back: the restarted server finds the cluster by
/// its labels, makes no second one, and deletes it.
#[test]
fn a_dataproc_cluster_survives_a_kill_mid_provisioning_without_a_duplicate() {
    let hold = json!({"api": "dataproc", "op": "create", "kind": "hold", "seconds": 60});
    killed_mid_create(hold, "gcp-dataproc", ("clusters", "deletedClusters"), 1);
}

/// A create whose operation ends in error leaves an ERROR cluster, as Dataproc does: the run
/// fails with Dataproc's detail and the ERROR cluster is deleted, not left behind.
#[test]
fn a_dataproc_cluster_in_error_fails_the_run_and_is_deleted() {
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    gcp_profile(&server, &gcp, "gcp-dataproc", "dp", &[], None);
    deploy(&server, "a", "true", json!({}));
    gcp.fault(
        json!({"api": "dataproc", "op": "create", "kind": "op_error",
                     "message": "Insufficient 'CPUS' quota. Requested 12.0, available 8.0."}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "dp"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    let (_, events) = server.get(&format!("{run}/events"));
    assert!(
        events.to_string().contains("Insufficient 'CPUS' quota"),
        "{events}"
    );
    let id = run_id(&run);
    assert!(
        of_run(&gcp, "clusters", id).is_empty(),
        "{}",
        gcp.resources()
    );
    assert_eq!(of_run(&gcp, "deletedClusters", id).len(), 1);
    assert_eq!(
        gcp.count("POST", "/clusters"),
        1,
        "a quota error is not retried"
    );
}

/// The janitor sweeps Google accounts too: an instance and a cluster with ebb's labels and a
/// run this server does not know are deleted; another server's instance is left alone.
#[test]
fn the_janitor_deletes_strays_in_compute_and_dataproc() {
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    gcp_profile(&server, &gcp, "gcp-compute", "gce", &[], None);
    gcp_profile(&server, &gcp, "gcp-dataproc", "dp", &[], None);
    let http = reqwest::blocking::Client::new();
    let labels =
        |server: &str| json!({"ebb-run": "0190-lost", "ebb-node": "master", "ebb-server": server});
    for (name, owner) in [("stray", "ebb"), ("theirs", "other")] {
        let reply = http
            .post(format!(
                "{}/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances",
                gcp.url
            ))
            .json(&json!({"name": name, "machineType": "e2-small", "labels": labels(owner)}))
            .send()
            .expect("insert");
        assert!(reply.status().is_success());
    }
    let reply = http
        .post(format!(
            "{}/v1/projects/{PROJECT}/regions/{REGION}/clusters",
            gcp.url
        ))
        .json(&json!({"clusterName": "stray-dp", "labels": labels("ebb")}))
        .send()
        .expect("create");
    assert!(reply.status().is_success());
    std::thread::sleep(Duration::from_millis(800)); // both finish being made
    let (code, sweep) = server.post("/v3/janitor/run");
    assert_eq!(code, 200, "{sweep}");
    let text = sweep.to_string();
    assert!(
        text.contains("stray") && text.contains("stray-dp"),
        "{text}"
    );
    assert!(
        !text.contains("\"theirs\""),
        "another server's instance: {text}"
    );
    let started = std::time::Instant::now();
    loop {
        let left = gcp.resources();
        let names: Vec<&str> = left["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(left["clusters"].as_array().into_iter().flatten())
            .filter_map(|r| r["name"].as_str().or(r["clusterName"].as_str()))
            .collect();
        if names == ["theirs"] {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{left}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
