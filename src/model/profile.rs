//! Profiles: where and how a run executes (CDAP's compute profiles).
//!
//! This module holds the profile types, shared by the REST API, the built-in profile files
//! and the store so they cannot drift, and the validation of a profile definition.
//! `service::profiles` applies the rules (status, assignments, built-ins) against the store;
//! `rules::resolve` picks a run's profile and properties; `model::builtin` parses
//! `profiles/*.json`.

use std::collections::BTreeSet;
use std::fmt;

use ebb_spi::Properties;
use serde::{Deserialize, Serialize};

use crate::model::access::Trust;
use crate::model::invalid::Invalid;
use crate::model::names;

/// The namespace under which SYSTEM profiles are kept; no user namespace may take this name.
pub const SYSTEM_NAMESPACE: &str = "system";

pub use crate::model::seconds::{MAX_SECONDS, Seconds};

/// Who a profile belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Scope {
    /// Instance-wide, usable from every namespace.
    System,
    /// Belongs to one namespace.
    User,
}

display_as_serde!(Scope);

/// Whether a profile may be assigned and used by new runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum ProfileStatus {
    Enabled,
    Disabled,
}

impl fmt::Display for ProfileStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProfileStatus::Enabled => "ENABLED",
            ProfileStatus::Disabled => "DISABLED",
        })
    }
}

/// Identifies a profile: SYSTEM profiles by name, USER profiles by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProfileId {
    pub scope: Scope,
    /// The owning namespace; [`SYSTEM_NAMESPACE`] for SYSTEM profiles.
    pub namespace: String,
    pub name: String,
}

impl ProfileId {
    pub fn system(name: &str) -> Self {
        ProfileId {
            scope: Scope::System,
            namespace: SYSTEM_NAMESPACE.into(),
            name: name.into(),
        }
    }

    pub fn user(namespace: &str, name: &str) -> Self {
        ProfileId {
            scope: Scope::User,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The instance default: `SYSTEM:native`.
    pub fn native() -> Self {
        ProfileId::system("native")
    }

    /// Parses a scoped name as used in `system.profile.name`: `SYSTEM:x`, `USER:x`, or a bare
    /// `x` meaning `USER:x`; USER profiles are looked up in `namespace`. The scope is
    /// case-insensitive.
    pub fn parse_scoped(namespace: &str, scoped: &str) -> Result<ProfileId, String> {
        let (scope, name) = match scoped.split_once(':') {
            None => (Scope::User, scoped),
            Some((s, name)) if s.eq_ignore_ascii_case("system") => (Scope::System, name),
            Some((s, name)) if s.eq_ignore_ascii_case("user") => (Scope::User, name),
            Some((s, _)) => {
                return Err(format!(
                    "'{scoped}' has an unknown scope '{s}': use SYSTEM:<name>, USER:<name> or <name>"
                ));
            }
        };
        names::check("profile name", name).map_err(|e| format!("'{scoped}': {e}"))?;
        Ok(match scope {
            Scope::System => ProfileId::system(name),
            Scope::User => ProfileId::user(namespace, name),
        })
    }

    /// `SYSTEM:name` or `USER:name`, as CDAP writes it.
    pub fn scoped_name(&self) -> String {
        match self.scope {
            Scope::System => format!("SYSTEM:{}", self.name),
            Scope::User => format!("USER:{}", self.name),
        }
    }

    /// The key of this profile in the store.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl fmt::Display for ProfileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scope {
            Scope::System => write!(f, "profile 'SYSTEM:{}'", self.name),
            Scope::User => write!(
                f,
                "profile '{}' in namespace '{}'",
                self.name, self.namespace
            ),
        }
    }
}

/// A profile as the API returns it and the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Profile {
    pub name: String,
    pub label: String,
    pub description: String,
    pub scope: Scope,
    pub status: ProfileStatus,
    pub provisioner: ProvisionerInfo,
    pub keepalive: Keepalive,
    /// Longest a run's cluster may live, in seconds; `None` for no limit.
    pub timeout: Option<u64>,
    /// How a failed program of its runs is tried again on the same cluster (a program's own
    /// policy comes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::model::retry::Retry>,
    /// Whether a start of its runs that a limit refuses waits in the queue (over the
    /// namespace's `queueRuns`; a `system.run.queue` preference or argument comes first).
    #[serde(default, rename = "queueRuns", skip_serializing_if = "Option::is_none")]
    pub queue_runs: Option<bool>,
    /// Whether a run that COMPLETED leaves its cluster for the next run that matches.
    #[serde(
        default,
        rename = "clusterReuse",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub cluster_reuse: bool,
    /// How long such a cluster waits for its next run, in seconds (with `clusterReuse`).
    #[serde(default, rename = "reuseIdle", skip_serializing_if = "Option::is_none")]
    pub reuse_idle: Option<u64>,
    /// Clusters kept ready ahead of demand for the namespace's runs (implies reuse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<Pool>,
    /// What a node of its runs costs an hour, over the price table (hosts, local, a negotiated
    /// rate), in the table's currency.
    #[serde(
        default,
        rename = "pricePerNodeHour",
        skip_serializing_if = "Option::is_none"
    )]
    pub price_per_node_hour: Option<f64>,
    /// When the profile was first created, in epoch seconds.
    pub created: u64,
}

