//! `ebb template` and `ebb plan`: cluster templates, and the dry run of a cluster plan.

use reqwest::Method;
use serde_json::{Value, json};

use super::args::{PlanArgs, TemplateCmd};
use super::client::{CliError, Client};
use super::input::{read_json, scoped_path};
use super::output::{self, done, list, out, rows, table, text};

pub fn template(client: &Client, json: bool, cmd: TemplateCmd) -> Result<(), CliError> {
    let v = match cmd {
        TemplateCmd::List(scope) => {
            let v = client.get(&scope.path("templates"))?;
            if !json {
                let mut items = list(&v);
                for t in &mut items {
                    t["services"] = json!(
                        t["services"].as_object().map(|m| m
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", "))
                    );
                    t["name"] = json!(format!("{}:{}", text(&t["scope"]), text(&t["name"])));
                }
                table(
                    &["TEMPLATE", "SERVICES", "DESCRIPTION"],
                    &rows(&items, &["name", "services", "description"]),
                );
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
    if let Some(h) = args.hardware_type {
        body["hardwareType"] = json!(h);
    }
    if let Some(i) = args.image_type {
        body["imageType"] = json!(i);
    }
    let path = format!("/v3/namespaces/{}/plan", args.namespace);
    let v = client.call(Method::POST, &path, Some(&body))?;
    if json {
        output::json(&v);
        return Ok(());
    }
    let mut layout = list(&v["layout"]);
    for n in &mut layout {
        n["services"] = json!(
            list(&n["services"])
                .iter()
                .map(text)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    table(
        &["NODE", "HARDWARE", "IMAGE", "SERVICES"],
        &rows(&layout, &["node", "hardwareType", "imageType", "services"]),
    );
    let tasks = list(&v["tasks"]);
    let describe = |id: &Value| {
        let t = &tasks[id.as_u64().unwrap_or(0) as usize];
        match t["service"].as_str() {
            Some(s) => format!("{} {s}@{}", text(&t["action"]), text(&t["node"])),
            None => format!("{} {}", text(&t["action"]), text(&t["node"])),
        }
    };
    out!();
    out!(
        "{} tasks in {} stages (stages are for reading; tasks start as soon as what they depend on is done):",
        tasks.len(),
        list(&v["stages"]).len()
    );
    for (i, stage) in list(&v["stages"]).iter().enumerate() {
        let names: Vec<String> = list(stage).iter().map(describe).collect();
        out!("{:>3}. {}", i + 1, names.join(", "));
    }
    Ok(())
}
