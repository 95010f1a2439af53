use super::*;
use crate::model::service::ServiceState;
use serde_json::json;

fn template() -> Template {
    let t: Template = serde_json::from_value(json!({
        "services": {
            "base": {"actions": {"install": {"type": "shell", "script": "i"}}},
            "zk": {"dependencies": {"install": {"requires": ["base"]}},
                   "actions": {"install": {"type": "shell", "script": "i"}, "start": {"type": "shell", "script": "s"}, "stop": {"type": "shell", "script": "x"}}},
            "master": {"dependencies": {"runtime": {"requires": ["zk"]}},
                       "actions": {"initialize": {"type": "shell", "script": "n"}, "start": {"type": "shell", "script": "s"}, "stop": {"type": "shell", "script": "x"}}},
            "worker": {"dependencies": {"runtime": {"requires": ["master"]}},
                       "actions": {"start": {"type": "shell", "script": "s"}, "stop": {"type": "shell", "script": "x"}}}
        }
    }))
    .expect("template");
    t.validate().expect("valid");
    t
}

fn nodes() -> Vec<PlanNode> {
    let node = |name: &str, services: &[&str]| PlanNode {
        name: name.into(),
        services: services.iter().map(|s| s.to_string()).collect(),
    };
    vec![
        node("n1", &["base", "master"]),
        node("n2", &["base", "zk", "worker"]),
        node("n3", &["base", "zk", "worker"]),
    ]
}

fn find<'a>(
    tasks: &'a [ClusterTask],
    node: &str,
    action: Action,
    service: Option<&str>,
) -> &'a ClusterTask {
    tasks
        .iter()
        .find(|t| t.node == node && t.action == action && t.service.as_deref() == service)
        .unwrap_or_else(|| panic!("no {action:?} {service:?} on {node}"))
}

/// Whether `b` is reachable from `a`.
pub(super) fn before(tasks: &[ClusterTask], a: usize, b: usize) -> bool {
    let mut stack = vec![b];
    let mut seen = BTreeSet::new();
    while let Some(t) = stack.pop() {
        if t == a {
            return true;
        }
        if seen.insert(t) {
            stack.extend(tasks[t].depends_on.iter().copied());
        }
    }
    false
}

