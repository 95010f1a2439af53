//! The registry of provisioners this server offers, with their widgets.
//!
//! Each built-in provisioner comes with a widget JSON (`widgets/<name>.json`, CDAP's plugin
//! widget format) compiled into the binary, so the server runs from any directory. The
//! registry is built once at start-up and read-only afterwards. It never touches the store.
//! Plugins found in the plugin directories join it at start-up ([`super::plugins`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use ebb_plugin::{PluginAutomator, PluginProvisioner};
use ebb_spi::Provisioner;

pub use super::native::Native;
use crate::model::view::{PluginFault, PluginList, PluginView, ProvisionerDetail};

/// Widgets of the built-in provisioners, by name.
const WIDGETS: &[(&str, &str)] = &[
    ("native", include_str!("../../widgets/native.json")),
    ("local", include_str!("../../widgets/local.json")),
    ("sim", include_str!("../../widgets/sim.json")),
    ("aws-ec2", include_str!("../../widgets/aws-ec2.json")),
    ("hosts", include_str!("../../widgets/hosts.json")),
    (
        "gcp-compute",
        include_str!("../../widgets/gcp-compute.json"),
    ),
    (
        "gcp-dataproc",
        include_str!("../../widgets/gcp-dataproc.json"),
    ),
];

#[derive(Debug)]
struct Entry {
    provisioner: Arc<dyn Provisioner>,
    configuration_groups: serde_json::Value,
    /// The same provisioner, when it is a plugin.
    plugin: Option<Arc<PluginProvisioner>>,
}

/// Every provisioner the server knows, by name.
#[derive(Debug)]
pub struct Registry {
    entries: BTreeMap<&'static str, Entry>,
    /// Automator plugins, by the name a template's action gives as its `type`.
    automators: BTreeMap<&'static str, Arc<PluginAutomator>>,
    /// Plugin directories refused at start-up, and why.
    broken: Vec<PluginFault>,
    /// The server's work directory: plugins' own directories are in it.
    work_dir: std::path::PathBuf,
}

impl crate::model::profile::Provisioners for Registry {
    fn provisioner(&self, name: &str) -> Option<&dyn Provisioner> {
        self.get(name).map(|p| p.as_ref())
    }
}

