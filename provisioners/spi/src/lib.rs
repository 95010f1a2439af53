//! The provisioner contract shared by the ebb server and every provisioner plugin.
//!
//! A provisioner is a stateless plugin that knows how to make and remove the resources of a
//! cluster in one place (this host, a simulated cloud, a real cloud). This crate holds only the
//! contract: the [`Provisioner`] trait, the [`ProvisionerSpec`] that describes a plugin and its
//! properties, and the property validation every plugin shares. It does no IO and must never
//! depend on the server, so that plugins and the server can both depend on it without a cycle.
//!
//! Property validation is declarative: a plugin lists its properties with a [`PropertyKind`]
//! and [`validate_properties`] checks a property map against that list, naming the first bad
//! property. Plugins with rules that span properties override [`Provisioner::validate`].
//!
//! The resource calls ([`resource`]) are async and stateless: the framework persists each
//! resource's lifecycle around them, so a plugin never keeps state of its own.

pub mod capacity;
pub mod resource;

use std::collections::BTreeMap;
use std::time::Duration;

pub use capacity::{CallRates, CapacityScope, ErrorKind, Market, Placement, Rate};
pub use resource::{
    Call, Context, FACT_REMOTE_DIR, FACT_SSH, FACT_SSH_HOST_KEY, FACT_WORK_DIR, ProvisionError,
    RESERVED_FACTS, Resource, ResourceKey, ResourceState, SSH_HOST_KEY_CHECKING, SSH_KNOWN_HOSTS,
    SSH_PORT, SSH_PRIVATE_KEY, SSH_USER, TAG_NAMESPACE, TAG_NODE, TAG_PROFILE, TAG_RUN, TAG_SERVER,
    Tags,
};

/// The most nodes any cluster may have, whatever its provisioner: the ceiling on every node
/// count a request carries (a plan, a start, an expand) before anything is sized by it.
pub const MAX_NODES: u32 = 10_000;

/// Effective provisioner properties, by name. Values are strings, as in CDAP.
pub type Properties = BTreeMap<String, String>;

/// Builds a property map from name/value pairs.
pub fn properties<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Properties {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What a provisioner is, for the registry and the `/v3/provisioners` API.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisionerSpec {
    /// The key profiles use to name this provisioner (`local`, `sim`, `aws-ec2`).
    pub name: &'static str,
    /// A short human name.
    pub label: &'static str,
    /// One or two sentences on what it provisions.
    pub description: &'static str,
    /// Every property the provisioner understands. Anything else is rejected.
    pub properties: &'static [PropertySpec],
}

impl ProvisionerSpec {
    /// The spec of property `name`, if the provisioner has one.
    pub fn property(&self, name: &str) -> Option<&PropertySpec> {
        self.properties.iter().find(|p| p.name == name)
    }

    /// The first of `names` that names a place on the server's host, if any.
    pub fn first_host_path<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String>,
    ) -> Option<&'a String> {
        names
            .into_iter()
            .find(|n| self.property(n).is_some_and(|p| p.host_path))
    }

    /// Whether property `name` may be set only by the profile's author. A name the
    /// provisioner does not know is treated as such: it is refused later anyway.
    pub fn author_only(&self, name: &str) -> bool {
        self.property(name).is_none_or(|p| p.author_only)
    }

    /// The most nodes a cluster of this provisioner may have: the upper end of its `nodes`
    /// property, else [`MAX_NODES`]; never above [`MAX_NODES`].
    pub fn max_nodes(&self) -> u32 {
        match self.property("nodes").map(|p| &p.kind) {
            Some(PropertyKind::Integer { max, .. }) => u32::try_from((*max).max(0))
                .unwrap_or(MAX_NODES)
                .min(MAX_NODES),
            _ => MAX_NODES,
        }
    }
}

/// One property a provisioner accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct PropertySpec {
    pub name: &'static str,
    pub kind: PropertyKind,
    /// A profile (after overrides) must set it.
    pub required: bool,
    /// The value is sensitive: it is redacted wherever a run's properties are shown.
    pub secret: bool,
    /// The property decides where the provisioner reaches or with what rights (an endpoint,
    /// a region, credentials, hosts, a directory on the server's host, a template, an SSH
    /// user): only the profile's author, or a level as trusted, may set it. Secrets always
    /// are.
    pub author_only: bool,
    /// The property names a place on the server's own host (a work or state directory):
    /// only an instance admin may set it, in a profile or in instance preferences.
    pub host_path: bool,
}

