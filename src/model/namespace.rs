//! Namespaces: the tenant boundary. `default` always exists; `system` is reserved for SYSTEM
//! profiles and never exists as a namespace.

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::names;

/// The namespace that always exists.
pub const DEFAULT: &str = "default";

/// A namespace as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Namespace {
    pub name: String,
    pub description: String,
    /// When it was created, in epoch seconds.
    pub created: u64,
    /// The most its runs may hold at once.
    #[serde(default, flatten)]
    pub quota: Quota,
    /// Whether its admins may deploy apps whose programs run on the server's own host
    /// (otherwise only an instance admin may).
    #[serde(default)]
    pub allow_host_programs: bool,
    /// Whether a start that a limit refuses waits in the queue instead, and for how long.
    #[serde(default, flatten)]
    pub queue: QueueSettings,
    /// What its runs may use in a calendar month (UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// The most a budget may state, in money or node-hours.
pub const MAX_BUDGET: f64 = 1e12;
/// The share of a budget whose use is warned of (an audit entry, a log line).
pub const BUDGET_WARNING: f64 = 0.8;

/// A namespace's monthly budget: a cost (in the price table's currency), node-hours, or both.
/// Once its runs used it all in the month, new starts are refused (or queued, if the namespace
/// queues) until the month turns or the budget is raised; runs live then go on unless
/// `hardStop`. Runs count when their use of a cluster ends (`GET /v3/usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_hours: Option<f64>,
    /// Stop the namespace's live runs too once the budget is used.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hard_stop: bool,
}

impl Budget {
    /// Checks it: at least one limit, each a number from 0 to [`MAX_BUDGET`].
    pub fn check(&self) -> Result<(), Invalid> {
        if self.cost.is_none() && self.node_hours.is_none() {
            return Err(Invalid::new("budget", "give a cost, nodeHours or both"));
        }
        for (field, v) in [
            ("budget.cost", self.cost),
            ("budget.nodeHours", self.node_hours),
        ] {
            if let Some(v) = v
                && (!v.is_finite() || !(0.0..=MAX_BUDGET).contains(&v))
            {
                return Err(Invalid::new(
                    field,
                    format!("must be a number from 0 to {MAX_BUDGET}"),
                ));
            }
        }
        Ok(())
    }

    /// How much of it `figures` use: the larger share of its limits (1.0 is all of it).
    pub fn used(&self, figures: &crate::model::usage::Figures) -> f64 {
        // A limit of 0 allows nothing: any use is all of it.
        let share = |limit: Option<f64>, used: f64| match limit {
            Some(l) if l > 0.0 => used / l,
            Some(_) if used > 0.0 => 1.0,
            Some(_) | None => 0.0,
        };
        let cost = crate::model::usage::money(figures.cost_micros);
        let hours = figures.node_seconds() as f64 / 3600.0;
        share(self.cost, cost).max(share(self.node_hours, hours))
    }

    /// Why a start is refused with `figures` used this month, if it is.
    pub fn refuse(&self, figures: &crate::model::usage::Figures, currency: &str) -> Option<String> {
        if self.used(figures) < 1.0 {
            return None;
        }
        let cost = crate::model::usage::money(figures.cost_micros);
        let hours = figures.node_seconds() as f64 / 3600.0;
        let limits: Vec<String> = [
            self.cost.map(|c| format!("{cost:.2} of {c:.2} {currency}")),
            self.node_hours
                .map(|h| format!("{hours:.2} of {h:.2} node-hours")),
        ]
        .into_iter()
        .flatten()
        .collect();
        Some(format!(
            "the namespace's runs used {} this month, all of its budget (budget)",
            limits.join(" and ")
        ))
    }
}

/// Most runs one namespace's queue may be set to hold.
pub const MAX_QUEUED_BOUND: u32 = 100_000;
/// Runs a namespace's queue holds when it sets no `maxQueued`.
pub const DEFAULT_MAX_QUEUED: u32 = 1_000;
/// Longest a namespace may let a run wait in its queue: 30 days.
pub const MAX_QUEUE_TIME_BOUND: u64 = 30 * 24 * 3600;
/// How long a run waits in the queue when its namespace sets no `maxQueueTime`: a day.
pub const DEFAULT_MAX_QUEUE_TIME: u64 = 24 * 3600;

