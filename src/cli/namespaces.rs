//! `ebb namespace`: create, list, show and delete namespaces.

use reqwest::Method;
use serde_json::json;

use super::args::NamespaceCmd;
use super::client::{CliError, Client, read_answer};
use super::output::{self, done, out, table};
use crate::model::namespace::Namespace;

pub fn namespace(client: &Client, json: bool, cmd: NamespaceCmd) -> Result<(), CliError> {
    let v = match cmd {
        NamespaceCmd::List => {
            let v = client.get("/v3/namespaces")?;
            if !json {
                let namespaces: Vec<Namespace> = read_answer(v)?;
                let rows = namespaces
                    .into_iter()
                    .map(|n| vec![n.name, n.description])
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
        return Ok(());
    }
    let ns: Namespace = read_answer(v)?;
    out!("name:        {}\ndescription: {}", ns.name, ns.description);
    Ok(())
}