impl PropertySpec {
    /// An optional, non-secret property.
    pub const fn optional(name: &'static str, kind: PropertyKind) -> Self {
        Self {
            name,
            kind,
            required: false,
            secret: false,
            author_only: false,
            host_path: false,
        }
    }

    /// An optional property whose value is a secret (a key, a password): give it as a
    /// `${secure(name)}` reference to the secure store.
    pub const fn secret(name: &'static str, kind: PropertyKind) -> Self {
        Self {
            name,
            kind,
            required: false,
            secret: true,
            author_only: true,
            host_path: false,
        }
    }

    /// A property every profile of this provisioner must set.
    pub const fn required(name: &'static str, kind: PropertyKind) -> Self {
        Self {
            name,
            kind,
            required: true,
            secret: false,
            author_only: false,
            host_path: false,
        }
    }

    /// The same property, settable only by the profile's author (see [`Self::author_only`]).
    pub const fn author_only(self) -> Self {
        Self {
            author_only: true,
            ..self
        }
    }

    /// The same property, naming a place on the server's host (see [`Self::host_path`]).
    pub const fn host_path(self) -> Self {
        Self {
            author_only: true,
            host_path: true,
            ..self
        }
    }
}

/// The type and range of a property value.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyKind {
    /// Any non-empty text.
    Text,
    /// A whole number in `min..=max`.
    Integer { min: i64, max: i64 },
    /// A decimal number in `min..=max`.
    Number { min: f64, max: f64 },
    /// `true` or `false`.
    Boolean,
    /// A duration a person types, parsed with humantime (`250ms`, `30s`, `8h`), in `min..=max`.
    Duration { min: Duration, max: Duration },
    /// One of a fixed set of words.
    OneOf(&'static [&'static str]),
    /// A JSON object, at most `max_bytes` long.
    JsonObject { max_bytes: usize },
}

/// A property that failed validation: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("property '{property}': {message}")]
pub struct PropertyError {
    pub property: String,
    pub message: String,
}

impl PropertyError {
    pub fn new(property: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            property: property.into(),
            message: message.into(),
        }
    }
}

/// A provisioner plugin.
///
/// Implementations are stateless and cheap to share. Each resource call makes one outside
/// call and reports what it saw; the framework owns all persisted state, so every method may
/// be called again after a crash. Errors say whether a retry can help.
pub trait Provisioner: Send + Sync + std::fmt::Debug {
    /// The static description of this provisioner and its properties.
    fn spec(&self) -> &'static ProvisionerSpec;

    /// Checks a full property map (a profile's, or a run's after overrides).
    ///
    /// The default checks each property against the spec; override it to add rules that span
    /// several properties, and call [`validate_properties`] first.
    fn validate(&self, properties: &Properties) -> Result<(), PropertyError> {
        validate_properties(self.spec(), properties)
    }

    /// Where node `master` (the master, or a worker) of a cluster made with `properties` may
    /// be created, in order of preference: the framework asks for the first, and moves on to
    /// the next when a create answers [`ProvisionError::capacity`]. The default reads the
    /// shared `zones` and `marketType` properties ([`capacity::candidates`]).
    fn placements(&self, properties: &Properties, master: bool) -> Vec<Placement> {
        capacity::candidates(self.spec(), properties, master)
    }

    /// The nodes of a cluster made with `properties`, master first. Empty means no cluster:
    /// the program runs on the server's host.
    fn nodes(&self, properties: &Properties) -> Vec<String>;

    /// The most nodes a cluster made with `properties` may grow to (an expand may not pass
    /// it). The default is [`ProvisionerSpec::max_nodes`]; a provisioner whose nodes are fixed
    /// by its properties (a list of hosts, one managed cluster) answers how many it has.
    fn max_nodes(&self, properties: &Properties) -> u32 {
        let _ = properties;
        self.spec().max_nodes()
    }

    /// Requests the creation of the resource `key`, tagged with [`ResourceKey::tags`]. It may
    /// come back `Pending`; the framework polls it with [`Provisioner::describe`].
    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource>;

    /// The live (not deleted) resource carrying `key`'s tags, if there is one.
    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>>;

    /// The resource with provider id `id`; `None` once it is gone.
    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>>;

    /// Requests the deletion of resource `id`. Deleting a resource that is gone succeeds.
    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()>;

    /// Every live resource that carries ebb's tags in the account `ctx` names, for the
    /// janitor's sweep.
    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>>;

