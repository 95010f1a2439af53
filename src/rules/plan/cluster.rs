//! Plans for operations on a cluster with services: the node-level task DAG.
//!
//! Pure: (operation, template, nodes with their services) → tasks with dependencies. Per node
//! `create → confirm → bootstrap`, then per service on it `install → configure → initialize →
//! start`. Across nodes, a service's install waits for the installs of what it needs at
//! install time, and its initialize waits for the starts, on every node, of what it needs at
//! run time; stops go in the reverse order, and a node is deleted after its services stop.
//! Steps a service has no action for are walked through (their edges pass on to what follows)
//! and the result is transitively reduced, so every edge left is one that matters.
//! [`stages`] derives the classic stage view (one task per node per stage) for display only;
//! execution follows the DAG.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::plan::{Action, ClusterOperation, ClusterTask, PlanNode, Progress};
use crate::model::template::Template;

type Key = (String, Action, Option<String>);

/// A DAG under construction, keyed by (node, action, service).
#[derive(Default)]
struct Dag {
    tasks: Vec<Key>,
    index: BTreeMap<Key, usize>,
    edges: BTreeSet<(usize, usize)>,
}

impl Dag {
    fn task(&mut self, node: &str, action: Action, service: Option<&str>) -> usize {
        let key = (node.to_string(), action, service.map(str::to_string));
        if let Some(i) = self.index.get(&key) {
            return *i;
        }
        let i = self.tasks.len();
        self.tasks.push(key.clone());
        self.index.insert(key, i);
        i
    }

    fn find(&self, node: &str, action: Action, service: Option<&str>) -> Option<usize> {
        self.index
            .get(&(node.to_string(), action, service.map(str::to_string)))
            .copied()
    }

    fn edge(&mut self, before: usize, after: usize) {
        if before != after {
            self.edges.insert((before, after));
        }
    }
}

/// The service steps of a create, in order.
const UP: [Action; 4] = [
    Action::Install,
    Action::Configure,
    Action::Initialize,
    Action::Start,
];

/// Plans `operation` over `nodes` for `template`.
pub fn plan(
    operation: ClusterOperation,
    template: &Template,
    nodes: &[PlanNode],
) -> Vec<ClusterTask> {
    plan_change(operation, template, nodes, &BTreeSet::new())
}

/// Plans `operation` over `nodes`; for `expand` the `changed` nodes are the new ones, for
/// `shrink` the ones that go. Other operations ignore `changed`.
pub fn plan_change(
    operation: ClusterOperation,
    template: &Template,
    nodes: &[PlanNode],
    changed: &BTreeSet<String>,
) -> Vec<ClusterTask> {
    use ClusterOperation as Op;
    let mut dag = Dag::default();
    let all = |_: &str| true;
    let (moving, staying): (Vec<PlanNode>, Vec<PlanNode>) = nodes
        .iter()
        .cloned()
        .partition(|n| changed.contains(&n.name));
    match operation {
        Op::Create => up(&mut dag, template, nodes, &UP, true, &all),
        Op::Delete => down(&mut dag, template, nodes, &[Action::Stop], true, &all),
        Op::StartServices => up(&mut dag, template, nodes, &[Action::Start], false, &all),
        Op::StopServices => down(&mut dag, template, nodes, &[Action::Stop], false, &all),
        Op::RestartServices => {
            down(&mut dag, template, nodes, &[Action::Stop], false, &all);
            up(&mut dag, template, nodes, &[Action::Start], false, &all);
            // Every stop before any start: a restart brings the cluster down, then up.
            all_before(&mut dag, Action::Stop, Action::Start);
        }
        Op::Configure => {
            let restarts = |s: &str| {
                template
                    .services
                    .get(s)
                    .is_some_and(|svc| svc.restart_on_configure)
            };
            down(&mut dag, template, nodes, &[Action::Stop], false, &restarts);
            for node in nodes {
                for s in &node.services {
                    let configure = dag.task(&node.name, Action::Configure, Some(s));
                    if let Some(stop) = dag.find(&node.name, Action::Stop, Some(s)) {
                        dag.edge(stop, configure);
                    }
                }
            }
            up(
                &mut dag,
                template,
                nodes,
                &[Action::Start],
                false,
                &restarts,
            );
            for node in nodes {
                for s in &node.services {
                    if let (Some(configure), Some(start)) = (
                        dag.find(&node.name, Action::Configure, Some(s)),
                        dag.find(&node.name, Action::Start, Some(s)),
                    ) {
                        dag.edge(configure, start);
                    }
                }
            }
            all_before(&mut dag, Action::Stop, Action::Start);
        }
        Op::Expand => {
            up(&mut dag, template, &moving, &UP, true, &all);
            // The nodes already there learn of the new ones once those exist.
            reconfigure(&mut dag, &staying, Action::Confirm);
        }
        Op::Shrink => {
            let steps = [Action::Stop, Action::Remove];
            down(&mut dag, template, &moving, &steps, true, &all);
            // The nodes that stay learn the others are gone once they are.
            reconfigure(&mut dag, &staying, Action::Delete);
        }
    }
    finish(dag, template)
}

