//! `ebb secure`: the namespace's secure keys.

use std::io::Read;

use reqwest::Method;
use serde_json::{Map, json};

use super::args::SecureCmd;
use super::client::{CliError, Client, read_answer};
use super::input::split_pair;
use super::output::{self, done, out, table, timestamp};
use crate::model::secure::KeyMetadata;

pub fn secure(client: &Client, json: bool, cmd: SecureCmd) -> Result<(), CliError> {
    let path = |ns: &str, name: &str| format!("/v3/namespaces/{ns}/securekeys/{name}");
    let v = match cmd {
        SecureCmd::List { namespace } => {
            let v = client.get(&format!("/v3/namespaces/{namespace}/securekeys"))?;
            if !json {
                let keys: Vec<KeyMetadata> = read_answer(v)?;
                let rows: Vec<Vec<String>> = keys
                    .iter()
                    .map(|k| {
                        vec![
                            k.name.clone(),
                            k.description.clone(),
                            timestamp(Some(k.created_epoch_ms / 1000)),
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
        return Ok(());
    }
    let key: KeyMetadata = read_answer(v)?;
    out!(
        "name:        {}\ndescription: {}\ncreated:     {}",
        key.name,
        key.description,
        timestamp(Some(key.created_epoch_ms / 1000))
    );
    Ok(())
}
