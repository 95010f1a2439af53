//! The `local` provisioner: each node of a cluster is a sandbox on this host.
//!
//! A node is a directory under the data dir (or the `workDir` property) with its own
//! loopback address; deleting the node stops what runs in it and removes the directory. This
//! crate describes the provisioner and its properties; it keeps no state of its own.

use ebb_spi::{PropertyKind, PropertySpec, Provisioner, ProvisionerSpec};

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
        PropertySpec::optional("workDir", PropertyKind::Text),
    ],
};

/// The `local` provisioner.
#[derive(Debug, Default, Clone, Copy)]
pub struct Local;

impl Provisioner for Local {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_spi::Properties;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        ebb_spi::properties(pairs.iter().copied())
    }

    #[test]
    fn validates_its_properties() {
        assert_eq!(Local.validate(&props(&[])), Ok(()));
        assert_eq!(
            Local.validate(&props(&[("nodes", "3"), ("workDir", "/tmp/ebb")])),
            Ok(())
        );
        for (input, bad) in [
            (props(&[("nodes", "0")]), "nodes"),
            (props(&[("nodes", "65")]), "nodes"),
            (props(&[("nodes", "three")]), "nodes"),
            (props(&[("workDir", "")]), "workDir"),
            (props(&[("instanceType", "t3.small")]), "instanceType"),
        ] {
            assert_eq!(Local.validate(&input).expect_err("rejected").property, bad);
        }
    }
}
