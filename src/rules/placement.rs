//! Services added to, or removed from, a live cluster: which nodes take a new service, and
//! whether the cluster that results is a valid layout of its template. Pure.
//!
//! A live cluster's nodes keep their hardware, image and services; only the services added
//! or removed change. A new service goes:
//! - on the nodes named, if the request names some (each must be able to run it);
//! - else, with a `mustCoexist` partner in the cluster, exactly where that partner is;
//! - else, without a quantity or ratio constraint, on every node that may run it (as the
//!   solver puts an unconstrained service on every node of a new cluster);
//! - else on as few nodes as its constraints need (odd if it must be), the nodes running the
//!   fewest services first.
//!
//! Then the whole layout is checked against the template: every service's dependencies and
//! conflicts, its hardware and image types, its quantity, ratio and odd-count bounds, and the
//! coexist groups. An error says which rule fails, so the admin can name nodes instead.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::template::Template;
use crate::rules::solver::{NodeLayout, SolveError, bounds, check_services};

fn fail<T>(message: impl Into<String>) -> Result<T, SolveError> {
    Err(SolveError(message.into()))
}

/// Every service of the cluster laid out as `nodes`.
fn services_of(nodes: &[NodeLayout]) -> BTreeSet<String> {
    nodes
        .iter()
        .flat_map(|n| n.services.iter().cloned())
        .collect()
}

/// Whether `service` may run on `node` as far as the node itself goes: its hardware and image
/// types, and no `cantCoexist` partner on it.
fn may_run(template: &Template, service: &str, node: &NodeLayout) -> Result<(), String> {
    if let Some(c) = template.constraints.services.get(service) {
        if !c.hardware_types.is_empty() && !c.hardware_types.contains(&node.hardware_type) {
            return Err(format!(
                "'{service}' does not run on hardware type '{}'",
                node.hardware_type
            ));
        }
        if !c.image_types.is_empty() && !c.image_types.contains(&node.image_type) {
            return Err(format!(
                "'{service}' does not run on image type '{}'",
                node.image_type
            ));
        }
    }
    for group in &template.constraints.layout.cant_coexist {
        if !group.iter().any(|g| g == service) {
            continue;
        }
        if let Some(other) = group
            .iter()
            .find(|g| *g != service && node.services.contains(*g))
        {
            return Err(format!("'{service}' can't coexist with '{other}'"));
        }
    }
    Ok(())
}

/// The layout of a cluster laid out as `current` once `add` are added, on the nodes at the
/// indexes `on` if given (else placed as the module says).
pub fn add(
    template: &Template,
    current: &[NodeLayout],
    add: &BTreeSet<String>,
    on: Option<&BTreeSet<usize>>,
    names: &[String],
) -> Result<Vec<NodeLayout>, SolveError> {
    let had = services_of(current);
    if let Some(s) = add.iter().find(|s| had.contains(*s)) {
        return fail(format!("'{s}' is in the cluster already"));
    }
    let all: BTreeSet<String> = had.union(add).cloned().collect();
    check_services(template, &all)?;
    let n = current.len() as u32;
    let limits = bounds(template, &all, n);
    let mut out = current.to_vec();
    for service in add {
        let partner = template
            .constraints
            .layout
            .must_coexist
            .iter()
            .filter(|g| g.iter().any(|s| s == service))
            .flat_map(|g| g.iter())
            .find(|s| *s != service && had.contains(*s));
        let chosen: Vec<usize> = match (on, partner) {
            (Some(on), _) => {
                for &i in on {
                    if let Err(why) = may_run(template, service, &out[i]) {
                        return fail(format!("node '{}': {why}", names[i]));
                    }
                }
                on.iter().copied().collect()
            }
            (None, Some(partner)) => (0..out.len())
                .filter(|i| out[*i].services.contains(partner))
                .collect(),
            (None, None) => {
                let mut eligible: Vec<usize> = (0..out.len())
                    .filter(|i| may_run(template, service, &out[*i]).is_ok())
                    .collect();
                // Types alone do not bound how many nodes run it.
                let bounded = limits
                    .get(service)
                    .filter(|b| b.min > 0 || b.max != u32::MAX || b.odd);
                match bounded {
                    None => eligible,
                    Some(b) => {
                        let mut want = b.min.max(1);
                        if b.odd && want % 2 == 0 {
                            want += 1;
                        }
                        let want = want.min(b.max) as usize;
                        if eligible.len() < want {
                            return fail(format!(
                                "'{service}' needs {want} node(s) it may run on; the cluster has {}",
                                eligible.len()
                            ));
                        }
                        // The least busy nodes first, then in the cluster's order.
                        eligible.sort_by_key(|i| (out[*i].services.len(), *i));
                        eligible.truncate(want);
                        eligible.sort_unstable();
                        eligible
                    }
                }
            }
        };
        for i in chosen {
            out[i].services.insert(service.clone());
        }
    }
    check(template, &out, names)?;
    Ok(out)
}

