//! The `sim` provisioner: a simulated EC2-like cloud for tests and benchmarks.
//!
//! Its resources live as files in a state directory outside the server, so they outlive a
//! crash of ebb, and every call is appended to a call log that tests read to prove nothing was
//! created or deleted twice. Latency and faults are properties: transient errors, creates whose
//! response is lost, fatal creates, and a quota. The provisioner itself keeps no state: all of
//! it is in the state directory ([`cloud`]).

pub mod cloud;

use std::path::PathBuf;
use std::time::Duration;

use ebb_spi::capacity::{
    MARKET_TYPE, MAX_NODES, MAX_SPOT_PRICE, MIN_NODES, SPOT_RETRIES, SPOT_WORKERS_ONLY, ZONES,
};
use ebb_spi::resource::{
    HEAL, HEAL_ATTEMPTS, HEAL_WINDOW, RETRY_BUDGET, TEMPLATE, TEMPLATE_CONFIG, TEMPLATE_SERVICES,
    node_count, node_names,
};
use ebb_spi::{
    Call, Context, Properties, PropertyKind, PropertySpec, ProvisionError, Provisioner,
    ProvisionerSpec, Resource, ResourceKey, Tags,
};

use cloud::{Behaviour, Cloud};

const RATE: PropertyKind = PropertyKind::Number { min: 0.0, max: 1.0 };
const LATENCY: PropertyKind = PropertyKind::Duration {
    min: Duration::ZERO,
    max: Duration::from_secs(3600),
};

/// The provisioner's description and properties, as the widget in `widgets/sim.json` shows them.
pub static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: "sim",
    label: "Simulated cloud",
    description: "An EC2-like cloud simulated on this host, with configurable latency and fault \
                  injection (transient errors, lost create responses, fatal creates, quota). \
                  For tests and benchmarks.",
    properties: &[
        PropertySpec::optional(
            "nodes",
            PropertyKind::Integer {
                min: 1,
                max: 10_000,
            },
        ),
        PropertySpec::optional("stateDir", PropertyKind::Text).host_path(),
        PropertySpec::optional("createLatency", LATENCY),
        PropertySpec::optional("deleteLatency", LATENCY),
        PropertySpec::optional("transientErrorRate", RATE),
        PropertySpec::optional("lostCreateRate", RATE),
        PropertySpec::optional("deleteErrorRate", RATE),
        PropertySpec::optional("failCreate", PropertyKind::Boolean),
        PropertySpec::optional(
            "bootFailures",
            PropertyKind::Integer {
                min: 0,
                max: 1_000_000,
            },
        ),
        PropertySpec::optional(
            "quota",
            PropertyKind::Integer {
                min: 0,
                max: 1_000_000,
            },
        ),
        PropertySpec::optional("machineType", PropertyKind::Text),
        PropertySpec::optional("zone", PropertyKind::Text),
        PropertySpec::optional("throttle", PropertyKind::OneOf(&["none", "ec2"])),
        PropertySpec::optional(
            "spotReclaimRate",
            PropertyKind::Number {
                min: 0.0,
                max: 3600.0,
            },
        ),
        ZONES,
        MARKET_TYPE,
        SPOT_WORKERS_ONLY,
        SPOT_RETRIES,
        MAX_SPOT_PRICE,
        MIN_NODES,
        MAX_NODES,
        RETRY_BUDGET,
        TEMPLATE,
        TEMPLATE_CONFIG,
        TEMPLATE_SERVICES,
        HEAL,
        HEAL_ATTEMPTS,
        HEAL_WINDOW,
    ],
};

/// The machine type and zone of an instance whose profile names none.
pub const DEFAULT_MACHINE_TYPE: &str = "sim.standard";
pub const DEFAULT_ZONE: &str = "sim-1a";

/// The `sim` provisioner.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sim;

/// Where the cloud of a run with these properties keeps its state.
pub fn state_dir(ctx: &Context) -> PathBuf {
    ctx.property("stateDir")
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.work_dir.join("sim"))
}