impl Registry {
    /// The built-in provisioners: `native`, `local`, `sim`, `hosts`, and `aws-ec2` when built with
    /// the `aws` feature.
    pub fn builtin() -> Registry {
        let plugins: Vec<Arc<dyn Provisioner>> = vec![
            Arc::new(Native),
            Arc::new(ebb_local::Local),
            Arc::new(ebb_sim::Sim),
            Arc::new(ebb_hosts::Hosts),
            #[cfg(feature = "aws")]
            Arc::new(ebb_aws::Ec2::default()),
            #[cfg(feature = "gcp")]
            Arc::new(ebb_gcp_compute::Compute::default()),
            #[cfg(feature = "gcp")]
            Arc::new(ebb_gcp_dataproc::Dataproc::default()),
        ];
        let entries = plugins
            .into_iter()
            .map(|provisioner| {
                let name = provisioner.spec().name;
                let widget = WIDGETS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, json)| *json)
                    .expect("every built-in provisioner has a widget; checked by tests");
                let mut widget: serde_json::Value = serde_json::from_str(widget)
                    .expect("built-in widgets are valid JSON; checked by tests");
                let configuration_groups = widget
                    .get_mut("configuration-groups")
                    .map(serde_json::Value::take)
                    .unwrap_or_else(|| serde_json::Value::Array(Vec::new()));
                (
                    name,
                    Entry {
                        provisioner,
                        configuration_groups,
                        plugin: None,
                    },
                )
            })
            .collect();
        Registry {
            entries,
            automators: BTreeMap::new(),
            broken: Vec::new(),
            work_dir: std::env::temp_dir(),
        }
    }

    /// The built-ins and the plugins found in `plugin_dirs` (each a directory of plugin
    /// directories). A plugin that cannot be loaded is logged and listed as broken; the others
    /// load.
    pub fn with_plugins(
        plugin_dirs: &[std::path::PathBuf],
        work_dir: &std::path::Path,
    ) -> Registry {
        let mut registry = Registry::builtin();
        registry.work_dir = work_dir.to_path_buf();
        let found = super::plugins::load(plugin_dirs, |name| {
            registry.entries.contains_key(name) || name == "shell"
        });
        for automator in found.automators {
            let d = automator.descriptor();
            tracing::info!(plugin = d.name, dir = %d.dir.display(), version = %d.version, "automator plugin loaded");
            registry.automators.insert(d.name, automator);
        }
        for plugin in found.provisioners {
            let configuration_groups = plugin_widget(plugin.descriptor());
            let name = plugin.descriptor().name;
            tracing::info!(plugin = name, dir = %plugin.descriptor().dir.display(), version = %plugin.descriptor().version, "plugin loaded");
            registry.entries.insert(
                name,
                Entry {
                    provisioner: Arc::clone(&plugin) as Arc<dyn Provisioner>,
                    configuration_groups,
                    plugin: Some(plugin),
                },
            );
        }
        for fault in &found.broken {
            tracing::error!(dir = %fault.dir, "plugin not loaded: {}", fault.error);
        }
        registry.broken = found.broken;
        registry
    }

    /// The automator plugin called `name`.
    pub fn automator(&self, name: &str) -> Option<&Arc<PluginAutomator>> {
        self.automators.get(name)
    }

    /// The automators a template's action may name: `shell`, and the plugins'.
    pub fn automator_names(&self) -> Vec<&str> {
        std::iter::once("shell")
            .chain(self.automators.keys().copied())
            .collect()
    }

    /// The server's work directory (plugins keep their files under it).
    pub fn work_dir(&self) -> &std::path::Path {
        &self.work_dir
    }

    /// Asks provisioner `name`, when it is a plugin, to check `properties` (a profile's, its
    /// secrets left out) beyond what its descriptor declares. A plugin that cannot answer
    /// does not hold the profile up: its runs will say what it does.
    pub async fn check(
        &self,
        name: &str,
        properties: ebb_spi::Properties,
    ) -> Result<(), ebb_spi::PropertyError> {
        let Some(plugin) = self.entries.get(name).and_then(|e| e.plugin.as_ref()) else {
            return Ok(());
        };
        let spec = plugin.descriptor().spec;
        let properties = properties
            .into_iter()
            .filter(|(k, _)| spec.property(k).is_none_or(|p| !p.secret))
            .collect();
        let ctx = ebb_spi::Context::new(properties, self.work_dir.clone());
        match plugin.check(&ctx).await {
            Err(e) if e.property.is_empty() => {
                tracing::warn!(
                    plugin = name,
                    "the plugin could not check a profile: {}",
                    e.message
                );
                Ok(())
            }
            other => other,
        }
    }

    /// The plugins loaded and those refused, for `GET /v3/plugins`.
    pub fn plugins(&self) -> PluginList {
        PluginList {
            plugins: self
                .entries
                .values()
                .filter_map(|e| e.plugin.as_deref())
                .map(|p| plugin_view(p.descriptor(), p.health(), true))
                .chain(
                    self.automators
                        .values()
                        .map(|a| plugin_view(a.descriptor(), a.health(), true)),
                )
                .collect(),
            broken: self.broken.clone(),
        }
    }

    /// A registry of `provisioner` alone (the in-process actor tests' scripted one).
    #[cfg(test)]
    pub fn only(provisioner: Arc<dyn Provisioner>) -> Registry {
        let name = provisioner.spec().name;
        let entry = Entry {
            provisioner,
            configuration_groups: serde_json::Value::Array(Vec::new()),
            plugin: None,
        };
        Registry {
            entries: [(name, entry)].into(),
            automators: BTreeMap::new(),
            broken: Vec::new(),
            work_dir: std::env::temp_dir(),
        }
    }

    /// The provisioner called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provisioner>> {
        self.entries.get(name).map(|e| &e.provisioner)
    }

    /// The API view of provisioner `name`.
    pub fn detail(&self, name: &str) -> Option<ProvisionerDetail> {
        self.entries.get(name).map(|entry| {
            let spec = entry.provisioner.spec();
            ProvisionerDetail {
                name: spec.name.to_string(),
                label: spec.label.to_string(),
                description: spec.description.to_string(),
                configuration_groups: entry.configuration_groups.clone(),
                plugin: entry
                    .plugin
                    .as_deref()
                    .map(|p| plugin_view(p.descriptor(), p.health(), false)),
            }
        })
    }

    /// The API view of every provisioner, by name.
    pub fn details(&self) -> Vec<ProvisionerDetail> {
        self.entries
            .keys()
            .filter_map(|name| self.detail(name))
            .collect()
    }
}

/// A provisioner plugin's widget: its own groups, then ebb's (template, healing, retries).
fn plugin_widget(descriptor: &ebb_plugin::Descriptor) -> serde_json::Value {
    let mut groups = descriptor
        .configuration_groups
        .as_array()
        .cloned()
        .unwrap_or_default();
    groups.extend(framework_groups());
    serde_json::Value::Array(groups)
}

