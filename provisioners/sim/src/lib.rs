//! The `sim` provisioner: a simulated EC2-like cloud for tests and benchmarks.
//!
//! Its resources live as files in a state directory outside the server, so they outlive a
//! crash of ebb, and every call is appended to a call log that tests read to prove nothing was
//! created or deleted twice. Latency and faults are properties: transient errors, creates whose
//! response is lost, fatal creates, and a quota. This crate describes the provisioner and its
//! properties; it keeps no state of its own.

use std::time::Duration;

use ebb_spi::{PropertyKind, PropertySpec, Provisioner, ProvisionerSpec};

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
        PropertySpec::optional("stateDir", PropertyKind::Text),
        PropertySpec::optional("createLatency", LATENCY),
        PropertySpec::optional("deleteLatency", LATENCY),
        PropertySpec::optional("transientErrorRate", RATE),
        PropertySpec::optional("lostCreateRate", RATE),
        PropertySpec::optional("failCreate", PropertyKind::Boolean),
        PropertySpec::optional(
            "quota",
            PropertyKind::Integer {
                min: 0,
                max: 1_000_000,
            },
        ),
    ],
};

/// The `sim` provisioner.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sim;

impl Provisioner for Sim {
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
        let good = props(&[
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
            (props(&[("nodes", "0")]), "nodes"),
            (props(&[("createLatency", "2h")]), "createLatency"),
            (props(&[("deleteLatency", "fast")]), "deleteLatency"),
            (
                props(&[("transientErrorRate", "1.01")]),
                "transientErrorRate",
            ),
            (props(&[("lostCreateRate", "-0.1")]), "lostCreateRate"),
            (props(&[("failCreate", "maybe")]), "failCreate"),
            (props(&[("quota", "-1")]), "quota"),
        ] {
            assert_eq!(Sim.validate(&input).expect_err("rejected").property, bad);
        }
    }
}