    /// Every live resource of the cluster of run `run` (those whose [`TAG_RUN`] is `run`),
    /// in as few calls as the provider allows: the framework's many-resource lookup, which
    /// watches a live cluster's nodes (a spot node the cloud reclaimed is missing from it).
    /// The default filters [`Provisioner::list`]; a provisioner that can filter by tag or
    /// label in the call itself should.
    fn lookup<'a>(&'a self, ctx: &'a Context, run: &'a str) -> Call<'a, Vec<Resource>> {
        Box::pin(async move {
            let all = self.list(ctx).await?;
            Ok(all
                .into_iter()
                .filter(|r| r.tags.get(TAG_RUN).is_some_and(|v| v == run))
                .collect())
        })
    }

    /// Whether the framework should answer its nodes' polls from shared [`Self::lookup`]s
    /// of the whole cluster (one call for many nodes) instead of a `describe` each. For a
    /// provisioner whose `lookup` is one call filtered by the cluster's tags.
    fn batches_lookups(&self) -> bool {
        false
    }

    /// How fast the account `properties` point at may be called, by kind of call: the
    /// framework holds every server's calls to it within these buckets (shaped like the
    /// cloud's documented limits), so the cloud's throttling is rare; a throttled call
    /// ([`ProvisionError::throttled`]) is waited out, not failed. The default is no limit.
    fn call_rates(&self, properties: &Properties) -> capacity::CallRates {
        let _ = properties;
        capacity::CallRates::default()
    }

    /// Which account (region, endpoint, credentials' owner...) `properties` point at, so that
    /// the janitor lists each account once however many profiles share it. It must not hold
    /// a secret. The default treats every property map as one account.
    fn account(&self, properties: &Properties) -> String {
        let _ = properties;
        String::new()
    }
}

/// Checks `properties` against `spec`: no unknown names, every required one present, each
/// value of the right kind and in range. Stops at the first bad property, in name order.
pub fn validate_properties(
    spec: &ProvisionerSpec,
    properties: &Properties,
) -> Result<(), PropertyError> {
    for (name, value) in properties {
        let Some(prop) = spec.property(name) else {
            return Err(PropertyError::new(name, unknown_message(spec)));
        };
        check_value(&prop.kind, value).map_err(|message| PropertyError::new(name, message))?;
    }
    if let Some(missing) = spec
        .properties
        .iter()
        .find(|p| p.required && !properties.contains_key(p.name))
    {
        return Err(PropertyError::new(
            missing.name,
            format!("is required by provisioner '{}'", spec.name),
        ));
    }
    capacity::validate(properties)
}

fn unknown_message(spec: &ProvisionerSpec) -> String {
    if spec.properties.is_empty() {
        return format!("provisioner '{}' takes no properties", spec.name);
    }
    let known: Vec<&str> = spec.properties.iter().map(|p| p.name).collect();
    format!(
        "is not a property of provisioner '{}' (known: {})",
        spec.name,
        known.join(", ")
    )
}

