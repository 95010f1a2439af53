//! What each client command does: build the request, send it, print the answer.

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::client::{CliError, Client};
use super::output::{self, out, table, text};
use super::{
    ClientArgs, Command, NamespaceCmd, PrefCmd, PrefTarget, ProfileCmd, ProfileFlags,
    ProfileTarget, ProvisionerCmd,
};

/// Runs a client command; the result is the process's exit code.
pub fn run(args: &ClientArgs, command: Command) -> Result<u8, CliError> {
    let client = Client::new(args)?;
    let json = args.json;
    match command {
        Command::Serve(_) | Command::Shim { .. } => {
            Err(CliError::Usage("not a client command".into()))
        }
        Command::Namespace(cmd) => namespace(&client, json, cmd).map(|()| 0),
        Command::Provisioner(cmd) => provisioner(&client, json, cmd).map(|()| 0),
        Command::Profile(cmd) => profile(&client, json, *cmd).map(|()| 0),
        Command::Pref(cmd) => pref(&client, json, cmd).map(|()| 0),
        Command::App(cmd) => super::runs::app(&client, json, cmd).map(|()| 0),
        Command::Run(cmd) => super::runs::run(&client, json, cmd),
        Command::Template(cmd) => super::runs::template(&client, json, cmd).map(|()| 0),
        Command::Plan(args) => super::runs::plan(&client, json, args).map(|()| 0),
        Command::Secure(cmd) => super::admin::secure(&client, json, cmd).map(|()| 0),
        Command::Janitor(cmd) => super::admin::janitor(&client, json, cmd).map(|()| 0),
    }
}