/// A plugin's view: what it is and how its calls fare; with `admin`, where it lives and why it
/// fails.
fn plugin_view(d: &ebb_plugin::Descriptor, health: ebb_plugin::Health, admin: bool) -> PluginView {
    PluginView {
        name: d.name.to_string(),
        kind: d.kind.as_str().to_string(),
        version: d.version.clone(),
        dir: admin.then(|| d.dir.display().to_string()),
        status: if health.failing.is_some() {
            "failing"
        } else {
            "loaded"
        }
        .to_string(),
        calls: health.calls,
        errors: health.errors,
        broken: health.broken,
        starts: health.starts,
        failure: health.failing.filter(|_| admin),
    }
}

/// The widget groups of ebb's own properties (template, healing, retries), which every
/// provisioner plugin takes: those of `local`'s widget.
pub fn framework_groups() -> Vec<serde_json::Value> {
    let local: serde_json::Value = WIDGETS
        .iter()
        .find(|(n, _)| *n == "local")
        .and_then(|(_, json)| serde_json::from_str(json).ok())
        .unwrap_or_default();
    let framework: Vec<&str> = ebb_plugin::descriptor::FRAMEWORK_PROPERTIES
        .iter()
        .map(|p| p.name)
        .collect();
    local["configuration-groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|group| {
            let fields: Vec<serde_json::Value> = group["properties"]
                .as_array()?
                .iter()
                .filter(|f| f["name"].as_str().is_some_and(|n| framework.contains(&n)))
                .cloned()
                .collect();
            (!fields.is_empty())
                .then(|| serde_json::json!({ "label": group["label"], "properties": fields }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The widget is what a UI shows; the spec is what the server accepts. They must name the
    /// same properties, or a UI would offer a field the server rejects (or ignores).
    #[test]
    fn every_widget_matches_its_provisioner_spec() {
        let registry = Registry::builtin();
        // Every widget has its provisioner, but those of the features this build leaves out
        // (aws-ec2; gcp-compute and gcp-dataproc).
        let left_out =
            usize::from(!cfg!(feature = "aws")) + 2 * usize::from(!cfg!(feature = "gcp"));
        assert_eq!(registry.entries.len(), WIDGETS.len() - left_out);
        for detail in registry.details() {
            let groups = detail
                .configuration_groups
                .as_array()
                .expect("groups are a list");
            let mut in_widget = BTreeSet::new();
            for group in groups {
                assert!(
                    group["label"].is_string(),
                    "{}: group without label",
                    detail.name
                );
                for prop in group["properties"].as_array().expect("properties list") {
                    for field in ["widget-type", "label", "name", "description"] {
                        assert!(
                            prop[field].is_string(),
                            "{}: {prop} lacks {field}",
                            detail.name
                        );
                    }
                    assert!(
                        prop["widget-attributes"].is_object(),
                        "{}: {prop}",
                        detail.name
                    );
                    let name = prop["name"].as_str().expect("checked above").to_string();
                    // A secret is typed into a secure-key widget, which stores a reference.
                    let secret = spec_of(&registry, &detail.name, &name).is_some_and(|p| p.secret);
                    let secure_widget = prop["widget-type"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("securekey"));
                    assert_eq!(secret, secure_widget, "{}: {name}", detail.name);
                    assert!(
                        in_widget.insert(name.clone()),
                        "{}: {name} twice",
                        detail.name
                    );
                }
            }
            let spec = registry.get(&detail.name).expect("listed").spec();
            let in_spec: BTreeSet<String> =
                spec.properties.iter().map(|p| p.name.to_string()).collect();
            assert_eq!(
                in_widget, in_spec,
                "widget and spec of {} differ",
                detail.name
            );
        }
    }

    fn spec_of<'r>(
        registry: &'r Registry,
        provisioner: &str,
        name: &str,
    ) -> Option<&'r ebb_spi::PropertySpec> {
        registry.get(provisioner)?.spec().property(name)
    }

    #[test]
    fn widget_defaults_are_valid_values() {
        let registry = Registry::builtin();
        for detail in registry.details() {
            let spec = registry.get(&detail.name).expect("listed").spec();
            for group in detail.configuration_groups.as_array().expect("list") {
                for prop in group["properties"].as_array().expect("list") {
                    let name = prop["name"].as_str().expect("name");
                    if let Some(default) = prop["widget-attributes"]["default"].as_str() {
                        let kind = &spec.property(name).expect("in spec").kind;
                        assert_eq!(
                            ebb_spi::check_value(kind, default),
                            Ok(()),
                            "{}.{name}",
                            detail.name
                        );
                    }
                }
            }
        }
    }
}
