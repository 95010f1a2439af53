//! Property values and where they come from: the levels of the preference hierarchy, a run's
//! effective properties, which names are secret, and the `${secure(name)}` reference syntax.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::names;

/// Key that assigns a profile.
pub const PROFILE_KEY: &str = "system.profile.name";
/// Prefix of keys that override a profile property.
pub const PROPERTY_PREFIX: &str = "system.profile.properties.";
/// Key that makes a start a limit refuses wait in its namespace's queue instead (`true`), or
/// not (`false`), whatever the namespace's `queueRuns` says.
pub const QUEUE_KEY: &str = "system.run.queue";

/// The levels of the preference hierarchy, from least to most specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Level {
    /// Instance preferences (`/v3/preferences`).
    Instance,
    /// Namespace preferences.
    Namespace,
    /// The app's deploy-time configuration.
    App,
    /// App preferences.
    AppPreferences,
    /// Program preferences.
    Program,
    /// The properties of the schedule that started the run.
    Schedule,
    /// Runtime arguments of the run.
    Runtime,
}

impl Level {
    /// The least trusted writer of this level: runtime arguments come from whoever may
    /// start a run, preferences and app configuration from namespace admins, instance
    /// preferences from instance admins.
    pub fn writer(self) -> crate::model::access::Trust {
        use crate::model::access::Trust;
        match self {
            Level::Instance => Trust::InstanceAdmin,
            Level::Namespace
            | Level::App
            | Level::AppPreferences
            | Level::Program
            | Level::Schedule => Trust::NamespaceAdmin,
            Level::Runtime => Trust::Operator,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Instance => "instance preferences",
            Level::Namespace => "namespace preferences",
            Level::App => "app configuration",
            Level::AppPreferences => "app preferences",
            Level::Program => "program preferences",
            Level::Schedule => "schedule properties",
            Level::Runtime => "runtime arguments",
        })
    }
}

/// Where an effective value came from: `default`, `profile`, a level (`namespace`,
/// `appPreferences`, `runtime`, ...), or `schedule:<name>` for the properties of the schedule
/// that started the run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(into = "String", try_from = "String")]
#[schemars(with = "String")]
pub enum Origin {
    /// Nothing chose a profile: the instance default.
    Default,
    /// The profile's own value.
    Profile,
    /// An override at this level.
    Level(Level),
    /// The properties of schedule `ns/app/name`.
    Schedule(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Profile => f.write_str("profile"),
            Origin::Level(level) => {
                let v = serde_json::to_value(level).map_err(|_| fmt::Error)?;
                f.write_str(v.as_str().unwrap_or_default())
            }
            Origin::Schedule(name) => write!(f, "schedule:{name}"),
        }
    }
}

impl From<Origin> for String {
    fn from(o: Origin) -> String {
        o.to_string()
    }
}

impl TryFrom<String> for Origin {
    type Error = String;

    fn try_from(s: String) -> Result<Origin, String> {
        match s.as_str() {
            "default" => Ok(Origin::Default),
            "profile" => Ok(Origin::Profile),
            _ => match s.strip_prefix("schedule:") {
                Some(name) => Ok(Origin::Schedule(name.to_string())),
                None => serde_json::from_value(serde_json::Value::String(s.clone()))
                    .map(Origin::Level)
                    .map_err(|_| format!("'{s}' is not an origin")),
            },
        }
    }
}

/// One level's key/values.
pub type Values = BTreeMap<String, String>;

/// One effective property of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveProperty {
    pub name: String,
    pub value: String,
    pub origin: Origin,
}

/// `properties` by name, as a provisioner takes them.
pub fn by_name(properties: &[EffectiveProperty]) -> ebb_spi::Properties {
    properties
        .iter()
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect()
}

/// Names that look secret but are not: a host key's fingerprint, the host key policy and an
/// EC2 key pair's name are public, and an admin checks them by eye.
const PUBLIC_NAMES: &[&str] = &[ebb_spi::FACT_SSH_HOST_KEY, "sshHostKeyChecking", "keyName"];