/// Every task doing `first` before any doing `then`. Only the last `first` tasks (no other
/// `first` after them) need an edge to the earliest `then` tasks (no other `then` before them):
/// every other pair is ordered through those, and the reduction would drop its edge anyway.
fn all_before(dag: &mut Dag, first: Action, then: Action) {
    let is = |i: usize, a: Action| dag.tasks[i].1 == a;
    let mut has_later_first = BTreeSet::new();
    let mut has_earlier_then = BTreeSet::new();
    for &(a, b) in &dag.edges {
        if is(a, first) && is(b, first) {
            has_later_first.insert(a);
        }
        if is(a, then) && is(b, then) {
            has_earlier_then.insert(b);
        }
    }
    let lasts: Vec<usize> = (0..dag.tasks.len())
        .filter(|i| is(*i, first) && !has_later_first.contains(i))
        .collect();
    let earliest: Vec<usize> = (0..dag.tasks.len())
        .filter(|i| is(*i, then) && !has_earlier_then.contains(i))
        .collect();
    for f in &lasts {
        for t in &earliest {
            dag.edge(*f, *t);
        }
    }
}

/// A `configure` of every service on `nodes`, after every node task `after` in the plan.
fn reconfigure(dag: &mut Dag, nodes: &[PlanNode], after: Action) {
    let gates: Vec<usize> = (0..dag.tasks.len())
        .filter(|i| dag.tasks[*i].1 == after && dag.tasks[*i].2.is_none())
        .collect();
    for node in nodes {
        for s in &node.services {
            let configure = dag.task(&node.name, Action::Configure, Some(s));
            for g in &gates {
                dag.edge(*g, configure);
            }
        }
    }
}

/// Brings services up on `nodes`: for a create the node tasks first, then per service the
/// `steps` in order; across nodes, install order from install-time dependencies, and a
/// service's first step past install (initialize for a create, else start) after the starts,
/// everywhere, of what it needs at run time. Only services `only` accepts are planned.
fn up(
    dag: &mut Dag,
    template: &Template,
    nodes: &[PlanNode],
    steps: &[Action],
    create: bool,
    only: &dyn Fn(&str) -> bool,
) {
    for node in nodes {
        let mut last = None;
        if create {
            let create = dag.task(&node.name, Action::Create, None);
            let confirm = dag.task(&node.name, Action::Confirm, None);
            let bootstrap = dag.task(&node.name, Action::Bootstrap, None);
            dag.edge(create, confirm);
            dag.edge(confirm, bootstrap);
            last = Some(bootstrap);
        }
        for s in node.services.iter().filter(|s| only(s)) {
            chain(dag, &node.name, s, steps, last);
        }
    }
    let gate = if steps.contains(&Action::Initialize) {
        Action::Initialize
    } else {
        Action::Start
    };
    // install(B everywhere) → install(A) when A needs B at install time; start(B everywhere)
    // → gate(A) when A needs B at run time.
    link(
        dag,
        template,
        nodes,
        "install",
        Action::Install,
        Action::Install,
        false,
    );
    link(dag, template, nodes, "runtime", Action::Start, gate, false);
}

/// Chains `steps` of `service` on `node`, after `first` if given; returns the last one.
fn chain(
    dag: &mut Dag,
    node: &str,
    service: &str,
    steps: &[Action],
    first: Option<usize>,
) -> Option<usize> {
    let mut prev = first;
    for step in steps {
        let t = dag.task(node, *step, Some(service));
        if let Some(p) = prev {
            dag.edge(p, t);
        }
        prev = Some(t);
    }
    prev
}

