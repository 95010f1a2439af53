//! `ebb provisioner` and `ebb janitor`: what the server offers, and its sweeps of leftovers.

use reqwest::Method;
use serde_json::Value;

use super::args::{JanitorCmd, ProvisionerCmd};
use super::client::{CliError, Client};
use super::output::{self, list, out, table, text, timestamp};

pub fn provisioner(client: &Client, json: bool, cmd: ProvisionerCmd) -> Result<(), CliError> {
    match cmd {
        ProvisionerCmd::List => {
            let v = client.get("/v3/provisioners")?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list(&v)
                .iter()
                .map(|p| vec![text(&p["name"]), text(&p["label"]), text(&p["description"])])
                .collect();
            table(&["NAME", "LABEL", "DESCRIPTION"], &rows);
        }
        ProvisionerCmd::Get { name } => {
            let v = client.get(&format!("/v3/provisioners/{name}"))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            out!(
                "{} ({})\n{}\n",
                text(&v["name"]),
                text(&v["label"]),
                text(&v["description"])
            );
            let mut rows = Vec::new();
            for group in list(&v["configuration-groups"]) {
                for p in list(&group["properties"]) {
                    rows.push(vec![
                        text(&p["name"]),
                        text(&group["label"]),
                        text(&p["widget-attributes"]["default"]),
                        text(&p["description"]),
                    ]);
                }
            }
            if rows.is_empty() {
                out!("(no properties)");
            } else {
                table(&["PROPERTY", "GROUP", "DEFAULT", "DESCRIPTION"], &rows);
            }
        }
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
