//! The layout solver: which hardware type, image type and services each node of a cluster gets.
//!
//! A pure, deterministic function of a template and a request, in Coopr's three stages:
//! 1. **Service sets.** Services with no constraint (no quantity, ratio, type or coexist
//!    rule) join every set; every subset of the constrained ones that respects the
//!    must/can't-coexist groups is a candidate node service set.
//! 2. **Node layouts.** For each service set, the most preferred (hardware, image) pair that
//!    every service in it allows. Layouts are ordered by [`compare`]: more services first, then
//!    the preferred hardware and image types, then names.
//! 3. **Counts.** How many nodes of each layout, searched most-preferred-first (fill the
//!    first layouts as far as their caps allow, then move nodes right), pruned by every
//!    service's bounds, until every quantity, ratio and odd-count rule holds.
//!
//! Existing nodes (when an operation grows a cluster) are fixed: they count toward every
//! bound and are returned unchanged, first. Same inputs, same layout.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::model::template::Template;

/// One node's layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeLayout {
    pub hardware_type: String,
    pub image_type: String,
    pub services: BTreeSet<String>,
}

/// What to solve for.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The provisioner the nodes are for; only types with settings for it are used.
    pub provisioner: String,
    /// How many nodes the cluster has in all (fixed ones included).
    pub nodes: u32,
    /// The cluster's services; the template's defaults when `None`.
    pub services: Option<Vec<String>>,
    /// Every node gets this hardware type (else any allowed, the template's default first).
    pub hardware_type: Option<String>,
    /// Every node gets this image type (else any allowed, the template's default first).
    pub image_type: Option<String>,
    /// Nodes that exist already and must not change.
    pub fixed: Vec<NodeLayout>,
}

/// Why no layout exists; the message names the constraint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SolveError(pub String);

fn fail<T>(message: impl Into<String>) -> Result<T, SolveError> {
    Err(SolveError(message.into()))
}

/// Most units of work one solve may take: candidate service sets, (hardware, image) pairs
/// weighed, and steps of the count search. A template that needs more gets a clear error
/// instead of holding a thread.
pub const MAX_STEPS: u64 = 1_000_000;

/// The work a solve (or a series of solves, such as a shrink trying which nodes can go) may
/// still do.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    left: u64,
}

impl Budget {
    /// The budget of one solve: [`MAX_STEPS`].
    pub fn new() -> Self {
        Budget { left: MAX_STEPS }
    }

    /// Whether nothing is left.
    pub fn is_spent(&self) -> bool {
        self.left == 0
    }

    fn spend(&mut self, steps: u64) -> Result<(), SolveError> {
        match self.left.checked_sub(steps) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.left = 0;
                fail(format!(
                    "no layout found within {MAX_STEPS} steps: the template's constraints leave too many combinations to search (constrain fewer services, or fewer of them per coexist group)"
                ))
            }
        }
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self::new()
    }
}

/// Bounds on how many nodes run a service.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub min: u32,
    pub max: u32,
    pub odd: bool,
}

/// Orders node layouts, most preferred first: more services, then the hardware and image
/// types' preference (their index in `hw_pref`/`img_pref`), then names.
pub fn compare(
    a: &NodeLayout,
    b: &NodeLayout,
    hw_pref: &[String],
    img_pref: &[String],
) -> Ordering {
    let index = |list: &[String], v: &str| list.iter().position(|x| x == v).unwrap_or(usize::MAX);
    b.services
        .len()
        .cmp(&a.services.len())
        .then_with(|| index(hw_pref, &a.hardware_type).cmp(&index(hw_pref, &b.hardware_type)))
        .then_with(|| index(img_pref, &a.image_type).cmp(&index(img_pref, &b.image_type)))
        .then_with(|| a.hardware_type.cmp(&b.hardware_type))
        .then_with(|| a.image_type.cmp(&b.image_type))
        .then_with(|| a.services.iter().cmp(b.services.iter()))
}

