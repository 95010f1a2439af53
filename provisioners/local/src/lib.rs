//! The `local` provisioner: each node of a cluster is a sandbox on this host.
//!
//! A node is a directory under the server's work dir (or the `workDir` property) with its own
//! loopback address; deleting the node stops what runs in it and removes the directory. The
//! provisioner keeps no state of its own: the sandboxes on disk are the truth ([`sandbox`]).

pub mod sandbox;

use std::path::PathBuf;

use ebb_spi::resource::{
    HEAL, HEAL_ATTEMPTS, HEAL_WINDOW, RETRY_BUDGET, TEMPLATE, TEMPLATE_CONFIG, TEMPLATE_SERVICES,
    node_count, node_names,
};
use ebb_spi::{
    Call, Context, Properties, PropertyKind, PropertySpec, ProvisionError, Provisioner,
    ProvisionerSpec, Resource, ResourceKey,
};

use sandbox::Sandboxes;

/// Most nodes a local cluster may have: each one is a sandbox on this one host.
pub const MAX_NODES: i64 = 64;

/// The provisioner's description and properties, as the widget in `widgets/local.json` shows them.
pub static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: "local",
    label: "Local sandboxes",
    description: "Runs each node of the cluster as a sandbox on this host: its own directory and \
                  loopback address. For development and tests; nothing leaves the machine.",
    properties: &[
        PropertySpec::optional(
            "nodes",
            PropertyKind::Integer {
                min: 1,
                max: MAX_NODES,
            },
        ),
        PropertySpec::optional("workDir", PropertyKind::Text).host_path(),
        RETRY_BUDGET,
        TEMPLATE,
        TEMPLATE_CONFIG,
        TEMPLATE_SERVICES,
        HEAL,
        HEAL_ATTEMPTS,
        HEAL_WINDOW,
    ],
};

/// The `local` provisioner.
#[derive(Debug, Default, Clone, Copy)]
pub struct Local;

/// The sandboxes of a run with these properties.
pub fn sandboxes(ctx: &Context) -> Sandboxes {
    Sandboxes::new(
        ctx.property("workDir")
            .map(PathBuf::from)
            .unwrap_or_else(|| ctx.work_dir.join("local")),
    )
}

/// Runs `f` on the sandboxes of `ctx` on the blocking pool.
async fn blocking<T: Send + 'static>(
    ctx: &Context,
    f: impl FnOnce(Sandboxes) -> Result<T, ProvisionError> + Send + 'static,
) -> Result<T, ProvisionError> {
    let sandboxes = sandboxes(ctx);
    tokio::task::spawn_blocking(move || f(sandboxes))
        .await
        .map_err(|e| ProvisionError::retryable(format!("local call did not finish: {e}")))?
}

impl Provisioner for Local {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn nodes(&self, properties: &Properties) -> Vec<String> {
        node_names(node_count(properties, 1))
    }

    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        let (key, tags) = (key.clone(), ctx.tags(key));
        Box::pin(blocking(ctx, move |s| s.create(&key, tags)))
    }

    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        let key = key.clone();
        Box::pin(blocking(ctx, move |s| s.find(&key)))
    }

    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        let id = id.to_string();
        Box::pin(blocking(ctx, move |s| s.describe(&id)))
    }

    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()> {
        let id = id.to_string();
        Box::pin(blocking(ctx, move |s| s.delete(&id)))
    }

    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(blocking(ctx, |s| {
            Ok(s.list()?.into_iter().map(|n| n.resource()).collect())
        }))
    }

    /// Each work directory holds its own sandboxes.
    fn account(&self, properties: &Properties) -> String {
        properties.get("workDir").cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_spi::Properties;

    #[test]
    fn validates_its_properties() {
        assert_eq!(Local.validate(&Properties::new()), Ok(()));
        assert_eq!(
            Local.validate(&ebb_spi::properties([
                ("nodes", "3"),
                ("workDir", "/tmp/ebb")
            ])),
            Ok(())
        );
        for (input, bad) in [
            (ebb_spi::properties([("nodes", "0")]), "nodes"),
            (ebb_spi::properties([("nodes", "65")]), "nodes"),
            (ebb_spi::properties([("nodes", "three")]), "nodes"),
            (ebb_spi::properties([("workDir", "")]), "workDir"),
            (
                ebb_spi::properties([("instanceType", "t3.small")]),
                "instanceType",
            ),
        ] {
            assert_eq!(Local.validate(&input).expect_err("rejected").property, bad);
        }
    }
}
