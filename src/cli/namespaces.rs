//! `ebb namespace`: create, list, show and delete namespaces.

use reqwest::Method;
use serde_json::json;

use super::args::NamespaceCmd;
use super::client::{CliError, Client};
use super::output::{self, done, list, out, table, text};

pub fn namespace(client: &Client, json: bool, cmd: NamespaceCmd) -> Result<(), CliError> {
    let v = match cmd {
        NamespaceCmd::List => {
            let v = client.get("/v3/namespaces")?;
            if !json {
                let rows = list(&v)
                    .iter()
                    .map(|n| vec![text(&n["name"]), text(&n["description"])])
                    .collect::<Vec<_>>();
                table(&["NAME", "DESCRIPTION"], &rows);
                return Ok(());
            }
            v
        }
        NamespaceCmd::Get { name } => client.get(&format!("/v3/namespaces/{name}"))?,
        NamespaceCmd::Create { name, description } => {
            let body = description.map(|d| json!({ "description": d }));
            client.call(
                Method::PUT,
                &format!("/v3/namespaces/{name}"),
                body.as_ref(),
            )?
        }
        NamespaceCmd::Delete { name } => {
            client.call(Method::DELETE, &format!("/v3/namespaces/{name}"), None)?;
            return done(json, &format!("namespace '{name}' deleted"));
        }
    };
    if json {
        output::json(&v);
    } else {
        out!(
            "name:        {}\ndescription: {}",
            text(&v["name"]),
            text(&v["description"])
        );
    }
    Ok(())
}