/// The allowed types of one kind, preferred first: the requested one only, else the
/// template's default first and the rest by name.
fn allowed_types(
    kind: &str,
    defined: &crate::model::template::TypeMap,
    compatible: &[String],
    requested: Option<&String>,
    default: Option<&String>,
    provisioner: &str,
) -> Result<Vec<String>, SolveError> {
    let usable = |t: &String| {
        defined
            .get(t)
            .is_some_and(|per| per.contains_key(provisioner))
            && (compatible.is_empty() || compatible.contains(t))
    };
    if let Some(t) = requested {
        if !usable(t) {
            return fail(format!(
                "{kind} '{t}' is not allowed by the template for provisioner '{provisioner}'"
            ));
        }
        return Ok(vec![t.clone()]);
    }
    let mut all: Vec<String> = defined.keys().filter(|t| usable(t)).cloned().collect();
    if all.is_empty() {
        return fail(format!(
            "no {kind} of the template has settings for provisioner '{provisioner}'"
        ));
    }
    if let Some(d) = default
        && let Some(i) = all.iter().position(|t| t == d)
    {
        let d = all.remove(i);
        all.insert(0, d);
    }
    Ok(all)
}

/// Solves `request` against `template`: one layout per node, fixed nodes first, then the
/// layouts with a service allowed on one node only, then those fewest nodes share (stably, so
/// the order is still deterministic).
pub fn solve(template: &Template, request: &Request) -> Result<Vec<NodeLayout>, SolveError> {
    solve_within(template, request, &mut Budget::new())
}

/// [`solve`], spending from `budget`.
pub fn solve_within(
    template: &Template,
    request: &Request,
    budget: &mut Budget,
) -> Result<Vec<NodeLayout>, SolveError> {
    let n = request.nodes;
    if n > ebb_spi::MAX_NODES {
        return fail(format!(
            "a cluster has at most {} nodes, not {n}",
            ebb_spi::MAX_NODES
        ));
    }
    if let Some(size) = template.constraints.size
        && (n < size.min || n > size.max)
    {
        return fail(format!(
            "constraints.size: the template allows {} to {} nodes, not {n}",
            size.min, size.max
        ));
    }
    let fixed = request.fixed.len() as u32;
    if fixed > n {
        return fail(format!(
            "the cluster already has {fixed} nodes, more than the {n} asked for"
        ));
    }
    let services: BTreeSet<String> = request
        .services
        .clone()
        .unwrap_or_else(|| template.defaults.services.clone())
        .into_iter()
        .collect();
    check_services(template, &services)?;
    let hw = allowed_types(
        "hardware type",
        &template.hardware_types,
        &template.compatibility.hardware_types,
        request.hardware_type.as_ref(),
        template.defaults.hardware_type.as_ref(),
        &request.provisioner,
    )?;
    let img = allowed_types(
        "image type",
        &template.image_types,
        &template.compatibility.image_types,
        request.image_type.as_ref(),
        template.defaults.image_type.as_ref(),
        &request.provisioner,
    )?;

    let layouts = node_layouts(template, &services, &hw, &img, budget)?;
    let bounds = bounds(template, &services, n);
    let counts = find_counts(&layouts, &bounds, &request.fixed, n - fixed, budget)?.ok_or_else(|| {
        let described: Vec<String> = bounds
            .iter()
            .map(|(s, b)| {
                let max = if b.max == u32::MAX { "any".to_string() } else { b.max.to_string() };
                format!("{s} on {}..{max} node(s){}", b.min, if b.odd { ", odd" } else { "" })
            })
            .collect();
        SolveError(format!(
            "no layout of {n} node(s) meets the template's constraints ({}; layout rules: mustCoexist {:?}, cantCoexist {:?})",
            described.join("; "),
            template.constraints.layout.must_coexist,
            template.constraints.layout.cant_coexist
        ))
    })?;
    // Layouts holding a service allowed on one node only first, then the rarest (a lone master
    // before its workers): the first node is the one the program runs on, and names such as
    // `master` then fit what runs there.
    let singleton = |l: &NodeLayout| {
        l.services
            .iter()
            .any(|s| bounds.get(s.as_str()).is_some_and(|b| b.max == 1))
    };
    let mut used: Vec<(&NodeLayout, u32)> =
        layouts.iter().zip(counts).filter(|(_, c)| *c > 0).collect();
    used.sort_by_key(|(l, c)| (!singleton(l), *c));
    let mut out = request.fixed.clone();
    for (layout, count) in used {
        out.extend(std::iter::repeat_n(layout.clone(), count as usize));
    }
    Ok(out)
}

