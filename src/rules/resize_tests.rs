use super::*;
use serde_json::json;

fn run() -> RunRecord {
    let template = crate::model::builtin::fixture_template()
        .expect("the echo fixture")
        .1;
    let solved = solve(
        &template,
        &Request {
            provisioner: "local".into(),
            nodes: 4,
            ..Default::default()
        },
    )
    .expect("solved");
    let names = ebb_spi::resource::node_names(4);
    let mut run: RunRecord = serde_json::from_value(json!({
        "key": {"namespace": "default", "app": "a", "program": "p", "run": "r"},
        "status": "RUNNING", "starting": 1, "start": null, "end": null, "args": {},
        "profile": "USER:zk", "provisioner": "local", "profileProperties": [],
        "keepalive": {"killed": 0, "failed": 0}, "timeout": null,
        "launch": {"command": ["true"], "env": {}},
        "cluster": {"status": "PROVISIONED", "expiresAt": null, "end": null, "nodes": names},
        "failure": null, "stop": null, "exit": null
    }))
    .expect("run");
    for (name, l) in names.iter().zip(solved) {
        run.node_types.insert(
            name.clone(),
            NodeTypes {
                hardware_type: l.hardware_type,
                image_type: l.image_type,
            },
        );
        run.layout.insert(name.clone(), l.services);
    }
    run.template = Some(template);
    run
}

fn request(body: serde_json::Value) -> ClusterRequest {
    serde_json::from_value(body).expect("request")
}

#[test]
fn a_services_operation_names_services_and_nodes_the_cluster_has() {
    let r = run();
    let body =
        json!({"operation": "restart-services", "services": ["zookeeper"], "nodes": ["worker-1"]});
    let c = change(&r, &request(body), 64).expect("change");
    assert_eq!(c.selection.services, ["zookeeper".to_string()].into());
    assert_eq!(c.selection.nodes, ["worker-1".to_string()].into());
    assert_eq!(
        c.final_nodes, r.cluster.nodes,
        "nothing is added or removed"
    );
    let back = Change::from_request(c.operation, &c.to_request()).expect("round trip");
    assert_eq!(back, c);
    // An operation recorded before there were selections acts on everything.
    let mut old = c.to_request();
    old.as_object_mut().expect("object").remove("selection");
    let all = Change::from_request(c.operation, &old).expect("older record");
    assert!(all.selection.is_all());
    let refused = |body: serde_json::Value, field: &str, says: &str| {
        let e = change(&r, &request(body.clone()), 64).expect_err("refused");
        assert_eq!(e.field, field, "{body}: {e}");
        assert!(e.to_string().contains(says), "{body}: {e}");
    };
    refused(
        json!({"operation": "stop-services", "services": ["hbase"]}),
        "services[0]",
        "not a service of this cluster",
    );
    refused(
        json!({"operation": "stop-services", "services": ["master"], "nodes": ["worker-1"]}),
        "services[0]",
        "none of the nodes named",
    );
    refused(
        json!({"operation": "start-services", "nodes": ["worker-1", "worker-9"]}),
        "nodes[1]",
        "not a node of this cluster",
    );
    refused(
        json!({"operation": "start-services", "nodes": ["worker-1", "worker-1"]}),
        "nodes[1]",
        "listed twice",
    );
    refused(
        json!({"operation": "start-services", "nodes": 2}),
        "nodes",
        "list of node names",
    );
    refused(
        json!({"operation": "expand", "nodes": ["worker-1"]}),
        "nodes",
        "number of nodes",
    );
    refused(
        json!({"operation": "configure", "config": {}, "services": ["zookeeper"]}),
        "services",
        "not used by 'configure'",
    );
    // A list longer than any cluster is refused while it is read.
    let long: Vec<String> = (0..=crate::model::names::MAX_LIST)
        .map(|i| format!("n{i}"))
        .collect();
    let e = serde_json::from_value::<ClusterRequest>(
        json!({"operation": "start-services", "nodes": long}),
    )
    .expect_err("too long");
    assert!(e.to_string().contains("at most"), "{e}");
}