impl Profile {
    /// Its cluster reuse, for its runs: `None` unless `clusterReuse` or a pool. A cluster a
    /// run leaves waits `reuseIdle`, else the pool's `idle`, else 30 minutes.
    pub fn reuse(&self) -> Option<Reuse> {
        (self.cluster_reuse || self.pool.is_some()).then(|| Reuse {
            idle: self
                .reuse_idle
                .or(self.pool.and_then(|p| p.idle))
                .unwrap_or(DEFAULT_REUSE_IDLE),
        })
    }

    /// The profile's properties as a map, without their editability.
    pub fn properties(&self) -> Properties {
        self.provisioner
            .properties
            .iter()
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect()
    }
}

/// The provisioner of a profile and its property values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProvisionerInfo {
    pub name: String,
    pub properties: Vec<PropertyValue>,
}

/// One provisioner property of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PropertyValue {
    pub name: String,
    pub value: String,
    /// Whether `system.profile.properties.<name>` may override it for a run.
    #[serde(rename = "isEditable")]
    pub is_editable: bool,
}

/// A profile's cluster reuse, copied into its runs: a run that COMPLETED leaves its cluster
/// `IDLE` for `idle` seconds, for the next run that matches.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
pub struct Reuse {
    /// How long an idle cluster waits for its next run (seconds).
    pub idle: u64,
}

/// A profile's warm pool: at least `min` clusters kept ready (IDLE) ahead of demand, made in
/// the background as runs take them over, and at most `max` IDLE clusters in all (made
/// ahead, or left by runs that completed); one a run left waits `idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct Pool {
    pub min: u32,
    pub max: u32,
    /// Seconds a cluster a run left waits for its next (clusters made ahead wait until taken
    /// or the profile's `timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<u64>,
}

/// The most clusters a pool may hold.
pub const MAX_POOL: u32 = 100;

/// The most profiles of one namespace that keep a pool.
pub const MAX_POOLS_PER_NAMESPACE: usize = 16;

/// The `pool` object of a profile body.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolInput {
    #[serde(default)]
    pub min: u32,
    pub max: u32,
    #[serde(default)]
    pub idle: Option<Seconds>,
}

/// How long an idle cluster waits for its next run when the profile does not say.
pub const DEFAULT_REUSE_IDLE: u64 = 30 * 60;

/// How long a cluster is kept after its run ends badly, in seconds (0: tear down at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct Keepalive {
    /// After the run was stopped with `keepalive: true`.
    pub killed: u64,
    /// After the run failed.
    pub failed: u64,
}

/// The body of `PUT .../profiles/{name}`, and the content of `profiles/*.json`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "label": "Example",
    "description": "Runs programs on the server's host",
    "provisioner": {"name": "native", "properties": []}
}))]
pub struct ProfileSpec {
    /// Optional in a PUT body (the path names the profile); when present it must match.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub provisioner: ProvisionerSpecInput,
    #[serde(default)]
    pub keepalive: Option<KeepaliveInput>,
    #[serde(default)]
    pub timeout: Option<Seconds>,
    #[serde(default)]
    pub retry: Option<crate::model::retry::Retry>,
    #[serde(default, rename = "queueRuns")]
    pub queue_runs: Option<bool>,
    #[serde(default, rename = "clusterReuse")]
    pub cluster_reuse: Option<bool>,
    #[serde(default, rename = "reuseIdle")]
    pub reuse_idle: Option<Seconds>,
    #[serde(default)]
    pub pool: Option<PoolInput>,
    #[serde(default, rename = "pricePerNodeHour")]
    pub price_per_node_hour: Option<f64>,
}

/// The `provisioner` object of a profile body.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvisionerSpecInput {
    pub name: String,
    #[serde(default)]
    pub properties: Vec<PropertyInput>,
}

/// One property in a profile body. A number or boolean value is taken as its text; a missing
/// `isEditable` means fixed: overriding is opt-in.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PropertyInput {
    pub name: String,
    pub value: ValueText,
    #[serde(rename = "isEditable", default)]
    pub is_editable: bool,
}