fn namespace(client: &Client, json: bool, cmd: NamespaceCmd) -> Result<(), CliError> {
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

fn provisioner(client: &Client, json: bool, cmd: ProvisionerCmd) -> Result<(), CliError> {
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

/// The API path of a profile named on the command line.
pub(super) fn profile_path(target: &ProfileTarget) -> Result<String, CliError> {
    scoped_path("profiles", &target.profile, &target.namespace)
}

/// The API path of a scoped entity (`profiles`, `templates`): `SYSTEM:<name>` at the top
/// level, `USER:<name>` or `<name>` in `namespace`.
pub(super) fn scoped_path(kind: &str, scoped: &str, namespace: &str) -> Result<String, CliError> {
    let (scope, name) = match scoped.split_once(':') {
        Some((s, n)) => (s.to_ascii_uppercase(), n),
        None => ("USER".to_string(), scoped),
    };
    match scope.as_str() {
        "SYSTEM" => Ok(format!("/v3/{kind}/{name}")),
        "USER" => Ok(format!("/v3/namespaces/{namespace}/{kind}/{name}")),
        other => Err(CliError::Usage(format!(
            "unknown scope '{other}': use SYSTEM:<name>, USER:<name> or <name>"
        ))),
    }
}

fn profile(client: &Client, json: bool, cmd: ProfileCmd) -> Result<(), CliError> {
    match cmd {
        ProfileCmd::List(scope) => {
            let v = client.get(&scope.path("profiles"))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list(&v)
                .iter()
                .map(|p| {
                    vec![
                        format!("{}:{}", text(&p["scope"]), text(&p["name"])),
                        text(&p["status"]),
                        text(&p["provisioner"]["name"]),
                        output::seconds(&p["keepalive"]["failed"]),
                        output::seconds(&p["keepalive"]["killed"]),
                        output::seconds(&p["timeout"]),
                        text(&p["label"]),
                    ]
                })
                .collect();
            table(
                &[
                    "PROFILE",
                    "STATUS",
                    "PROVISIONER",
                    "KEEP FAILED",
                    "KEEP KILLED",
                    "TIMEOUT",
                    "LABEL",
                ],
                &rows,
            );
            Ok(())
        }
        ProfileCmd::Get(target) => show_profile(json, &client.get(&profile_path(&target)?)?),
        ProfileCmd::Status(target) => {
            let v = client.get(&format!("{}/status", profile_path(&target)?))?;
            if json {
                output::json(&v)
            } else {
                out!("{}", text(&v))
            }
            Ok(())
        }
        ProfileCmd::Create { target, flags } => {
            let path = profile_path(&target)?;
            if client.get_opt(&path)?.is_some() {
                return Err(CliError::Usage(format!(
                    "profile '{}' already exists; use `ebb profile edit`",
                    target.profile
                )));
            }
            let body = profile_body(None, &flags)?;
            show_profile(json, &client.call(Method::PUT, &path, Some(&body))?)
        }
        ProfileCmd::Edit { target, flags } => {
            let path = profile_path(&target)?;
            let current = client.get(&path)?;
            let body = profile_body(Some(&current), &flags)?;
            show_profile(json, &client.call(Method::PUT, &path, Some(&body))?)
        }
        ProfileCmd::Delete(target) => {
            client.call(Method::DELETE, &profile_path(&target)?, None)?;
            done(json, &format!("profile '{}' deleted", target.profile))
        }
        ProfileCmd::Enable(target) => set_status(client, json, &target, "enable"),
        ProfileCmd::Disable(target) => set_status(client, json, &target, "disable"),
        ProfileCmd::Usage(target) => super::runs::usage(client, json, &profile_path(&target)?),
        ProfileCmd::Assignments(target) => {
            super::runs::assignments(client, json, &profile_path(&target)?)
        }
    }
}

/// POSTs `verb` (`enable` or `disable`) to a profile and reports its new status.
fn set_status(
    client: &Client,
    json: bool,
    target: &ProfileTarget,
    verb: &str,
) -> Result<(), CliError> {
    let v = client.call(
        Method::POST,
        &format!("{}/{verb}", profile_path(target)?),
        None,
    )?;
    if json {
        output::json(&v);
    } else {
        out!("profile '{}' is {}", target.profile, text(&v["status"]));
    }
    Ok(())
}

/// Builds a PUT body: from `current` (for edit) or the file, then the flags on top.
fn profile_body(current: Option<&Value>, flags: &ProfileFlags) -> Result<Value, CliError> {
    let mut body: Map<String, Value> = match (&flags.file, current) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).map_err(|e| CliError::File {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            let v: Value = serde_json::from_str(&text).map_err(|e| CliError::File {
                path: path.display().to_string(),
                reason: format!("not valid JSON: {e}"),
            })?;
            v.as_object().cloned().ok_or_else(|| CliError::File {
                path: path.display().to_string(),
                reason: "must hold a JSON object".into(),
            })?
        }
        (None, Some(current)) => current.as_object().cloned().unwrap_or_default(),
        (None, None) => Map::new(),
    };
    // What GET returns but PUT does not take.
    for read_only in ["scope", "status", "created", "name"] {
        body.remove(read_only);
    }
    if let Some(p) = &flags.provisioner {
        let keep = body
            .get("provisioner")
            .and_then(|v| v.get("name"))
            .and_then(Value::as_str)
            == Some(p.as_str());
        if !keep {
            body.insert("provisioner".into(), json!({ "name": p, "properties": [] }));
        }
    }
    let Some(provisioner) = body.get_mut("provisioner").and_then(Value::as_object_mut) else {
        return Err(CliError::Usage(
            "a profile needs a provisioner: give --provisioner NAME or --file FILE".into(),
        ));
    };
    let props = provisioner.entry("properties").or_insert_with(|| json!([]));
    let Some(props) = props.as_array_mut() else {
        return Err(CliError::Usage(
            "provisioner.properties must be a list".into(),
        ));
    };
    for name in &flags.remove_properties {
        props.retain(|p| p["name"].as_str() != Some(name));
    }
    for (pairs, editable) in [(&flags.properties, true), (&flags.fixed_properties, false)] {
        for pair in pairs {
            let (name, value) = split_pair(pair)?;
            props.retain(|p| p["name"].as_str() != Some(name));
            props.push(json!({ "name": name, "value": value, "isEditable": editable }));
        }
    }
    for (field, value) in [("label", &flags.label), ("description", &flags.description)] {
        if let Some(v) = value {
            body.insert(field.into(), json!(v));
        }
    }
    let keepalive = body
        .entry("keepalive")
        .or_insert_with(|| json!({ "killed": 0, "failed": 0 }));
    for (field, value) in [
        ("failed", &flags.keepalive_failed),
        ("killed", &flags.keepalive_killed),
    ] {
        if let Some(v) = value {
            keepalive[field] = json!(duration(&format!("--keepalive-{field}"), v)?);
        }
    }
    if let Some(t) = &flags.timeout {
        body.insert("timeout".into(), json!(duration("--timeout", t)?));
    }
    if flags.no_timeout {
        body.insert("timeout".into(), Value::Null);
    }
    Ok(Value::Object(body))
}

pub(super) fn duration(flag: &str, value: &str) -> Result<u64, CliError> {
    ebb_spi::parse_duration(value)
        .map(|d| d.as_secs())
        .map_err(|e| CliError::Usage(format!("{flag} {e}")))
}

pub(super) fn split_pair(pair: &str) -> Result<(&str, &str), CliError> {
    match pair.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k, v)),
        _ => Err(CliError::Usage(format!("'{pair}' is not NAME=VALUE"))),
    }
}

