//! `ebb server`, `ebb provisioner` and `ebb janitor`: the servers of the installation, what
//! they offer, and their sweeps of leftovers.

use reqwest::Method;

use super::args::{JanitorCmd, ProvisionerCmd, ServerCmd};
use super::client::{CliError, Client, read_answer};
use super::output::{self, list, out, table, text, timestamp};
use crate::model::server::ServerView;
use crate::model::sweep::{JanitorView, Sweep};
use crate::model::view::ProvisionerDetail;

pub fn server(client: &Client, json: bool, cmd: ServerCmd) -> Result<(), CliError> {
    match cmd {
        ServerCmd::List => {
            let v = client.get("/v3/servers")?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let servers: Vec<ServerView> = read_answer(v)?;
            let rows: Vec<Vec<String>> = servers
                .into_iter()
                .map(|s| {
                    vec![
                        s.record.name,
                        s.record.url,
                        format!("{:x}", s.record.lease),
                        timestamp(Some(s.record.heartbeat)),
                        s.runs.to_string(),
                        s.record.version,
                    ]
                })
                .collect();
            table(
                &["NAME", "URL", "LEASE", "HEARTBEAT", "RUNS", "VERSION"],
                &rows,
            );
        }
        ServerCmd::Drain { name } => {
            crate::model::names::check("server name", &name)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            let v = client.call(Method::POST, &format!("/v3/servers/{name}/drain"), None)?;
            if json {
                output::json(&v);
                return Ok(());
            }
            eprintln!("server {name} is draining: handing its runs to the others");
            // Until it is gone from the list (it stops once it owns no run).
            loop {
                let servers: Vec<ServerView> = match client.get("/v3/servers") {
                    Ok(v) => read_answer(v)?,
                    // The server asked is the one that stopped.
                    Err(CliError::Unreachable { .. }) => break,
                    Err(e) => return Err(e),
                };
                match servers.iter().find(|s| s.record.name == name) {
                    None => break,
                    Some(s) => eprintln!("  {} run(s) left", s.runs),
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            out!("server {name} drained and stopped");
        }
    }
    Ok(())
}

pub fn provisioner(client: &Client, json: bool, cmd: ProvisionerCmd) -> Result<(), CliError> {
    match cmd {
        ProvisionerCmd::List => {
            let v = client.get("/v3/provisioners")?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let provisioners: Vec<ProvisionerDetail> = read_answer(v)?;
            let rows: Vec<Vec<String>> = provisioners
                .into_iter()
                .map(|p| vec![p.name, p.label, p.description])
                .collect();
            table(&["NAME", "LABEL", "DESCRIPTION"], &rows);
        }
        ProvisionerCmd::Get { name } => {
            let v = client.get(&format!("/v3/provisioners/{name}"))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let p: ProvisionerDetail = read_answer(v)?;
            out!("{} ({})\n{}\n", p.name, p.label, p.description);
            // The widget's own format: groups of properties with their widget attributes.
            let mut rows = Vec::new();
            for group in list(&p.configuration_groups) {
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
                show_sweep(&read_answer(sweep)?);
            }
        }
        JanitorCmd::Show => {
            let v = client.get("/v3/janitor")?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let janitor: JanitorView = read_answer(v)?;
            let every = janitor
                .settings
                .interval
                .map_or("never".to_string(), |i| format!("every {i}s"));
            let mode = if janitor.settings.delete {
                "deletes orphans"
            } else {
                "reports orphans"
            };
            out!("schedule: {every}, {mode}");
            match &janitor.last {
                None => out!("no sweep yet"),
                Some(sweep) => show_sweep(sweep),
            }
        }
    }
    Ok(())
}

fn show_sweep(sweep: &Sweep) {
    let mode = if sweep.dry_run { "dry run" } else { "acting" };
    out!(
        "sweep at {} ({}, {mode})",
        timestamp(Some(sweep.started)),
        sweep.trigger
    );
    let accounts: Vec<Vec<String>> = sweep
        .accounts
        .iter()
        .map(|a| {
            vec![
                a.provisioner.clone(),
                a.account.clone(),
                a.listed.to_string(),
                a.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["PROVISIONER", "ACCOUNT", "LISTED", "ERROR"], &accounts);
    if sweep.orphans.is_empty() {
        out!("no orphans");
        return;
    }
    let rows: Vec<Vec<String>> = sweep
        .orphans
        .iter()
        .map(|o| {
            vec![
                o.action.clone(),
                o.provisioner.clone(),
                o.id.clone(),
                o.reason.clone(),
            ]
        })
        .collect();
    table(&["ACTION", "PROVISIONER", "ID", "REASON"], &rows);
}