/// The `keepalive` object of a profile body; a missing field is 0.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeepaliveInput {
    #[serde(default)]
    pub killed: Option<Seconds>,
    #[serde(default)]
    pub failed: Option<Seconds>,
}

/// A property value: JSON text, or a number or boolean taken as its text.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueText(pub String);

impl<'de> Deserialize<'de> for ValueText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(ValueText(s)),
            serde_json::Value::Number(n) => Ok(ValueText(n.to_string())),
            serde_json::Value::Bool(b) => Ok(ValueText(b.to_string())),
            other @ (serde_json::Value::Null
            | serde_json::Value::Array(_)
            | serde_json::Value::Object(_)) => Err(serde::de::Error::custom(format!(
                "expected a string, number or boolean, got {other}"
            ))),
        }
    }
}

impl schemars::JsonSchema for ValueText {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ValueText".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A property value: text, or a number or boolean taken as its text.",
            "type": ["string", "number", "boolean"]
        })
    }
}

/// The provisioners a profile may name, by name: the server's registry, or a test's few.
pub trait Provisioners {
    /// Provisioner `name`, if there is one.
    fn provisioner(&self, name: &str) -> Option<&dyn ebb_spi::Provisioner>;
}

/// A profile definition that passed validation, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSpec {
    pub label: Option<String>,
    pub description: Option<String>,
    pub provisioner: ProvisionerInfo,
    pub keepalive: Keepalive,
    pub timeout: Option<u64>,
    pub retry: Option<crate::model::retry::Retry>,
    pub queue_runs: Option<bool>,
    pub cluster_reuse: bool,
    pub reuse_idle: Option<u64>,
    pub pool: Option<Pool>,
    pub price_per_node_hour: Option<f64>,
}

impl ProfileSpec {
    /// Checks the definition of profile `name`: the provisioner exists, property names are
    /// unique, the provisioner accepts the properties, and the timeout is positive.
    pub fn validate(self, name: &str, registry: &impl Provisioners) -> Result<ValidSpec, Invalid> {
        if let Some(body_name) = &self.name
            && body_name != name
        {
            return Err(Invalid::new(
                "name",
                format!("'{body_name}' does not match the profile name '{name}' in the path"),
            ));
        }
        let provisioner_name = self.provisioner.name.trim();
        let Some(provisioner) = registry.provisioner(provisioner_name) else {
            return Err(Invalid::new(
                "provisioner.name",
                format!(
                    "provisioner '{provisioner_name}' does not exist; GET /v3/provisioners lists them"
                ),
            ));
        };
        let mut seen = BTreeSet::new();
        let mut properties = Vec::with_capacity(self.provisioner.properties.len());
        for (i, p) in self.provisioner.properties.into_iter().enumerate() {
            if p.name.trim().is_empty() {
                return Err(Invalid::new(
                    format!("provisioner.properties[{i}].name"),
                    "must not be empty",
                ));
            }
            if !seen.insert(p.name.clone()) {
                return Err(Invalid::new(
                    format!("provisioner.properties[{i}].name"),
                    format!("property '{}' is given twice", p.name),
                ));
            }
            properties.push(PropertyValue {
                name: p.name,
                value: p.value.0,
                is_editable: p.is_editable,
            });
        }
        let info = ProvisionerInfo {
            name: provisioner.spec().name.to_string(),
            properties,
        };
        let map: Properties = info
            .properties
            .iter()
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect();
        crate::model::property::check_references(
            "provisioner.properties",
            provisioner.spec(),
            &map,
        )?;
        provisioner.validate(&map).map_err(|e| {
            Invalid::new(format!("provisioner.properties.{}", e.property), e.message)
        })?;
        let timeout = match self.timeout {
            Some(Seconds(0)) => {
                return Err(Invalid::new(
                    "timeout",
                    "must be at least 1 second; leave it out for no limit",
                ));
            }
            other => other.map(|s| s.0),
        };
        let keepalive = self
            .keepalive
            .map_or_else(Keepalive::default, |k| Keepalive {
                killed: k.killed.map_or(0, |s| s.0),
                failed: k.failed.map_or(0, |s| s.0),
            });
        if let Some(retry) = &self.retry {
            retry.check("retry")?;
        }
        let pool = match self.pool {
            None => None,
            Some(p) if p.max == 0 || p.max > MAX_POOL => {
                return Err(Invalid::new(
                    "pool.max",
                    format!("must be 1 to {MAX_POOL}, got {}", p.max),
                ));
            }
            Some(p) if p.min > p.max => {
                return Err(Invalid::new(
                    "pool.min",
                    format!("must not be more than pool.max ({}), got {}", p.max, p.min),
                ));
            }
            Some(PoolInput {
                idle: Some(Seconds(0)),
                ..
            }) => return Err(Invalid::new("pool.idle", "must be at least 1 second")),
            Some(PoolInput {
                idle: Some(Seconds(s)),
                ..
            }) if timeout.is_some_and(|t| s > t) => {
                return Err(Invalid::new(
                    "pool.idle",
                    "must not be longer than the profile's timeout, the longest a cluster lives",
                ));
            }
            Some(p) => Some(Pool {
                min: p.min,
                max: p.max,
                idle: p.idle.map(|s| s.0),
            }),
        };
        let cluster_reuse = self.cluster_reuse.unwrap_or(false);
        let reuse_idle = match self.reuse_idle {
            None => None,
            Some(_) if !cluster_reuse && pool.is_none() => {
                return Err(Invalid::new(
                    "reuseIdle",
                    "applies only with clusterReuse: true (or a pool)",
                ));
            }
            Some(Seconds(0)) => {
                return Err(Invalid::new(
                    "reuseIdle",
                    "must be at least 1 second; leave it out for the default (30m)",
                ));
            }
            Some(Seconds(s)) if timeout.is_some_and(|t| s > t) => {
                return Err(Invalid::new(
                    "reuseIdle",
                    "must not be longer than the profile's timeout, the longest a cluster lives",
                ));
            }
            Some(Seconds(s)) => Some(s),
        };
        if let Some(price) = self.price_per_node_hour {
            crate::model::price::check_per_hour("pricePerNodeHour", price)?;
        }
        Ok(ValidSpec {
            label: self.label,
            description: self.description,
            provisioner: info,
            keepalive,
            timeout,
            retry: self.retry,
            queue_runs: self.queue_runs,
            cluster_reuse,
            reuse_idle,
            pool,
            price_per_node_hour: self.price_per_node_hour,
        })
    }
}