/// Edges across nodes from `which` dependencies (A needs B): `b_action` of B everywhere before
/// `a_action` of A, or, with `reverse`, `a_action` of A before `b_action` of B everywhere.
/// Only between tasks the plan has.
fn link(
    dag: &mut Dag,
    template: &Template,
    nodes: &[PlanNode],
    which: &str,
    b_action: Action,
    a_action: Action,
    reverse: bool,
) {
    let providers = template.providers();
    // The tasks doing `b_action`, per service, across the nodes: found once, not per pair.
    let mut by_service: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for node in nodes {
        for s in &node.services {
            if let Some(t) = dag.find(&node.name, b_action, Some(s)) {
                by_service.entry(s.as_str()).or_default().push(t);
            }
        }
    }
    for node in nodes {
        for a in &node.services {
            let Some(ta) = dag.find(&node.name, a_action, Some(a)) else {
                continue;
            };
            for b in template.predecessors_in(&providers, a, which) {
                for &tb in by_service.get(b).map(Vec::as_slice).unwrap_or_default() {
                    if reverse {
                        dag.edge(ta, tb);
                    } else {
                        dag.edge(tb, ta);
                    }
                }
            }
        }
    }
}

/// Takes services down on `nodes`: per service the `steps` in order (stop, then remove for a
/// shrink), in the reverse of run-time dependencies across nodes (A stops everywhere before
/// what A needs stops); with `delete`, each node is deleted after its services. Only services
/// `only` accepts are planned.
fn down(
    dag: &mut Dag,
    template: &Template,
    nodes: &[PlanNode],
    steps: &[Action],
    delete: bool,
    only: &dyn Fn(&str) -> bool,
) {
    for node in nodes {
        let mut lasts = Vec::new();
        for s in node.services.iter().filter(|s| only(s)) {
            lasts.extend(chain(dag, &node.name, s, steps, None));
        }
        if delete {
            let d = dag.task(&node.name, Action::Delete, None);
            for l in lasts {
                dag.edge(l, d);
            }
        }
    }
    // A stops everywhere before what it needs at run time stops.
    link(
        dag,
        template,
        nodes,
        "runtime",
        Action::Stop,
        Action::Stop,
        true,
    );
}

/// Walks through service steps without an action, reduces transitively and numbers tasks.
fn finish(dag: Dag, template: &Template) -> Vec<ClusterTask> {
    let n = dag.tasks.len();
    let keep: Vec<bool> = dag
        .tasks
        .iter()
        .map(
            |(_, action, service)| match (action.service_action(), service) {
                (Some(kind), Some(s)) => template
                    .services
                    .get(s)
                    .is_some_and(|svc| svc.actions.contains_key(&kind)),
                _ => true,
            },
        )
        .collect();
    let mut succ: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for (a, b) in &dag.edges {
        succ[*a].insert(*b);
    }
    // What each task reaches, as a bit set: n²/8 bytes, which the size limit on plans
    // ([`check_size`]) keeps small.
    let order = topo_order(n, &succ);
    let reach = Reach::new(n, &order, &succ);
    // Kept-to-kept edges: w reachable from v through dropped tasks only.
    let mut direct: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for v in (0..n).filter(|v| keep[*v]) {
        let mut stack: Vec<usize> = succ[v].iter().copied().collect();
        let mut seen = BTreeSet::new();
        while let Some(w) = stack.pop() {
            if !seen.insert(w) {
                continue;
            }
            if keep[w] {
                direct[v].insert(w);
            } else {
                stack.extend(succ[w].iter().copied());
            }
        }
    }
    // Transitive reduction: drop v → w when w is reachable from another successor of v.
    let mut reduced: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for v in 0..n {
        for &w in &direct[v] {
            let implied = direct[v].iter().any(|&u| u != w && reach.has(u, w));
            if !implied {
                reduced[v].insert(w);
            }
        }
    }
    let ids: BTreeMap<usize, usize> = order
        .iter()
        .copied()
        .filter(|v| keep[*v])
        .enumerate()
        .map(|(id, v)| (v, id))
        .collect();
    let mut tasks: Vec<ClusterTask> = ids
        .iter()
        .map(|(&v, &id)| {
            let (node, action, service) = dag.tasks[v].clone();
            ClusterTask {
                id,
                node,
                action,
                service,
                depends_on: Vec::new(),
            }
        })
        .collect();
    tasks.sort_by_key(|t| t.id);
    for (v, successors) in reduced.iter().enumerate() {
        for &w in successors {
            if let (Some(&a), Some(&b)) = (ids.get(&v), ids.get(&w)) {
                tasks[b].depends_on.push(a);
            }
        }
    }
    for t in &mut tasks {
        t.depends_on.sort_unstable();
    }
    tasks
}