fn show_profile(json: bool, p: &Value) -> Result<(), CliError> {
    if json {
        output::json(p);
        return Ok(());
    }
    out!("profile:      {}:{}", text(&p["scope"]), text(&p["name"]));
    out!("label:        {}", text(&p["label"]));
    out!("description:  {}", text(&p["description"]));
    out!("status:       {}", text(&p["status"]));
    out!("provisioner:  {}", text(&p["provisioner"]["name"]));
    out!(
        "keepalive:    failed {}, killed {}",
        output::seconds(&p["keepalive"]["failed"]),
        output::seconds(&p["keepalive"]["killed"])
    );
    out!("timeout:      {}", output::seconds(&p["timeout"]));
    let rows: Vec<Vec<String>> = list(&p["provisioner"]["properties"])
        .iter()
        .map(|prop| {
            let editable = if prop["isEditable"].as_bool() == Some(false) {
                "fixed"
            } else {
                "editable"
            };
            vec![
                text(&prop["name"]),
                text(&prop["value"]),
                editable.to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out!();
        table(&["PROPERTY", "VALUE", "RUNS MAY OVERRIDE"], &rows);
    }
    Ok(())
}

fn pref_path(target: &PrefTarget) -> String {
    match (&target.namespace, &target.app, &target.program) {
        (Some(ns), Some(app), Some(program)) => {
            format!("/v3/namespaces/{ns}/apps/{app}/workflows/{program}/preferences")
        }
        (Some(ns), Some(app), None) => format!("/v3/namespaces/{ns}/apps/{app}/preferences"),
        (Some(ns), None, _) => format!("/v3/namespaces/{ns}/preferences"),
        (None, _, _) => "/v3/preferences".to_string(),
    }
}

fn pref(client: &Client, json: bool, cmd: PrefCmd) -> Result<(), CliError> {
    let v = match cmd {
        PrefCmd::Get { target, resolved } => {
            client.get(&format!("{}?resolved={resolved}", pref_path(&target)))?
        }
        PrefCmd::Set {
            target,
            pairs,
            replace,
        } => {
            let path = pref_path(&target);
            let mut values = if replace {
                Map::new()
            } else {
                client.get(&path)?.as_object().cloned().unwrap_or_default()
            };
            for pair in &pairs {
                let (k, v) = split_pair(pair)?;
                values.insert(k.to_string(), json!(v));
            }
            client.call(Method::PUT, &path, Some(&Value::Object(values)))?
        }
        PrefCmd::Delete { target, keys } => {
            let path = pref_path(&target);
            if keys.is_empty() {
                client.call(Method::DELETE, &path, None)?;
                return done(json, "preferences deleted");
            }
            let mut values = client.get(&path)?.as_object().cloned().unwrap_or_default();
            for key in &keys {
                if values.remove(key).is_none() {
                    return Err(CliError::Usage(format!(
                        "preference '{key}' is not set here"
                    )));
                }
            }
            client.call(Method::PUT, &path, Some(&Value::Object(values)))?
        }
    };
    if json {
        output::json(&v);
    } else {
        let rows: Vec<Vec<String>> = v
            .as_object()
            .map(|m| m.iter().map(|(k, v)| vec![k.clone(), text(v)]).collect())
            .unwrap_or_default();
        if rows.is_empty() {
            out!("(no preferences)");
        } else {
            table(&["KEY", "VALUE"], &rows);
        }
    }
    Ok(())
}

pub(super) fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

pub(super) fn done(json: bool, message: &str) -> Result<(), CliError> {
    if json {
        output::json(&json!({ "ok": true }));
    } else {
        out!("{message}");
    }
    Ok(())
}
