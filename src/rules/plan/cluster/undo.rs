//! Rollbacks of cluster operations, as plans: the inverse of what a failed (or cancelled)
//! operation completed, and for a shrink the nodes it deleted made anew with their services.

use std::collections::{BTreeMap, BTreeSet};

use super::dag::{Dag, Reach, UP, finish, link, reconfigure, up_from};
use crate::model::plan::{Action, ClusterTask, PlanNode};
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

/// What a shrink did before it stopped, from its tasks and the node records, for [`restore`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShrinkDone {
    /// Leaving nodes whose resource is gone (deleted, or never there): made anew.
    pub gone: BTreeSet<String>,
    /// Leaving nodes whose delete began but did not finish: taken back if their resource is
    /// still there (made anew if not).
    pub deleting: BTreeSet<String>,
    /// (node, service) the shrink removed, or stopped, on a node that is still there.
    pub removed: BTreeSet<(String, String)>,
    pub stopped: BTreeSet<(String, String)>,
}

/// The plan that undoes a shrink: each node it deleted is made anew (same name, hardware and
/// image; a new incarnation, as replace-node makes) and brought up with its services as a
/// create does; a node whose delete did not finish is taken back (confirmed) and gets the
/// services it lost; on a node still whole (leaving or staying), the services removed are
/// installed again and those stopped started again. Once any node was made anew, the nodes that stay are
/// reconfigured after it is confirmed, as they were told it had gone. `leaving` are the
/// shrink's leaving nodes with the services they had, `staying` the others.
pub fn restore(
    template: &Template,
    leaving: &[PlanNode],
    staying: &[PlanNode],
    done: &ShrinkDone,
) -> Vec<ClusterTask> {
    let mut dag = Dag::default();
    let pair = |n: &str, s: &str| (n.to_string(), s.to_string());
    // Everything a node that goes away and comes back runs; else only what it lost.
    let whole = |n: &str| done.gone.contains(n) || done.deleting.contains(n);
    let reinstall = |n: &str, s: &str| whole(n) || done.removed.contains(&pair(n, s));
    let restart = |n: &str, s: &str| !reinstall(n, s) && done.stopped.contains(&pair(n, s));
    let made: Vec<PlanNode> = leaving
        .iter()
        .filter(|n| done.gone.contains(&n.name))
        .cloned()
        .collect();
    let taken: Vec<PlanNode> = leaving
        .iter()
        .filter(|n| done.deleting.contains(&n.name) && !done.gone.contains(&n.name))
        .cloned()
        .collect();
    // Nodes still whole, leaving or staying (a restart its reconfigure stopped).
    let rest: Vec<PlanNode> = leaving
        .iter()
        .filter(|n| !whole(&n.name))
        .chain(staying)
        .cloned()
        .collect();
    let every: Vec<PlanNode> = leaving.iter().chain(staying).cloned().collect();
    // Node tasks first: a replace (or, for a node still there, its confirm), then bootstrap.
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
    // Then the services, in dependency order across every leaving node.
    up_from(&mut dag, template, leaving, &UP, None, &reinstall);
    up_from(&mut dag, template, &rest, &[Action::Start], None, &restart);
    link(
        &mut dag,
        template,
        &every,
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
            if let Some(first) = dag.find(&node.name, Action::Install, Some(s)) {
                dag.edge(bootstrap, first);
            }
        }
    }
    if !made.is_empty() {
        reconfigure(&mut dag, template, staying, Some(Action::Confirm));
    }
    finish(dag, template)
}