/// Reachability in a DAG: one bit set per task.
struct Reach {
    words: usize,
    bits: Vec<u64>,
}

impl Reach {
    /// Every task's descendants, from a topological `order` and the successor lists.
    fn new(n: usize, order: &[usize], succ: &[BTreeSet<usize>]) -> Self {
        let words = n.div_ceil(64);
        let mut bits = vec![0u64; n * words];
        for &v in order.iter().rev() {
            for &w in &succ[v] {
                bits[v * words + w / 64] |= 1 << (w % 64);
                for i in 0..words {
                    bits[v * words + i] |= bits[w * words + i];
                }
            }
        }
        Reach { words, bits }
    }

    /// What every task of a plan comes after (its ancestors); task ids are a topological
    /// order, as [`plan`] numbers them.
    fn ancestors(tasks: &[ClusterTask]) -> Self {
        let n = tasks.len();
        let words = n.div_ceil(64);
        let mut bits = vec![0u64; n * words];
        for t in tasks {
            for &d in &t.depends_on {
                bits[t.id * words + d / 64] |= 1 << (d % 64);
                for i in 0..words {
                    bits[t.id * words + i] |= bits[d * words + i];
                }
            }
        }
        Reach { words, bits }
    }

    /// Whether `to` is reachable from `from`.
    fn has(&self, from: usize, to: usize) -> bool {
        self.bits[from * self.words + to / 64] & (1 << (to % 64)) != 0
    }
}

/// Most tasks a plan may have, counting the steps a service has no action for: the planner's
/// work and memory grow with its square.
pub const MAX_PLAN_TASKS: usize = 10_000;
/// Most dependencies a plan may have before it is reduced.
pub const MAX_PLAN_EDGES: usize = 2_000_000;

/// Checks, before planning, that `operation` over `nodes` stays within [`MAX_PLAN_TASKS`] and
/// [`MAX_PLAN_EDGES`]; the error says how large it would be. An upper estimate, in time linear
/// in the nodes and services.
pub fn check_size(
    operation: ClusterOperation,
    template: &Template,
    nodes: &[PlanNode],
) -> Result<(), String> {
    // Per node: its node tasks, and per service at most every step of a create, a stop and a
    // remove; across nodes, one edge per pair of nodes whose services depend on each other,
    // and (restart, configure) every stop before every start.
    let services: usize = nodes.iter().map(|n| n.services.len()).sum();
    let tasks = nodes.len() * 4 + services * (UP.len() + 2);
    if tasks > MAX_PLAN_TASKS {
        return Err(format!(
            "the plan of '{}' over {} node(s) with {services} service placement(s) would have up to {tasks} tasks, more than the limit of {MAX_PLAN_TASKS}",
            operation.name(),
            nodes.len()
        ));
    }
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for n in nodes {
        for s in &n.services {
            *count.entry(s.as_str()).or_default() += 1;
        }
    }
    let providers = template.providers();
    let mut edges = tasks;
    for (a, on_a) in &count {
        for which in ["install", "runtime"] {
            for b in template.predecessors_in(&providers, a, which) {
                edges += on_a * count.get(b).copied().unwrap_or(0);
            }
        }
    }
    if matches!(
        operation,
        ClusterOperation::RestartServices | ClusterOperation::Configure
    ) {
        edges += services * services;
    }
    if edges > MAX_PLAN_EDGES {
        return Err(format!(
            "the plan of '{}' over {} node(s) would have up to {edges} dependencies, more than the limit of {MAX_PLAN_EDGES}",
            operation.name(),
            nodes.len()
        ));
    }
    Ok(())
}

