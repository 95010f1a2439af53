//! Operations an admin asks for on a live run's cluster (`POST .../runs/{run}/cluster`):
//! expand, shrink, start, stop or restart the services, configure, replace nodes, add or
//! remove services (placed by [`crate::rules::placement`]), repair. Pure: the request and the
//! run in, the change the operation makes out (the nodes it plans over, the layout and config
//! the cluster has once it succeeds), or a 400 naming the field.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::model::invalid::Invalid;
use crate::model::operation::OpOutcome;
use crate::model::plan::{ClusterOperation, Selection};
use crate::model::run::{ProgramStatus, RunRecord};
use crate::model::template::NodeTypes;
use crate::rules::lifecycle::Transition;
use crate::rules::solver::{Budget, NodeLayout, Request, SolveError, solve, solve_within};

/// The body of `POST .../runs/{run}/cluster`.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterRequest {
    pub operation: ClusterOperation,
    /// `expand`: how many nodes to add; `shrink`: how many to remove (a number). Starting,
    /// stopping or restarting services: on which nodes (a list of names; all if left out);
    /// `replace-node`: which; `add-services`: where (placed by the template's rules if left
    /// out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Nodes>,
    /// Starting, stopping or restarting services: which ones (all if left out; the operation
    /// adds their dependent chains). Adding or removing services: which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::model::names::list_schema")]
    pub services: Vec<String>,
    /// `shrink`: which nodes to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    /// `configure`: the new config (an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
}

/// The `nodes` of a [`ClusterRequest`]: how many (expand, shrink) or which (the services
/// operations).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Nodes {
    Count(u32),
    Names(Vec<String>),
}

impl<'de> Deserialize<'de> for Nodes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Nodes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number of nodes (expand, shrink) or a list of node names")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Nodes, E> {
                u32::try_from(v)
                    .map(Nodes::Count)
                    .map_err(|_| E::custom(format!("{v} nodes is more than any cluster has")))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Nodes, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    // Bounded while it is read: no list longer than any cluster is kept.
                    if names.len() == crate::model::names::MAX_LIST {
                        return Err(serde::de::Error::custom(format!(
                            "lists at most {} nodes",
                            crate::model::names::MAX_LIST
                        )));
                    }
                    names.push(name);
                }
                Ok(Nodes::Names(names))
            }
        }
        d.deserialize_any(Visit)
    }
}

impl schemars::JsonSchema for Nodes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Nodes".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let list = crate::model::names::list_schema(generator);
        schemars::json_schema!({
            "oneOf": [
                {"type": "integer", "minimum": 0, "maximum": u32::MAX},
                list
            ]
        })
    }
}

/// What an operation on a live cluster changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub operation: ClusterOperation,
    /// The nodes the operation plans over (for an expand, the new ones included).
    pub nodes: Vec<String>,
    /// The nodes being added (expand) or removed (shrink).
    pub changed: BTreeSet<String>,
    /// The cluster's nodes once the operation succeeds.
    pub final_nodes: Vec<String>,
    /// Every planned node's services (a shrink's leaving nodes included) and types.
    pub layout: BTreeMap<String, BTreeSet<String>>,
    pub node_types: BTreeMap<String, NodeTypes>,
    pub config: serde_json::Value,
    /// The services, and nodes, a start, stop or restart of services acts on.
    pub selection: Selection,
    /// What set off an operation ebb started on its own (a heal): the check's finding.
    pub trigger: Option<serde_json::Value>,
}

impl Change {
    /// The change as the audit log keeps it, enough to resume the operation after a restart.
    pub fn to_request(&self) -> serde_json::Value {
        let mut request = serde_json::json!({
            "nodes": self.nodes,
            "changed": self.changed,
            "finalNodes": self.final_nodes,
            "layout": self.layout,
            "nodeTypes": self.node_types,
            "config": self.config,
            "selection": self.selection,
        });
        if let Some(trigger) = &self.trigger {
            request["trigger"] = trigger.clone();
        }
        request
    }

