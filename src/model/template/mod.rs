//! Cluster templates: which services a cluster can run, how they depend on each other, what
//! hardware and images its nodes may have, and the constraints a layout must meet.
//!
//! This module holds the template's shape (the same serde types for REST bodies and the
//! built-in files under `profiles/templates/`) and the queries the solver and planner make
//! of it; its validation, a pure function that names the bad field, is in `validate.rs`, its
//! store record in `stored.rs`. It never touches the store; the solver and planner read
//! validated templates.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

mod stored;
mod validate;
pub use stored::{StoredTemplate, TemplateId};

use crate::model::invalid::Invalid;

/// A step of a service's life on a node, in the order a create walks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ActionKind {
    Install,
    Configure,
    Initialize,
    Start,
    Stop,
    Remove,
    /// Whether the service runs, asked every `checkInterval` while the cluster is live: exit
    /// 0 is up, 3 is down, anything else (or its timeout) unknown. No operation plans it.
    Check,
    /// Makes the service clean for the next run when another run takes its cluster over
    /// (reuse): no application of the last run left running, none of its files. Run on every
    /// node before the services are checked; one that fails discards the cluster for the
    /// run. No operation plans it.
    Reset,
}

/// Most services a template may define: every layout and plan grows with it.
pub const MAX_SERVICES: usize = 128;
/// Most services a template may constrain (a constraint, or a place in a coexist group): the
/// solver weighs subsets of them as the service sets of nodes.
pub const MAX_CONSTRAINED_SERVICES: usize = 16;
/// Most hardware types, and most image types, a template may define.
pub const MAX_TYPES: usize = 32;
/// Most entries in one list of a template (a service's `requires`, a coexist group, the list
/// of groups).
pub const MAX_LIST: usize = MAX_SERVICES;

/// What an action runs: an automator type and its fields. `shell` is built in; any other
/// type names an automator plugin, whose fields are its own (checked against what the
/// plugin declares when the template is written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A shell script run on the node (`sh -c`).
    Shell {
        script: String,
        /// How long one attempt may run (seconds or humantime, default 10m).
        timeout: Option<String>,
        /// How many attempts before the operation fails (default 3).
        attempts: Option<u32>,
    },
    /// An action an automator plugin runs (an Ansible playbook, say).
    Plugin {
        /// The plugin's name: the action's `type`.
        automator: String,
        timeout: Option<String>,
        attempts: Option<u32>,
        /// Every other field of the action, for the plugin.
        fields: serde_json::Map<String, serde_json::Value>,
    },
}

/// The shape of a `shell` action, as it is written.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
enum ShellAction {
    Shell {
        script: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempts: Option<u32>,
    },
}

impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Action::Shell {
                script,
                timeout,
                attempts,
            } => ShellAction::Shell {
                script: script.clone(),
                timeout: timeout.clone(),
                attempts: *attempts,
            }
            .serialize(s),
            Action::Plugin {
                automator,
                timeout,
                attempts,
                fields,
            } => {
                let mut map = fields.clone();
                map.insert("type".into(), automator.clone().into());
                if let Some(t) = timeout {
                    map.insert("timeout".into(), t.clone().into());
                }
                if let Some(n) = attempts {
                    map.insert("attempts".into(), (*n).into());
                }
                map.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map = serde_json::Map::deserialize(d)?;
        let kind = match map.get("type") {
            Some(serde_json::Value::String(t)) => t.clone(),
            Some(_) => return Err(D::Error::custom("'type' must be text")),
            None => {
                return Err(D::Error::custom(
                    "an action needs a 'type': shell, or the name of an automator plugin",
                ));
            }
        };
        if kind == "shell" {
            let ShellAction::Shell {
                script,
                timeout,
                attempts,
            } = ShellAction::deserialize(serde_json::Value::Object(map))
                .map_err(D::Error::custom)?;
            return Ok(Action::Shell {
                script,
                timeout,
                attempts,
            });
        }
        map.remove("type");
        let timeout = match map.remove("timeout") {
            None => None,
            Some(serde_json::Value::String(t)) => Some(t),
            Some(_) => return Err(D::Error::custom("'timeout' must be text, like 10m")),
        };
        let attempts = match map.remove("attempts") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| D::Error::custom("'attempts' must be a whole number"))?,
            ),
        };
        Ok(Action::Plugin {
            automator: kind,
            timeout,
            attempts,
            fields: map,
        })
    }
}