/// The cluster's services must be allowed, have what they require, and not conflict.
pub fn check_services(template: &Template, services: &BTreeSet<String>) -> Result<(), SolveError> {
    if services.is_empty() {
        return fail(
            "the cluster has no services (give some, or set the template's defaults.services)",
        );
    }
    let compatible = &template.compatibility.services;
    for s in services {
        let Some(service) = template.services.get(s) else {
            return fail(format!("service '{s}' is not in the template"));
        };
        if !compatible.is_empty() && !compatible.contains(s) {
            return fail(format!(
                "service '{s}' is not in the template's compatibility.services"
            ));
        }
        let deps = &service.dependencies;
        for req in deps.install.requires.iter().chain(&deps.runtime.requires) {
            let met = services.iter().any(|other| {
                other == req
                    || template
                        .services
                        .get(other)
                        .is_some_and(|o| o.dependencies.provides.contains(req))
            });
            if !met {
                return fail(format!(
                    "service '{s}' requires '{req}', which is not in the cluster"
                ));
            }
        }
        if let Some(c) = deps.conflicts.iter().find(|c| services.contains(*c)) {
            return fail(format!(
                "service '{s}' conflicts with '{c}', which is in the cluster"
            ));
        }
    }
    Ok(())
}

/// Every valid node service set: unconstrained services join each; constrained subsets must
/// respect the coexist groups.
fn service_sets(
    template: &Template,
    services: &BTreeSet<String>,
    budget: &mut Budget,
) -> Result<Vec<BTreeSet<String>>, SolveError> {
    let layout = &template.constraints.layout;
    let all_constrained = template.constrained_services();
    let (constrained, free): (Vec<&String>, Vec<&String>) = services
        .iter()
        .partition(|s| all_constrained.contains(s.as_str()));
    let valid = |set: &BTreeSet<&String>| {
        layout
            .cant_coexist
            .iter()
            .all(|g| g.iter().filter(|s| set.contains(s)).count() < 2)
            && layout.must_coexist.iter().all(|g| {
                let present: Vec<&String> = g.iter().filter(|s| services.contains(*s)).collect();
                let has = present.iter().filter(|s| set.contains(**s)).count();
                has == 0 || has == present.len()
            })
    };
    if constrained.len() > crate::model::template::MAX_CONSTRAINED_SERVICES {
        return fail(format!(
            "the cluster has {} constrained services, more than the limit of {}",
            constrained.len(),
            crate::model::template::MAX_CONSTRAINED_SERVICES
        ));
    }
    let mut sets = Vec::new();
    for mask in 0u64..(1u64 << constrained.len()) {
        budget.spend(1)?;
        let mut set: BTreeSet<&String> = (0..constrained.len())
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| constrained[i])
            .collect();
        if !valid(&set) {
            continue;
        }
        set.extend(free.iter().copied());
        if !set.is_empty() {
            sets.push(set.into_iter().cloned().collect());
        }
    }
    Ok(sets)
}

