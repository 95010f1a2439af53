//! Admin commands: the secure store and the janitor.

use std::io::Read;

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::client::{CliError, Client};
use super::commands::{done, list, split_pair};
use super::output::{self, out, table, text, timestamp};
use super::{JanitorCmd, SecureCmd};

pub fn secure(client: &Client, json: bool, cmd: SecureCmd) -> Result<(), CliError> {
    let path = |ns: &str, name: &str| format!("/v3/namespaces/{ns}/securekeys/{name}");
    let v = match cmd {
        SecureCmd::List { namespace } => {
            let v = client.get(&format!("/v3/namespaces/{namespace}/securekeys"))?;
            if !json {
                let rows: Vec<Vec<String>> = list(&v)
                    .iter()
                    .map(|k| {
                        vec![
                            text(&k["name"]),
                            text(&k["description"]),
                            timestamp(&json!(k["createdEpochMs"].as_u64().unwrap_or(0) / 1000)),
                        ]
                    })
                    .collect();
                table(&["NAME", "DESCRIPTION", "CREATED"], &rows);
                return Ok(());
            }
            v
        }
        SecureCmd::Get { name, namespace } => client.get(&path(&namespace, &name))?,
        SecureCmd::Put {
            name,
            namespace,
            description,
            data_file,
            properties,
        } => {
            let data = match &data_file {
                Some(file) => std::fs::read_to_string(file).map_err(|e| CliError::File {
                    path: file.display().to_string(),
                    reason: e.to_string(),
                })?,
                None => {
                    let mut data = String::new();
                    std::io::stdin()
                        .read_to_string(&mut data)
                        .map_err(|e| CliError::Usage(format!("cannot read the secret: {e}")))?;
                    data
                }
            };
            // A trailing newline from `echo` or an editor is not part of the secret.
            let data = data.strip_suffix('\n').unwrap_or(&data).to_string();
            let mut props = Map::new();
            for pair in &properties {
                let (k, v) = split_pair(pair)?;
                props.insert(k.to_string(), json!(v));
            }
            let mut body = json!({ "data": data, "properties": props });
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            client.call(Method::PUT, &path(&namespace, &name), Some(&body))?
        }
        SecureCmd::Delete { name, namespace } => {
            client.call(Method::DELETE, &path(&namespace, &name), None)?;
            return done(json, &format!("secure key '{name}' deleted"));
        }
    };
    if json {
        output::json(&v);
    } else {
        out!(
            "name:        {}\ndescription: {}\ncreated:     {}",
            text(&v["name"]),
            text(&v["description"]),
            timestamp(&json!(v["createdEpochMs"].as_u64().unwrap_or(0) / 1000))
        );
    }
    Ok(())
}

pub fn janitor(client: &Client, json: bool, cmd: JanitorCmd) -> Result<(), CliError> {
    match cmd {
        JanitorCmd::Run { dry_run } => {
            let path = format!("/v3/janitor/run?dryRun={dry_run}");
            let sweep = client.call(Method::POST, &path, None)?;
            if json {
                output::json(&sweep);
            } else {
                show_sweep(&sweep);
            }
        }
        JanitorCmd::Show => {
            let v = client.get("/v3/janitor")?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let s = &v["settings"];
            let every = s["interval"]
                .as_u64()
                .map_or("never".to_string(), |i| format!("every {i}s"));
            let mode = if s["delete"] == true {
                "deletes orphans"
            } else {
                "reports orphans"
            };
            out!("schedule: {every}, {mode}");
            if v["last"].is_null() {
                out!("no sweep yet");
            } else {
                show_sweep(&v["last"]);
            }
        }
    }
    Ok(())
}

fn show_sweep(sweep: &Value) {
    let mode = if sweep["dryRun"] == true {
        "dry run"
    } else {
        "acting"
    };
    out!(
        "sweep at {} ({}, {mode})",
        timestamp(&sweep["started"]),
        text(&sweep["trigger"])
    );
    let accounts: Vec<Vec<String>> = list(&sweep["accounts"])
        .iter()
        .map(|a| {
            vec![
                text(&a["provisioner"]),
                text(&a["account"]),
                a["listed"].to_string(),
                a["error"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    table(&["PROVISIONER", "ACCOUNT", "LISTED", "ERROR"], &accounts);
    let orphans = list(&sweep["orphans"]);
    if orphans.is_empty() {
        out!("no orphans");
        return;
    }
    let rows: Vec<Vec<String>> = orphans
        .iter()
        .map(|o| {
            vec![
                text(&o["action"]),
                text(&o["provisioner"]),
                text(&o["id"]),
                text(&o["reason"]),
            ]
        })
        .collect();
    table(&["ACTION", "PROVISIONER", "ID", "REASON"], &rows);
}