/// Whether a property name looks secret: its value is shown as `***`.
pub fn is_secret_name(name: &str) -> bool {
    if PUBLIC_NAMES.contains(&name) {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    ["secret", "password", "key", "token"]
        .iter()
        .any(|s| lower.contains(s))
}

/// The value to show for property `name`.
pub fn redact<'a>(name: &str, value: &'a str) -> &'a str {
    // A reference to the secure store names a secret without holding it.
    if is_secret_name(name) && !is_reference(value) {
        "***"
    } else {
        value
    }
}

const OPEN: &str = "${secure(";
const CLOSE: &str = ")}";

/// The secure keys `value` refers to, in order, or what is wrong with a reference.
pub fn references(value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    substitute(value, |name| {
        names::check("secure key name", name).map_err(|e| e.to_string())?;
        out.push(name.to_string());
        Ok(String::new())
    })?;
    Ok(out)
}

/// Whether `value` is nothing but one reference (so it can be shown: it names, not holds, a
/// secret).
pub fn is_reference(value: &str) -> bool {
    let v = value.trim();
    v.starts_with(OPEN) && v.ends_with(CLOSE) && references(v).is_ok_and(|r| r.len() == 1)
}

/// Whether `value` holds a `${secure(...)}` reference, well formed or not.
pub fn mentions_secure(value: &str) -> bool {
    value.contains(OPEN)
}

/// Checks the references in `properties` (from a profile, or a run's after its overrides)
/// against `spec`: a property the provisioner marks secret must be exactly one
/// `${secure(name)}` reference, so no secret is ever stored or shown in the clear; and no
/// other property may hold one, so a secret can never be written into a directory name, sent
/// to an endpoint or put in a tag (a 400 naming `{field}.{property}` otherwise).
pub fn check_references<'a>(
    field: &str,
    spec: &ebb_spi::ProvisionerSpec,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), Invalid> {
    for (name, value) in properties {
        let at = || format!("{field}.{name}");
        let refs = references(value).map_err(|e| Invalid::new(at(), e))?;
        let secret = spec.property(name).is_some_and(|p| p.secret);
        if secret && !is_reference(value) {
            return Err(Invalid::new(
                at(),
                "is a secret: give it as a reference to the secure store, ${secure(<key>)}, after storing it with PUT /v3/namespaces/<namespace>/securekeys/<key> (or `ebb secure put <key>`)",
            ));
        }
        if !secret && !refs.is_empty() {
            let secrets: Vec<&str> = spec
                .properties
                .iter()
                .filter(|p| p.secret)
                .map(|p| p.name)
                .collect();
            let allowed = if secrets.is_empty() {
                format!("provisioner '{}' has none", spec.name)
            } else {
                format!("for provisioner '{}': {}", spec.name, secrets.join(", "))
            };
            return Err(Invalid::new(
                at(),
                format!(
                    "is not a secret property: a ${{secure(...)}} reference may only be the value of a secret property ({allowed})"
                ),
            ));
        }
    }
    Ok(())
}

/// `value` with each reference replaced by `lookup(name)`.
pub fn substitute(
    value: &str,
    mut lookup: impl FnMut(&str) -> Result<String, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let end = after
            .find(CLOSE)
            .ok_or("a ${secure(name)} reference is not closed with ')}'")?;
        out.push_str(&rest[..start]);
        out.push_str(&lookup(after[..end].trim())?);
        rest = &after[end + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_parsed_and_checked() {
        assert_eq!(references("plain").expect("none"), Vec::<String>::new());
        assert_eq!(references("${secure(aws-key)}").expect("one"), ["aws-key"]);
        assert_eq!(
            references("user:${secure(u)}:${secure( p )}").expect("two"),
            ["u", "p"]
        );
        assert!(references("${secure(aws-key").is_err());
        assert!(references("${secure(a/b)}").is_err());
        assert!(is_reference(" ${secure(k)} "));
        assert!(!is_reference("x${secure(k)}"));
        assert!(!is_reference("${secure(a)}${secure(b)}"));
    }

    #[test]
    fn secret_looking_names_are_redacted() {
        for name in [
            "apiKey",
            "PASSWORD",
            "client_secret",
            "authToken",
            "sshKeyPath",
        ] {
            assert_eq!(redact(name, "v"), "***", "{name}");
        }
        for name in [
            "nodes",
            "keepalive",
            "zone",
            "sshHostKey",
            "sshHostKeyChecking",
        ] {
            assert_eq!(redact(name, "v"), "v", "{name}");
        }
    }
}