impl schemars::JsonSchema for Action {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Action".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "What an action runs: `{\"type\": \"shell\", \"script\": ...}`, or an automator plugin's action (`type` names the plugin; its other fields are the plugin's).",
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string", "description": "shell, or the name of an automator plugin"},
                "script": {"type": "string", "description": "shell: the script, run with sh -c"},
                "timeout": {"type": "string", "description": "How long one attempt may run (seconds or humantime, default 10m)"},
                "attempts": {"type": "integer", "minimum": 0, "description": "How many attempts before the operation fails (default 3)"}
            },
            "additionalProperties": true
        })
    }
}

/// How long one attempt of an action may run unless it says otherwise.
pub const DEFAULT_ACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
/// How many attempts an action gets unless it says otherwise.
pub const DEFAULT_ACTION_ATTEMPTS: u32 = 3;
/// The longest one attempt of an action may be given.
const MAX_ACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
/// The most fields an automator plugin's action may have.
const MAX_ACTION_FIELDS: usize = 64;
/// The most attempts an action may ask for.
const MAX_ACTION_ATTEMPTS: u32 = 20;

impl Action {
    /// The shell script it runs, for a `shell` action.
    pub fn script(&self) -> Option<&str> {
        match self {
            Action::Shell { script, .. } => Some(script),
            Action::Plugin { .. } => None,
        }
    }

    /// Whether an automator plugin runs it: code from the template then runs in the plugin's
    /// process, on the server's own host (an Ansible playbook's lookups and local tasks).
    pub fn is_plugin(&self) -> bool {
        matches!(self, Action::Plugin { .. })
    }

    /// The automator that runs it: `shell` or a plugin's name.
    pub fn automator(&self) -> &str {
        match self {
            Action::Shell { .. } => "shell",
            Action::Plugin { automator, .. } => automator,
        }
    }

    /// Its `timeout` and `attempts`, as written.
    pub fn limits(&self) -> (Option<&str>, Option<u32>) {
        match self {
            Action::Shell {
                timeout, attempts, ..
            }
            | Action::Plugin {
                timeout, attempts, ..
            } => (timeout.as_deref(), *attempts),
        }
    }

    pub fn timeout(&self) -> std::time::Duration {
        self.limits()
            .0
            .and_then(|t| ebb_spi::parse_duration(t).ok())
            .unwrap_or(DEFAULT_ACTION_TIMEOUT)
    }

    pub fn attempts(&self) -> u32 {
        self.limits().1.unwrap_or(DEFAULT_ACTION_ATTEMPTS)
    }
}

/// The services one set of dependencies names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DependencySet {
    /// Must be in the cluster, and ordered before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// Ordered before when present in the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uses: Vec<String>,
}

/// A service's dependencies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dependencies {
    /// Ordering of installs.
    #[serde(default)]
    pub install: DependencySet,
    /// Ordering of starts (and reverse ordering of stops).
    #[serde(default)]
    pub runtime: DependencySet,
    /// Other names this service answers to in `requires` and `uses`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provides: Vec<String>,
    /// Services that must not be in the same cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

/// A service of a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Service {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub dependencies: Dependencies,
    #[serde(default)]
    pub actions: BTreeMap<ActionKind, Action>,
    /// A `configure` operation stops the service before configuring it and starts it after.
    #[serde(
        default,
        rename = "restartOnConfigure",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub restart_on_configure: bool,
    /// How often its `check` action runs while the cluster is live (`"30s"`; 1 minute when
    /// left out).
    #[serde(
        default,
        rename = "checkInterval",
        skip_serializing_if = "Option::is_none"
    )]
    pub check_interval: Option<String>,
    /// What ebb does when the check finds the service down or failed (`none` when left out:
    /// it reports it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal: Option<Heal>,
    /// Most heals in one `healWindow` before ebb stops healing and says so (3 when left out).
    #[serde(
        default,
        rename = "healAttempts",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 100))]
    pub heal_attempts: Option<u32>,
    /// The window `healAttempts` counts in (`"1h"` when left out).
    #[serde(
        default,
        rename = "healWindow",
        skip_serializing_if = "Option::is_none"
    )]
    pub heal_window: Option<String>,
    /// The service's daemon logs, as paths under its node's directory (`spark/worker.log`):
    /// what `GET .../runs/{run}/services/{service}/logs` and `ebb run logs --service` read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub logs: Vec<String>,
}