#[test]
fn a_replace_names_nodes_of_the_cluster_and_spares_the_running_program() {
    let r = run();
    let c = change(
        &r,
        &request(json!({"operation": "replace-node", "nodes": ["worker-2"]})),
        64,
    )
    .expect("change");
    assert_eq!(c.changed, ["worker-2".to_string()].into());
    assert_eq!(
        c.final_nodes, r.cluster.nodes,
        "the same nodes, one made anew"
    );
    assert_eq!(c.layout, r.layout);
    for (body, field, says) in [
        (json!({"operation": "replace-node"}), "nodes", "is required"),
        (
            json!({"operation": "replace-node", "nodes": []}),
            "nodes",
            "names no node",
        ),
        (
            json!({"operation": "replace-node", "nodes": 1}),
            "nodes",
            "list of node names",
        ),
        (
            json!({"operation": "replace-node", "nodes": ["worker-9"]}),
            "nodes[0]",
            "not a node",
        ),
        (
            json!({"operation": "replace-node", "nodes": ["master"]}),
            "nodes[0]",
            "runs the program",
        ),
        (
            json!({"operation": "replace-node", "nodes": ["worker-1", "worker-1"]}),
            "nodes[1]",
            "listed twice",
        ),
        (
            json!({"operation": "replace-node", "nodes": ["worker-1"], "services": ["zookeeper"]}),
            "services",
            "not used",
        ),
    ] {
        let e = change(&r, &request(body.clone()), 64).expect_err("refused");
        assert_eq!(e.field, field, "{body}: {e}");
        assert!(e.to_string().contains(says), "{body}: {e}");
    }
    // A heal's replace carries its trigger into the audit log, and back.
    let heal = heal_replace(&r, "worker-1", json!({"heal": "replace-node"}));
    let back = Change::from_request(heal.operation, &heal.to_request()).expect("round trip");
    assert_eq!(back, heal);
    assert!(heal.selection.is_all());
}

#[test]
fn expand_adds_numbered_workers_and_keeps_the_nodes_there() {
    let r = run();
    let c = change(&r, &request(json!({"operation": "expand", "nodes": 2})), 64).expect("change");
    assert_eq!(c.changed, ["worker-4", "worker-5"].map(String::from).into());
    assert_eq!(c.nodes.len(), 6);
    assert_eq!(c.final_nodes, c.nodes);
    for n in &r.cluster.nodes {
        assert_eq!(c.layout[n], r.layout[n], "{n} kept its services");
    }
    assert!(c.layout["worker-4"].contains("worker"), "{:?}", c.layout);
    let back = Change::from_request(c.operation, &c.to_request()).expect("round trip");
    assert_eq!(back, c);
}

#[test]
fn shrink_removes_the_last_nodes_unless_the_rest_would_be_invalid() {
    let r = run();
    // Three workers each run zookeeper (odd, at most 3): one cannot go alone, two can.
    let e = change(&r, &request(json!({"operation": "shrink", "nodes": 1})), 64).expect_err("even");
    assert!(e.to_string().contains("odd"), "{e}");
    let c = change(&r, &request(json!({"operation": "shrink", "nodes": 2})), 64).expect("change");
    let leaving: Vec<String> = c.changed.iter().cloned().collect();
    assert_eq!(leaving.len(), 2);
    assert_eq!(c.final_nodes.len(), 2);
    assert!(valid_without(&r, &leaving).is_ok());
    for gone in &leaving {
        assert!(!r.layout[gone].contains("master"), "the only master stays");
    }
    let e =
        change(&r, &request(json!({"operation": "shrink", "nodes": 4})), 64).expect_err("too many");
    assert!(e.to_string().contains("nodes"), "{e}");
    let e = change(
        &r,
        &request(json!({"operation": "shrink", "remove": ["master"]})),
        64,
    )
    .expect_err("master");
    assert!(e.to_string().contains("runs the program"), "{e}");
    let e = change(
        &r,
        &request(json!({"operation": "shrink", "remove": ["nope"]})),
        64,
    )
    .expect_err("unknown");
    assert!(e.to_string().contains("remove[0]"), "{e}");
}

#[test]
fn expand_stops_at_the_provisioners_node_limit_before_sizing_anything() {
    let r = run();
    // The run has 4 nodes; a limit of 6 takes 2 more, not 3.
    change(&r, &request(json!({"operation": "expand", "nodes": 2})), 6).expect("fits");
    let e = change(&r, &request(json!({"operation": "expand", "nodes": 3})), 6)
        .expect_err("past the limit");
    assert!(e.to_string().contains("allows at most 6"), "{e}");
    // The largest count a body can carry is refused at once, not allocated.
    let e = change(
        &r,
        &request(json!({"operation": "expand", "nodes": u32::MAX})),
        ebb_spi::MAX_NODES,
    )
    .expect_err("huge");
    assert!(e.to_string().starts_with("nodes"), "{e}");
    let e = change(
        &r,
        &request(json!({"operation": "shrink", "remove": ["worker-1", "worker-1"]})),
        64,
    )
    .expect_err("twice");
    assert!(
        e.to_string().contains("remove[1]") && e.to_string().contains("twice"),
        "{e}"
    );
}

