//! The `native` provisioner: no cluster at all; programs run on this host.

use ebb_spi::{Provisioner, ProvisionerSpec};

/// The provisioner's description; it takes no properties.
pub static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: "native",
    label: "Native",
    description: "Runs programs on the host that runs ebb, without provisioning a cluster.",
    properties: &[],
};

/// The `native` provisioner.
#[derive(Debug, Default, Clone, Copy)]
pub struct Native;

impl Provisioner for Native {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }
}
