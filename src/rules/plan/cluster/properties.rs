use super::*;
use proptest::prelude::*;

/// A template of `deps.len()` services where service i may depend only on services
/// before it (so there is no cycle), with a random set of actions each.
fn template(deps: &[ServiceDeps]) -> Template {
    let mut services = serde_json::Map::new();
    let kinds = [
        "install",
        "configure",
        "initialize",
        "start",
        "stop",
        "remove",
    ];
    for (i, (install, runtime, actions)) in deps.iter().enumerate() {
        let name = |j: &usize| format!("s{j}");
        let mut acts = serde_json::Map::new();
        for (bit, kind) in kinds.iter().enumerate() {
            if actions & (1 << bit) != 0 {
                acts.insert(
                    kind.to_string(),
                    serde_json::json!({"type": "shell", "script": "x"}),
                );
            }
        }
        services.insert(
            format!("s{i}"),
            serde_json::json!({
                "dependencies": {
                    "install": {"requires": install.iter().filter(|j| **j < i).map(name).collect::<Vec<_>>()},
                    "runtime": {"uses": runtime.iter().filter(|j| **j < i).map(name).collect::<Vec<_>>()}
                },
                "actions": acts
            }),
        );
    }
    let t: Template =
        serde_json::from_value(serde_json::json!({ "services": services })).expect("template");
    t.validate().expect("generated templates are valid");
    t
}

use super::tests::before as reachable;

/// Per service: install deps, runtime deps, action bits.
type ServiceDeps = (Vec<usize>, Vec<usize>, u8);

/// Services, and per node which of them it runs.
fn scenario() -> impl Strategy<Value = (Vec<ServiceDeps>, Vec<Vec<bool>>)> {
    (1usize..7).prop_flat_map(|n| {
        (
            proptest::collection::vec(
                (
                    proptest::collection::vec(0..n, 0..3),
                    proptest::collection::vec(0..n, 0..3),
                    any::<u8>(),
                ),
                n,
            ),
            proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), 1..6),
        )
    })
}

proptest! {
    #[test]
    fn plans_are_acyclic_ordered_and_staged_one_per_node((deps, placement) in scenario()) {
        let t = template(&deps);
        let nodes: Vec<PlanNode> = placement
            .iter()
            .enumerate()
            .map(|(i, has)| PlanNode {
                name: format!("n{i}"),
                services: has.iter().enumerate().filter(|(_, h)| **h).map(|(s, _)| format!("s{s}")).collect(),
            })
            .collect();
        let half: BTreeSet<String> = nodes.iter().step_by(2).map(|n| n.name.clone()).collect();
        // Services added or removed (every other one the nodes have): plans without a cycle
        // (building one would panic), whatever depends on what.
        let named: BTreeSet<String> = nodes
            .iter()
            .flat_map(|n| n.services.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .step_by(2)
            .collect();
        let selection = crate::model::plan::Selection { services: named, nodes: BTreeSet::new() };
        for op in [ClusterOperation::AddServices, ClusterOperation::RemoveServices] {
            let tasks = plan_selected(op, &t, &nodes, &BTreeSet::new(), &selection);
            for task in &tasks {
                prop_assert!(task.depends_on.iter().all(|d| *d < task.id));
            }
        }
        for op in [
            ClusterOperation::Create,
            ClusterOperation::Delete,
            ClusterOperation::RestartServices,
            ClusterOperation::Configure,
            ClusterOperation::Expand,
            ClusterOperation::Shrink,
        ] {
            let tasks = plan_change(op, &t, &nodes, &half);
            // Acyclic: every dependency points to an earlier id.
            for task in &tasks {
                prop_assert!(task.depends_on.iter().all(|d| *d < task.id));
            }
            let get = |node: &str, action: Action, s: &str| {
                tasks.iter().find(|x| x.node == node && x.action == action && x.service.as_deref() == Some(s)).map(|x| x.id)
            };
            // Every dependency rule holds between the tasks that exist.
            for a_node in &nodes {
                for a in &a_node.services {
                    for b_node in &nodes {
                        for b in t.predecessors(a, "install") {
                            if let (Some(x), Some(y)) = (get(&b_node.name, Action::Install, b), get(&a_node.name, Action::Install, a)) {
                                prop_assert!(reachable(&tasks, x, y), "install {b}@{} before install {a}@{}", b_node.name, a_node.name);
                            }
                        }
                        for b in t.predecessors(a, "runtime") {
                            if !b_node.services.contains(b) { continue; }
                            if let (Some(x), Some(y)) = (get(&b_node.name, Action::Start, b), get(&a_node.name, Action::Start, a)) {
                                prop_assert!(reachable(&tasks, x, y), "start {b} before start {a}");
                            }
                            if let (Some(x), Some(y)) = (get(&a_node.name, Action::Stop, a), get(&b_node.name, Action::Stop, b)) {
                                prop_assert!(reachable(&tasks, x, y), "stop {a} before stop {b}");
                            }
                        }
                    }
                }
            }
            // Rolling back any completed prefix undoes exactly those tasks, in reverse.
            if op == ClusterOperation::Create && !tasks.is_empty() {
                let cut = tasks.len() / 2;
                let completed: BTreeSet<usize> = (0..cut).collect();
                let undo = rollback(&t, &tasks, &completed);
                for task in &undo {
                    prop_assert!(task.depends_on.iter().all(|d| *d < task.id));
                }
                for &c in &completed {
                    let done = &tasks[c];
                    let Some(inverse) = done.action.inverse() else { continue };
                    let service = if inverse == Action::Delete { None } else { done.service.clone() };
                    let has_action = match (inverse.service_action(), &service) {
                        (Some(kind), Some(s)) => t.services[s].actions.contains_key(&kind),
                        _ => true,
                    };
                    let found = undo.iter().filter(|u| u.node == done.node && u.action == inverse && u.service == service).count();
                    prop_assert_eq!(found, usize::from(has_action), "inverse of {:?}", done);
                }
                prop_assert!(undo.iter().all(|u| {
                    let service = u.service.clone();
                    completed.iter().any(|c| {
                        let d = &tasks[*c];
                        d.node == u.node && d.action.inverse() == Some(u.action)
                            && (u.action == Action::Delete || d.service == service)
                    })
                }), "nothing undone that was not done");
            }
            let stages = stages(&tasks);
            prop_assert_eq!(stages.iter().map(Vec::len).sum::<usize>(), tasks.len());
            for stage in &stages {
                let on: BTreeSet<&str> = stage.iter().map(|i| tasks[*i].node.as_str()).collect();
                prop_assert_eq!(on.len(), stage.len());
            }
        }
    }
}
