//! `ebb token` and `ebb audit`: access tokens, and who changed what.

use reqwest::Method;
use serde_json::json;

use super::args::{AuditArgs, TokenCmd};
use super::client::{CliError, Client, read_answer};
use super::output::{self, out, table, timestamp};
use crate::model::access::{AuditEntry, TokenView};

pub fn token(client: &Client, json: bool, cmd: TokenCmd) -> Result<(), CliError> {
    match cmd {
        TokenCmd::Create {
            name,
            namespaces,
            roles,
            instance_admin,
            metrics,
            expires,
        } => {
            if namespaces.len() != roles.len() {
                return Err(CliError::Usage(format!(
                    "give one --role for each --namespace ({} namespaces, {} roles)",
                    namespaces.len(),
                    roles.len()
                )));
            }
            let grants: serde_json::Map<String, serde_json::Value> = namespaces
                .into_iter()
                .zip(roles)
                .map(|(ns, role)| (ns, json!(role.to_ascii_lowercase())))
                .collect();
            let mut body = json!({
                "name": name,
                "namespaces": grants,
                "instanceAdmin": instance_admin,
                "metrics": metrics,
            });
            if let Some(expires) = expires {
                body["expiresIn"] = json!(expires);
            }
            let v = client.call(Method::POST, "/v3/tokens", Some(&body))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let made: TokenView = read_answer(v)?;
            eprintln!(
                "token {} made; its secret follows, shown this once (keep it in an owner-only file and pass it with --token-file):",
                made.name
            );
            out!("{}", made.token.unwrap_or_default());
        }
        TokenCmd::List => {
            let v = client.get("/v3/tokens")?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let tokens: Vec<TokenView> = read_answer(v)?;
            let rows: Vec<Vec<String>> = tokens
                .into_iter()
                .map(|t| {
                    let roles = if t.grants.instance_admin {
                        "instance-admin".to_string()
                    } else {
                        t.grants
                            .metrics
                            .then(|| "metrics".to_string())
                            .into_iter()
                            .chain(
                                t.grants
                                    .namespaces
                                    .iter()
                                    .map(|(ns, role)| format!("{ns}:{role}")),
                            )
                            .collect::<Vec<_>>()
                            .join(",")
                    };
                    vec![
                        t.name,
                        roles,
                        t.created_by,
                        timestamp(Some(t.created)),
                        t.expires.map_or("never".into(), |e| timestamp(Some(e))),
                    ]
                })
                .collect();
            table(
                &["NAME", "ROLES", "CREATED BY", "CREATED", "EXPIRES"],
                &rows,
            );
        }
        TokenCmd::Revoke { name } => {
            crate::model::names::check("token", &name)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            let v = client.call(Method::DELETE, &format!("/v3/tokens/{name}"), None)?;
            if json {
                output::json(&v);
                return Ok(());
            }
            out!("token {name} revoked");
        }
    }
    Ok(())
}

pub fn audit(client: &Client, json: bool, args: AuditArgs) -> Result<(), CliError> {
    let mut query = format!("limit={}", args.limit);
    if let Some(ns) = &args.namespace {
        crate::model::names::check("namespace", ns).map_err(|e| CliError::Usage(e.to_string()))?;
        query.push_str(&format!("&namespace={ns}"));
    }
    if let Some(since) = &args.since {
        let back =
            ebb_spi::parse_duration(since).map_err(|e| CliError::Usage(format!("--since: {e}")))?;
        let from = crate::store::clock::now_secs().saturating_sub(back.as_secs());
        query.push_str(&format!("&since={from}"));
    }
    let v = client.get(&format!("/v3/audit?{query}"))?;
    if json {
        output::json(&v);
        return Ok(());
    }
    let entries: Vec<AuditEntry> = read_answer(v)?;
    let rows: Vec<Vec<String>> = entries
        .into_iter()
        .map(|e| {
            vec![
                timestamp(Some(e.time as u64)),
                e.act.actor,
                e.act.action,
                e.act.namespace.unwrap_or_else(|| "-".into()),
                e.act.target,
            ]
        })
        .collect();
    table(&["TIME", "ACTOR", "ACTION", "NAMESPACE", "TARGET"], &rows);
    Ok(())
}
