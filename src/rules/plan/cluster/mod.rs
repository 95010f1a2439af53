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

use crate::model::plan::{Action, ClusterOperation, ClusterTask, PlanNode, Progress, Selection};
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
    plan_selected(operation, template, nodes, changed, &Selection::default())
}

/// Plans `operation` over `nodes`, as [`plan_change`]; a start, stop or restart of services
/// acts on the services and nodes `selection` names, with their dependent chains
/// ([`chains`]). Other operations ignore `selection`.
pub fn plan_selected(
    operation: ClusterOperation,
    template: &Template,
    nodes: &[PlanNode],
    changed: &BTreeSet<String>,
    selection: &Selection,
) -> Vec<ClusterTask> {
    use ClusterOperation as Op;
    let mut dag = Dag::default();
    let all = |_: &str, _: &str| true;
    let (moving, staying): (Vec<PlanNode>, Vec<PlanNode>) = nodes
        .iter()
        .cloned()
        .partition(|n| changed.contains(&n.name));
    let (stops, starts) = chains(operation, template, nodes, selection);
    let stopped = |n: &str, s: &str| stops.contains(&(n.to_string(), s.to_string()));
    let started = |n: &str, s: &str| starts.contains(&(n.to_string(), s.to_string()));
    match operation {
        Op::Create => up(&mut dag, template, nodes, &UP, true, &all),
        Op::Delete => down(&mut dag, template, nodes, &[Action::Stop], true, &all),
        Op::StartServices => up(&mut dag, template, nodes, &[Action::Start], false, &started),
        Op::StopServices => down(&mut dag, template, nodes, &[Action::Stop], false, &stopped),
        Op::RestartServices => {
            down(&mut dag, template, nodes, &[Action::Stop], false, &stopped);
            up(&mut dag, template, nodes, &[Action::Start], false, &started);
            // Every stop before any start: a restart brings the services down, then up.
            all_before(&mut dag, Action::Stop, Action::Start);
        }
        Op::Configure => {
            reconfigure(&mut dag, template, nodes, None);
            // Every stop before any start: a restart brings the services down, then up.
            all_before(&mut dag, Action::Stop, Action::Start);
        }
        Op::Expand => {
            up(&mut dag, template, &moving, &UP, true, &all);
            // The nodes already there learn of the new ones once those exist.
            reconfigure(&mut dag, template, &staying, Some(Action::Confirm));
        }
        Op::Shrink => {
            let steps = [Action::Stop, Action::Remove];
            down(&mut dag, template, &moving, &steps, true, &all);
            // The nodes that stay learn the others are gone once they are.
            reconfigure(&mut dag, template, &staying, Some(Action::Delete));
        }
        Op::ReplaceNode => {
            // Each replaced node made anew and brought up as in a create...
            up_from(
                &mut dag,
                template,
                &moving,
                &UP,
                Some(Action::Replace),
                &all,
            );
            // ...and the others learn its new address once it has one.
            reconfigure(&mut dag, template, &staying, Some(Action::Confirm));
        }
    }
    finish(dag, template)
}

/// A service on a node.
type Placed = BTreeSet<(String, String)>;

/// What a start, stop or restart of the `selection` stops and starts, as (node, service):
/// - a stop stops the selected services and, first, on every node, whatever needs them at
///   run time, directly or through others;
/// - a start starts the selected services and, first, on every node, whatever they need;
/// - a restart stops like a stop, then starts again what it stopped.
///
/// The order among them is the plan's edges; this only says which tasks there are. Other
/// operations get nothing.
pub fn chains(
    operation: ClusterOperation,
    template: &Template,
    nodes: &[PlanNode],
    selection: &Selection,
) -> (Placed, Placed) {
    use ClusterOperation as Op;
    let (stop, start) = match operation {
        Op::StopServices => (true, false),
        Op::StartServices => (false, true),
        Op::RestartServices => (true, true),
        Op::Create | Op::Delete | Op::Expand | Op::Shrink | Op::Configure | Op::ReplaceNode => {
            return Default::default();
        }
    };
    let selected: Placed = nodes
        .iter()
        .flat_map(|n| n.services.iter().map(move |s| (n.name.clone(), s.clone())))
        .filter(|(n, s)| selection.takes(n, s))
        .collect();
    let named: BTreeSet<&str> = selected.iter().map(|(_, s)| s.as_str()).collect();
    let everywhere = |services: &BTreeSet<&str>| -> Placed {
        nodes
            .iter()
            .flat_map(|n| n.services.iter().map(move |s| (n.name.clone(), s.clone())))
            .filter(|(_, s)| services.contains(s.as_str()))
            .collect()
    };
    let providers = template.providers();
    let mut stops = Placed::new();
    if stop {
        // Dependents: the services needing a named one, then those needing them...
        let dependents = closure(&named, |s| {
            template
                .services
                .keys()
                .map(String::as_str)
                .filter(|a| {
                    template
                        .predecessors_in(&providers, a, "runtime")
                        .contains(s)
                })
                .collect()
        });
        stops = selected.clone();
        stops.extend(everywhere(&dependents));
    }
    let starts = match (stop, start) {
        (_, false) => Placed::new(),
        // A restart starts again what it stopped; what those need keeps running.
        (true, true) => stops.clone(),
        (false, true) => {
            let needed = closure(&named, |s| {
                template
                    .predecessors_in(&providers, s, "runtime")
                    .into_iter()
                    .collect()
            });
            let mut starts = selected.clone();
            starts.extend(everywhere(&needed));
            starts
        }
    };
    (stops, starts)
}

