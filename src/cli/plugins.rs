//! `ebb plugin`: the plugins a server loaded, and the conformance kit for a plugin.

use std::collections::BTreeMap;

use ebb_plugin::conformance::{self, Options};
use ebb_plugin::{Kind, PluginAutomator, PluginProvisioner};
use ebb_spi::{Context, Properties, TAG_NAMESPACE, TAG_PROFILE, TAG_SERVER};

use super::PluginTestArgs;
use super::client::{CliError, Client, read_answer};
use super::output::{self, out, table};
use crate::model::view::PluginList;

/// `ebb plugin list`.
pub fn list(client: &Client, json: bool) -> Result<(), CliError> {
    let v = client.get("/v3/plugins")?;
    if json {
        output::json(&v);
        return Ok(());
    }
    let list: PluginList = read_answer(v)?;
    let rows: Vec<Vec<String>> = list
        .plugins
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.kind.clone(),
                p.version.clone(),
                p.status.clone(),
                format!("{}/{}/{}", p.calls, p.errors, p.broken),
                p.dir.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "KIND",
            "VERSION",
            "STATUS",
            "CALLS/ERRORS/BROKEN",
            "DIR",
        ],
        &rows,
    );
    for p in list.plugins.iter().filter(|p| p.failure.is_some()) {
        out!(
            "\n{} is failing: {}",
            p.name,
            p.failure.as_deref().unwrap_or_default()
        );
    }
    for b in &list.broken {
        out!("\nnot loaded: {}: {}", b.dir, b.error);
    }
    Ok(())
}

/// `ebb plugin test DIR`: the kit's cases, one line each; exit code 1 unless all hold.
pub fn test(args: PluginTestArgs, json: bool) -> Result<u8, CliError> {
    let usage = |m: String| CliError::Usage(m);
    let descriptor = ebb_plugin::descriptor::load(&args.dir).map_err(|e| usage(e.to_string()))?;
    let properties = properties(&args)?;
    let fixtures = match descriptor.kind {
        Kind::Provisioner => None,
        Kind::Automator => Some(fixtures(&args)?),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| usage(format!("cannot start: {e}")))?;
    // Everything that may fail is done: a temporary work dir made now is always removed.
    let (work_dir, temporary) = match &args.work_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let dir = tempdir()?;
            (dir.clone(), Some(dir))
        }
    };
    let secrets: Vec<String> = properties
        .iter()
        .filter(|(name, _)| descriptor.spec.property(name).is_some_and(|p| p.secret))
        .map(|(_, v)| v.clone())
        .collect();
    let mut ctx = Context::new(properties.clone(), work_dir).with_resolved(properties, secrets);
    ctx.labels = [
        (TAG_SERVER, "ebb-plugin-test"),
        (TAG_NAMESPACE, "default"),
        (TAG_PROFILE, "conformance"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let options = Options {
        wait: args.wait,
        ..Options::default()
    };
    let cases = match fixtures {
        None => {
            let plugin = PluginProvisioner::new(descriptor);
            runtime.block_on(conformance::run_plugin(&plugin, &ctx, options))
        }
        Some(fixtures) => {
            let plugin = PluginAutomator::new(descriptor);
            runtime.block_on(conformance::run_automator(
                &plugin,
                &fixtures,
                &ctx.work_dir,
            ))
        }
    };
    drop(runtime);
    if let Some(dir) = temporary {
        let _ = std::fs::remove_dir_all(dir);
    }
    if json {
        let v: Vec<serde_json::Value> = cases
            .iter()
            .map(|c| serde_json::json!({ "case": c.name, "passed": c.passed, "detail": c.detail }))
            .collect();
        output::json(&serde_json::Value::Array(v));
    } else {
        for line in conformance::report(&cases).lines() {
            out!("{line}");
        }
    }
    Ok(u8::from(cases.iter().any(|c| !c.passed)))
}

/// The actions an automator is tested with: `--fixtures`, else its `conformance.json`.
fn fixtures(args: &PluginTestArgs) -> Result<conformance::Fixtures, CliError> {
    let file = args
        .fixtures
        .clone()
        .unwrap_or_else(|| args.dir.join("conformance.json"));
    let text = std::fs::read_to_string(&file).map_err(|e| {
        CliError::Usage(format!(
            "{}: {e} (an automator is tested with the actions it names: succeeds, fails, slow)",
            file.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| CliError::Usage(format!("{}: {e}", file.display())))
}

fn properties(args: &PluginTestArgs) -> Result<Properties, CliError> {
    let mut properties = Properties::new();
    if let Some(file) = &args.properties_file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::Usage(format!("{}: {e}", file.display())))?;
        let map: BTreeMap<String, String> = serde_json::from_str(&text).map_err(|e| {
            CliError::Usage(format!(
                "{}: must be a JSON object of text values: {e}",
                file.display()
            ))
        })?;
        properties.extend(map);
    }
    for pair in &args.properties {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| CliError::Usage(format!("--property {pair}: must be NAME=VALUE")))?;
        properties.insert(name.to_string(), value.to_string());
    }
    Ok(properties)
}

/// A new private directory for the kit's work.
fn tempdir() -> Result<std::path::PathBuf, CliError> {
    let base = std::env::temp_dir();
    for _ in 0..16 {
        let dir = base.join(format!("ebb-plugin-test-{:x}", fastrand::u64(..)));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(CliError::Usage(format!("cannot make a work dir: {e}"))),
        }
    }
    Err(CliError::Usage("cannot make a work dir".into()))
}
