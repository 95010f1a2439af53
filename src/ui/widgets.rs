//! A provisioner's properties as form fields, drawn from its widget JSON (CDAP's plugin widget
//! format: `configuration-groups` → `properties`, each with a `widget-type`, `label`, `name`,
//! `description` and `widget-attributes`), with what its spec says besides: which properties
//! are required and which are secret.
//!
//! Widget types drawn: `textbox`, `number`, `select`, `toggle`, `textarea`, `csv`, `keyvalue`,
//! and the secure-key pickers `securekey-password` and `securekey-textarea`. Each field has
//! an "editable by runs" switch (CDAP's editable/fixed property), and shows the server's
//! error for it next to it.

use std::collections::BTreeMap;

use maud::{Markup, html};
use serde_json::Value;

/// One property's field.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub label: String,
    pub description: String,
    pub widget: String,
    pub attributes: Value,
    pub required: bool,
    pub secret: bool,
}

/// A group of fields, as the widget lays them out.
#[derive(Debug, Clone)]
pub struct Group {
    pub label: String,
    pub fields: Vec<Field>,
}

fn text(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// The groups of `configuration_groups`, with each property's spec from `spec`.
pub fn groups(configuration_groups: &Value, spec: &ebb_spi::ProvisionerSpec) -> Vec<Group> {
    let Some(groups) = configuration_groups.as_array() else {
        return Vec::new();
    };
    groups
        .iter()
        .map(|g| Group {
            label: text(g, "label"),
            fields: g
                .get("properties")
                .and_then(Value::as_array)
                .map(|props| {
                    props
                        .iter()
                        .map(|p| {
                            let name = text(p, "name");
                            let prop = spec.property(&name);
                            Field {
                                label: text(p, "label"),
                                description: text(p, "description"),
                                widget: text(p, "widget-type"),
                                attributes: p
                                    .get("widget-attributes")
                                    .cloned()
                                    .unwrap_or(Value::Null),
                                required: prop.is_some_and(|s| s.required),
                                secret: prop.is_some_and(|s| s.secret),
                                name,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// What a form holds for one property: its value and whether runs may override it.
#[derive(Debug, Clone, Default)]
pub struct Entered {
    pub value: String,
    pub editable: bool,
}

/// The choices of a `select` widget: `values` as strings, or objects with `value` and `label`.
fn choices(attributes: &Value) -> Vec<(String, String)> {
    attributes
        .get("values")
        .or_else(|| attributes.get("options"))
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .map(|v| match v {
                    Value::Object(_) => {
                        let value = text(v, "value");
                        let label = text(v, "label");
                        (value.clone(), if label.is_empty() { value } else { label })
                    }
                    Value::String(s) => (s.clone(), s.clone()),
                    Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => {
                        (v.to_string(), v.to_string())
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The field of property `f`, holding `entered` (or, for a new profile, the widget's default),
/// with `error` next to it; `keys` are the secure keys a picker offers.
pub fn field(f: &Field, entered: Option<&Entered>, error: Option<&str>, keys: &[String]) -> Markup {
    let attrs = &f.attributes;
    let default = text(attrs, "default");
    let value = entered.map_or(default.clone(), |e| e.value.clone());
    let editable = entered.is_none_or(|e| e.editable);
    let id = format!("p-{}", f.name);
    let input_name = format!("p.{}", f.name);
    let help = format!("{id}-help");
    let err_id = format!("{id}-error");
    let described = if error.is_some() {
        format!("{help} {err_id}")
    } else {
        help.clone()
    };
    let placeholder = text(attrs, "placeholder");
    let placeholder = (!placeholder.is_empty()).then_some(placeholder);
    let invalid = error.map(|_| "true");
    html! {
        div.field.invalid[error.is_some()] data-property=(f.name) {
            label.required[f.required] for=(id) { (f.label) }
            div.row {
                @match f.widget.as_str() {
                    "number" => {
                        input id=(id) type="number" name=(input_name) value=(value)
                            min=[Some(text(attrs, "min")).filter(|s| !s.is_empty())]
                            max=[Some(text(attrs, "max")).filter(|s| !s.is_empty())]
                            placeholder=[placeholder] required[f.required]
                            aria-describedby=(described) aria-invalid=[invalid];
                    }
                    "select" => {
                        select id=(id) name=(input_name) aria-describedby=(described) aria-invalid=[invalid] {
                            @if !f.required { option value="" selected[value.is_empty()] { "(not set)" } }
                            @for (v, label) in choices(attrs) {
                                option value=(v) selected[v == value] { (label) }
                            }
                        }
                    }
                    "toggle" => {
                        @let on = attrs.get("on").map_or("true".to_string(), |o| text(o, "value"));
                        @let off = attrs.get("off").map_or("false".to_string(), |o| text(o, "value"));
                        @let on_label = attrs.get("on").map_or("On".to_string(), |o| text(o, "label"));
                        @let off_label = attrs.get("off").map_or("Off".to_string(), |o| text(o, "label"));
                        fieldset.toggle id=(id) aria-describedby=(described) {
                            legend.sr { (f.label) }
                            label.fixed { input type="radio" name=(input_name) value=(on) checked[value == on]; (on_label) }
                            label.fixed { input type="radio" name=(input_name) value=(off) checked[value != on]; (off_label) }
                        }
                    }
                    "textarea" => {
                        textarea id=(id) name=(input_name) placeholder=[placeholder]
                            aria-describedby=(described) aria-invalid=[invalid] { (value) }
                    }
                    "keyvalue" => {
                        @let delimiter = Some(text(attrs, "delimiter")).filter(|d| !d.is_empty()).unwrap_or_else(|| ",".into());
                        textarea id=(id) name=(input_name) data-delimiter=(delimiter)
                            placeholder="key=value, one pair a line"
                            aria-describedby=(described) aria-invalid=[invalid] {
                            (value.split(delimiter.as_str()).map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>().join("\n"))
                        }
                    }
                    "securekey-password" | "securekey-textarea" => {
                        @let offered = offered(keys, &value);
                        select id=(id) name=(input_name) aria-describedby=(described) aria-invalid=[invalid] {
                            option value="" selected[value.is_empty()] { "(not set)" }
                            @for v in &offered {
                                option value=(v) selected[*v == value] { (v) }
                            }
                        }
                    }
                    // textbox, csv, and any type this UI does not know: a line of text.
                    _ => {
                        input id=(id) type="text" name=(input_name) value=(value) placeholder=[placeholder]
                            required[f.required] aria-describedby=(described) aria-invalid=[invalid];
                    }
                }
                label.fixed title="Whether a run's preferences or runtime arguments may override it (system.profile.properties.<name>)" {
                    input type="checkbox" name=(format!("fixed.{}", f.name)) value="true" checked[!editable];
                    "Fixed"
                }
            }
            @if let Some(error) = error {
                p.error id=(err_id) role="alert" { (error) }
            }
            p.help id=(help) {
                (f.description)
                @if f.widget == "csv" { " Separate values with commas." }
                @if f.widget == "keyvalue" { " One key=value pair a line." }
                @if f.secret {
                    " A secret: pick a secure key of the namespace ("
                    @if keys.is_empty() { "it has none yet; add them under Secure keys" } @else { "its value is never shown" }
                    ")."
                }
            }
        }
    }
}

/// What a secure-key picker offers: a reference to each of `keys`, and the value it holds
/// when that is none of them.
fn offered(keys: &[String], value: &str) -> Vec<String> {
    let mut out: Vec<String> = keys.iter().map(|k| format!("${{secure({k})}}")).collect();
    if !value.is_empty() && !out.iter().any(|v| v == value) {
        out.push(value.to_string());
    }
    out
}

/// The value a form field sent for a property of widget type `widget`, as the profile keeps
/// it (a key/value list's lines joined with its delimiter).
pub fn value_of(widget: &Field, sent: &str) -> String {
    match widget.widget.as_str() {
        "keyvalue" => {
            let delimiter = Some(text(&widget.attributes, "delimiter"))
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| ",".into());
            sent.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(&delimiter)
        }
        "textarea" | "securekey-textarea" => sent.replace("\r\n", "\n"),
        _ => sent.trim().to_string(),
    }
}

/// Errors by property name, from the server's error for field `field` (as
/// `provisioner.properties.<name>`).
pub fn property_of(field: &str) -> Option<&str> {
    field.strip_prefix("provisioner.properties.")
}

/// The entered values of a profile's properties.
pub fn entered(properties: &[crate::model::profile::PropertyValue]) -> BTreeMap<String, Entered> {
    properties
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                Entered {
                    value: p.value.clone(),
                    editable: p.is_editable,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every widget file, whether or not this build has its provisioner.
    const WIDGETS: &[&str] = &[
        include_str!("../../widgets/native.json"),
        include_str!("../../widgets/local.json"),
        include_str!("../../widgets/sim.json"),
        include_str!("../../widgets/aws-ec2.json"),
        include_str!("../../widgets/hosts.json"),
        include_str!("../../widgets/gcp-compute.json"),
        include_str!("../../widgets/gcp-dataproc.json"),
    ];

    #[test]
    fn every_widget_type_the_built_in_widgets_use_is_drawn() {
        let spec = ebb_spi::ProvisionerSpec {
            name: "any",
            label: "",
            description: "",
            properties: &[],
        };
        let mut seen = std::collections::BTreeSet::new();
        for json in WIDGETS {
            let widget: Value = serde_json::from_str(json).expect("valid widget");
            for group in groups(&widget["configuration-groups"], &spec) {
                for f in &group.fields {
                    seen.insert(f.widget.clone());
                    let html = field(f, None, Some("bad"), &["k".into()]).into_string();
                    assert!(
                        html.contains(&format!("p.{}", f.name)),
                        "{}: {html}",
                        f.name
                    );
                    assert!(html.contains("role=\"alert\""), "the error is shown");
                    if f.widget.starts_with("securekey-") {
                        assert!(
                            html.contains("${secure(k)}"),
                            "a picker of secure keys: {html}"
                        );
                    }
                }
            }
        }
        for known in [
            "textbox",
            "number",
            "select",
            "textarea",
            "csv",
            "keyvalue",
            "toggle",
            "securekey-password",
            "securekey-textarea",
        ] {
            assert!(
                seen.contains(known),
                "{known} is used by a built-in widget: {seen:?}"
            );
        }
    }

    #[test]
    fn required_and_secret_come_from_the_spec() {
        let registry = crate::runtime::registry::Registry::builtin();
        let detail = registry.detail("hosts").expect("hosts is always built");
        let spec = registry.get("hosts").expect("hosts").spec();
        let fields: Vec<Field> = groups(&detail.configuration_groups, spec)
            .into_iter()
            .flat_map(|g| g.fields)
            .collect();
        let hosts = fields
            .iter()
            .find(|f| f.name == "hosts")
            .expect("hosts field");
        assert!(hosts.required);
        assert!(
            field(hosts, None, None, &[])
                .into_string()
                .contains("class=\"required\"")
        );
        assert!(fields.iter().any(|f| f.secret), "the SSH key is secret");
    }

    #[test]
    fn key_values_are_one_pair_a_line_in_the_form() {
        let f = Field {
            name: "tags".into(),
            label: "Tags".into(),
            description: String::new(),
            widget: "keyvalue".into(),
            attributes: serde_json::json!({"delimiter": ","}),
            required: false,
            secret: false,
        };
        assert_eq!(value_of(&f, "a=1\r\n\r\n b=2 \n"), "a=1,b=2");
        let html = field(
            &f,
            Some(&Entered {
                value: "a=1,b=2".into(),
                editable: true,
            }),
            None,
            &[],
        )
        .into_string();
        assert!(html.contains("a=1\nb=2"), "{html}");
    }
}