/// How a namespace queues the starts a limit (its program's `maxConcurrentRuns`, the
/// namespace's `maxLiveRuns` or `maxLiveNodes`) would refuse. A run also queues when the
/// `system.run.queue` preference or argument says so, whatever `queueRuns` is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSettings {
    /// Queue every such start of the namespace's programs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue_runs: bool,
    /// Most runs waiting at once (default 1000); a start past it is REJECTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queued: Option<u32>,
    /// Longest a run waits, in seconds (default a day); then it is REJECTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_time: Option<u64>,
}

impl QueueSettings {
    /// Most runs waiting at once.
    pub fn max_queued(&self) -> u32 {
        self.max_queued.unwrap_or(DEFAULT_MAX_QUEUED)
    }

    /// Longest a run waits, in seconds.
    pub fn max_queue_time(&self) -> u64 {
        self.max_queue_time.unwrap_or(DEFAULT_MAX_QUEUE_TIME)
    }
}

/// The shares of an installation a namespace may hold at once (the patent's shares per
/// tenant); none is a limit left out. A start that would pass one is REJECTED.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    /// Nodes of all its live runs (those whose cluster is not yet deprovisioned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_live_nodes: Option<u32>,
    /// Live runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_live_runs: Option<u32>,
    /// Nodes of one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes_per_run: Option<u32>,
}

/// What a namespace's live runs hold now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub live_runs: u32,
    pub live_nodes: u32,
}

impl Quota {
    /// Whether it limits anything (only then does a start count the namespace's live runs).
    pub fn limits(&self) -> bool {
        self.max_live_nodes.is_some()
            || self.max_live_runs.is_some()
            || self.max_nodes_per_run.is_some()
    }

    /// Why a run of `nodes` nodes may not start on top of `usage`, if it may not.
    pub fn refuse(&self, usage: Usage, nodes: u32) -> Option<String> {
        if let Some(max) = self.max_nodes_per_run
            && nodes > max
        {
            return Some(format!(
                "it asks for {nodes} nodes and the namespace allows at most {max} per run (maxNodesPerRun)"
            ));
        }
        if let Some(max) = self.max_live_runs
            && usage.live_runs >= max
        {
            return Some(format!(
                "the namespace has {} live runs, its limit (maxLiveRuns {max})",
                usage.live_runs
            ));
        }
        if let Some(max) = self.max_live_nodes
            && usage.live_nodes.saturating_add(nodes) > max
        {
            return Some(format!(
                "the namespace's live runs hold {} nodes and this run asks for {nodes}, over its limit (maxLiveNodes {max})",
                usage.live_nodes
            ));
        }
        None
    }
}

/// A namespace as the API shows it: with what its live runs hold, when it has a quota.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceView {
    #[serde(flatten)]
    pub namespace: Namespace,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What its runs used of its budget this month, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_used: Option<BudgetUse>,
}

/// What a namespace's runs used of its budget in a month.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetUse {
    /// `2026-11`.
    pub month: String,
    pub cost: f64,
    pub node_hours: f64,
    /// The larger share of the budget's limits used (1.0: all of it).
    pub share: f64,
}

impl BudgetUse {
    pub fn new(month: String, budget: &Budget, figures: &crate::model::usage::Figures) -> Self {
        BudgetUse {
            month,
            cost: crate::model::usage::money(figures.cost_micros),
            node_hours: figures.node_seconds() as f64 / 3600.0,
            share: budget.used(figures),
        }
    }
}

/// The body of `PUT /v3/namespaces/{ns}`; it may be left out. What it leaves out stays as it
/// is; a quota of `null` removes that limit.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(example = serde_json::json!({"description": "Team A", "maxLiveRuns": 10}))]
pub struct NamespaceSpec {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "some")]
    pub max_live_nodes: Option<Option<u32>>,
    #[serde(default, deserialize_with = "some")]
    pub max_live_runs: Option<Option<u32>>,
    #[serde(default, deserialize_with = "some")]
    pub max_nodes_per_run: Option<Option<u32>>,
    #[serde(default)]
    pub allow_host_programs: Option<bool>,
    #[serde(default)]
    pub queue_runs: Option<bool>,
    /// At most 100000; `null` for the default (1000).
    #[serde(default, deserialize_with = "some")]
    pub max_queued: Option<Option<u32>>,
    /// Seconds or a duration (`"2h"`), at most 30 days; `null` for the default (a day).
    #[serde(default, deserialize_with = "some")]
    pub max_queue_time: Option<Option<crate::model::seconds::Seconds>>,
    /// A monthly budget; `null` removes it.
    #[serde(default, deserialize_with = "some")]
    pub budget: Option<Option<Budget>>,
}