/// A profile as the store keeps it: the API view plus whether it ships with ebb.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredProfile {
    #[serde(flatten)]
    pub profile: Profile,
    /// Loaded from `profiles/*.json`; cannot be replaced or deleted over the API.
    #[serde(default)]
    pub builtin: bool,
    /// The trust of whoever wrote it last. A record from before this was kept is taken as
    /// a namespace admin's.
    #[serde(default = "Trust::unrecorded")]
    pub written_by: Trust,
    /// When it was last written, enabled or disabled (epoch seconds): its pool counts its
    /// failed runs since (`rules::pool`).
    #[serde(default)]
    pub changed: u64,
}

impl StoredProfile {
    /// Its author's trust: instance admins for a SYSTEM profile, whoever wrote a USER one.
    pub fn author(&self) -> Trust {
        match self.profile.scope {
            Scope::System => Trust::InstanceAdmin,
            Scope::User => self.written_by,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Result<ProfileSpec, String> {
        let de = &mut serde_json::Deserializer::from_str(json);
        serde_path_to_error::deserialize(de).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    /// The provisioners these tests name.
    struct Few;

    impl Provisioners for Few {
        fn provisioner(&self, name: &str) -> Option<&dyn ebb_spi::Provisioner> {
            match name {
                "local" => Some(&ebb_local::Local),
                "sim" => Some(&ebb_sim::Sim),
                "hosts" => Some(&ebb_hosts::Hosts),
                _ => None,
            }
        }
    }

    fn validate(json: &str) -> Result<ValidSpec, String> {
        spec(json)?.validate("p", &Few).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_scoped_names() {
        assert_eq!(
            ProfileId::parse_scoped("ns", "SYSTEM:a"),
            Ok(ProfileId::system("a"))
        );
        assert_eq!(
            ProfileId::parse_scoped("ns", "system:a"),
            Ok(ProfileId::system("a"))
        );
        assert_eq!(
            ProfileId::parse_scoped("ns", "USER:a"),
            Ok(ProfileId::user("ns", "a"))
        );
        assert_eq!(
            ProfileId::parse_scoped("ns", "a"),
            Ok(ProfileId::user("ns", "a"))
        );
        for bad in ["GROUP:a", "SYSTEM:", "USER:a b", "", "SYSTEM:a:b"] {
            assert!(ProfileId::parse_scoped("ns", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn accepts_numbers_and_human_durations() {
        let v = validate(
            r#"{"provisioner":{"name":"local","properties":[{"name":"nodes","value":3}]},
                "keepalive":{"failed":"8h","killed":60},"timeout":"1h 30m"}"#,
        )
        .expect("valid");
        assert_eq!(
            v.keepalive,
            Keepalive {
                killed: 60,
                failed: 8 * 3600
            }
        );
        assert_eq!(v.timeout, Some(5400));
        assert_eq!(v.provisioner.properties[0].value, "3");
        assert!(
            !v.provisioner.properties[0].is_editable,
            "a property is fixed unless the profile says otherwise"
        );
    }
}