fn behaviour(properties: &Properties) -> Behaviour {
    let duration = |name: &str| {
        properties
            .get(name)
            .and_then(|v| ebb_spi::parse_duration(v).ok())
            .unwrap_or_default()
    };
    let rate = |name: &str| {
        properties
            .get(name)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Behaviour {
        create_latency: duration("createLatency"),
        delete_latency: duration("deleteLatency"),
        transient_error_rate: rate("transientErrorRate"),
        lost_create_rate: rate("lostCreateRate"),
        delete_error_rate: rate("deleteErrorRate"),
        fail_create: properties
            .get("failCreate")
            .and_then(|v| ebb_spi::parse_bool(v).ok())
            .unwrap_or(false),
        quota: properties.get("quota").and_then(|v| v.trim().parse().ok()),
        boot_failures: properties
            .get("bootFailures")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
        machine_type: properties.get("machineType").map_or_else(
            || DEFAULT_MACHINE_TYPE.to_string(),
            |v| v.trim().to_string(),
        ),
        zone: properties
            .get("zone")
            .map_or_else(|| DEFAULT_ZONE.to_string(), |v| v.trim().to_string()),
        max_spot_price: properties
            .get(MAX_SPOT_PRICE.name)
            .and_then(|v| v.trim().parse().ok()),
        rates: rates(properties),
        spot_reclaim_rate: rate("spotReclaimRate"),
    }
}

/// The account's request buckets: EC2's with `throttle: ec2`, else none.
fn rates(properties: &Properties) -> ebb_spi::CallRates {
    match properties.get("throttle").map(|v| v.trim()) {
        Some("ec2") => ebb_spi::CallRates::EC2,
        _ => ebb_spi::CallRates::default(),
    }
}

/// Runs `f` on the cloud of `ctx` on the blocking pool.
async fn with_cloud<T: Send + 'static>(
    ctx: &Context,
    f: impl FnOnce(Cloud) -> Result<T, ProvisionError> + Send + 'static,
) -> Result<T, ProvisionError> {
    let dir = state_dir(ctx);
    let behaviour = behaviour(&ctx.properties);
    tokio::task::spawn_blocking(move || f(Cloud::open(&dir, behaviour)?))
        .await
        .map_err(|e| ProvisionError::retryable(format!("sim call did not finish: {e}")))?
}

impl Provisioner for Sim {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn nodes(&self, properties: &Properties) -> Vec<String> {
        node_names(node_count(properties, 1))
    }

    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        let tags = ctx.tags(key);
        let placement = ctx.placement.clone();
        Box::pin(with_cloud(ctx, move |cloud| {
            cloud.create(&tags, &placement)
        }))
    }

    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        let tags = key.tags();
        Box::pin(with_cloud(ctx, move |cloud| {
            Ok(cloud.list(&tags)?.into_iter().next())
        }))
    }

    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        let id = id.to_string();
        Box::pin(with_cloud(ctx, move |cloud| cloud.describe(&id)))
    }

    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()> {
        let id = id.to_string();
        Box::pin(with_cloud(ctx, move |cloud| cloud.delete(&id)))
    }

    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(with_cloud(ctx, |cloud| cloud.list(&Tags::new())))
    }

    /// One list call filtered by the run's tag.
    fn lookup<'a>(&'a self, ctx: &'a Context, run: &'a str) -> Call<'a, Vec<Resource>> {
        let tags: Tags = [(ebb_spi::TAG_RUN.to_string(), run.to_string())].into();
        Box::pin(with_cloud(ctx, move |cloud| cloud.list(&tags)))
    }

    /// One list call, filtered by the run's tag, answers a whole cluster's polls.
    fn batches_lookups(&self) -> bool {
        true
    }

    /// With `throttle: ec2`, the buckets its cloud enforces: ebb keeps within them.
    fn call_rates(&self, properties: &Properties) -> ebb_spi::CallRates {
        rates(properties)
    }

    /// Each state directory is its own cloud.
    fn account(&self, properties: &Properties) -> String {
        properties.get("stateDir").cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_its_properties() {
        let good = ebb_spi::properties([
            ("nodes", "3"),
            ("stateDir", "/tmp/sim"),
            ("createLatency", "250ms"),
            ("deleteLatency", "0s"),
            ("transientErrorRate", "0.1"),
            ("lostCreateRate", "0"),
            ("failCreate", "false"),
            ("quota", "10"),
        ]);
        assert_eq!(Sim.validate(&good), Ok(()));
        for (input, bad) in [
            (ebb_spi::properties([("nodes", "0")]), "nodes"),
            (
                ebb_spi::properties([("createLatency", "2h")]),
                "createLatency",
            ),
            (
                ebb_spi::properties([("deleteLatency", "fast")]),
                "deleteLatency",
            ),
            (
                ebb_spi::properties([("transientErrorRate", "1.01")]),
                "transientErrorRate",
            ),
            (
                ebb_spi::properties([("lostCreateRate", "-0.1")]),
                "lostCreateRate",
            ),
            (ebb_spi::properties([("failCreate", "maybe")]), "failCreate"),
            (ebb_spi::properties([("quota", "-1")]), "quota"),
        ] {
            assert_eq!(Sim.validate(&input).expect_err("rejected").property, bad);
        }
    }
}
