//! Snapshots of the plans for every built-in template (and the tests' echo fixture): the layout the solver picks and every
//! operation's tasks, as text under `tests/snapshots/plans/`. A change to the solver or the
//! planner that alters a shipped plan fails here until the snapshot is reviewed and rewritten
//! (`EBB_UPDATE_SNAPSHOTS=1 cargo nextest run snapshots`).

use super::*;
use std::fmt::Write as _;

fn render(tasks: &[ClusterTask]) -> String {
    let mut out = String::new();
    for t in tasks {
        let what = match &t.service {
            Some(s) => format!("{:?} {s}", t.action),
            None => format!("{:?}", t.action),
        };
        let deps: Vec<String> = t.depends_on.iter().map(|d| format!("#{d}")).collect();
        let _ = writeln!(
            out,
            "#{:<3} {:<9} {:<24} <- {}",
            t.id,
            t.node,
            what.to_lowercase(),
            deps.join(" ")
        );
    }
    for (i, stage) in stages(tasks).iter().enumerate() {
        let ids: Vec<String> = stage.iter().map(|d| format!("#{d}")).collect();
        let _ = writeln!(out, "stage {:<2} {}", i + 1, ids.join(" "));
    }
    out
}

#[test]
fn shipped_template_plans_match_their_snapshots() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/plans");
    let update = std::env::var_os("EBB_UPDATE_SNAPSHOTS").is_some();
    let mut stale = Vec::new();
    let mut templates = crate::model::builtin::templates().expect("built-ins");
    templates.push(crate::model::builtin::fixture_template().expect("the echo fixture"));
    for (id, template) in templates {
        // Four nodes, or three for a template that takes only an odd number (an ensemble).
        let (count, solved) = [4, 3]
            .into_iter()
            .find_map(|count| {
                let request = crate::rules::solver::Request {
                    provisioner: "local".into(),
                    nodes: count,
                    ..Default::default()
                };
                crate::rules::solver::solve(&template, &request)
                    .ok()
                    .map(|s| (count, s))
            })
            .expect("solved with 4 or 3 nodes");
        let names = ebb_spi::resource::node_names(count as usize);
        let nodes: Vec<PlanNode> = names
            .iter()
            .zip(&solved)
            .map(|(n, l)| PlanNode {
                name: n.clone(),
                services: l.services.clone(),
            })
            .collect();
        let mut text = String::from("layout\n");
        for (n, l) in names.iter().zip(&solved) {
            let services: Vec<&str> = l.services.iter().map(String::as_str).collect();
            let _ = writeln!(
                text,
                "  {n:<9} {} {} {}",
                l.hardware_type,
                l.image_type,
                services.join(",")
            );
        }
        let changed: BTreeSet<String> = ["worker-3".to_string()].into();
        for op in [
            ClusterOperation::Create,
            ClusterOperation::Delete,
            ClusterOperation::RestartServices,
            ClusterOperation::Configure,
            ClusterOperation::Expand,
            ClusterOperation::Shrink,
            ClusterOperation::ReplaceNode,
        ] {
            let _ = writeln!(
                text,
                "\n{} (changed: worker-3 for expand, shrink and replace-node)",
                op.name()
            );
            text.push_str(&render(&plan_change(op, &template, &nodes, &changed)));
        }
        // Named operations with their chains, on the services the template has.
        for (op, service, node) in [
            (
                ClusterOperation::RestartServices,
                "zookeeper",
                Some("worker-1"),
            ),
            (ClusterOperation::RestartServices, "zookeeper", None),
            (ClusterOperation::StopServices, "master", None),
            (ClusterOperation::StartServices, "worker", Some("worker-2")),
        ] {
            if !template.services.contains_key(service) {
                continue;
            }
            let selection = Selection {
                services: [service.to_string()].into(),
                nodes: node.iter().map(|n| n.to_string()).collect(),
            };
            let _ = writeln!(
                text,
                "\n{} {service} on {}",
                op.name(),
                node.unwrap_or("every node")
            );
            let tasks = plan_selected(op, &template, &nodes, &BTreeSet::new(), &selection);
            text.push_str(&render(&tasks));
        }
        let file = dir.join(format!("{}.txt", id.name));
        if update {
            std::fs::create_dir_all(&dir).expect("snapshot dir");
            std::fs::write(&file, &text).expect("write snapshot");
            continue;
        }
        let expected = std::fs::read_to_string(&file).unwrap_or_default();
        if expected != text {
            stale.push(format!("{}:\n{text}", file.display()));
        }
    }
    assert!(
        stale.is_empty(),
        "plans differ from their snapshots; review, then rewrite with EBB_UPDATE_SNAPSHOTS=1:\n{}",
        stale.join("\n")
    );
}
