//! Rollbacks of cluster operations, as plans: the inverse of what a failed (or cancelled)
//! operation completed; and the plan that brings a cluster back to its layout from what the
//! store knows of it, which undoes a shrink and is the `repair` operation.

use std::collections::{BTreeMap, BTreeSet};

use super::dag::{Dag, Reach, UP, all_before, down, finish, link, reconfigure, up_from};
use crate::model::plan::{Action, ClusterTask, PlanNode};
use crate::model::service::ServiceState;
use crate::model::template::Template;

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

/// How a node of the layout a [`repair`] brings back is, as the store knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeCondition {
    /// Its resource is there.
    Whole,
    /// Its delete began and did not finish: taken back if the resource is still there (made
    /// anew if not).
    Deleting,
    /// Its resource is gone (deleted, never made, or its create did not finish): made anew.
    Gone,
}

/// What the store knows of a cluster a [`repair`] works on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Each node of the layout; a node left out is whole.
    pub nodes: BTreeMap<String, NodeCondition>,
    /// The state of each service on each node; a service left out is not installed.
    pub services: BTreeMap<(String, String), ServiceState>,
    /// Nodes whose resource may exist but that the layout does not have: deleted.
    pub strays: Vec<String>,
}

/// The plan that brings a cluster back to `layout` (its nodes with their services) from
/// what was `found`, as a `repair` does and as a shrink is undone:
/// - a node that is gone is made anew (same name and types, a new incarnation, as
///   replace-node makes) and brought up with every service, as a create does;
/// - a node whose delete did not finish is taken back (confirmed) and gets back what it lost;
/// - on a node, a service not installed or failed is brought up in full (install,
///   configure, initialize, start), one down started, one in an unknown state stopped and
///   started; one up (or running an outdated config) is left alone;
/// - a node outside the layout is deleted;
/// - once any node was made anew or deleted, the others are reconfigured after it, as they
///   were told it had gone.
///
/// Across nodes, services come up in dependency order.
pub fn repair(template: &Template, layout: &[PlanNode], found: &Found) -> Vec<ClusterTask> {
    let mut dag = Dag::default();
    let condition = |n: &str| found.nodes.get(n).copied().unwrap_or(NodeCondition::Whole);
    let state = |n: &str, s: &str| {
        if condition(n) == NodeCondition::Gone {
            return None;
        }
        found.services.get(&(n.to_string(), s.to_string())).copied()
    };
    let of = |c: NodeCondition| -> Vec<PlanNode> {
        layout
            .iter()
            .filter(|n| condition(&n.name) == c)
            .cloned()
            .collect()
    };
    let (made, taken, whole) = (
        of(NodeCondition::Gone),
        of(NodeCondition::Deleting),
        of(NodeCondition::Whole),
    );
    // Node tasks first: a replace (or, for a node being deleted, its confirm), then bootstrap.
    up_from(
        &mut dag,
        template,
        &made,
        &[],
        Some(Action::Replace),
        &|_, _| false,
    );
    up_from(
        &mut dag,
        template,
        &taken,
        &[],
        Some(Action::Confirm),
        &|_, _| false,
    );
    // Then the services, by their state, in dependency order across every node.
    use ServiceState::{Down, Failed, Outdated, Unknown, Up};
    let anew = |n: &str, s: &str| matches!(state(n, s), None | Some(Failed));
    let started = |n: &str, s: &str| matches!(state(n, s), Some(Down));
    let unsure = |n: &str, s: &str| matches!(state(n, s), Some(Unknown));
    let _settled = |n: &str, s: &str| matches!(state(n, s), Some(Up | Outdated));
    up_from(&mut dag, template, layout, &UP, None, &anew);
    down(&mut dag, template, layout, &[Action::Stop], false, &unsure);
    up_from(
        &mut dag,
        template,
        layout,
        &[Action::Start],
        None,
        &|n, s| started(n, s) || unsure(n, s),
    );
    all_before(&mut dag, Action::Stop, Action::Start);
    link(
        &mut dag,
        template,
        layout,
        "runtime",
        Action::Start,
        Action::Start,
        false,
    );
    for node in made.iter().chain(&taken) {
        let Some(bootstrap) = dag.find(&node.name, Action::Bootstrap, None) else {
            continue;
        };
        for s in &node.services {
            for step in [Action::Install, Action::Start] {
                if let Some(first) = dag.find(&node.name, step, Some(s)) {
                    dag.edge(bootstrap, first);
                }
            }
        }
    }
    let strays: Vec<PlanNode> = found
        .strays
        .iter()
        .map(|name| PlanNode {
            name: name.clone(),
            services: BTreeSet::new(),
        })
        .collect();
    down(&mut dag, template, &strays, &[], true, &|_, _| false);
    if !made.is_empty() || !strays.is_empty() {
        reconfigure(
            &mut dag,
            template,
            &whole,
            &[Action::Confirm, Action::Delete],
        );
    }
    finish(dag, template)
}
