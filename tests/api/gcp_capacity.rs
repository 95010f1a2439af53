//! Spot VMs and zones on gcp-compute, and Dataproc's secondary workers, through Google's Rust
//! SDK against the local stand-in: the Spot request reaches Compute Engine as it documents
//! it, a zone without room sends the node to the next zone, Spot out everywhere falls back to
//! STANDARD, a preempted Spot VM is replaced while the program runs, and a node's lookups
//! are one aggregated list over every zone.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::gcp::*;
use crate::support::runs::*;

const ZONE_B: &str = "us-central1-b";

/// Every instance of run `run` the stand-in ever made (live and deleted).
fn instances_of_run(gcp: &Gcp, run: &str) -> Vec<Value> {
    let id = run.rsplit('/').next().expect("id");
    gcp.of_run(&["instances", "deletedInstances"], id)
}

fn zone_of(instance: &Value) -> String {
    let link = instance["zone"].as_str().unwrap_or_default();
    link.rsplit('/').next().unwrap_or_default().to_string()
}

fn model_of(instance: &Value) -> String {
    instance["scheduling"]["provisioningModel"]
        .as_str()
        .unwrap_or("STANDARD")
        .to_string()
}

/// (node, zone, provisioning model) of each instance of `run`, sorted.
fn placed(gcp: &Gcp, run: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = instances_of_run(gcp, run)
        .iter()
        .map(|i| {
            let node = i["labels"]["ebb-node"].as_str().unwrap_or_default();
            (node.to_string(), zone_of(i), model_of(i))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn spot_vms_move_to_the_next_zone_then_fall_back_to_standard() {
    let (gcp, _dir, server) = gcp_and_server();
    gcp.config(json!({"capacity": {ZONE: {"SPOT": 0}, ZONE_B: {"SPOT": 1}}}));
    let zones = format!("{ZONE}, {ZONE_B}");
    gcp_profile(
        &server,
        &gcp,
        "gcp-compute",
        "spot",
        &[
            ("zones", &zones),
            ("provisioningModel", "SPOT"),
            ("marketType", "spot-with-fallback"),
        ],
        Some(3600),
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "spot"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");

    let placed = placed(&gcp, &run);
    assert_eq!(placed.len(), 3, "one instance per node: {placed:?}");
    assert_eq!(
        placed[0],
        ("master".into(), ZONE.into(), "STANDARD".into()),
        "the master stays STANDARD in the first zone"
    );
    let workers = &placed[1..];
    let spot: Vec<_> = workers.iter().filter(|(_, _, m)| m == "SPOT").collect();
    assert_eq!(spot.len(), 1, "{placed:?}");
    assert_eq!(spot[0].1, ZONE_B, "the one Spot VM there was room for");
    let standard: Vec<_> = workers.iter().filter(|(_, _, m)| m == "STANDARD").collect();
    assert_eq!(standard.len(), 1, "{placed:?}");
    assert_eq!(
        standard[0].1, ZONE,
        "the fallback goes back to the first zone"
    );

    // The Spot VM as Compute Engine documents it: SPOT, deleted when preempted, never
    // restarted; the profile's timeout is its maxRunDuration.
    let vm = instances_of_run(&gcp, &run)
        .into_iter()
        .find(|i| model_of(i) == "SPOT")
        .expect("the Spot VM");
    let scheduling = &vm["scheduling"];
    assert_eq!(scheduling["instanceTerminationAction"], "DELETE", "{vm}");
    assert_eq!(scheduling["automaticRestart"], false, "{vm}");
    assert!(!scheduling["maxRunDuration"].is_null(), "{vm}");
    assert!(
        vm["machineType"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("zones/{ZONE_B}/"))),
        "the machine type is the zone's: {vm}"
    );

    // The blocked list says where there was no room, and Compute Engine's own words.
    let ops = operations(&server, &run);
    let create = ops
        .iter()
        .find(|o| o["operation"] == "create")
        .expect("create");
    let blocked: Vec<(String, String)> = create["blocked"]
        .as_array()
        .expect("blocked")
        .iter()
        .map(|b| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (text(&b["zone"]), text(&b["market"]))
        })
        .collect();
    assert!(
        blocked.contains(&(ZONE.to_string(), "spot".to_string())),
        "{create}"
    );
    let (_, events) = server.get(&format!("{run}/events"));
    assert!(
        events.to_string().contains("ZONE_RESOURCE_POOL_EXHAUSTED"),
        "{events}"
    );
    gcp.wait_deleted();
}

#[test]
fn a_preempted_spot_vm_is_replaced_while_the_program_runs() {
    let (gcp, dir, server) = gcp_and_server();
    gcp_profile(
        &server,
        &gcp,
        "gcp-compute",
        "spot",
        &[("nodes", "2"), ("provisioningModel", "SPOT")],
        None,
    );
    let gate = dir.path().join("done");
    let run = gated_run(&server, "spot", &gate, "");
    let before = placed(&gcp, &run);
    assert_eq!(
        before,
        [
            ("master".into(), ZONE.into(), "STANDARD".into()),
            ("worker-1".into(), ZONE.into(), "SPOT".into())
        ]
    );
    let first = instances_of_run(&gcp, &run)
        .into_iter()
        .find(|i| i["labels"]["ebb-node"] == "worker-1")
        .expect("worker-1");
    let name = first["name"].as_str().expect("name").to_string();
    let lists_before = gcp.count("GET", "/aggregated/instances");
    assert!(gcp.preempt(ZONE, &name), "{first}");

    let started = std::time::Instant::now();
    let replacement = loop {
        let live = gcp.resources()["instances"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(new) = live.into_iter().find(|i| {
            i["labels"]["ebb-node"] == "worker-1"
                && i["name"] != name.as_str()
                && i["status"] == "RUNNING"
        }) {
            break new;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never replaced: {}",
            gcp.resources()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(model_of(&replacement), "SPOT", "{replacement}");
    // The watch found it gone with the cluster-wide aggregated list, not a get per node.
    assert!(gcp.count("GET", "/aggregated/instances") > lists_before);
    std::fs::write(&gate, "").expect("gate");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let (_, events) = server.get(&format!("{run}/events"));
    assert!(
        events.to_string().contains("was reclaimed by the cloud"),
        "{events}"
    );
    assert_eq!(
        instances_of_run(&gcp, &run).len(),
        3,
        "master, worker-1 twice"
    );
    gcp.wait_deleted();
}

#[test]
fn dataproc_secondary_workers_are_spot_vms() {
    let (gcp, _dir, server) = gcp_and_server();
    gcp_profile(
        &server,
        &gcp,
        "gcp-dataproc",
        "dp",
        &[
            ("workerNumNodes", "2"),
            ("secondaryWorkerNumNodes", "4"),
            ("secondaryWorkerType", "spot"),
        ],
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "dp"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let id = run.rsplit('/').next().expect("id");
    let cluster = gcp.resources()["deletedClusters"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|c| c["labels"]["ebb-run"] == id)
        .expect("the cluster");
    let secondary = &cluster["config"]["secondaryWorkerConfig"];
    assert_eq!(secondary["numInstances"], 4, "{cluster}");
    assert_eq!(secondary["preemptibility"], "SPOT", "{cluster}");
    assert_eq!(cluster["config"]["workerConfig"]["numInstances"], 2);

    // A secondary group type Dataproc does not know is refused at the profile, naming it.
    let body = crate::support::profiles::profile_body(
        "gcp-dataproc",
        &[
            ("projectId", PROJECT, false),
            ("region", REGION, false),
            ("secondaryWorkerType", "cheap", false),
        ],
    );
    let (code, body) = server.put("/v3/namespaces/default/profiles/dp2", body);
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("secondaryWorkerType"), "{body}");
}

#[test]
fn compute_engines_rate_limit_is_waited_out_and_a_missing_permission_is_not() {
    let (gcp, _dir, server) = gcp_and_server();
    // The project's rate quota is spent for the next two inserts: 403 rateLimitExceeded.
    gcp.fault(
        json!({"api": "compute", "op": "insert", "kind": "http_error", "times": 2,
                     "status": 403, "code": "rateLimitExceeded", "message": "Rate Limit Exceeded"}),
    );
    gcp_profile(&server, &gcp, "gcp-compute", "gce", &[("nodes", "1")], None);
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "gce"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(
        gcp.count("POST", "/instances"),
        3,
        "two throttled, one made"
    );
    let (_, events) = server.get(&format!("{run}/events"));
    assert!(
        !events.to_string().contains("Rate Limit Exceeded"),
        "throttling reached the run's history: {events}"
    );
    // A 403 that is a missing permission fails the run, saying so.
    gcp.fault(
        json!({"api": "compute", "op": "insert", "kind": "http_error", "times": 1,
                     "status": 403, "code": "forbidden",
                     "message": "Required 'compute.instances.create' permission"}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "gce"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    assert!(
        done["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("compute.instances.create")),
        "{done}"
    );
    gcp.wait_deleted();
}