#[test]
fn bad_requests_name_the_field() {
    let r = run();
    for (body, field) in [
        (json!({"operation": "create"}), "operation"),
        (json!({"operation": "expand"}), "nodes"),
        (json!({"operation": "expand", "nodes": 0}), "nodes"),
        (json!({"operation": "configure"}), "config"),
        (json!({"operation": "configure", "config": [1]}), "config"),
        (
            json!({"operation": "restart-services", "nodes": 1}),
            "nodes",
        ),
        (
            json!({"operation": "start-services", "config": {}}),
            "config",
        ),
    ] {
        let e = change(&r, &request(body.clone()), 64).expect_err("rejected");
        assert!(e.to_string().starts_with(field), "{body}: {e}");
    }
    let c = change(
        &r,
        &request(json!({"operation": "configure", "config": {"heap": "2g"}})),
        64,
    )
    .expect("configure");
    assert_eq!(c.config, json!({"heap": "2g"}));
}

#[test]
fn a_finished_operation_gives_the_run_its_new_shape_only_on_success() {
    let r = run();
    let grow =
        change(&r, &request(json!({"operation": "expand", "nodes": 2})), 64).expect("change");
    let t = finished(&r, grow.clone(), &OpOutcome::Done, 0);
    assert_eq!(t.run.cluster.nodes.len(), 6);
    assert_eq!(t.run.layout.len(), 6);
    assert_eq!(t.run.node_types.len(), 6);
    assert!(t.effects.is_empty());
    assert_eq!(t.notes, vec!["cluster expand done: 6 node(s)".to_string()]);
    for outcome in [OpOutcome::Failed("boom".into()), OpOutcome::Cancelled] {
        let t = finished(&r, grow.clone(), &outcome, 0);
        assert_eq!(t.run, r, "{outcome:?} leaves the run as it was");
        assert!(t.notes[0].starts_with("cluster expand "), "{:?}", t.notes);
    }
    let grown = finished(&r, grow, &OpOutcome::Done, 0).run;
    let shrink = change(
        &grown,
        &request(json!({"operation": "shrink", "nodes": 2})),
        64,
    )
    .expect("shrink");
    let t = finished(&grown, shrink, &OpOutcome::Done, 0);
    assert_eq!(t.run.cluster.nodes.len(), 4);
    assert_eq!(t.run.layout.len(), 4, "the leaving nodes' services go too");
    assert_eq!(t.run.node_types.len(), 4);
    let configure = change(
        &r,
        &request(json!({"operation": "configure", "config": {"tickTime": 3000}})),
        64,
    )
    .expect("configure");
    let t = finished(&r, configure, &OpOutcome::Done, 0);
    assert_eq!(t.run.config, Some(json!({"tickTime": 3000})));
}

#[test]
fn a_failed_rollback_needs_attention_until_a_repair_succeeds() {
    let r = run();
    let grow =
        change(&r, &request(json!({"operation": "expand", "nodes": 1})), 64).expect("change");
    let broken = OpOutcome::RollbackFailed("node worker-5: delete: refused".into());
    let t = finished(&r, grow, &broken, 7);
    let attention = t.run.cluster.attention.clone().expect("needs attention");
    assert_eq!(attention.since, 7);
    assert!(
        attention
            .reason
            .starts_with("expand failed and so did its rollback: node worker-5"),
        "{attention:?}"
    );
    assert_eq!(
        t.run.cluster.nodes, r.cluster.nodes,
        "the layout stays the last good one"
    );
    let needs = t.run;
    let repair = change(&needs, &request(json!({"operation": "repair"})), 64).expect("repair");
    assert_eq!(repair.final_nodes, needs.cluster.nodes);
    for outcome in [OpOutcome::Failed("again".into()), OpOutcome::Cancelled] {
        let t = finished(&needs, repair.clone(), &outcome, 8);
        assert!(t.run.cluster.attention.is_some(), "{outcome:?}");
    }
    let t = finished(&needs, repair, &OpOutcome::Done, 9);
    assert_eq!(t.run.cluster.attention, None);
    assert_error_on_fields(&needs);
}

/// A repair takes no other field.
fn assert_error_on_fields(run: &RunRecord) {
    let e = change(
        run,
        &request(json!({"operation": "repair", "nodes": 1})),
        64,
    )
    .expect_err("nodes");
    assert_eq!(e.field, "nodes", "{e:?}");
}
