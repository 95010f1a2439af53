//! A plugin's descriptor, `plugin.json`: what the plugin is, the command that runs it and, for
//! a provisioner, its properties and widget.
//!
//! The descriptor is read once, when the server starts (or `ebb plugin test` runs), and checked
//! whole before anything uses it: a bad one is an error naming the file and the field, and
//! leaves the other plugins alone. Every count and length in it is bounded.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ebb_spi::resource::{
    HEAL, HEAL_ATTEMPTS, HEAL_WINDOW, RETRY_BUDGET, TEMPLATE, TEMPLATE_CONFIG, TEMPLATE_SERVICES,
};
use ebb_spi::{PropertyKind, PropertySpec, ProvisionerSpec};
use serde::Deserialize;
use serde_json::Value;

/// The descriptor's file name in a plugin's directory.
pub const FILE: &str = "plugin.json";
/// The largest descriptor read, in bytes.
pub const MAX_FILE: u64 = 1 << 20;
/// The most properties a plugin may declare.
pub const MAX_PROPERTIES: usize = 100;
/// The most processes of one plugin that run at once.
pub const MAX_CONCURRENCY: u32 = 64;
/// The longest a plugin may take to answer one call.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// The calls of a plugin whose descriptor sets no `timeout` end after this long.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How many processes of a plugin run at once when its descriptor does not say.
pub const DEFAULT_CONCURRENCY: u32 = 4;

/// The properties every provisioner that makes resources takes, which the framework (not the
/// plugin) acts on: a plugin gets them without declaring them, and may not redeclare them.
pub const FRAMEWORK_PROPERTIES: [PropertySpec; 7] = [
    RETRY_BUDGET,
    TEMPLATE,
    TEMPLATE_CONFIG,
    TEMPLATE_SERVICES,
    HEAL,
    HEAL_ATTEMPTS,
    HEAL_WINDOW,
];

/// What a plugin does for ebb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// Makes and removes the resources of clusters.
    Provisioner,
    /// Runs a service's actions on a node.
    Automator,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Provisioner => "provisioner",
            Kind::Automator => "automator",
        }
    }
}

/// A descriptor that was checked whole.
#[derive(Debug, Clone)]
pub struct Descriptor {
    /// The plugin's directory: its command runs there.
    pub dir: PathBuf,
    pub name: &'static str,
    pub kind: Kind,
    /// The plugin's own version, as its author numbers it.
    pub version: String,
    /// The program and its arguments. A program named with a `/` is found in the plugin's
    /// directory; a bare name on the server's `PATH`.
    pub command: Vec<String>,
    /// How many of its processes may run at once.
    pub concurrency: u32,
    /// How long one call may take.
    pub timeout: Duration,
    /// Its properties (with the framework's), for a provisioner.
    pub spec: &'static ProvisionerSpec,
    /// The properties whose values say which account a profile points at (for the janitor).
    pub account: Vec<String>,
    /// The plugin answers `lookup` (a cluster's resources in one call), so ebb answers a
    /// cluster's polls from shared lookups instead of a `describe` per node.
    pub lookups: bool,
    /// The widget's configuration groups for the plugin's own properties (CDAP's format).
    pub configuration_groups: Value,
    /// What the server checks of the plugin's directory before each of its processes
    /// starts (that no other user could have changed it since it was loaded); none checks
    /// nothing.
    pub guard: Option<Guard>,
}

/// A check of a plugin's directory (`dir`) before one of its processes starts: the reason
/// it may not.
#[derive(Clone)]
pub struct Guard(pub std::sync::Arc<GuardFn>);

/// The function of a [`Guard`].
pub type GuardFn = dyn Fn(&Path) -> Result<(), String> + Send + Sync;

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard(..)")
    }
}

