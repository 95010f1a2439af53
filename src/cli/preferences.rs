//! `ebb pref`: preferences at each level of the hierarchy.

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::args::{PrefCmd, PrefTarget};
use super::client::{CliError, Client};
use super::input::split_pair;
use super::output::{self, done, out, table, text};

fn pref_path(target: &PrefTarget) -> String {
    match (&target.namespace, &target.app, &target.program) {
        (Some(ns), Some(app), Some(program)) => {
            format!("/v3/namespaces/{ns}/apps/{app}/workflows/{program}/preferences")
        }
        (Some(ns), Some(app), None) => format!("/v3/namespaces/{ns}/apps/{app}/preferences"),
        (Some(ns), None, _) => format!("/v3/namespaces/{ns}/preferences"),
        (None, _, _) => "/v3/preferences".to_string(),
    }
}

pub fn pref(client: &Client, json: bool, cmd: PrefCmd) -> Result<(), CliError> {
    let v = match cmd {
        PrefCmd::Get { target, resolved } => {
            client.get(&format!("{}?resolved={resolved}", pref_path(&target)))?
        }
        PrefCmd::Set {
            target,
            pairs,
            replace,
        } => {
            let path = pref_path(&target);
            let mut values = if replace {
                Map::new()
            } else {
                client.get(&path)?.as_object().cloned().unwrap_or_default()
            };
            for pair in &pairs {
                let (k, v) = split_pair(pair)?;
                values.insert(k.to_string(), json!(v));
            }
            client.call(Method::PUT, &path, Some(&Value::Object(values)))?
        }
        PrefCmd::Delete { target, keys } => {
            let path = pref_path(&target);
            if keys.is_empty() {
                client.call(Method::DELETE, &path, None)?;
                return done(json, "preferences deleted");
            }
            let mut values = client.get(&path)?.as_object().cloned().unwrap_or_default();
            for key in &keys {
                if values.remove(key).is_none() {
                    return Err(CliError::Usage(format!(
                        "preference '{key}' is not set here"
                    )));
                }
            }
            client.call(Method::PUT, &path, Some(&Value::Object(values)))?
        }
    };
    if json {
        output::json(&v);
    } else {
        let rows: Vec<Vec<String>> = v
            .as_object()
            .map(|m| m.iter().map(|(k, v)| vec![k.clone(), text(v)]).collect())
            .unwrap_or_default();
        if rows.is_empty() {
            out!("(no preferences)");
        } else {
            table(&["KEY", "VALUE"], &rows);
        }
    }
    Ok(())
}
