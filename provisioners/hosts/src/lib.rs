//! The `hosts` provisioner: a cluster of machines that already exist (CDAP's remote-hadoop
//! case), reached over SSH.
//!
//! The nodes are the machines the `hosts` property lists, in order (the first is the
//! master). Nothing is made or destroyed: "create" logs in, checks the machine answers and
//! makes the node's directory for the run (`<remoteDir>/<run>/<node>`), with a `.ebb-node`
//! file holding the node's tags; "delete" stops the run's program there if it still runs and
//! removes that directory, and never anything else on the machine. The directory is the
//! truth: `find`, `describe` and `list` look for it, so the provisioner keeps no state.

use std::collections::BTreeMap;

use ebb_spi::resource::{
    HEAL, HEAL_ATTEMPTS, HEAL_WINDOW, RETRY_BUDGET, TEMPLATE, TEMPLATE_CONFIG, TEMPLATE_SERVICES,
    node_names,
};
use ebb_spi::{
    Call, Context, FACT_REMOTE_DIR, FACT_SSH, FACT_SSH_HOST_KEY, Properties, PropertyError,
    PropertyKind, PropertySpec, ProvisionError, Provisioner, ProvisionerSpec, Resource,
    ResourceKey, ResourceState, SSH_HOST_KEY_CHECKING, SSH_KNOWN_HOSTS, SSH_USER, Tags,
};
use ebb_ssh::{Access, Session, Target, quote};

/// The file in a node's directory that holds its tags.
const MARKER: &str = ".ebb-node";

/// Where nodes' directories go when `remoteDir` is not set (relative to the login directory).
const DEFAULT_BASE: &str = ".ebb";

/// The provisioner's description and properties, as `widgets/hosts.json` shows them.
pub static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: "hosts",
    label: "Existing hosts",
    description: "Runs clusters on machines that already exist, reached over SSH: nothing is \
                  created or destroyed, only the run's directory on each machine.",
    properties: &[
        PropertySpec::required("hosts", PropertyKind::Text).author_only(),
        SSH_USER,
        PropertySpec {
            required: true,
            ..ebb_spi::SSH_PRIVATE_KEY
        },
        SSH_HOST_KEY_CHECKING,
        SSH_KNOWN_HOSTS,
        PropertySpec::optional("remoteDir", PropertyKind::Text).author_only(),
        RETRY_BUDGET,
        TEMPLATE,
        TEMPLATE_CONFIG,
        TEMPLATE_SERVICES,
        HEAL,
        HEAL_ATTEMPTS,
        HEAL_WINDOW,
    ],
};

/// The `hosts` provisioner.
#[derive(Debug, Default, Clone, Copy)]
pub struct Hosts;

/// Most machines one `hosts` list may name.
pub const MAX_HOSTS: usize = 1_000;

/// The machines of `hosts`, in order: `[user@]host[:port]`, separated by commas or white
/// space.
pub fn targets(properties: &Properties) -> Result<Vec<Target>, PropertyError> {
    let user = properties.get(SSH_USER.name).map(String::as_str);
    let text = properties.get("hosts").map(String::as_str).unwrap_or("");
    let mut targets: Vec<Target> = Vec::new();
    for item in text.split(|c: char| c == ',' || c.is_whitespace()) {
        if item.is_empty() {
            continue;
        }
        if targets.len() == MAX_HOSTS {
            return Err(PropertyError::new(
                "hosts",
                format!("lists more than {MAX_HOSTS} machines"),
            ));
        }
        let target = Target::parse(item, user).map_err(|e| PropertyError::new("hosts", e))?;
        if targets.contains(&target) {
            return Err(PropertyError::new(
                "hosts",
                format!("{target} is listed twice"),
            ));
        }
        targets.push(target);
    }
    if targets.is_empty() {
        return Err(PropertyError::new("hosts", "lists no machine"));
    }
    Ok(targets)
}

fn base(ctx: &Context) -> Option<&str> {
    ctx.property("remoteDir")
}

/// The node a target serves, and the node's machine.
fn target_of(ctx: &Context, node: &str) -> Result<Target, ProvisionError> {
    let targets = targets(&ctx.properties).map_err(|e| ProvisionError::fatal(e.to_string()))?;
    let index = node_names(targets.len())
        .iter()
        .position(|n| n == node)
        .ok_or_else(|| {
            ProvisionError::fatal(format!("'hosts' lists no machine for node {node}"))
        })?;
    Ok(targets[index].clone())
}

fn access(ctx: &Context) -> Result<Access, ProvisionError> {
    Access::from_context(ctx).map_err(ProvisionError::from)
}

/// Logs in to `target`. The provisioner's own calls check listed keys (`yes`) and otherwise
/// take the machine's word, as a first contact; the scripts and the program that follow check
/// the key pinned then (`sshHostKey`).
async fn login(ctx: &Context, target: &Target) -> Result<Session, ProvisionError> {
    let access = access(ctx)?;
    Ok(access.connect(target, access.checking(None)).await?)
}