/// One layout per valid service set (its best hardware and image pair), most preferred first.
fn node_layouts(
    template: &Template,
    services: &BTreeSet<String>,
    hw: &[String],
    img: &[String],
    budget: &mut Budget,
) -> Result<Vec<NodeLayout>, SolveError> {
    let constraints = &template.constraints.services;
    let mut layouts = Vec::new();
    for set in service_sets(template, services, budget)? {
        budget.spend((hw.len() * img.len()) as u64)?;
        let best = hw
            .iter()
            .flat_map(|h| img.iter().map(move |i| (h, i)))
            .filter(|(h, i)| {
                set.iter().all(|s| {
                    constraints.get(s).is_none_or(|c| {
                        (c.hardware_types.is_empty() || c.hardware_types.contains(h))
                            && (c.image_types.is_empty() || c.image_types.contains(i))
                    })
                })
            })
            .map(|(h, i)| NodeLayout {
                hardware_type: h.clone(),
                image_type: i.clone(),
                services: set.clone(),
            })
            .min_by(|a, b| compare(a, b, hw, img));
        layouts.extend(best);
    }
    if layouts.is_empty() {
        return fail("no node layout satisfies the services' hardware and image type constraints");
    }
    layouts.sort_by(|a, b| compare(a, b, hw, img));
    Ok(layouts)
}

/// Each constrained service's bounds for a cluster of `n` nodes (quantities and ratio).
pub fn bounds(
    template: &Template,
    services: &BTreeSet<String>,
    n: u32,
) -> BTreeMap<String, Bounds> {
    template
        .constraints
        .services
        .iter()
        .filter(|(s, _)| services.contains(*s))
        .map(|(s, c)| {
            let (mut min, mut max) = c.quantities.map_or((0, u32::MAX), |q| (q.min, q.max));
            if let Some(r) = c.ratio {
                min = min.max((r.min * f64::from(n)).ceil() as u32);
                max = max.min((r.max * f64::from(n)).floor() as u32);
            }
            (
                s.clone(),
                Bounds {
                    min,
                    max,
                    odd: c.odd,
                },
            )
        })
        .collect()
}

/// The most preferred node count per layout for `free` new nodes, or `None` when there is
/// none; an error when the budget runs out first.
fn find_counts(
    layouts: &[NodeLayout],
    bounds: &BTreeMap<String, Bounds>,
    fixed: &[NodeLayout],
    free: u32,
    budget: &mut Budget,
) -> Result<Option<Vec<u32>>, SolveError> {
    let names: Vec<&String> = bounds.keys().collect();
    let b: Vec<Bounds> = bounds.values().copied().collect();
    // Which bounded services each layout carries.
    let carries: Vec<Vec<usize>> = layouts
        .iter()
        .map(|l| {
            (0..names.len())
                .filter(|i| l.services.contains(names[*i]))
                .collect()
        })
        .collect();
    let mut current: Vec<u32> = names
        .iter()
        .map(|s| fixed.iter().filter(|f| f.services.contains(*s)).count() as u32)
        .collect();
    if current.iter().zip(&b).any(|(c, b)| *c > b.max) {
        return Ok(None);
    }
    let search = Search {
        b: &b,
        carries: &carries,
    };
    search.run(free, &mut current, budget)
}

/// Depth-first search over counts, slot by slot, largest count first; iterative, so its depth
/// (one level per layout) never touches the thread's stack.
struct Search<'a> {
    b: &'a [Bounds],
    carries: &'a [Vec<usize>],
}