/// Most log files a service names.
pub const MAX_LOGS: usize = 8;

/// Whether `path` may name a service's log: relative, at most 256 bytes of `A-Za-z0-9._-`
/// in `/`-separated parts, none of them `.` or `..` (so it stays under the node's directory
/// and needs no quoting in a shell).
pub fn valid_log_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 256
        && path.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
}

/// How a service found down or failed is healed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Heal {
    /// Report it, nothing more.
    #[default]
    None,
    /// Restart it with its dependent chain.
    Restart,
    /// Replace its node when the node's resource is gone (the provider says so); restart it
    /// when it is down on a node that is there.
    ReplaceNode,
}

/// Most heals in a window unless the template says.
pub const DEFAULT_HEAL_ATTEMPTS: u32 = 3;
/// The window heals are counted in unless the template says.
pub const DEFAULT_HEAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(3600);
/// The most heals a window may allow.
const MAX_HEAL_ATTEMPTS: u32 = 100;

/// A service's healing: what, at most how many times, in which window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealPolicy {
    pub heal: Heal,
    pub attempts: u32,
    pub window: std::time::Duration,
}

/// How often a service's check runs unless its template says.
pub const DEFAULT_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// The shortest and longest a check interval may be.
const CHECK_INTERVALS: std::ops::RangeInclusive<std::time::Duration> =
    std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(24 * 3600);
/// How long one check may run unless its action says.
pub const DEFAULT_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a reset may run unless its action says.
pub const DEFAULT_RESET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl Service {
    /// Its reset, if it has one: the script and how long it may take.
    pub fn reset(&self) -> Option<(&str, std::time::Duration)> {
        let action = self.actions.get(&ActionKind::Reset)?;
        // A reset is a shell script (validation refuses any other).
        let script = action.script()?;
        let timeout = action
            .limits()
            .0
            .and_then(|t| ebb_spi::parse_duration(t).ok())
            .unwrap_or(DEFAULT_RESET_TIMEOUT);
        Some((script, timeout))
    }

    /// Its check, if it has one: the script, how often it runs and how long it may take.
    pub fn check(&self) -> Option<(&str, std::time::Duration, std::time::Duration)> {
        let action = self.actions.get(&ActionKind::Check)?;
        // A check is a shell script (validation refuses any other).
        let script = action.script()?;
        let interval = self
            .check_interval
            .as_deref()
            .and_then(|t| ebb_spi::parse_duration(t).ok())
            .unwrap_or(DEFAULT_CHECK_INTERVAL);
        let timeout = action
            .limits()
            .0
            .and_then(|t| ebb_spi::parse_duration(t).ok())
            .unwrap_or(DEFAULT_CHECK_TIMEOUT);
        Some((script, interval, timeout))
    }

    /// How the service is healed.
    pub fn heal_policy(&self) -> HealPolicy {
        HealPolicy {
            heal: self.heal.unwrap_or_default(),
            attempts: self.heal_attempts.unwrap_or(DEFAULT_HEAL_ATTEMPTS),
            window: self
                .heal_window
                .as_deref()
                .and_then(|t| ebb_spi::parse_duration(t).ok())
                .unwrap_or(DEFAULT_HEAL_WINDOW),
        }
    }
}

/// Per provisioner, the properties a hardware or image type stands for.
pub type TypeMap = BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>;

/// What may go into a cluster of this template; empty lists mean "everything defined".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compatibility {
    #[serde(default)]
    pub services: Vec<String>,
    #[serde(default)]
    pub hardware_types: Vec<String>,
    #[serde(default)]
    pub image_types: Vec<String>,
}

/// What a cluster gets when the run does not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Defaults {
    #[serde(default)]
    pub services: Vec<String>,
    pub hardware_type: Option<String>,
    pub image_type: Option<String>,
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
}

/// A whole-number range, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Range {
    #[serde(default)]
    pub min: u32,
    #[serde(default = "unbounded")]
    pub max: u32,
}

fn unbounded() -> u32 {
    u32::MAX
}

/// A share of the cluster's nodes, from 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ratio {
    #[serde(default)]
    pub min: f64,
    #[serde(default = "one")]
    pub max: f64,
}

