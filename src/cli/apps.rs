//! `ebb app`: deploy, list, show and delete apps.

use std::path::Path;

use reqwest::Method;
use serde_json::Value;

use super::args::AppCmd;
use super::client::{CliError, Client};
use super::input::read_json;
use super::output::{self, done, list, out, table, text};

pub fn app(client: &Client, json: bool, cmd: AppCmd) -> Result<(), CliError> {
    match cmd {
        AppCmd::Deploy {
            file,
            name,
            namespace,
        } => {
            let body = read_json(&file)?;
            let name = match name {
                Some(n) => n,
                None => app_name(&file)?,
            };
            let path = format!("/v3/namespaces/{namespace}/apps/{name}");
            let v = client.call(Method::PUT, &path, Some(&body))?;
            show_app(json, &v);
        }
        AppCmd::List { namespace } => {
            let v = client.get(&format!("/v3/namespaces/{namespace}/apps"))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list(&v)
                .iter()
                .map(|a| {
                    let programs: Vec<String> = list(&a["programs"])
                        .iter()
                        .map(|p| text(&p["name"]))
                        .collect();
                    vec![
                        text(&a["name"]),
                        programs.join(", "),
                        text(&a["description"]),
                    ]
                })
                .collect();
            table(&["APP", "PROGRAMS", "DESCRIPTION"], &rows);
        }
        AppCmd::Get { name, namespace } => {
            show_app(
                json,
                &client.get(&format!("/v3/namespaces/{namespace}/apps/{name}"))?,
            );
        }
        AppCmd::Delete { name, namespace } => {
            let path = format!("/v3/namespaces/{namespace}/apps/{name}");
            client.call(Method::DELETE, &path, None)?;
            return done(json, &format!("app '{namespace}/{name}' deleted"));
        }
    }
    Ok(())
}

fn app_name(file: &Path) -> Result<String, CliError> {
    file.file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string)
        .ok_or_else(|| CliError::Usage("cannot take an app name from the file; pass --name".into()))
}

fn show_app(json: bool, a: &Value) {
    if json {
        output::json(a);
        return;
    }
    out!(
        "app:         {}/{}",
        text(&a["namespace"]),
        text(&a["name"])
    );
    out!("description: {}", text(&a["description"]));
    if let Some(config) = a["config"].as_object().filter(|c| !c.is_empty()) {
        for (k, v) in config {
            out!("config:      {k}={}", text(v));
        }
    }
    out!();
    let rows: Vec<Vec<String>> = list(&a["programs"])
        .iter()
        .map(|p| {
            let command: Vec<String> = list(&p["command"]).iter().map(text).collect();
            vec![
                text(&p["type"]),
                text(&p["name"]),
                text(&p["maxConcurrentRuns"]),
                command.join(" "),
            ]
        })
        .collect();
    table(&["TYPE", "PROGRAM", "MAX RUNS", "COMMAND"], &rows);
}