    /// The change an interrupted operation recorded.
    pub fn from_request(operation: ClusterOperation, request: &serde_json::Value) -> Option<Self> {
        let field = |name: &str| request.get(name).cloned().unwrap_or_default();
        Some(Self {
            operation,
            nodes: serde_json::from_value(field("nodes")).ok()?,
            changed: serde_json::from_value(field("changed")).ok()?,
            final_nodes: serde_json::from_value(field("finalNodes")).ok()?,
            layout: serde_json::from_value(field("layout")).ok()?,
            node_types: serde_json::from_value(field("nodeTypes")).ok()?,
            config: field("config"),
            // Left out by operations recorded before there were selections: all of them.
            selection: match request.get("selection") {
                None => Selection::default(),
                Some(v) => serde_json::from_value(v.clone()).ok()?,
            },
            trigger: request.get("trigger").cloned(),
        })
    }
}

fn invalid(field: &str, message: impl Into<String>) -> Invalid {
    Invalid::new(field, message)
}

/// The change `request` makes to `run`'s cluster, which may have at most `max_nodes` nodes
/// (the provisioner's limit for the run's properties).
pub fn change(
    run: &RunRecord,
    request: &ClusterRequest,
    max_nodes: u32,
) -> Result<Change, Invalid> {
    use ClusterOperation as Op;
    let op = request.operation;
    let unchanged = Change {
        operation: op,
        nodes: run.cluster.nodes.clone(),
        changed: BTreeSet::new(),
        final_nodes: run.cluster.nodes.clone(),
        layout: run.layout.clone(),
        node_types: run.node_types.clone(),
        config: run.config(),
        selection: Selection::default(),
        trigger: None,
    };
    let no = |field: &str, present: bool| -> Result<(), Invalid> {
        if present {
            return Err(invalid(field, format!("is not used by '{}'", op.name())));
        }
        Ok(())
    };
    let services_op = matches!(
        op,
        Op::StartServices
            | Op::StopServices
            | Op::RestartServices
            | Op::AddServices
            | Op::RemoveServices
    );
    let names_op = (services_op && op != Op::RemoveServices) || op == Op::ReplaceNode;
    let count = match &request.nodes {
        Some(Nodes::Count(n)) if op == Op::Expand || op == Op::Shrink => Some(*n),
        Some(Nodes::Names(_)) if names_op => None,
        Some(Nodes::Count(_)) if names_op => {
            return Err(invalid(
                "nodes",
                format!("'{}' takes a list of node names", op.name()),
            ));
        }
        Some(Nodes::Names(_)) if op == Op::Expand || op == Op::Shrink => {
            return Err(invalid(
                "nodes",
                format!(
                    "'{}' takes a number of nodes{}",
                    op.name(),
                    if op == Op::Shrink {
                        "; name the nodes that go with 'remove'"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Some(_) => {
            return Err(invalid("nodes", format!("is not used by '{}'", op.name())));
        }
        None => None,
    };
    if !services_op {
        no("services", !request.services.is_empty())?;
    }
    if op != Op::Shrink {
        no("remove", !request.remove.is_empty())?;
    }
    if op != Op::Configure {
        no("config", request.config.is_some())?;
    }
    match op {
        Op::Create | Op::Delete => Err(invalid(
            "operation",
            "a run's cluster is created when the run starts and deleted with POST .../deprovision",
        )),
        Op::StartServices | Op::StopServices | Op::RestartServices => Ok(Change {
            selection: selection(run, request)?,
            ..unchanged
        }),
        Op::Configure => match &request.config {
            Some(c @ serde_json::Value::Object(_)) => Ok(Change {
                config: c.clone(),
                ..unchanged
            }),
            Some(_) => Err(invalid("config", "must be an object")),
            None => Err(invalid("config", "is required for 'configure'")),
        },
        Op::ReplaceNode => replace(run, request, unchanged),
        Op::Repair => Ok(unchanged),
        Op::AddServices | Op::RemoveServices => services_change(run, request, unchanged),
        Op::Expand => expand(run, count, unchanged, max_nodes),
        Op::Shrink => shrink(run, count, &request.remove, unchanged),
    }
}

/// The services and nodes a start, stop or restart of services names: each one the cluster
/// has, listed once, and every named service on at least one named node.
fn selection(run: &RunRecord, request: &ClusterRequest) -> Result<Selection, Invalid> {
    let max = crate::model::names::MAX_LIST;
    let nodes: &[String] = match &request.nodes {
        Some(Nodes::Names(names)) => names,
        _ => &[],
    };
    if request.services.len() > max {
        return Err(invalid("services", format!("lists at most {max} services")));
    }
    let mut chosen = Selection::default();
    for (i, name) in nodes.iter().enumerate() {
        if !run.cluster.nodes.contains(name) {
            return Err(invalid(
                &format!("nodes[{i}]"),
                format!("'{name}' is not a node of this cluster"),
            ));
        }
        if !chosen.nodes.insert(name.clone()) {
            return Err(invalid(
                &format!("nodes[{i}]"),
                format!("'{name}' is listed twice"),
            ));
        }
    }
    let on_nodes = |service: &str| {
        run.cluster
            .nodes
            .iter()
            .filter(|n| chosen.nodes.is_empty() || chosen.nodes.contains(*n))
            .any(|n| run.layout.get(n).is_some_and(|s| s.contains(service)))
    };
    for (i, name) in request.services.iter().enumerate() {
        let field = format!("services[{i}]");
        if !run.layout.values().any(|s| s.contains(name)) {
            return Err(invalid(
                &field,
                format!("'{name}' is not a service of this cluster"),
            ));
        }
        if !on_nodes(name) {
            return Err(invalid(
                &field,
                format!("'{name}' runs on none of the nodes named"),
            ));
        }
        if chosen.services.contains(name) {
            return Err(invalid(&field, format!("'{name}' is listed twice")));
        }
        chosen.services.insert(name.clone());
    }
    Ok(chosen)
}

/// An admin's add or remove of services: each named once; an add placed by the template's
/// rules (or on the nodes named), a remove from every node; the cluster that results must
/// be a valid layout of its template.
fn services_change(
    run: &RunRecord,
    request: &ClusterRequest,
    base: Change,
) -> Result<Change, Invalid> {
    let op = base.operation;
    let Some(template) = &run.template else {
        return Err(invalid(
            "operation",
            format!(
                "'{}' needs a cluster made from a template; this one has no services",
                op.name()
            ),
        ));
    };
    let max = crate::model::names::MAX_LIST;
    if request.services.len() > max {
        return Err(invalid("services", format!("lists at most {max} services")));
    }
    if request.services.is_empty() {
        return Err(invalid(
            "services",
            format!(
                "is required for '{}': the services to {}",
                op.name(),
                if op == ClusterOperation::AddServices {
                    "add"
                } else {
                    "remove"
                }
            ),
        ));
    }
    let mut named = BTreeSet::new();
    for (i, s) in request.services.iter().enumerate() {
        if !named.insert(s.clone()) {
            return Err(invalid(
                &format!("services[{i}]"),
                format!("'{s}' is listed twice"),
            ));
        }
    }
    let names = &run.cluster.nodes;
    let on = match &request.nodes {
        Some(Nodes::Names(list)) => {
            let mut on = BTreeSet::new();
            for (i, name) in list.iter().enumerate() {
                let Some(at) = names.iter().position(|n| n == name) else {
                    return Err(invalid(
                        &format!("nodes[{i}]"),
                        format!("'{name}' is not a node of this cluster"),
                    ));
                };
                if !on.insert(at) {
                    return Err(invalid(
                        &format!("nodes[{i}]"),
                        format!("'{name}' is listed twice"),
                    ));
                }
            }
            Some(on)
        }
        Some(Nodes::Count(_)) | None => None,
    };
    let current = fixed(run, names);
    let placed = if op == ClusterOperation::AddServices {
        crate::rules::placement::add(template, &current, &named, on.as_ref(), names)
    } else {
        crate::rules::placement::remove(template, &current, &named, names)
    }
    .map_err(|e| invalid("services", e.to_string()))?;
    let mut change = Change {
        selection: Selection {
            services: named,
            nodes: BTreeSet::new(),
        },
        ..base
    };
    // An add plans over the layout with the new services; a remove over the one it has
    // (its stops are planned from it), and the run drops them once it succeeds.
    if op == ClusterOperation::AddServices {
        for (name, layout) in names.iter().zip(placed) {
            change.layout.insert(name.clone(), layout.services);
        }
    }
    Ok(change)
}

/// An admin's replace of the nodes named: each a node of the cluster, listed once; not the
/// program's node while the program runs on it.
fn replace(run: &RunRecord, request: &ClusterRequest, base: Change) -> Result<Change, Invalid> {
    let Some(Nodes::Names(names)) = &request.nodes else {
        return Err(invalid(
            "nodes",
            "is required for 'replace-node': the names of the nodes to replace",
        ));
    };
    if names.is_empty() {
        return Err(invalid("nodes", "names no node to replace"));
    }
    let mut changed = BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        if !run.cluster.nodes.contains(name) {
            return Err(invalid(
                &format!("nodes[{i}]"),
                format!("'{name}' is not a node of this cluster"),
            ));
        }
        if run.cluster.nodes.first() == Some(name) && run.status == ProgramStatus::Running {
            return Err(invalid(
                &format!("nodes[{i}]"),
                format!("'{name}' runs the program, which is running"),
            ));
        }
        if !changed.insert(name.clone()) {
            return Err(invalid(
                &format!("nodes[{i}]"),
                format!("'{name}' is listed twice"),
            ));
        }
    }
    Ok(Change { changed, ..base })
}

/// A heal: make `node` anew (its resource is gone), set off by `trigger`.
pub fn heal_replace(run: &RunRecord, node: &str, trigger: serde_json::Value) -> Change {
    Change {
        operation: ClusterOperation::ReplaceNode,
        changed: [node.to_string()].into(),
        selection: Selection::default(),
        ..heal_restart(run, node, "", trigger)
    }
}

/// A heal: restart `service` on `node` with its dependent chain, set off by `trigger`.
pub fn heal_restart(
    run: &RunRecord,
    node: &str,
    service: &str,
    trigger: serde_json::Value,
) -> Change {
    Change {
        operation: ClusterOperation::RestartServices,
        nodes: run.cluster.nodes.clone(),
        changed: BTreeSet::new(),
        final_nodes: run.cluster.nodes.clone(),
        layout: run.layout.clone(),
        node_types: run.node_types.clone(),
        config: run.config(),
        selection: Selection {
            services: [service.to_string()].into(),
            nodes: [node.to_string()].into(),
        },
        trigger: Some(trigger),
    }
}

/// The layout of the nodes there are, as the solver takes them.
fn fixed(run: &RunRecord, nodes: &[String]) -> Vec<NodeLayout> {
    let defaults = run.template.as_ref().map(|t| &t.defaults);
    nodes
        .iter()
        .map(|n| {
            let types = run.node_types.get(n);
            NodeLayout {
                hardware_type: types.map(|t| t.hardware_type.clone()).unwrap_or_else(|| {
                    defaults
                        .and_then(|d| d.hardware_type.clone())
                        .unwrap_or_default()
                }),
                image_type: types.map(|t| t.image_type.clone()).unwrap_or_else(|| {
                    defaults
                        .and_then(|d| d.image_type.clone())
                        .unwrap_or_default()
                }),
                services: run.layout.get(n).cloned().unwrap_or_default(),
            }
        })
        .collect()
}

fn expand(
    run: &RunRecord,
    count: Option<u32>,
    base: Change,
    max_nodes: u32,
) -> Result<Change, Invalid> {
    let add = match count {
        Some(n) if n >= 1 => n,
        Some(_) => return Err(invalid("nodes", "must be at least 1")),
        None => {
            return Err(invalid(
                "nodes",
                "is required for 'expand': how many nodes to add",
            ));
        }
    };
    // Checked before anything is sized by it: the provisioner's limit bounds the cost.
    let have = run.cluster.nodes.len() as u64;
    if have + u64::from(add) > u64::from(max_nodes) {
        return Err(invalid(
            "nodes",
            format!(
                "the cluster has {have} node(s) and provisioner '{}' allows at most {max_nodes}: {add} more would pass it",
                run.provisioner
            ),
        ));
    }
    // New workers are numbered after the highest one there is.
    let highest = run
        .cluster
        .nodes
        .iter()
        .filter_map(|n| n.strip_prefix("worker-")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let fresh: Vec<String> = (1..=u64::from(add))
        .map(|i| format!("worker-{}", highest.saturating_add(i)))
        .collect();
    let mut change = base;
    change.nodes.extend(fresh.iter().cloned());
    change.final_nodes = change.nodes.clone();
    change.changed = fresh.iter().cloned().collect();
    if let Some(template) = &run.template {
        let solved = solve(
            template,
            &Request {
                provisioner: run.provisioner.clone(),
                nodes: change.nodes.len() as u32,
                fixed: fixed(run, &run.cluster.nodes),
                ..Default::default()
            },
        )
        .map_err(|e| invalid("nodes", e.to_string()))?;
        for (name, layout) in fresh
            .iter()
            .zip(solved.into_iter().skip(run.cluster.nodes.len()))
        {
            change.node_types.insert(
                name.clone(),
                NodeTypes {
                    hardware_type: layout.hardware_type,
                    image_type: layout.image_type,
                },
            );
            change.layout.insert(name.clone(), layout.services);
        }
    }
    Ok(change)
}

/// Whether the cluster without `leaving` is still a valid layout of the template.
fn valid_without(run: &RunRecord, leaving: &[String]) -> Result<(), String> {
    valid_without_within(run, leaving, &mut Budget::new()).map_err(|e| e.to_string())
}

/// [`valid_without`], spending from `budget`.
fn valid_without_within(
    run: &RunRecord,
    leaving: &[String],
    budget: &mut Budget,
) -> Result<(), SolveError> {
    let Some(template) = &run.template else {
        return Ok(());
    };
    let staying: Vec<String> = run
        .cluster
        .nodes
        .iter()
        .filter(|n| !leaving.contains(n))
        .cloned()
        .collect();
    solve_within(
        template,
        &Request {
            provisioner: run.provisioner.clone(),
            nodes: staying.len() as u32,
            fixed: fixed(run, &staying),
            ..Default::default()
        },
        budget,
    )
    .map(|_| ())
}

/// Most sets of nodes tried when choosing which ones a shrink removes.
const MAX_TRIES: usize = 10_000;

/// `count` nodes whose removal leaves a valid cluster, the most recently added preferred (the
/// first node, which runs the program, never).
fn removable(run: &RunRecord, count: usize) -> Result<Vec<String>, Invalid> {
    let candidates: Vec<&String> = run.cluster.nodes.iter().skip(1).rev().collect();
    let mut pick: Vec<usize> = (0..count).collect();
    let mut last = String::new();
    // One budget for every try: a shrink costs at most one solve's work, however many sets of
    // nodes it weighs.
    let mut budget = Budget::new();
    for _ in 0..MAX_TRIES {
        let leaving: Vec<String> = pick.iter().map(|i| candidates[*i].clone()).collect();
        match valid_without_within(run, &leaving, &mut budget) {
            Ok(()) => return Ok(leaving),
            Err(e) => last = e.to_string(),
        }
        if budget.is_spent() {
            break;
        }
        // The next combination in lexicographic order.
        let Some(i) = (0..count)
            .rev()
            .find(|&i| pick[i] < candidates.len() - count + i)
        else {
            break;
        };
        pick[i] += 1;
        for j in i + 1..count {
            pick[j] = pick[j - 1] + 1;
        }
    }
    Err(invalid(
        "nodes",
        format!("no {count} node(s) can go and leave a valid cluster: {last}"),
    ))
}

fn shrink(
    run: &RunRecord,
    count: Option<u32>,
    remove: &[String],
    base: Change,
) -> Result<Change, Invalid> {
    let nodes = &run.cluster.nodes;
    let leaving: Vec<String> = match (count, remove.is_empty()) {
        (Some(_), false) => {
            return Err(invalid(
                "remove",
                "give either 'nodes' (how many) or 'remove' (which), not both",
            ));
        }
        (Some(0), true) => return Err(invalid("nodes", "must be at least 1")),
        (Some(n), true) => {
            if n as usize >= nodes.len() {
                return Err(invalid(
                    "nodes",
                    format!(
                        "the cluster has {} nodes; at least one must stay",
                        nodes.len()
                    ),
                ));
            }
            removable(run, n as usize)?
        }
        (None, false) => {
            let mut seen = BTreeSet::new();
            for (i, name) in remove.iter().enumerate() {
                if !nodes.contains(name) {
                    return Err(invalid(
                        &format!("remove[{i}]"),
                        format!("'{name}' is not a node of this cluster"),
                    ));
                }
                if !seen.insert(name) {
                    return Err(invalid(
                        &format!("remove[{i}]"),
                        format!("'{name}' is listed twice"),
                    ));
                }
            }
            remove.to_vec()
        }
        (None, true) => {
            return Err(invalid(
                "nodes",
                "is required for 'shrink': how many nodes to remove (or 'remove': which)",
            ));
        }
    };
    if let Some(first) = nodes.first()
        && leaving.contains(first)
    {
        return Err(invalid(
            "remove",
            format!("'{first}' runs the program and cannot be removed"),
        ));
    }
    // What stays must still be a valid layout of the template.
    valid_without(run, &leaving).map_err(|e| {
        let field = if remove.is_empty() { "nodes" } else { "remove" };
        invalid(
            field,
            format!("the nodes left would not be a valid cluster: {e}"),
        )
    })?;
    let staying: Vec<String> = nodes
        .iter()
        .filter(|n| !leaving.contains(n))
        .cloned()
        .collect();
    // The layout keeps the leaving nodes' services until they are gone: their stops are planned
    // from it.
    let mut change = base;
    change.changed = leaving.iter().cloned().collect();
    change.final_nodes = staying;
    Ok(change)
}

/// The run once an admin's operation ended at `now` (epoch seconds): on success it takes the
/// cluster's new shape (its nodes, their services and types, and a configure's config; a
/// repair clears the need for attention); when the operation and its rollback failed, the
/// cluster needs attention; either way its history says how the operation ended.
pub fn finished(run: &RunRecord, change: Change, outcome: &OpOutcome, now: u64) -> Transition {
    let name = change.operation.name();
    let mut run = run.clone();
    let note = match outcome {
        OpOutcome::Done => {
            let kept = |n: &String| change.final_nodes.contains(n);
            run.layout = change.layout.into_iter().filter(|(n, _)| kept(n)).collect();
            run.node_types = change
                .node_types
                .into_iter()
                .filter(|(n, _)| kept(n))
                .collect();
            run.cluster.nodes = change.final_nodes;
            if change.operation == ClusterOperation::Configure {
                run.config = Some(change.config);
            }
            if change.operation == ClusterOperation::Repair {
                run.cluster.attention = None;
            }
            if change.operation == ClusterOperation::RemoveServices {
                for services in run.layout.values_mut() {
                    services.retain(|s| !change.selection.services.contains(s));
                }
            }
            format!("cluster {name} done: {} node(s)", run.cluster.nodes.len())
        }
        OpOutcome::Failed(e) => format!("cluster {name} failed: {e}"),
        OpOutcome::RollbackFailed(e) => {
            run.cluster.attention = Some(crate::model::run::Attention {
                reason: format!("{name} failed and so did its rollback: {e}"),
                since: now,
            });
            format!(
                "cluster {name} failed and was not undone: {e}; the cluster needs attention, and only a repair may run on it"
            )
        }
        OpOutcome::Cancelled => format!("cluster {name} cancelled"),
    };
    Transition {
        run,
        effects: Vec::new(),
        notes: vec![note],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run() -> RunRecord {
        let template = crate::model::builtin::templates()
            .expect("built-ins")
            .into_iter()
            .find(|(id, _)| id.name == "zookeeper-cluster")
            .expect("zookeeper-cluster")
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
        let body = json!({"operation": "restart-services", "services": ["zookeeper"], "nodes": ["worker-1"]});
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
        let c =
            change(&r, &request(json!({"operation": "expand", "nodes": 2})), 64).expect("change");
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
        let e =
            change(&r, &request(json!({"operation": "shrink", "nodes": 1})), 64).expect_err("even");
        assert!(e.to_string().contains("odd"), "{e}");
        let c =
            change(&r, &request(json!({"operation": "shrink", "nodes": 2})), 64).expect("change");
        let leaving: Vec<String> = c.changed.iter().cloned().collect();
        assert_eq!(leaving.len(), 2);
        assert_eq!(c.final_nodes.len(), 2);
        assert!(valid_without(&r, &leaving).is_ok());
        for gone in &leaving {
            assert!(!r.layout[gone].contains("master"), "the only master stays");
        }
        let e = change(&r, &request(json!({"operation": "shrink", "nodes": 4})), 64)
            .expect_err("too many");
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
}