/// A topological order (Kahn's algorithm, smallest index first, so it is deterministic).
fn topo_order(n: usize, succ: &[BTreeSet<usize>]) -> Vec<usize> {
    let mut indegree = vec![0usize; n];
    for s in succ {
        for &w in s {
            indegree[w] += 1;
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|v| indegree[*v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop_first() {
        order.push(v);
        for &w in &succ[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.insert(w);
            }
        }
    }
    debug_assert_eq!(order.len(), n, "template validation rules out cycles");
    order
}

/// The tasks that may start now: waiting, every predecessor done, and no other task of the
/// same node running.
pub fn ready(tasks: &[ClusterTask], progress: &[crate::model::plan::Progress]) -> Vec<usize> {
    let mut busy: BTreeSet<&str> = tasks
        .iter()
        .zip(progress)
        .filter(|(_, p)| **p == Progress::Running)
        .map(|(t, _)| t.node.as_str())
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        if progress[t.id] == Progress::Waiting
            && t.depends_on.iter().all(|d| progress[*d] == Progress::Done)
            && busy.insert(t.node.as_str())
        {
            out.push(t.id);
        }
    }
    out
}

/// The stage view: each stage holds tasks whose predecessors are all in earlier stages, at
/// most one per node. For display; execution does not wait for stages.
pub fn stages(tasks: &[ClusterTask]) -> Vec<Vec<usize>> {
    let mut stage_of: Vec<Option<usize>> = vec![None; tasks.len()];
    let mut stages: Vec<Vec<usize>> = Vec::new();
    let mut placed = 0;
    while placed < tasks.len() {
        let current = stages.len();
        let mut busy = BTreeSet::new();
        let mut stage = Vec::new();
        for t in tasks {
            if stage_of[t.id].is_none()
                && t.depends_on
                    .iter()
                    .all(|d| stage_of[*d].is_some_and(|s| s < current))
                && busy.insert(t.node.as_str())
            {
                stage.push(t.id);
            }
        }
        for id in &stage {
            stage_of[*id] = Some(current);
        }
        placed += stage.len();
        if stage.is_empty() {
            break; // cannot happen for a DAG
        }
        stages.push(stage);
    }
    stages
}

/// The plan that undoes the `completed` tasks of a failed operation: each one's inverse
/// (delete ↔ create, remove ↔ install, stop ↔ start, configure with the previous config), in
/// the reverse of the original dependency order; a node's delete comes after every other
/// inverse on that node. Tasks without an inverse (bootstrap, initialize) need none, and an
/// inverse the service has no action for (a `remove`, say) is walked through.
pub fn rollback(
    template: &Template,
    tasks: &[ClusterTask],
    completed: &BTreeSet<usize>,
) -> Vec<ClusterTask> {
    // Original reachability, to reverse it: what each task comes after.
    let after = Reach::ancestors(tasks);
    let mut dag = Dag::default();
    let mut origin: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &c in completed {
        let t = &tasks[c];
        if let Some(inverse) = t.action.inverse() {
            let service = if inverse == Action::Delete {
                None
            } else {
                t.service.as_deref()
            };
            let i = dag.task(&t.node, inverse, service);
            origin.entry(i).or_default().push(c);
        }
    }
    let inverses: Vec<usize> = origin.keys().copied().collect();
    for &x in &inverses {
        for &y in &inverses {
            let (kx, ky) = (&dag.tasks[x], &dag.tasks[y]);
            // Undo later work first: if an original of y came after an original of x, y's
            // inverse runs before x's.
            let later = origin[&x]
                .iter()
                .any(|ox| origin[&y].iter().any(|oy| after.has(*oy, *ox)));
            let node_last = kx.1 == Action::Delete && ky.1 != Action::Delete && kx.0 == ky.0;
            if later || node_last {
                dag.edge(y, x);
            }
        }
    }
    finish(dag, template)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let err =
            check_size(ClusterOperation::RestartServices, &t, &layout(340)).expect_err("edges");
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
}

#[cfg(test)]
mod properties {
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
}

/// Snapshots of the plans for every built-in template: the layout the solver picks and every
/// operation's tasks, as text under `tests/snapshots/plans/`. A change to the solver or the
/// planner that alters a shipped plan fails here until the snapshot is reviewed and rewritten
/// (`EBB_UPDATE_SNAPSHOTS=1 cargo nextest run snapshots`).
#[cfg(test)]
mod snapshots {
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
        for (id, template) in crate::model::builtin::templates().expect("built-ins") {
            let names = ebb_spi::resource::node_names(4);
            let solved = crate::rules::solver::solve(
                &template,
                &crate::rules::solver::Request {
                    provisioner: "local".into(),
                    nodes: 4,
                    ..Default::default()
                },
            )
            .expect("solved");
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
            ] {
                let _ = writeln!(
                    text,
                    "\n{} (changed: worker-3 for expand and shrink)",
                    op.name()
                );
                text.push_str(&render(&plan_change(op, &template, &nodes, &changed)));
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
}