/// `ssh://user@host:port/abs/dir`: the machine and the node's directory on it.
fn resource_id(target: &Target, dir: &str) -> String {
    format!("ssh://{target}{dir}")
}

fn parse_id(id: &str) -> Result<(Target, String), ProvisionError> {
    let bad = || ProvisionError::fatal(format!("'{id}' is not a hosts resource id"));
    let rest = id.strip_prefix("ssh://").ok_or_else(bad)?;
    let slash = rest.find('/').ok_or_else(bad)?;
    let target = Target::parse(&rest[..slash], None).map_err(|_| bad())?;
    let dir = &rest[slash..];
    if dir.len() < 2 || dir.contains("/../") || dir.ends_with("/..") {
        return Err(bad());
    }
    Ok((target, dir.to_string()))
}

/// Reads `key=value` lines.
fn parse_tags(text: &str) -> Tags {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn resource(session: &Session, dir: &str, tags: Tags, hostname: Option<String>) -> Resource {
    let target = session.target();
    let mut properties = BTreeMap::from([
        (FACT_SSH.to_string(), target.to_string()),
        (FACT_REMOTE_DIR.to_string(), dir.to_string()),
    ]);
    if !session.host_key().is_empty() {
        properties.insert(
            FACT_SSH_HOST_KEY.to_string(),
            session.host_key().to_string(),
        );
    }
    if let Some(h) = hostname.filter(|h| !h.is_empty()) {
        properties.insert("hostname".to_string(), h);
    }
    Resource {
        id: resource_id(target, dir),
        state: ResourceState::Running,
        tags,
        address: Some(target.host.clone()),
        properties,
    }
}

/// The script that prints a node directory's absolute path and tags, or nothing when it is
/// not there.
fn look(dir: &str) -> String {
    format!(
        "cd {} 2>/dev/null && [ -f {MARKER} ] && pwd && cat {MARKER}; true",
        quote(dir)
    )
}

/// What [`look`] printed: the directory and its tags.
fn looked(out: &str) -> Option<(String, Tags)> {
    let (dir, tags) = out.split_once('\n').unwrap_or((out, ""));
    let dir = dir.trim();
    (!dir.is_empty()).then(|| (dir.to_string(), parse_tags(tags)))
}

fn failed(e: String) -> ProvisionError {
    // A planted link or another user's directory stays so: trying again cannot help.
    if e.contains(ebb_ssh::remote::REFUSED) {
        return ProvisionError::fatal(e);
    }
    ProvisionError::retryable(e)
}

impl Hosts {
    async fn create(&self, ctx: &Context, key: &ResourceKey) -> Result<Resource, ProvisionError> {
        let target = target_of(ctx, &key.node)?;
        let session = login(ctx, &target).await?;
        let dir = ebb_spi::resource::remote_dir(base(ctx), &key.run, &key.node);
        let tags: String = ctx
            .tags(key)
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        let script = format!(
            "{make}cd {d} && cat > {MARKER} && pwd && hostname",
            make = ebb_ssh::remote::make(&dir),
            d = quote(&dir)
        );
        let out = session
            .run("making the node's directory", &script, tags.as_bytes())
            .await
            .map_err(failed)?;
        let mut lines = out.lines();
        let abs = lines.next().unwrap_or_default().trim().to_string();
        let hostname = lines.next().map(|h| h.trim().to_string());
        let made = resource(&session, &abs, ctx.tags(key), hostname);
        session.close().await;
        Ok(made)
    }

    async fn find(
        &self,
        ctx: &Context,
        key: &ResourceKey,
    ) -> Result<Option<Resource>, ProvisionError> {
        let target = target_of(ctx, &key.node)?;
        let session = login(ctx, &target).await?;
        let dir = ebb_spi::resource::remote_dir(base(ctx), &key.run, &key.node);
        let out = session
            .run("looking for the node's directory", &look(&dir), b"")
            .await
            .map_err(failed)?;
        let found = looked(&out)
            .filter(|(_, tags)| key.matches(tags))
            .map(|(dir, tags)| resource(&session, &dir, tags, None));
        session.close().await;
        Ok(found)
    }

    async fn describe(&self, ctx: &Context, id: &str) -> Result<Option<Resource>, ProvisionError> {
        let (target, dir) = parse_id(id)?;
        let session = login(ctx, &target).await?;
        let out = session
            .run("looking for the node's directory", &look(&dir), b"")
            .await
            .map_err(failed)?;
        let found = looked(&out).map(|(dir, tags)| resource(&session, &dir, tags, None));
        session.close().await;
        Ok(found)
    }

    async fn delete(&self, ctx: &Context, id: &str) -> Result<(), ProvisionError> {
        let (target, dir) = parse_id(id)?;
        let session = login(ctx, &target).await?;
        session
            .run(
                "removing the node's directory",
                &ebb_ssh::remote::clean(&dir),
                b"",
            )
            .await
            .map_err(failed)?;
        session.close().await;
        Ok(())
    }

    async fn list(&self, ctx: &Context) -> Result<Vec<Resource>, ProvisionError> {
        let targets = targets(&ctx.properties).map_err(|e| ProvisionError::fatal(e.to_string()))?;
        let base = base(ctx).unwrap_or(DEFAULT_BASE).trim_end_matches('/');
        let mut found = Vec::new();
        for target in targets {
            let session = login(ctx, &target).await?;
            let script = format!(
                "for f in {b}/*/*/{MARKER}; do [ -f \"$f\" ] || continue; \
                 d=$(cd \"$(dirname \"$f\")\" && pwd); printf '%s\\n' \"== $d\"; cat \"$f\"; done",
                b = quote(base)
            );
            let out = session
                .run("listing the nodes' directories", &script, b"")
                .await
                .map_err(failed)?;
            for block in out.split("== ").filter(|b| !b.trim().is_empty()) {
                if let Some((dir, tags)) = looked(block) {
                    found.push(resource(&session, &dir, tags, None));
                }
            }
            session.close().await;
        }
        Ok(found)
    }
}

impl Provisioner for Hosts {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn validate(&self, properties: &Properties) -> Result<(), PropertyError> {
        ebb_spi::validate_properties(&SPEC, properties)?;
        if properties.contains_key("hosts") {
            targets(properties)?;
        }
        if let Some(text) = properties.get(SSH_KNOWN_HOSTS.name) {
            ebb_ssh::KnownHosts::parse(text)
                .map_err(|e| PropertyError::new(SSH_KNOWN_HOSTS.name, e))?;
        }
        Ok(())
    }

    fn nodes(&self, properties: &Properties) -> Vec<String> {
        node_names(targets(properties).map(|t| t.len()).unwrap_or(0))
    }

    fn max_nodes(&self, properties: &Properties) -> u32 {
        targets(properties).map_or(0, |t| t.len() as u32)
    }

    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        Box::pin(Hosts::create(self, ctx, key))
    }

    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        Box::pin(Hosts::find(self, ctx, key))
    }

    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        Box::pin(Hosts::describe(self, ctx, id))
    }

    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()> {
        Box::pin(Hosts::delete(self, ctx, id))
    }

    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(Hosts::list(self, ctx))
    }

    /// The same machines and directory are one account, however the profile spells them.
    fn account(&self, properties: &Properties) -> String {
        let hosts = targets(properties)
            .map(|t| {
                t.iter()
                    .map(Target::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let base = properties
            .get("remoteDir")
            .map(String::as_str)
            .unwrap_or(DEFAULT_BASE);
        format!("{hosts} {base}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_its_properties() {
        let ok = ebb_spi::properties([
            ("hosts", "ops@10.0.0.1, 10.0.0.2:2222\n10.0.0.3"),
            ("sshUser", "root"),
            ("sshPrivateKey", "${secure(key)}"),
        ]);
        assert_eq!(Hosts.validate(&ok), Ok(()));
        assert_eq!(Hosts.nodes(&ok), ["master", "worker-1", "worker-2"]);
        let t = targets(&ok).expect("valid");
        assert_eq!(t[1].to_string(), "root@10.0.0.2:2222");
        for (props, bad) in [
            (
                ebb_spi::properties([("hosts", "a@h"), ("sshPrivateKey", "k")]),
                None,
            ),
            (
                ebb_spi::properties([("hosts", "h"), ("sshPrivateKey", "k")]),
                Some("hosts"),
            ),
            (
                ebb_spi::properties([("hosts", "a@h,a@h"), ("sshPrivateKey", "k")]),
                Some("hosts"),
            ),
            (
                ebb_spi::properties([("hosts", " , "), ("sshPrivateKey", "k")]),
                Some("hosts"),
            ),
            (
                ebb_spi::properties([
                    ("hosts", "a@h"),
                    ("sshPrivateKey", "k"),
                    ("sshHostKeyChecking", "maybe"),
                ]),
                Some("sshHostKeyChecking"),
            ),
            (
                ebb_spi::properties([
                    ("hosts", "a@h"),
                    ("sshPrivateKey", "k"),
                    ("sshKnownHosts", "h ssh-ed25519"),
                ]),
                Some("sshKnownHosts"),
            ),
        ] {
            let got = Hosts.validate(&props).err().map(|e| e.property);
            assert_eq!(got.as_deref(), bad, "{props:?}");
        }
    }

    #[test]
    fn ids_name_the_machine_and_directory() {
        let t = Target::parse("ops@[::1]:2222", None).expect("valid");
        let id = resource_id(&t, "/home/ops/.ebb/r1/master");
        assert_eq!(id, "ssh://ops@[::1]:2222/home/ops/.ebb/r1/master");
        let (back, dir) = parse_id(&id).expect("parses");
        assert_eq!((back, dir.as_str()), (t, "/home/ops/.ebb/r1/master"));
        for bad in [
            "i-123",
            "ssh://ops@h:22",
            "ssh://ops@h:22/",
            "ssh://ops@h/a/../b",
        ] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }
}
