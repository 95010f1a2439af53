//! `ebb app`: deploy, list, show and delete apps.

use std::path::Path;

use reqwest::Method;
use serde_json::Value;

use super::args::AppCmd;
use super::client::{CliError, Client, read_answer};
use super::input::read_json;
use super::output::{self, done, out, table};
use crate::model::app::App;

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
            show_app(json, v)?;
        }
        AppCmd::List { namespace } => {
            let v = client.get(&format!("/v3/namespaces/{namespace}/apps"))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let apps: Vec<App> = read_answer(v)?;
            let rows: Vec<Vec<String>> = apps
                .iter()
                .map(|a| {
                    let programs: Vec<&str> = a.programs.iter().map(|p| p.name.as_str()).collect();
                    vec![a.name.clone(), programs.join(", "), a.description.clone()]
                })
                .collect();
            table(&["APP", "PROGRAMS", "DESCRIPTION"], &rows);
        }
        AppCmd::Get { name, namespace } => {
            show_app(
                json,
                client.get(&format!("/v3/namespaces/{namespace}/apps/{name}"))?,
            )?;
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

fn show_app(json: bool, answer: Value) -> Result<(), CliError> {
    if json {
        output::json(&answer);
        return Ok(());
    }
    let a: App = read_answer(answer)?;
    out!("app:         {}/{}", a.namespace, a.name);
    out!("description: {}", a.description);
    for (k, v) in &a.config {
        out!("config:      {k}={v}");
    }
    out!();
    let rows: Vec<Vec<String>> = a
        .programs
        .iter()
        .map(|p| {
            vec![
                p.program_type.clone(),
                p.name.clone(),
                p.max_concurrent_runs.map_or("-".into(), |n| n.to_string()),
                p.summary(),
            ]
        })
        .collect();
    table(&["TYPE", "PROGRAM", "MAX RUNS", "COMMAND"], &rows);
    Ok(())
}