/// A descriptor that cannot be used: which file, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: field '{field}': {message}", file.display())]
pub struct DescriptorError {
    pub file: PathBuf,
    pub field: String,
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    name: String,
    kind: Kind,
    protocol: u32,
    version: String,
    command: Vec<String>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    properties: Vec<RawProperty>,
    #[serde(default)]
    account: Vec<String>,
    #[serde(default)]
    lookups: bool,
    #[serde(default)]
    concurrency: Option<u32>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    widget: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawProperty {
    name: String,
    #[serde(rename = "type")]
    kind: KindName,
    #[serde(default)]
    min: Option<Value>,
    #[serde(default)]
    max: Option<Value>,
    #[serde(default)]
    values: Option<Vec<String>>,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    secret: bool,
    #[serde(default)]
    author_only: bool,
    #[serde(default)]
    host_path: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
enum KindName {
    Text,
    Integer,
    Number,
    Boolean,
    Duration,
    OneOf,
}

/// Reads and checks the descriptor of the plugin in `dir`.
pub fn load(dir: &Path) -> Result<Descriptor, DescriptorError> {
    let file = dir.join(FILE);
    let fail = |field: &str, message: String| DescriptorError {
        file: file.clone(),
        field: field.to_string(),
        message,
    };
    let size = std::fs::metadata(&file)
        .map_err(|e| fail("", format!("cannot be read: {e}")))?
        .len();
    if size > MAX_FILE {
        return Err(fail("", format!("is {size} bytes; the most is {MAX_FILE}")));
    }
    let text =
        std::fs::read_to_string(&file).map_err(|e| fail("", format!("cannot be read: {e}")))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    let raw: Raw = serde_path_to_error::deserialize(de)
        .map_err(|e| fail(&e.path().to_string(), e.inner().to_string()))?;
    check(dir, raw).map_err(|(field, message)| fail(&field, message))
}

type Fault = (String, String);

fn fault(field: impl Into<String>, message: impl Into<String>) -> Fault {
    (field.into(), message.into())
}

fn check(dir: &Path, raw: Raw) -> Result<Descriptor, Fault> {
    if !valid_name(&raw.name) {
        return Err(fault(
            "name",
            format!(
                "must be 1 to 40 lowercase letters, digits or '-', starting with a letter, got '{}'",
                raw.name
            ),
        ));
    }
    if raw.protocol != crate::PROTOCOL {
        return Err(fault(
            "protocol",
            format!(
                "this ebb speaks plugin protocol {}, the plugin {}",
                crate::PROTOCOL,
                raw.protocol
            ),
        ));
    }
    if raw.version.trim().is_empty() || raw.version.len() > 40 {
        return Err(fault("version", "must be 1 to 40 characters"));
    }
    if raw.command.is_empty() || raw.command.len() > 32 {
        return Err(fault(
            "command",
            "must be a program and at most 31 arguments",
        ));
    }
    if let Some(i) = raw
        .command
        .iter()
        .position(|a| a.is_empty() || a.len() > 4096 || a.contains('\0'))
    {
        return Err(fault(
            format!("command[{i}]"),
            "must be 1 to 4096 characters without NUL",
        ));
    }
    let concurrency = raw.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        return Err(fault(
            "concurrency",
            format!("must be between 1 and {MAX_CONCURRENCY}, got {concurrency}"),
        ));
    }
    let timeout = match &raw.timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) => ebb_spi::parse_duration(t)
            .map_err(|m| fault("timeout", m))
            .and_then(|d| {
                if d < Duration::from_secs(1) || d > MAX_TIMEOUT {
                    Err(fault("timeout", "must be between 1s and 10m"))
                } else {
                    Ok(d)
                }
            })?,
    };
    let label = bounded("label", raw.label.unwrap_or_else(|| raw.name.clone()), 80)?;
    let description = bounded("description", raw.description.unwrap_or_default(), 2000)?;
    if raw.properties.len() > MAX_PROPERTIES {
        return Err(fault(
            "properties",
            format!("has {}; the most is {MAX_PROPERTIES}", raw.properties.len()),
        ));
    }
    let mut properties = Vec::with_capacity(raw.properties.len() + FRAMEWORK_PROPERTIES.len());
    for (i, p) in raw.properties.iter().enumerate() {
        let at = |f: &str| format!("properties[{i}].{f}");
        if !valid_property_name(&p.name) {
            return Err(fault(
                at("name"),
                format!(
                    "must be 1 to 64 letters, digits, '_' or '-', starting with a letter, got '{}'",
                    p.name
                ),
            ));
        }
        if FRAMEWORK_PROPERTIES.iter().any(|f| f.name == p.name) {
            return Err(fault(
                at("name"),
                format!(
                    "'{}' is ebb's own property, which every plugin takes",
                    p.name
                ),
            ));
        }
        if properties.iter().any(|q: &PropertySpec| q.name == p.name) {
            return Err(fault(at("name"), format!("'{}' is declared twice", p.name)));
        }
        properties.push(property(p).map_err(|(f, m)| fault(at(&f), m))?);
    }
    if raw.kind == Kind::Provisioner {
        properties.extend(FRAMEWORK_PROPERTIES);
    }
    for (i, name) in raw.account.iter().enumerate() {
        if !properties.iter().any(|p| p.name == name) {
            return Err(fault(
                format!("account[{i}]"),
                format!("'{name}' is not one of the plugin's properties"),
            ));
        }
        if properties.iter().any(|p| p.name == name && p.secret) {
            return Err(fault(
                format!("account[{i}]"),
                format!("'{name}' is a secret; an account is shown and kept"),
            ));
        }
    }
    let own = &properties[..raw.properties.len()];
    let configuration_groups = match raw.widget {
        None => generated_widget(own),
        Some(w) => widget(dir, w, own)?,
    };
    let spec: &'static ProvisionerSpec = Box::leak(Box::new(ProvisionerSpec {
        name: leak(raw.name),
        label: leak(label),
        description: leak(description),
        properties: Box::leak(properties.into_boxed_slice()),
    }));
    Ok(Descriptor {
        dir: dir.to_path_buf(),
        name: spec.name,
        kind: raw.kind,
        version: raw.version,
        command: raw.command,
        concurrency,
        timeout,
        spec,
        account: raw.account,
        lookups: raw.lookups,
        configuration_groups,
        guard: None,
    })
}

