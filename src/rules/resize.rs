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
#[path = "resize_tests.rs"]
mod tests;
