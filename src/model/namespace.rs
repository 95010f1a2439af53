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
}

/// A field that is present (`Some`), as `null` or a value.
fn some<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl NamespaceSpec {
    /// Applies the spec to `ns`.
    pub fn apply(&self, ns: &mut Namespace) {
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