/// A plugin's spec lives as long as the server: it is read once, at start-up (the leak is
/// bounded by the number of plugins in the plugin directories).
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn bounded(field: &str, value: String, most: usize) -> Result<String, Fault> {
    if value.chars().count() > most {
        return Err(fault(field, format!("must be at most {most} characters")));
    }
    Ok(value)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 40
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn valid_property_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn property(p: &RawProperty) -> Result<PropertySpec, Fault> {
    let name = leak(p.name.clone());
    let only_for = |field: &str, what: &str| fault(field, format!("is only for {what} properties"));
    if p.values.is_some() && !matches!(p.kind, KindName::OneOf) {
        return Err(only_for("values", "oneOf"));
    }
    let ranged = matches!(
        p.kind,
        KindName::Integer | KindName::Number | KindName::Duration
    );
    if !ranged && p.min.is_some() {
        return Err(only_for("min", "integer, number and duration"));
    }
    if !ranged && p.max.is_some() {
        return Err(only_for("max", "integer, number and duration"));
    }
    let kind = match p.kind {
        KindName::Text => PropertyKind::Text,
        KindName::Boolean => PropertyKind::Boolean,
        KindName::Integer => {
            let get = |field: &str, v: &Option<Value>, default: i64| match v {
                None => Ok(default),
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| fault(field, format!("must be a whole number, got {v}"))),
            };
            let (min, max) = (get("min", &p.min, 0)?, get("max", &p.max, i64::MAX)?);
            ordered(min, max)?;
            PropertyKind::Integer { min, max }
        }
        KindName::Number => {
            let get = |field: &str, v: &Option<Value>, default: f64| match v {
                None => Ok(default),
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| fault(field, format!("must be a number, got {v}"))),
            };
            let (min, max) = (get("min", &p.min, f64::MIN)?, get("max", &p.max, f64::MAX)?);
            ordered(min, max)?;
            PropertyKind::Number { min, max }
        }
        KindName::Duration => {
            let get = |field: &str, v: &Option<Value>, default: Duration| match v {
                None => Ok(default),
                Some(Value::String(s)) => ebb_spi::parse_duration(s).map_err(|m| fault(field, m)),
                Some(v) => Err(fault(
                    field,
                    format!("must be a duration like \"30s\", got {v}"),
                )),
            };
            let min = get("min", &p.min, Duration::ZERO)?;
            let max = get("max", &p.max, Duration::from_secs(366 * 24 * 3600))?;
            ordered(min, max)?;
            PropertyKind::Duration { min, max }
        }
        KindName::OneOf => {
            let values = p.values.as_deref().unwrap_or_default();
            if values.is_empty() || values.len() > 100 {
                return Err(fault("values", "must list 1 to 100 words"));
            }
            if values.iter().any(|v| v.is_empty() || v.len() > 100) {
                return Err(fault("values", "each must be 1 to 100 characters"));
            }
            let words: Vec<&'static str> = values.iter().map(|v| leak(v.clone())).collect();
            PropertyKind::OneOf(Box::leak(words.into_boxed_slice()))
        }
    };
    if p.secret && p.host_path {
        return Err(fault("hostPath", "a secret cannot also be a path"));
    }
    Ok(PropertySpec {
        name,
        kind,
        required: p.required,
        secret: p.secret,
        author_only: p.author_only || p.secret || p.host_path,
        host_path: p.host_path,
    })
}

