//! The building blocks of cluster plans: a DAG of node tasks under construction, the ways
//! services are brought up, taken down and reconfigured across nodes, and how a DAG becomes
//! the plan's tasks (steps without an action walked through, transitively reduced,
//! numbered). [`super`] composes them into each operation's plan, `undo` into rollbacks.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::plan::{Action, ClusterTask, PlanNode};
use crate::model::template::Template;

pub(super) type Key = (String, Action, Option<String>);

/// A DAG under construction, keyed by (node, action, service).
#[derive(Default)]
pub(super) struct Dag {
    pub(super) tasks: Vec<Key>,
    pub(super) index: BTreeMap<Key, usize>,
    pub(super) edges: BTreeSet<(usize, usize)>,
}

impl Dag {
    pub(super) fn task(&mut self, node: &str, action: Action, service: Option<&str>) -> usize {
        let key = (node.to_string(), action, service.map(str::to_string));
        if let Some(i) = self.index.get(&key) {
            return *i;
        }
        let i = self.tasks.len();
        self.tasks.push(key.clone());
        self.index.insert(key, i);
        i
    }

    pub(super) fn find(&self, node: &str, action: Action, service: Option<&str>) -> Option<usize> {
        self.index
            .get(&(node.to_string(), action, service.map(str::to_string)))
            .copied()
    }

    pub(super) fn edge(&mut self, before: usize, after: usize) {
        if before != after {
            self.edges.insert((before, after));
        }
    }
}

/// The service steps of a create, in order.
pub(super) const UP: [Action; 4] = [
    Action::Install,
    Action::Configure,
    Action::Initialize,
    Action::Start,
];

/// The services reached from `from` by `next`, `from` left out unless reached again. A
/// worklist, not recursion: a template's dependencies cannot exhaust the stack, and each
/// service is expanded once.
pub(super) fn closure<'a>(
    from: &BTreeSet<&'a str>,
    next: impl Fn(&str) -> Vec<&'a str>,
) -> BTreeSet<&'a str> {
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

/// The services that need one of `named` at run time, directly or through others.
pub(super) fn dependents<'a>(
    template: &'a Template,
    named: &BTreeSet<&'a str>,
) -> BTreeSet<&'a str> {
    let providers = template.providers();
    closure(named, |s| {
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
    })
}

/// Every task doing `first` before any doing `then`. Only the last `first` tasks (no other
/// `first` after them) need an edge to the earliest `then` tasks (no other `then` before them):
/// every other pair is ordered through those, and the reduction would drop its edge anyway.
pub(super) fn all_before(dag: &mut Dag, first: Action, then: Action) {
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
/// first, after what needs them at run time, and started after (in dependency order). All of
/// it waits for every node task of the kinds `after` names (the new nodes confirmed, the old
/// ones deleted).
pub(super) fn reconfigure(
    dag: &mut Dag,
    template: &Template,
    nodes: &[PlanNode],
    after: &[Action],
) {
    let gate = |k: &Key| after.contains(&k.1) && k.2.is_none();
    let gated = [Action::Stop, Action::Configure];
    reconfigure_where(dag, template, nodes, (&gate, &gated), None);
}

/// Which tasks a reconfigure waits for, and which of its own tasks (by action) wait.
pub(super) type Gate<'a> = (&'a dyn Fn(&Key) -> bool, &'a [Action]);

/// [`reconfigure`] of the services `only` names (all, when `None`); its tasks doing one of
/// `gate.1` come after every task `gate.0` accepts. Those that restart on configure still
/// take their run-time dependents down first and up after.
pub(super) fn reconfigure_where(
    dag: &mut Dag,
    template: &Template,
    nodes: &[PlanNode],
    gate: Gate<'_>,
    only: Option<&BTreeSet<&str>>,
) {
    let (gate, gated) = gate;
    let gates: Vec<usize> = (0..dag.tasks.len())
        .filter(|i| gate(&dag.tasks[*i]))
        .collect();
    let first = dag.tasks.len();
    let affected = |s: &str| only.is_none_or(|o| o.contains(s));
    // A service restarted to take its new config is stopped after what needs it at run time
    // (they would lose it under them) and started before them, as the COBs paper's chain.
    let restarted: BTreeSet<&str> = template
        .services
        .iter()
        .filter(|(name, svc)| svc.restart_on_configure && affected(name))
        .map(|(name, _)| name.as_str())
        .collect();
    let chained = dependents(template, &restarted);
    let restarts = |_: &str, s: &str| restarted.contains(s) || chained.contains(s);
    down(dag, template, nodes, &[Action::Stop], false, &restarts);
    for node in nodes {
        for s in node.services.iter().filter(|s| affected(s)) {
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
        .filter(|i| gated.contains(&dag.tasks[*i].1))
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
pub(super) fn up(
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
pub(super) fn up_from(
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
pub(super) fn chain(
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
pub(super) fn link(
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
/// what A needs stops) and of install-time ones for removes (A is removed before what it was
/// installed on); with `delete`, each node is deleted after its services. Only services
/// `only` accepts are planned.
pub(super) fn down(
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
    // A is removed everywhere before what it needed to install is.
    link(
        dag,
        template,
        nodes,
        "install",
        Action::Remove,
        Action::Remove,
        true,
    );
}

/// Walks through service steps without an action, reduces transitively and numbers tasks.
pub(super) fn finish(dag: Dag, template: &Template) -> Vec<ClusterTask> {
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
pub(super) struct Reach {
    words: usize,
    bits: Vec<u64>,
}

impl Reach {
    /// Every task's descendants, from a topological `order` and the successor lists.
    pub(super) fn new(n: usize, order: &[usize], succ: &[BTreeSet<usize>]) -> Self {
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
    pub(super) fn ancestors(tasks: &[ClusterTask]) -> Self {
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
    pub(super) fn has(&self, from: usize, to: usize) -> bool {
        self.bits[from * self.words + to / 64] & (1 << (to % 64)) != 0
    }
}

/// A topological order (Kahn's algorithm, smallest index first, so it is deterministic).
pub(super) fn topo_order(n: usize, succ: &[BTreeSet<usize>]) -> Vec<usize> {
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