fn one() -> f64 {
    1.0
}

/// Which services must share nodes, and which must not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LayoutConstraints {
    /// Each group: a node with one of these services has all of them (that are in the cluster).
    #[serde(default)]
    pub must_coexist: Vec<Vec<String>>,
    /// Each group: no node has two of these services.
    #[serde(default)]
    pub cant_coexist: Vec<Vec<String>>,
}

/// Where and how often one service may be placed.
#[derive(Debug, Clone, Default, PartialEq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceConstraint {
    /// Hardware types its nodes may have (any, when empty).
    #[serde(default)]
    pub hardware_types: Vec<String>,
    /// Image types its nodes may have (any, when empty).
    #[serde(default)]
    pub image_types: Vec<String>,
    /// How many nodes run it.
    pub quantities: Option<Range>,
    /// The share of nodes that run it.
    pub ratio: Option<Ratio>,
    /// The number of nodes running it must be odd (a quorum).
    #[serde(default)]
    pub odd: bool,
}

/// What every layout of this template must satisfy.
#[derive(Debug, Clone, Default, PartialEq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Constraints {
    /// How many nodes a cluster may have.
    pub size: Option<Range>,
    #[serde(default)]
    pub layout: LayoutConstraints,
    #[serde(default)]
    pub services: BTreeMap<String, ServiceConstraint>,
}

/// A cluster template, as stored and as a `PUT` body.
#[derive(Debug, Clone, Default, PartialEq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Template {
    /// Only in built-in files (a body takes its name from the path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub services: BTreeMap<String, Service>,
    #[serde(default)]
    pub hardware_types: TypeMap,
    #[serde(default)]
    pub image_types: TypeMap,
    #[serde(default)]
    pub compatibility: Compatibility,
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default)]
    pub constraints: Constraints,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid::new(field, message)
}

impl Template {
    /// The properties provisioner `provisioner` gets for a node of these types: the hardware
    /// type's, then the image type's.
    pub fn type_properties(
        &self,
        provisioner: &str,
        types: &NodeTypes,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (map, name) in [
            (&self.hardware_types, &types.hardware_type),
            (&self.image_types, &types.image_type),
        ] {
            if let Some(props) = map.get(name).and_then(|m| m.get(provisioner)) {
                out.extend(props.clone());
            }
        }
        out
    }

    /// The services each dependency name stands for: a service's own name, or a name it
    /// `provides`.
    pub fn providers(&self) -> BTreeMap<&str, BTreeSet<&str>> {
        let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (name, service) in &self.services {
            out.entry(name.as_str()).or_default().insert(name.as_str());
            for provided in &service.dependencies.provides {
                out.entry(provided.as_str())
                    .or_default()
                    .insert(name.as_str());
            }
        }
        out
    }

    /// Services `name` must come after in the `which` ("install" or "runtime") order.
    pub fn predecessors(&self, name: &str, which: &str) -> BTreeSet<&str> {
        self.predecessors_in(&self.providers(), name, which)
    }

    /// [`Template::predecessors`] with the [`Template::providers`] map computed once by the
    /// caller (the planner asks for every service on every node).
    pub fn predecessors_in<'a>(
        &'a self,
        providers: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        name: &str,
        which: &str,
    ) -> BTreeSet<&'a str> {
        let Some(service) = self.services.get(name) else {
            return BTreeSet::new();
        };
        let set = match which {
            "install" => &service.dependencies.install,
            _ => &service.dependencies.runtime,
        };
        set.requires
            .iter()
            .chain(&set.uses)
            .filter_map(|d| providers.get(d.as_str()))
            .flat_map(|s| s.iter().copied())
            .filter(|s| *s != name)
            .collect()
    }

    /// Services the solver weighs subsets of: those with a constraint or in a coexist group.
    pub fn constrained_services(&self) -> BTreeSet<&str> {
        let layout = &self.constraints.layout;
        self.constraints
            .services
            .keys()
            .chain(layout.must_coexist.iter().flatten())
            .chain(layout.cant_coexist.iter().flatten())
            .map(String::as_str)
            .collect()
    }
}

/// A node's hardware and image type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTypes {
    pub hardware_type: String,
    pub image_type: String,
}

#[cfg(test)]
mod tests;
