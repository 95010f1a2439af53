//! The `native` provisioner: no cluster at all; programs run on this host.

use ebb_spi::{
    Call, Context, Properties, ProvisionError, Provisioner, ProvisionerSpec, Resource, ResourceKey,
};

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

fn no_resources<'a, T: Send + 'a>() -> Call<'a, T> {
    Box::pin(async {
        Err(ProvisionError::fatal(
            "the native provisioner makes no resources",
        ))
    })
}

impl Provisioner for Native {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn nodes(&self, _: &Properties) -> Vec<String> {
        Vec::new()
    }

    fn max_nodes(&self, _: &Properties) -> u32 {
        0
    }

    fn create<'a>(&'a self, _: &'a Context, _: &'a ResourceKey) -> Call<'a, Resource> {
        no_resources()
    }

    fn find<'a>(&'a self, _: &'a Context, _: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        Box::pin(async { Ok(None) })
    }

    fn describe<'a>(&'a self, _: &'a Context, _: &'a str) -> Call<'a, Option<Resource>> {
        Box::pin(async { Ok(None) })
    }

    fn delete<'a>(&'a self, _: &'a Context, _: &'a str) -> Call<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn list<'a>(&'a self, _: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}
