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
            reconfigure(&mut dag, template, nodes, &[]);
            // Every stop before any start: a restart brings the services down, then up.
            all_before(&mut dag, Action::Stop, Action::Start);
        }
        Op::Expand => {
            up(&mut dag, template, &moving, &UP, true, &all);
            // The nodes already there learn of the new ones once those exist.
            reconfigure(&mut dag, template, &staying, &[Action::Confirm]);
        }
        Op::Shrink => {
            let steps = [Action::Stop, Action::Remove];
            down(&mut dag, template, &moving, &steps, true, &all);
            // The nodes that stay learn the others are gone once they are.
            reconfigure(&mut dag, template, &staying, &[Action::Delete]);
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
            reconfigure(&mut dag, template, &staying, &[Action::Confirm]);
        }
        // The new services up where they were placed, in dependency order; then what uses
        // them (at install or run time) reconfigured once they run.
        Op::AddServices => {
            let new = |_: &str, s: &str| selection.services.contains(s);
            up(&mut dag, template, nodes, &UP, false, &new);
            let users = users_of(template, nodes, &selection.services);
            let gate = |k: &Key| {
                k.1 == Action::Start && k.2.as_ref().is_some_and(|s| selection.services.contains(s))
            };
            let gated = [Action::Stop, Action::Configure];
            reconfigure_where(&mut dag, template, nodes, (&gate, &gated), Some(&users));
        }
        // The services stopped (what needs them is refused from staying) and removed
        // everywhere; then what used them reconfigured.
        Op::RemoveServices => {
            let gone = |_: &str, s: &str| selection.services.contains(s);
            down(
                &mut dag,
                template,
                nodes,
                &[Action::Stop, Action::Remove],
                false,
                &gone,
            );
            let users = users_of(template, nodes, &selection.services);
            let gate = |k: &Key| {
                k.1 == Action::Remove
                    && k.2.as_ref().is_some_and(|s| selection.services.contains(s))
            };
            // What uses them and restarts on configure stops before they do (it needs them);
            // its configure waits until they are gone.
            reconfigure_where(
                &mut dag,
                template,
                nodes,
                (&gate, &[Action::Configure]),
                Some(&users),
            );
        }
        // Planned from what the store knows of the cluster: see [`repair`].
        Op::Repair => {}
    }
    finish(dag, template)
}

/// The services of `nodes` (not in `changed`) that use one of `changed` at install or run
/// time: they are reconfigured when those come or go.
fn users_of<'a>(
    template: &'a Template,
    nodes: &'a [PlanNode],
    changed: &BTreeSet<String>,
) -> BTreeSet<&'a str> {
    let providers = template.providers();
    nodes
        .iter()
        .flat_map(|n| n.services.iter().map(String::as_str))
        .filter(|s| !changed.contains(*s))
        .filter(|s| {
            ["install", "runtime"].iter().any(|which| {
                template
                    .predecessors_in(&providers, s, which)
                    .iter()
                    .any(|p| changed.contains(*p))
            })
        })
        .collect()
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
        Op::Create
        | Op::Delete
        | Op::Expand
        | Op::Shrink
        | Op::Configure
        | Op::ReplaceNode
        | Op::AddServices
        | Op::RemoveServices
        | Op::Repair => {
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
        let dependents = dependents(template, &named);
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
    // and (restart, configure, repair) every stop before every start.
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
        ClusterOperation::RestartServices | ClusterOperation::Configure | ClusterOperation::Repair
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

mod dag;
mod undo;
use dag::*;
pub use undo::{Found, NodeCondition, repair, rollback};

#[cfg(test)]
mod properties;
#[cfg(test)]
mod snapshots;
#[cfg(test)]
mod tests;