/// A field that is present (`Some`), as `null` or a value.
fn some<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl NamespaceSpec {
    /// Checks the bounds of what it sets (400 naming the field).
    pub fn check(&self) -> Result<(), Invalid> {
        if let Some(Some(max)) = self.max_queued
            && max > MAX_QUEUED_BOUND
        {
            return Err(Invalid::new(
                "maxQueued",
                format!("must be at most {MAX_QUEUED_BOUND}, got {max}"),
            ));
        }
        if let Some(Some(t)) = self.max_queue_time
            && (t.0 == 0 || t.0 > MAX_QUEUE_TIME_BOUND)
        {
            return Err(Invalid::new(
                "maxQueueTime",
                format!(
                    "must be at least a second and at most 30 days ({MAX_QUEUE_TIME_BOUND} s), got {} s",
                    t.0
                ),
            ));
        }
        if let Some(Some(budget)) = &self.budget {
            budget.check()?;
        }
        Ok(())
    }

    /// Applies the spec to `ns`.
    pub fn apply(&self, ns: &mut Namespace) {
        if let Some(v) = self.queue_runs {
            ns.queue.queue_runs = v;
        }
        if let Some(v) = self.max_queued {
            ns.queue.max_queued = v;
        }
        if let Some(v) = self.max_queue_time {
            ns.queue.max_queue_time = v.map(|t| t.0);
        }
        if let Some(description) = &self.description {
            ns.description = description.clone();
        }
        if let Some(v) = self.max_live_nodes {
            ns.quota.max_live_nodes = v;
        }
        if let Some(v) = self.max_live_runs {
            ns.quota.max_live_runs = v;
        }
        if let Some(v) = self.max_nodes_per_run {
            ns.quota.max_nodes_per_run = v;
        }
        if let Some(v) = self.allow_host_programs {
            ns.allow_host_programs = v;
        }
        if let Some(v) = self.budget {
            ns.budget = v;
        }
    }
}

/// Checks a namespace name taken from a path or body (400 naming `namespace` if bad). The
/// reserved name `system` passes here: it is refused on create and simply never exists.
pub fn check_name(name: &str) -> Result<(), Invalid> {
    names::check("namespace", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_refuses_what_passes_it() {
        let q = Quota {
            max_live_nodes: Some(10),
            max_live_runs: Some(3),
            max_nodes_per_run: Some(4),
        };
        let usage = |live_runs, live_nodes| Usage {
            live_runs,
            live_nodes,
        };
        assert_eq!(q.refuse(usage(0, 0), 4), None);
        let why = q.refuse(usage(0, 0), 5).expect("per run");
        assert!(why.contains("maxNodesPerRun"), "{why}");
        let why = q.refuse(usage(3, 3), 1).expect("runs");
        assert!(why.contains("maxLiveRuns"), "{why}");
        assert_eq!(q.refuse(usage(2, 6), 4), None);
        let why = q.refuse(usage(2, 7), 4).expect("nodes");
        assert!(why.contains("maxLiveNodes"), "{why}");
        assert_eq!(Quota::default().refuse(usage(1000, 1000), 1000), None);
        assert!(!Quota::default().limits());
    }

    #[test]
    fn a_spec_changes_what_it_names() {
        let mut ns = Namespace {
            name: "a".into(),
            description: "d".into(),
            created: 0,
            quota: Quota {
                max_live_runs: Some(2),
                max_live_nodes: Some(5),
                max_nodes_per_run: None,
            },
            allow_host_programs: false,
            queue: QueueSettings::default(),
            budget: None,
        };
        let spec: NamespaceSpec =
            serde_json::from_value(serde_json::json!({"maxLiveRuns": null, "maxNodesPerRun": 3}))
                .expect("spec");
        spec.apply(&mut ns);
        let want = Quota {
            max_live_runs: None,
            max_live_nodes: Some(5),
            max_nodes_per_run: Some(3),
        };
        assert_eq!(ns.quota, want);
        assert_eq!(ns.description, "d");
    }
}