/// The layout of a cluster laid out as `current` once `remove` are removed from every node.
pub fn remove(
    template: &Template,
    current: &[NodeLayout],
    remove: &BTreeSet<String>,
    names: &[String],
) -> Result<Vec<NodeLayout>, SolveError> {
    let had = services_of(current);
    if let Some(s) = remove.iter().find(|s| !had.contains(*s)) {
        return fail(format!("'{s}' is not a service of this cluster"));
    }
    let left: BTreeSet<String> = had.difference(remove).cloned().collect();
    if left.is_empty() {
        return fail("the cluster would have no services left");
    }
    check_services(template, &left)?;
    let out: Vec<NodeLayout> = current
        .iter()
        .map(|n| NodeLayout {
            services: n.services.difference(remove).cloned().collect(),
            ..n.clone()
        })
        .collect();
    check(template, &out, names)?;
    Ok(out)
}

/// Whether the cluster laid out as `nodes` (named `names`) meets its template's placement
/// rules: each service's types and bounds, and the coexist groups.
pub fn check(
    template: &Template,
    nodes: &[NodeLayout],
    names: &[String],
) -> Result<(), SolveError> {
    let all = services_of(nodes);
    let n = nodes.len() as u32;
    let mut count: BTreeMap<&str, u32> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for s in &node.services {
            *count.entry(s.as_str()).or_default() += 1;
            if let Err(why) = may_run(template, s, node) {
                return fail(format!("node '{}': {why}", names[i]));
            }
        }
        for group in &template.constraints.layout.must_coexist {
            let in_cluster: Vec<&String> = group.iter().filter(|s| all.contains(*s)).collect();
            let here = in_cluster
                .iter()
                .filter(|s| node.services.contains(**s))
                .count();
            if here > 0 && here < in_cluster.len() {
                return fail(format!(
                    "node '{}': the services {in_cluster:?} must coexist",
                    names[i]
                ));
            }
        }
    }
    for (service, b) in bounds(template, &all, n) {
        let c = count.get(service.as_str()).copied().unwrap_or(0);
        if c < b.min || c > b.max || (b.odd && c % 2 == 0) {
            let max = if b.max == u32::MAX {
                "any".to_string()
            } else {
                b.max.to_string()
            };
            return fail(format!(
                "'{service}' would run on {c} node(s); the template allows {}..{max}{}",
                b.min,
                if b.odd { ", an odd number" } else { "" }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template() -> Template {
        let t: Template = serde_json::from_value(json!({
            "services": {
                "base": {},
                "zk": {},
                "master": {"dependencies": {"runtime": {"requires": ["zk"]}}},
                "ui": {"dependencies": {"runtime": {"requires": ["master"]}}},
                "agent": {},
                "gpu": {}
            },
            "hardwareTypes": {"small": {"local": {}}, "big": {"local": {}}},
            "imageTypes": {"any": {"local": {}}},
            "constraints": {
                "services": {
                    "zk": {"quantities": {"min": 1, "max": 5}, "odd": true},
                    "master": {"quantities": {"min": 1, "max": 1}},
                    "ui": {"quantities": {"min": 1, "max": 1}},
                    "gpu": {"hardwareTypes": ["big"]}
                },
                "layout": {"mustCoexist": [["ui", "master"]], "cantCoexist": [["master", "gpu"]]}
            }
        }))
        .expect("template");
        t.validate().expect("valid");
        t
    }

    fn node(hw: &str, services: &[&str]) -> NodeLayout {
        NodeLayout {
            hardware_type: hw.into(),
            image_type: "any".into(),
            services: services.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn cluster() -> (Vec<NodeLayout>, Vec<String>) {
        (
            vec![
                node("small", &["base", "master", "zk"]),
                node("big", &["base", "zk"]),
                node("big", &["base", "zk"]),
            ],
            ["master", "worker-1", "worker-2"]
                .map(String::from)
                .to_vec(),
        )
    }

    fn set(s: &[&str]) -> BTreeSet<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn new_services_go_where_their_rules_say() {
        let t = template();
        let (nodes, names) = cluster();
        // Unconstrained: every node. A mustCoexist partner: where the partner is.
        let got = add(&t, &nodes, &set(&["agent", "ui"]), None, &names).expect("placed");
        assert!(got.iter().all(|n| n.services.contains("agent")));
        let ui: Vec<bool> = got.iter().map(|n| n.services.contains("ui")).collect();
        assert_eq!(ui, [true, false, false]);
        // Typed: only where the hardware allows, and not beside what it can't coexist with.
        let got = add(&t, &nodes, &set(&["gpu"]), None, &names).expect("placed");
        let gpu: Vec<bool> = got.iter().map(|n| n.services.contains("gpu")).collect();
        assert_eq!(gpu, [false, true, true]);
        // Named nodes: those, each checked.
        let on: BTreeSet<usize> = [1].into();
        let got = add(&t, &nodes, &set(&["agent"]), Some(&on), &names).expect("placed");
        let agent: Vec<bool> = got.iter().map(|n| n.services.contains("agent")).collect();
        assert_eq!(agent, [false, true, false]);
        let on: BTreeSet<usize> = [0].into();
        let e = add(&t, &nodes, &set(&["gpu"]), Some(&on), &names).expect_err("typed");
        assert!(
            e.0.contains("node 'master': 'gpu' does not run on hardware type 'small'"),
            "{e}"
        );
    }

    #[test]
    fn what_breaks_a_rule_is_refused_saying_which() {
        let t = template();
        let (nodes, names) = cluster();
        let e = add(&t, &nodes, &set(&["zk"]), None, &names).expect_err("there");
        assert!(e.0.contains("'zk' is in the cluster already"), "{e}");
        let e = add(&t, &nodes, &set(&["nope"]), None, &names).expect_err("unknown");
        assert!(e.0.contains("nope"), "{e}");
        // ui named onto nodes without its mustCoexist partner.
        let on: BTreeSet<usize> = [1, 2].into();
        let e = add(&t, &nodes, &set(&["ui"]), Some(&on), &names).expect_err("coexist");
        assert!(e.0.contains("must coexist"), "{e}");
        // What stays needs it.
        let e = remove(&t, &nodes, &set(&["zk"]), &names).expect_err("required");
        assert!(e.0.contains("'master' requires 'zk'"), "{e}");
        let e = remove(&t, &nodes, &set(&["ui"]), &names).expect_err("absent");
        assert!(e.0.contains("'ui' is not a service of this cluster"), "{e}");
    }

    #[test]
    fn a_removed_service_leaves_every_node() {
        let t = template();
        let (nodes, names) = cluster();
        let grown = add(&t, &nodes, &set(&["agent"]), None, &names).expect("placed");
        let got = remove(&t, &grown, &set(&["agent"]), &names).expect("removed");
        assert_eq!(got, nodes);
        let e = remove(&t, &nodes, &set(&["base", "zk", "master"]), &names).expect_err("empty");
        assert!(e.0.contains("no services left"), "{e}");
    }
}