/// Checks one value against its kind; the error text completes "property 'x': ...".
pub fn check_value(kind: &PropertyKind, value: &str) -> Result<(), String> {
    match kind {
        PropertyKind::Text => {
            if value.trim().is_empty() {
                return Err("must not be empty".into());
            }
        }
        PropertyKind::Integer { min, max } => {
            let n: i64 = value
                .trim()
                .parse()
                .map_err(|_| format!("must be a whole number, got '{value}'"))?;
            if n < *min || n > *max {
                return Err(format!("must be between {min} and {max}, got {n}"));
            }
        }
        PropertyKind::Number { min, max } => {
            let n: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|n: &f64| n.is_finite())
                .ok_or_else(|| format!("must be a number, got '{value}'"))?;
            if n < *min || n > *max {
                return Err(format!("must be between {min} and {max}, got {n}"));
            }
        }
        PropertyKind::Boolean => {
            parse_bool(value)?;
        }
        PropertyKind::Duration { min, max } => {
            let d = parse_duration(value)?;
            if d < *min || d > *max {
                return Err(format!(
                    "must be between {} and {}, got {}",
                    humantime::format_duration(*min),
                    humantime::format_duration(*max),
                    humantime::format_duration(d)
                ));
            }
        }
        PropertyKind::JsonObject { max_bytes } => {
            if value.len() > *max_bytes {
                return Err(format!(
                    "must be at most {max_bytes} bytes, got {}",
                    value.len()
                ));
            }
            match serde_json::from_str::<serde_json::Value>(value) {
                Ok(serde_json::Value::Object(_)) => {}
                Ok(_) => return Err("must be a JSON object ({\"name\": value, ...})".into()),
                Err(e) => return Err(format!("must be a JSON object: {e}")),
            }
        }
        PropertyKind::OneOf(words) => {
            if !words.contains(&value) {
                return Err(format!(
                    "must be one of {}, got '{value}'",
                    words.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Parses `true`/`false` (any case).
pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("must be true or false, got '{value}'")),
    }
}

/// Parses a duration a person typed (`30s`, `1h 30m`, `250ms`). A bare number is seconds.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    if value.starts_with('-') {
        return Err(format!("must not be negative, got '{value}'"));
    }
    humantime::parse_duration(value)
        .map_err(|e| format!("must be a duration like 30s, 5m or 8h, got '{value}' ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: ProvisionerSpec = ProvisionerSpec {
        name: "test",
        label: "Test",
        description: "for tests",
        properties: &[
            PropertySpec::required("nodes", PropertyKind::Integer { min: 1, max: 10 }),
            PropertySpec::optional("rate", PropertyKind::Number { min: 0.0, max: 1.0 }),
            PropertySpec::optional("fail", PropertyKind::Boolean),
            PropertySpec::optional(
                "latency",
                PropertyKind::Duration {
                    min: Duration::ZERO,
                    max: Duration::from_secs(60),
                },
            ),
            PropertySpec::optional("mode", PropertyKind::OneOf(&["a", "b"])),
            PropertySpec::optional("dir", PropertyKind::Text),
        ],
    };

    fn props(pairs: &[(&str, &str)]) -> Properties {
        properties(pairs.iter().copied())
    }

    #[test]
    fn accepts_valid_values() {
        let p = props(&[
            ("nodes", "3"),
            ("rate", "0.5"),
            ("fail", "TRUE"),
            ("latency", "250ms"),
            ("mode", "b"),
            ("dir", "/tmp/x"),
        ]);
        assert_eq!(validate_properties(&SPEC, &p), Ok(()));
        assert_eq!(
            validate_properties(&SPEC, &props(&[("nodes", "1"), ("latency", "60")])),
            Ok(())
        );
    }

    #[test]
    fn names_the_bad_property() {
        type Case = (
            &'static [(&'static str, &'static str)],
            &'static str,
            &'static str,
        );
        let cases: &[Case] = &[
            (&[], "nodes", "is required"),
            (&[("nodes", "x")], "nodes", "whole number"),
            (&[("nodes", "0")], "nodes", "between 1 and 10"),
            (&[("nodes", "11")], "nodes", "between 1 and 10"),
            (
                &[("nodes", "2"), ("rate", "1.5")],
                "rate",
                "between 0 and 1",
            ),
            (
                &[("nodes", "2"), ("rate", "NaN")],
                "rate",
                "must be a number",
            ),
            (&[("nodes", "2"), ("fail", "yes")], "fail", "true or false"),
            (&[("nodes", "2"), ("latency", "-5s")], "latency", "negative"),
            (
                &[("nodes", "2"), ("latency", "soon")],
                "latency",
                "duration",
            ),
            (
                &[("nodes", "2"), ("latency", "2m")],
                "latency",
                "between 0s and 1m",
            ),
            (&[("nodes", "2"), ("mode", "c")], "mode", "one of a, b"),
            (&[("nodes", "2"), ("dir", " ")], "dir", "must not be empty"),
            (
                &[("nodes", "2"), ("nodez", "2")],
                "nodez",
                "known: nodes, rate",
            ),
        ];
        for (input, property, fragment) in cases {
            let err = validate_properties(&SPEC, &props(input)).expect_err("must be rejected");
            assert_eq!(err.property, *property, "input {input:?}");
            assert!(
                err.message.contains(fragment),
                "input {input:?}: message '{}' lacks '{fragment}'",
                err.message
            );
        }
    }

    #[test]
    fn a_provisioner_without_properties_says_so() {
        const EMPTY: ProvisionerSpec = ProvisionerSpec {
            name: "none",
            label: "None",
            description: "",
            properties: &[],
        };
        let err = validate_properties(&EMPTY, &props(&[("x", "1")])).expect_err("rejected");
        assert_eq!(
            err.to_string(),
            "property 'x': provisioner 'none' takes no properties"
        );
    }
}