fn ordered<T: PartialOrd>(min: T, max: T) -> Result<(), Fault> {
    if min > max {
        return Err(fault("max", "must not be below min"));
    }
    Ok(())
}

/// The widget of a plugin that brings none: one group with a field per property.
fn generated_widget(properties: &[PropertySpec]) -> Value {
    let fields: Vec<Value> = properties
        .iter()
        .map(|p| {
            let (widget, attributes) = if p.secret {
                ("securekey-password", serde_json::json!({}))
            } else {
                match &p.kind {
                PropertyKind::OneOf(words) => ("select", serde_json::json!({ "values": words })),
                PropertyKind::Integer { min, max } => {
                    ("number", serde_json::json!({ "min": min, "max": max }))
                }
                PropertyKind::Boolean => (
                    "toggle",
                    serde_json::json!({ "on": { "value": "true" }, "off": { "value": "false" } }),
                ),
                PropertyKind::Text
                | PropertyKind::Number { .. }
                | PropertyKind::Duration { .. }
                | PropertyKind::JsonObject { .. } => ("textbox", serde_json::json!({})),
                }
            };
            serde_json::json!({
                "widget-type": widget,
                "label": p.name,
                "name": p.name,
                "description": "",
                "widget-attributes": attributes,
            })
        })
        .collect();
    if fields.is_empty() {
        return Value::Array(Vec::new());
    }
    serde_json::json!([{ "label": "Properties", "properties": fields }])
}

/// The plugin's own widget (inline, or the name of a JSON file in its directory), checked to
/// name each of its properties exactly once.
fn widget(dir: &Path, widget: Value, properties: &[PropertySpec]) -> Result<Value, Fault> {
    let mut widget = if let Value::String(file) = widget {
        {
            let path = Path::new(&file);
            if path.is_absolute() || path.components().any(|c| c.as_os_str() == "..") {
                return Err(fault(
                    "widget",
                    "must name a file inside the plugin's directory",
                ));
            }
            let text = std::fs::read_to_string(dir.join(path))
                .map_err(|e| fault("widget", format!("{file} cannot be read: {e}")))?;
            if text.len() as u64 > MAX_FILE {
                return Err(fault(
                    "widget",
                    format!("{file} is larger than {MAX_FILE} bytes"),
                ));
            }
            serde_json::from_str(&text)
                .map_err(|e| fault("widget", format!("{file} is not JSON: {e}")))?
        }
    } else {
        widget
    };
    let groups = widget
        .get_mut("configuration-groups")
        .map(Value::take)
        .ok_or_else(|| fault("widget", "has no 'configuration-groups'"))?;
    let list = groups
        .as_array()
        .ok_or_else(|| fault("widget.configuration-groups", "must be a list"))?;
    let mut named = Vec::new();
    for (g, group) in list.iter().enumerate() {
        let at = format!("widget.configuration-groups[{g}]");
        if !group["label"].is_string() {
            return Err(fault(format!("{at}.label"), "must be text"));
        }
        let fields = group["properties"]
            .as_array()
            .ok_or_else(|| fault(format!("{at}.properties"), "must be a list"))?;
        for (f, field) in fields.iter().enumerate() {
            let at = format!("{at}.properties[{f}]");
            for key in ["widget-type", "label", "name"] {
                if !field[key].is_string() {
                    return Err(fault(format!("{at}.{key}"), "must be text"));
                }
            }
            let name = field["name"].as_str().unwrap_or_default();
            let Some(spec) = properties.iter().find(|p| p.name == name) else {
                return Err(fault(
                    format!("{at}.name"),
                    format!("'{name}' is not one of the plugin's properties"),
                ));
            };
            let secure = field["widget-type"]
                .as_str()
                .is_some_and(|t| t.starts_with("securekey"));
            if secure != spec.secret {
                return Err(fault(
                    format!("{at}.widget-type"),
                    "a secret property takes a securekey widget, and only a secret one",
                ));
            }
            if named.contains(&name) {
                return Err(fault(
                    format!("{at}.name"),
                    format!("'{name}' is shown twice"),
                ));
            }
            named.push(name);
        }
    }
    if let Some(missing) = properties.iter().find(|p| !named.contains(&p.name)) {
        return Err(fault(
            "widget",
            format!("does not show property '{}'", missing.name),
        ));
    }
    Ok(groups)
}

#[cfg(test)]
mod tests;