/// The services reached from `from` by `next`, `from` left out unless reached again. A
/// worklist, not recursion: a template's dependencies cannot exhaust the stack, and each
/// service is expanded once.
fn closure<'a>(from: &BTreeSet<&'a str>, next: impl Fn(&str) -> Vec<&'a str>) -> BTreeSet<&'a str> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut todo: Vec<&str> = from.iter().copied().collect();
    let mut expanded: BTreeSet<&str> = BTreeSet::new();
    while let Some(s) = todo.pop() {
        if !expanded.insert(s) {
            continue;
        }
        for t in next(s) {
            if seen.insert(t) {
                todo.push(t);
            }
        }
    }
    seen
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

/// Configures every service on `nodes` again; those with `restartOnConfigure` are stopped
/// first (dependents before what they need) and started after (in dependency order). With
/// `after`, all of it waits for every node task `after` (the new nodes confirmed, the old
/// ones deleted).
fn reconfigure(dag: &mut Dag, template: &Template, nodes: &[PlanNode], after: Option<Action>) {
    let gates: Vec<usize> = (0..dag.tasks.len())
        .filter(|i| Some(dag.tasks[*i].1) == after && dag.tasks[*i].2.is_none())
        .collect();
    let first = dag.tasks.len();
    let restarts = |_: &str, s: &str| {
        template
            .services
            .get(s)
            .is_some_and(|svc| svc.restart_on_configure)
    };
    down(dag, template, nodes, &[Action::Stop], false, &restarts);
    for node in nodes {
        for s in &node.services {
            let configure = dag.task(&node.name, Action::Configure, Some(s));
            if let Some(stop) = dag.find(&node.name, Action::Stop, Some(s)) {
                dag.edge(stop, configure);
            }
        }
    }
    up(dag, template, nodes, &[Action::Start], false, &restarts);
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
    let added: Vec<usize> = (first..dag.tasks.len())
        .filter(|i| matches!(dag.tasks[*i].1, Action::Stop | Action::Configure))
        .collect();
    for g in &gates {
        for t in &added {
            dag.edge(*g, *t);
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
    only: &dyn Fn(&str, &str) -> bool,
) {
    let first = create.then_some(Action::Create);
    up_from(dag, template, nodes, steps, first, only);
}

/// [`up`], the node tasks beginning with `first` (a create, or a replace), if any.
fn up_from(
    dag: &mut Dag,
    template: &Template,
    nodes: &[PlanNode],
    steps: &[Action],
    first: Option<Action>,
    only: &dyn Fn(&str, &str) -> bool,
) {
    for node in nodes {
        let mut last = None;
        if let Some(first) = first {
            let create = dag.task(&node.name, first, None);
            let confirm = dag.task(&node.name, Action::Confirm, None);
            let bootstrap = dag.task(&node.name, Action::Bootstrap, None);
            dag.edge(create, confirm);
            dag.edge(confirm, bootstrap);
            last = Some(bootstrap);
        }
        for s in node.services.iter().filter(|s| only(&node.name, s)) {
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
    only: &dyn Fn(&str, &str) -> bool,
) {
    for node in nodes {
        let mut lasts = Vec::new();
        for s in node.services.iter().filter(|s| only(&node.name, s)) {
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
mod properties;
#[cfg(test)]
mod snapshots;
#[cfg(test)]
mod tests;