impl Search<'_> {
    /// Whether the slots from `slot` on can still reach every minimum with `left` nodes.
    fn feasible(&self, slot: usize, left: u32, current: &[u32]) -> bool {
        self.b.iter().enumerate().all(|(i, b)| {
            current[i] >= b.min
                || (self.carries[slot..].iter().any(|c| c.contains(&i))
                    && b.min - current[i] <= left)
        })
    }

    /// Whether the counts so far meet every bound.
    fn complete(&self, current: &[u32]) -> bool {
        current
            .iter()
            .zip(self.b)
            .all(|(c, b)| *c >= b.min && *c <= b.max && (!b.odd || c % 2 == 1))
    }

    /// The most nodes slot `slot` may take.
    fn cap(&self, slot: usize, left: u32, current: &[u32]) -> u32 {
        self.carries[slot]
            .iter()
            .map(|i| self.b[*i].max - current[*i])
            .min()
            .unwrap_or(u32::MAX)
            .min(left)
    }

    fn set(&self, slot: usize, take: u32, current: &mut [u32], add: bool) {
        for i in &self.carries[slot] {
            if add {
                current[*i] += take;
            } else {
                current[*i] -= take;
            }
        }
    }

    fn run(
        &self,
        free: u32,
        current: &mut [u32],
        budget: &mut Budget,
    ) -> Result<Option<Vec<u32>>, SolveError> {
        let slots = self.carries.len();
        // The count taken at each slot on the current path.
        let mut taken: Vec<u32> = Vec::with_capacity(slots);
        let mut left = free;
        let mut advancing = true;
        loop {
            budget.spend(1)?;
            let slot = taken.len();
            if advancing {
                // Enter `slot`: succeed at the end, else take as many as it may.
                if slot == slots {
                    if left == 0 && self.complete(current) {
                        return Ok(Some(taken));
                    }
                    advancing = false;
                    continue;
                }
                let cap = self.cap(slot, left, current);
                if !self.feasible(slot, left, current) || (slot + 1 == slots && cap < left) {
                    advancing = false;
                    continue;
                }
                self.set(slot, cap, current, true);
                taken.push(cap);
                left -= cap;
            } else {
                // Back up: the previous slot takes one fewer, or backs up too.
                let Some(take) = taken.pop() else {
                    return Ok(None);
                };
                let slot = taken.len();
                self.set(slot, take, current, false);
                left += take;
                // The last slot must take every node left: fewer can never succeed.
                if take > 0 && slot + 1 < slots {
                    self.set(slot, take - 1, current, true);
                    taken.push(take - 1);
                    left -= take - 1;
                    advancing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(v: serde_json::Value) -> Template {
        let t: Template = serde_json::from_value(v).expect("template");
        t.validate().expect("valid");
        t
    }

    fn example() -> Template {
        template(json!({
            "services": {
                "base": {}, "zookeeper": {"dependencies": {"install": {"requires": ["base"]}}},
                "master": {"dependencies": {"runtime": {"requires": ["zookeeper"]}}},
                "worker": {"dependencies": {"runtime": {"requires": ["master"]}}}
            },
            "hardwareTypes": {"small": {"local": {}}, "large": {"local": {}}},
            "imageTypes": {"debian12": {"local": {}}},
            "defaults": {"services": ["base", "zookeeper", "master", "worker"], "hardwareType": "small"},
            "constraints": {
                "size": {"min": 1, "max": 1000},
                "layout": {"mustCoexist": [["base", "worker"]], "cantCoexist": [["master", "worker"]]},
                "services": {"master": {"quantities": {"min": 1, "max": 1}, "hardwareTypes": ["large"]},
                             "zookeeper": {"quantities": {"min": 1, "max": 3}, "odd": true}}
            }
        }))
    }

    fn request(nodes: u32) -> Request {
        Request {
            provisioner: "local".into(),
            nodes,
            ..Request::default()
        }
    }

    fn summary(layout: &[NodeLayout]) -> Vec<String> {
        layout
            .iter()
            .map(|l| {
                format!(
                    "{}:{}",
                    l.hardware_type,
                    l.services.iter().cloned().collect::<Vec<_>>().join("+")
                )
            })
            .collect()
    }

    #[test]
    fn the_example_gets_one_master_an_odd_quorum_and_workers() {
        let t = example();
        let five = solve(&t, &request(5)).expect("solves");
        assert_eq!(
            summary(&five),
            [
                "large:master",
                "small:base+worker",
                "small:base+worker+zookeeper",
                "small:base+worker+zookeeper",
                "small:base+worker+zookeeper",
            ]
        );
        let one = solve(&t, &request(1)).expect("solves");
        assert_eq!(summary(&one), ["large:master+zookeeper"]);
        assert_eq!(solve(&t, &request(5)), Ok(five), "deterministic");
    }

    #[test]
    fn each_constraint_kind_is_honoured_or_named() {
        let t = example();
        let err = solve(&t, &request(0)).expect_err("size");
        assert!(err.0.contains("constraints.size"), "{err}");
        let err = solve(
            &t,
            &Request {
                hardware_type: Some("small".into()),
                ..request(3)
            },
        )
        .expect_err("master needs large");
        assert!(err.0.contains("no layout"), "{err}");
        let err = solve(
            &t,
            &Request {
                provisioner: "aws-ec2".into(),
                ..request(3)
            },
        )
        .expect_err("provisioner");
        assert!(err.0.contains("provisioner 'aws-ec2'"), "{err}");
        let err = solve(
            &t,
            &Request {
                services: Some(vec!["worker".into()]),
                ..request(3)
            },
        )
        .expect_err("requires");
        assert!(err.0.contains("requires 'master'"), "{err}");

        let ratio = template(json!({
            "services": {"a": {}, "b": {}},
            "hardwareTypes": {"h": {"local": {}}}, "imageTypes": {"i": {"local": {}}},
            "defaults": {"services": ["a", "b"]},
            "constraints": {"layout": {"cantCoexist": [["a", "b"]]},
                            "services": {"a": {"ratio": {"min": 0.25, "max": 0.25}}}}
        }));
        let eight = solve(&ratio, &request(8)).expect("solves");
        let a = eight.iter().filter(|l| l.services.contains("a")).count();
        assert_eq!(a, 2, "{:?}", summary(&eight));
        assert!(eight.iter().all(|l| l.services.len() == 1), "cantCoexist");

        let odd = template(json!({
            "services": {"zk": {}},
            "hardwareTypes": {"h": {"local": {}}}, "imageTypes": {"i": {"local": {}}},
            "defaults": {"services": ["zk"]},
            "constraints": {"services": {"zk": {"quantities": {"min": 2, "max": 4}, "odd": true}}}
        }));
        assert_eq!(solve(&odd, &request(3)).expect("3 is odd").len(), 3);
        let err = solve(&odd, &request(4)).expect_err("4 zk nodes is even");
        assert!(err.0.contains("zk on 2..4 node(s), odd"), "{err}");
    }

    #[test]
    fn fixed_nodes_stay_as_they_are() {
        let t = example();
        let three = solve(&t, &request(3)).expect("solves");
        let grown = solve(
            &t,
            &Request {
                fixed: three.clone(),
                ..request(6)
            },
        )
        .expect("grows");
        assert_eq!(&grown[..3], &three[..]);
        assert_eq!(
            grown
                .iter()
                .filter(|l| l.services.contains("master"))
                .count(),
            1
        );
        let zk = grown
            .iter()
            .filter(|l| l.services.contains("zookeeper"))
            .count();
        assert!(zk % 2 == 1 && zk <= 3, "{:?}", summary(&grown));
    }

    #[test]
    fn a_search_too_large_ends_with_the_budget_not_the_stack() {
        // 16 services, each on exactly one node, none sharing: 2^16 candidate sets, each a
        // layout, searched iteratively until the budget runs out or a layout is found.
        let names: Vec<String> = (0..16).map(|i| format!("s{i}")).collect();
        let constraints: serde_json::Map<String, serde_json::Value> = names
            .iter()
            .map(|n| (n.clone(), json!({"quantities": {"min": 1, "max": 1}})))
            .collect();
        let t = template(json!({
            "services": names.iter().map(|n| (n.clone(), json!({}))).collect::<serde_json::Map<_, _>>(),
            "hardwareTypes": {"h": {"local": {}}}, "imageTypes": {"i": {"local": {}}},
            "defaults": {"services": names},
            "constraints": {"services": constraints}
        }));
        match solve(&t, &request(17)) {
            Ok(layout) => assert_eq!(layout.len(), 17),
            Err(e) => assert!(e.0.contains("within 1000000 steps"), "{e}"),
        }
        let mut tiny = Budget { left: 10 };
        let err = solve_within(&example(), &request(5), &mut tiny).expect_err("budget");
        assert!(err.0.starts_with("no layout found within"), "{err}");
        assert!(tiny.is_spent());
        let err = solve(&example(), &request(ebb_spi::MAX_NODES + 1)).expect_err("too many");
        assert!(err.0.contains("at most 10000 nodes"), "{err}");
    }
}
