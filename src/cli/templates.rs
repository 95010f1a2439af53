//! `ebb template` and `ebb plan`: cluster templates, and the dry run of a cluster plan.

use reqwest::Method;
use serde_json::json;

use super::args::{PlanArgs, TemplateCmd};
use super::client::{CliError, Client, read_answer};
use super::input::{read_json, scoped_path};
use super::output::{self, done, out, table};
use crate::model::template::StoredTemplate;
use crate::model::view::DryRun;

pub fn template(client: &Client, json: bool, cmd: TemplateCmd) -> Result<(), CliError> {
    let v = match cmd {
        TemplateCmd::List(scope) => {
            let v = client.get(&scope.path("templates"))?;
            if !json {
                let templates: Vec<StoredTemplate> = read_answer(v)?;
                let rows: Vec<Vec<String>> = templates
                    .iter()
                    .map(|t| {
                        let services: Vec<&str> =
                            t.template.services.keys().map(String::as_str).collect();
                        vec![
                            format!("{}:{}", t.scope, t.name),
                            services.join(", "),
                            t.template.description.clone(),
                        ]
                    })
                    .collect();
                table(&["TEMPLATE", "SERVICES", "DESCRIPTION"], &rows);
                return Ok(());
            }
            v
        }
        TemplateCmd::Get {
            template,
            namespace,
        } => client.get(&scoped_path("templates", &template, &namespace)?)?,
        TemplateCmd::Put {
            template,
            file,
            namespace,
        } => {
            let body = read_json(&file)?;
            let path = scoped_path("templates", &template, &namespace)?;
            client.call(Method::PUT, &path, Some(&body))?
        }
        TemplateCmd::Delete {
            template,
            namespace,
        } => {
            let path = scoped_path("templates", &template, &namespace)?;
            client.call(Method::DELETE, &path, None)?;
            return done(json, &format!("template '{template}' deleted"));
        }
    };
    output::json(&v);
    Ok(())
}

pub fn plan(client: &Client, json: bool, args: PlanArgs) -> Result<(), CliError> {
    let mut body = json!({
        "template": args.template,
        "provisioner": args.provisioner,
        "nodes": args.nodes,
        "operation": args.operation,
    });
    if !args.services.is_empty() {
        body["services"] = json!(args.services);
    }
    if !args.select_services.is_empty() || !args.select_nodes.is_empty() {
        body["select"] = json!({"services": args.select_services, "nodes": args.select_nodes});
    }
    if let Some(h) = args.hardware_type {
        body["hardwareType"] = json!(h);
    }
    if let Some(i) = args.image_type {
        body["imageType"] = json!(i);
    }
    let path = format!("/v3/namespaces/{}/plan", args.namespace);
    let v = client.call(Method::POST, &path, Some(&body))?;
    show_plan(json, v)
}

/// Prints a dry run's plan: the layout, then the tasks by stage.
pub fn show_plan(json: bool, v: serde_json::Value) -> Result<(), CliError> {
    if json {
        output::json(&v);
        return Ok(());
    }
    let plan: DryRun = read_answer(v)?;
    let layout: Vec<Vec<String>> = plan
        .layout
        .iter()
        .map(|n| {
            let services: Vec<&str> = n.services.iter().map(String::as_str).collect();
            vec![
                n.node.clone(),
                n.hardware_type.clone(),
                n.image_type.clone(),
                services.join(", "),
            ]
        })
        .collect();
    table(&["NODE", "HARDWARE", "IMAGE", "SERVICES"], &layout);
    let describe = |id: &usize| match plan.tasks.get(*id) {
        Some(t) => match &t.service {
            Some(s) => format!("{} {s}@{}", t.action.name(), t.node),
            None => format!("{} {}", t.action.name(), t.node),
        },
        None => format!("task {id}"),
    };
    out!();
    out!(
        "{} tasks in {} stages (stages are for reading; tasks start as soon as what they depend on is done):",
        plan.tasks.len(),
        plan.stages.len()
    );
    for (i, stage) in plan.stages.iter().enumerate() {
        let names: Vec<String> = stage.iter().map(describe).collect();
        out!("{:>3}. {}", i + 1, names.join(", "));
    }
    Ok(())
}