#[test]
fn plans_past_the_size_limits_are_refused_before_they_are_built() {
    let t = template();
    let layout = |n: usize| -> Vec<PlanNode> {
        (0..n)
            .map(|i| PlanNode {
                name: format!("n{i}"),
                services: ["base", "zk", "master", "worker"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
            })
            .collect()
    };
    check_size(ClusterOperation::Create, &t, &layout(100)).expect("fits");
    let err = check_size(ClusterOperation::Create, &t, &layout(1_000)).expect_err("tasks");
    assert!(err.contains("more than the limit of 10000"), "{err}");
    let err = check_size(ClusterOperation::RestartServices, &t, &layout(340)).expect_err("edges");
    assert!(err.contains("dependencies"), "{err}");
}

#[test]
fn create_orders_services_across_nodes() {
    let t = template();
    let tasks = plan(ClusterOperation::Create, &t, &nodes());
    let id = |n, a, s| find(&tasks, n, a, s).id;
    // Node steps, then installs in install-dependency order across nodes.
    assert!(before(
        &tasks,
        id("n2", Action::Bootstrap, None),
        id("n2", Action::Install, Some("zk"))
    ));
    assert!(before(
        &tasks,
        id("n1", Action::Install, Some("base")),
        id("n2", Action::Install, Some("zk"))
    ));
    // Runtime: zk starts everywhere before master initializes; master starts before workers.
    for n in ["n2", "n3"] {
        assert!(before(
            &tasks,
            id(n, Action::Start, Some("zk")),
            id("n1", Action::Initialize, Some("master"))
        ));
        assert!(before(
            &tasks,
            id("n1", Action::Start, Some("master")),
            id(n, Action::Start, Some("worker"))
        ));
    }
    // Steps without an action are walked through, not planned.
    assert!(tasks.iter().all(|t| t.action != Action::Configure));
    assert!(
        !tasks
            .iter()
            .any(|t| t.action == Action::Install && t.service.as_deref() == Some("worker"))
    );
    // Transitively reduced: no edge is implied by another path.
    for task in &tasks {
        for &d in &task.depends_on {
            let others = task.depends_on.iter().filter(|&&o| o != d);
            assert!(
                !others.clone().any(|&o| before(&tasks, d, o)),
                "edge {d}→{} is implied",
                task.id
            );
        }
    }
    // Ids follow a topological order.
    assert!(tasks.iter().all(|t| t.depends_on.iter().all(|d| *d < t.id)));
    let stages = stages(&tasks);
    assert_eq!(stages.iter().map(Vec::len).sum::<usize>(), tasks.len());
    for stage in &stages {
        let nodes: BTreeSet<&str> = stage.iter().map(|i| tasks[*i].node.as_str()).collect();
        assert_eq!(nodes.len(), stage.len(), "one task per node per stage");
    }
}

#[test]
fn delete_stops_in_reverse_then_deletes() {
    let t = template();
    let tasks = plan(ClusterOperation::Delete, &t, &nodes());
    let id = |n, a, s| find(&tasks, n, a, s).id;
    for n in ["n2", "n3"] {
        assert!(before(
            &tasks,
            id(n, Action::Stop, Some("worker")),
            id("n1", Action::Stop, Some("master"))
        ));
        assert!(before(
            &tasks,
            id("n1", Action::Stop, Some("master")),
            id(n, Action::Stop, Some("zk"))
        ));
        assert!(before(
            &tasks,
            id(n, Action::Stop, Some("zk")),
            id(n, Action::Delete, None)
        ));
    }
    assert!(
        tasks
            .iter()
            .all(|t| !matches!(t.action, Action::Create | Action::Install | Action::Start))
    );
}

#[test]
fn rollback_undoes_completed_work_in_reverse() {
    let t = template();
    let tasks = plan(ClusterOperation::Create, &t, &nodes());
    let id = |n, a, s| find(&tasks, n, a, s).id;
    // Everything up to and including zk's start on n2 and n3 completed; master failed.
    let completed: BTreeSet<usize> = tasks
        .iter()
        .filter(|x| !matches!(x.service.as_deref(), Some("master" | "worker")))
        .map(|x| x.id)
        .collect();
    assert!(completed.contains(&id("n2", Action::Start, Some("zk"))));
    let undo = rollback(&t, &tasks, &completed);
    let u = |n, a, s| find(&undo, n, a, s).id;
    for n in ["n2", "n3"] {
        assert!(before(
            &undo,
            u(n, Action::Stop, Some("zk")),
            u(n, Action::Delete, None)
        ));
    }
    assert!(
        undo.iter().all(|x| x.action != Action::Remove),
        "no service here has a remove action"
    );
    let deletes = undo.iter().filter(|x| x.action == Action::Delete).count();
    assert_eq!(deletes, 3, "one delete per created node");
    assert!(
        undo.iter()
            .all(|x| x.action != Action::Start && x.action != Action::Install)
    );
}

#[test]
fn names_are_the_serialized_names() {
    for a in [
        Action::Create,
        Action::Confirm,
        Action::Bootstrap,
        Action::Install,
        Action::Configure,
        Action::Initialize,
        Action::Start,
        Action::Stop,
        Action::Remove,
        Action::Delete,
    ] {
        assert_eq!(serde_json::to_value(a).expect("json"), a.name());
    }
    for op in [
        ClusterOperation::Create,
        ClusterOperation::Delete,
        ClusterOperation::Expand,
        ClusterOperation::Shrink,
        ClusterOperation::StartServices,
        ClusterOperation::StopServices,
        ClusterOperation::RestartServices,
        ClusterOperation::Configure,
    ] {
        assert_eq!(serde_json::to_value(op).expect("json"), op.name());
    }
}

#[test]
fn restart_stops_everything_before_starting() {
    let t = template();
    let tasks = plan(ClusterOperation::RestartServices, &t, &nodes());
    let stops: Vec<usize> = tasks
        .iter()
        .filter(|t| t.action == Action::Stop)
        .map(|t| t.id)
        .collect();
    let starts: Vec<usize> = tasks
        .iter()
        .filter(|t| t.action == Action::Start)
        .map(|t| t.id)
        .collect();
    assert_eq!((stops.len(), starts.len()), (5, 5));
    assert!(
        stops
            .iter()
            .all(|s| starts.iter().all(|t| before(&tasks, *s, *t)))
    );
}

fn select(services: &[&str], nodes: &[&str]) -> Selection {
    Selection {
        services: services.iter().map(|s| s.to_string()).collect(),
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
    }
}

fn placed(tasks: &[ClusterTask], action: Action) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = tasks
        .iter()
        .filter(|t| t.action == action)
        .map(|t| (t.node.clone(), t.service.clone().unwrap_or_default()))
        .collect();
    out.sort();
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

#[test]
fn a_named_restart_takes_its_dependents_down_first_on_every_node_and_up_after() {
    let (t, ns) = (template(), nodes());
    let none = BTreeSet::new();
    let tasks = plan_selected(
        ClusterOperation::RestartServices,
        &t,
        &ns,
        &none,
        &select(&["zk"], &["n2"]),
    );
    // zk on n2 only; master (needs zk) and the workers (need the master) everywhere.
    let expected = pairs(&[
        ("n1", "master"),
        ("n2", "worker"),
        ("n2", "zk"),
        ("n3", "worker"),
    ]);
    assert_eq!(placed(&tasks, Action::Stop), expected);
    assert_eq!(placed(&tasks, Action::Start), expected);
    let task = |n: &str, a: Action, s: &str| find(&tasks, n, a, Some(s)).id;
    for w in ["n2", "n3"] {
        assert!(before(
            &tasks,
            task(w, Action::Stop, "worker"),
            task("n1", Action::Stop, "master")
        ));
        assert!(before(
            &tasks,
            task("n1", Action::Start, "master"),
            task(w, Action::Start, "worker")
        ));
    }
    assert!(before(
        &tasks,
        task("n1", Action::Stop, "master"),
        task("n2", Action::Stop, "zk")
    ));
    assert!(before(
        &tasks,
        task("n2", Action::Stop, "zk"),
        task("n2", Action::Start, "zk")
    ));
    assert!(before(
        &tasks,
        task("n2", Action::Start, "zk"),
        task("n1", Action::Start, "master")
    ));
    assert!(
        tasks
            .iter()
            .all(|t| t.node != "n3" || t.service.as_deref() != Some("zk")),
        "zk on n3 keeps running"
    );
}

#[test]
fn a_named_start_starts_what_it_needs_first_and_a_named_stop_what_needs_it() {
    let (t, ns) = (template(), nodes());
    let none = BTreeSet::new();
    let start = plan_selected(
        ClusterOperation::StartServices,
        &t,
        &ns,
        &none,
        &select(&["worker"], &["n3"]),
    );
    assert_eq!(
        placed(&start, Action::Start),
        pairs(&[
            ("n1", "master"),
            ("n2", "zk"),
            ("n3", "worker"),
            ("n3", "zk")
        ])
    );
    assert!(placed(&start, Action::Stop).is_empty());
    let stop = plan_selected(
        ClusterOperation::StopServices,
        &t,
        &ns,
        &none,
        &select(&["master"], &[]),
    );
    assert_eq!(
        placed(&stop, Action::Stop),
        pairs(&[("n1", "master"), ("n2", "worker"), ("n3", "worker")])
    );
    // Nothing named: every service, as before there were selections.
    let all = plan_selected(
        ClusterOperation::StopServices,
        &t,
        &ns,
        &none,
        &Selection::default(),
    );
    assert_eq!(all, plan(ClusterOperation::StopServices, &t, &ns));
    assert_eq!(placed(&all, Action::Stop).len(), 5);
}

/// zk restarts on configure; web needs it at run time, db needs nothing.
fn chained() -> Template {
    let t: Template = serde_json::from_value(json!({
        "services": {
            "zk": {"restartOnConfigure": true,
                   "actions": {"configure": {"type": "shell", "script": "c"}, "start": {"type": "shell", "script": "s"}, "stop": {"type": "shell", "script": "x"}}},
            "web": {"dependencies": {"runtime": {"requires": ["zk"]}},
                    "actions": {"install": {"type": "shell", "script": "i"}, "remove": {"type": "shell", "script": "r"}, "configure": {"type": "shell", "script": "c"}, "start": {"type": "shell", "script": "s"}, "stop": {"type": "shell", "script": "x"}}},
            "db": {"actions": {"configure": {"type": "shell", "script": "c"}, "start": {"type": "shell", "script": "s"}, "stop": {"type": "shell", "script": "x"}}}
        }
    }))
    .expect("template");
    t.validate().expect("valid");
    t
}

fn chained_node(name: &str) -> PlanNode {
    PlanNode {
        name: name.into(),
        services: ["web", "zk", "db"].map(String::from).into(),
    }
}

/// A reconfigure that restarts a service stops what needs it first and starts it after, as
/// the COBs paper's chain; a service that neither restarts nor needs one is configured in
/// place.
#[test]
fn nodes_that_stay_restart_what_restarts_on_configure_and_its_dependents_once_the_new_ones_are_there()
 {
    let t = chained();
    let all = [chained_node("n1"), chained_node("n2"), chained_node("n3")];
    for (op, gate) in [
        (ClusterOperation::Expand, Some(Action::Confirm)),
        (ClusterOperation::ReplaceNode, Some(Action::Confirm)),
        (ClusterOperation::Shrink, Some(Action::Delete)),
        (ClusterOperation::Configure, None),
    ] {
        let changed: BTreeSet<String> = ["n3".to_string()].into();
        let tasks = plan_change(op, &t, &all, &changed);
        let gate = gate.map(|g| find(&tasks, "n3", g, None).id);
        let staying: &[&str] = if op == ClusterOperation::Configure {
            &["n1", "n2", "n3"]
        } else {
            &["n1", "n2"]
        };
        for n in staying {
            let id = |a: Action, s: &str| find(&tasks, n, a, Some(s)).id;
            let (zk_stop, zk_configure, zk_start) = (
                id(Action::Stop, "zk"),
                id(Action::Configure, "zk"),
                id(Action::Start, "zk"),
            );
            if let Some(gate) = gate {
                assert!(
                    before(&tasks, gate, zk_stop),
                    "{op:?}: {n} stops zk after n3"
                );
            }
            assert!(
                before(&tasks, zk_stop, zk_configure) && before(&tasks, zk_configure, zk_start)
            );
            // web needs zk: stopped before zk stops (everywhere), started after zk starts.
            let (web_stop, web_configure, web_start) = (
                id(Action::Stop, "web"),
                id(Action::Configure, "web"),
                id(Action::Start, "web"),
            );
            assert!(
                before(&tasks, web_stop, web_configure) && before(&tasks, web_configure, web_start)
            );
            for m in staying {
                let on = |a: Action, s: &str| find(&tasks, m, a, Some(s)).id;
                assert!(
                    before(&tasks, web_stop, on(Action::Stop, "zk")),
                    "{op:?}: web on {n} stops before zk on {m}"
                );
                assert!(
                    before(&tasks, on(Action::Start, "zk"), web_start),
                    "{op:?}: zk on {m} starts before web on {n}"
                );
            }
            // db neither restarts nor needs zk: configured in place, never stopped.
            assert!(
                !tasks.iter().any(|x| x.node == *n
                    && x.service.as_deref() == Some("db")
                    && x.action != Action::Configure),
                "{op:?}: db on {n} is only configured"
            );
        }
    }
}

fn found(nodes: &[(&str, NodeCondition)], services: &[(&str, &str, ServiceState)]) -> Found {
    Found {
        nodes: nodes.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
        services: services
            .iter()
            .map(|(n, s, state)| ((n.to_string(), s.to_string()), *state))
            .collect(),
        strays: Vec::new(),
    }
}

/// A shrink of n2 and n3 undone after it deleted n2, began to delete n3 (whose web it had
/// removed and the rest stopped): n2 is made anew and brought up whole, n3 taken back and
/// its services brought back, and n1 reconfigured once n2 is there again.
#[test]
fn a_repair_makes_anew_what_is_gone_and_brings_back_what_is_down() {
    use NodeCondition::{Deleting, Gone, Whole};
    use ServiceState::{Down, Up};
    let t = chained();
    let layout = [chained_node("n1"), chained_node("n2"), chained_node("n3")];
    let found = found(
        &[("n1", Whole), ("n2", Gone), ("n3", Deleting)],
        &[
            ("n1", "web", Up),
            ("n1", "zk", Up),
            ("n1", "db", Up),
            ("n3", "zk", Down),
            ("n3", "db", Down),
        ],
    );
    let tasks = repair(&t, &layout, &found);
    let id = |n: &str, a: Action, s: Option<&str>| find(&tasks, n, a, s).id;
    // n2: replace → confirm → bootstrap → every service up, as a create.
    let replace = id("n2", Action::Replace, None);
    assert!(before(&tasks, replace, id("n2", Action::Confirm, None)));
    for s in ["web", "zk", "db"] {
        assert!(before(
            &tasks,
            id("n2", Action::Bootstrap, None),
            id("n2", Action::Start, Some(s))
        ));
        assert!(before(
            &tasks,
            id("n2", Action::Configure, Some(s)),
            id("n2", Action::Start, Some(s))
        ));
    }
    assert!(before(
        &tasks,
        id("n2", Action::Bootstrap, None),
        id("n2", Action::Install, Some("web"))
    ));
    // n3: confirmed (taken back), not replaced; web installed anew, the others started.
    assert!(
        !tasks
            .iter()
            .any(|t| t.node == "n3" && t.action == Action::Replace)
    );
    let confirm = id("n3", Action::Confirm, None);
    assert!(before(
        &tasks,
        confirm,
        id("n3", Action::Install, Some("web"))
    ));
    for s in ["web", "zk", "db"] {
        assert!(
            before(&tasks, confirm, id("n3", Action::Start, Some(s))),
            "{s}"
        );
    }
    assert!(!tasks.iter().any(|t| t.node == "n3"
        && t.action == Action::Configure
        && t.service.as_deref() == Some("db")));
    // Run-time order across nodes: web starts after zk everywhere it starts.
    for n in ["n2", "n3"] {
        for m in ["n2", "n3"] {
            assert!(before(
                &tasks,
                id(m, Action::Start, Some("zk")),
                id(n, Action::Start, Some("web"))
            ));
        }
    }
    // n1 is reconfigured once n2 is confirmed; nothing is deleted.
    assert!(before(
        &tasks,
        id("n2", Action::Confirm, None),
        id("n1", Action::Configure, Some("db"))
    ));
    assert!(
        !tasks
            .iter()
            .any(|t| t.action == Action::Delete || t.action == Action::Remove)
    );
}

/// A cluster where only some services are down: only they start again (a service in an
/// unknown state is stopped first); the nodes are not reconfigured. One that is whole and up
/// needs nothing. A node outside the layout is deleted, and the others reconfigured after.
#[test]
fn a_repair_does_only_what_is_needed() {
    use NodeCondition::Whole;
    use ServiceState::{Down, Outdated, Unknown, Up};
    let t = chained();
    let layout = [chained_node("n1")];
    let some_down = found(
        &[("n1", Whole)],
        &[
            ("n1", "web", Down),
            ("n1", "zk", Up),
            ("n1", "db", Outdated),
        ],
    );
    let got: Vec<(String, Action, Option<String>)> = repair(&t, &layout, &some_down)
        .iter()
        .map(|t| (t.node.clone(), t.action, t.service.clone()))
        .collect();
    assert_eq!(got, vec![("n1".into(), Action::Start, Some("web".into()))]);
    let all_up = found(
        &[("n1", Whole)],
        &[("n1", "web", Up), ("n1", "zk", Up), ("n1", "db", Up)],
    );
    assert!(repair(&t, &layout, &all_up).is_empty());
    let unsure = found(
        &[("n1", Whole)],
        &[("n1", "web", Up), ("n1", "zk", Unknown), ("n1", "db", Up)],
    );
    let tasks = repair(&t, &layout, &unsure);
    let id = |a: Action, s: &str| find(&tasks, "n1", a, Some(s)).id;
    assert!(before(
        &tasks,
        id(Action::Stop, "zk"),
        id(Action::Start, "zk")
    ));
    let stray = Found {
        strays: vec!["n9".into()],
        ..all_up
    };
    let tasks = repair(&t, &layout, &stray);
    let delete = find(&tasks, "n9", Action::Delete, None).id;
    assert!(before(
        &tasks,
        delete,
        find(&tasks, "n1", Action::Configure, Some("db")).id
    ));
}

/// Adding web (which needs zk at run time) where zk and db run: web is installed and
/// started after zk everywhere, and nothing else restarts (nothing uses web).
/// Removing it again: stopped, then removed, and nothing else is touched.
#[test]
fn services_added_come_up_after_what_they_need_and_removed_ones_go() {
    let t = chained();
    let nodes = [chained_node("n1"), chained_node("n2")];
    let web = select(&["web"], &[]);
    let add = plan_selected(
        ClusterOperation::AddServices,
        &t,
        &nodes,
        &BTreeSet::new(),
        &web,
    );
    let id = |tasks: &[ClusterTask], n: &str, a: Action, s: &str| find(tasks, n, a, Some(s)).id;
    for n in ["n1", "n2"] {
        assert!(before(
            &add,
            id(&add, n, Action::Install, "web"),
            id(&add, n, Action::Configure, "web")
        ));
        assert!(before(
            &add,
            id(&add, n, Action::Configure, "web"),
            id(&add, n, Action::Start, "web")
        ));
    }
    assert!(
        add.iter().all(|t| t.service.as_deref() == Some("web")),
        "only web's tasks: {add:?}"
    );
    let remove = plan_selected(
        ClusterOperation::RemoveServices,
        &t,
        &nodes,
        &BTreeSet::new(),
        &web,
    );
    for n in ["n1", "n2"] {
        assert!(before(
            &remove,
            id(&remove, n, Action::Stop, "web"),
            id(&remove, n, Action::Remove, "web")
        ));
    }
    assert!(
        remove.iter().all(|t| t.service.as_deref() == Some("web")),
        "{remove:?}"
    );
}

/// Adding zk under web (web needs it at run time): zk comes up first and web is
/// reconfigured after zk runs; db, which does not use zk, is untouched. Removing zk
/// reconfigures web after zk is gone.
#[test]
fn what_uses_a_service_added_or_removed_is_reconfigured_after_it() {
    let t = chained();
    let nodes = [chained_node("n1"), chained_node("n2")];
    let zk = select(&["zk"], &[]);
    let add = plan_selected(
        ClusterOperation::AddServices,
        &t,
        &nodes,
        &BTreeSet::new(),
        &zk,
    );
    for n in ["n1", "n2"] {
        let web = find(&add, n, Action::Configure, Some("web")).id;
        for m in ["n1", "n2"] {
            assert!(
                before(&add, find(&add, m, Action::Start, Some("zk")).id, web),
                "{n} {m}"
            );
        }
    }
    assert!(
        !add.iter().any(|t| t.service.as_deref() == Some("db")),
        "db is untouched: {add:?}"
    );
    let remove = plan_selected(
        ClusterOperation::RemoveServices,
        &t,
        &nodes,
        &BTreeSet::new(),
        &zk,
    );
    for n in ["n1", "n2"] {
        let web = find(&remove, n, Action::Configure, Some("web")).id;
        for m in ["n1", "n2"] {
            assert!(before(
                &remove,
                find(&remove, m, Action::Stop, Some("zk")).id,
                web
            ));
        }
    }
}
