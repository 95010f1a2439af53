//! Where a resource is made and on which market, and the errors that say a place is full.
//!
//! A profile names the zones its nodes may go to (`zones`, in order of preference) and the
//! market it buys on (`marketType`: `on-demand`, `spot`, `spot-with-fallback`). The framework
//! turns them into each node's ordered [`Placement`] candidates ([`candidates`]); a create is
//! asked for one of them in [`Context::placement`](crate::Context::placement). A provisioner
//! that finds the place full answers [`ProvisionError::capacity`], and the framework moves the
//! node to the next candidate instead of failing; quota stays fatal
//! ([`ProvisionError::quota`]), and a cloud's throttling is backpressure
//! ([`ProvisionError::throttled`]), never a failure of the run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Properties, PropertyKind, PropertySpec, ProvisionError, ProvisionerSpec};

/// The market a resource is bought on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Market {
    /// Capacity that is the account's until it lets it go.
    #[default]
    OnDemand,
    /// Spare capacity, cheaper, that the cloud may reclaim at short notice.
    Spot,
}

impl Market {
    /// The name profiles, facts and usage use (`on-demand`, `spot`).
    pub fn as_str(self) -> &'static str {
        match self {
            Market::OnDemand => "on-demand",
            Market::Spot => "spot",
        }
    }
}

impl std::fmt::Display for Market {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a create is asked to put its resource: a zone (none: the provisioner's own default)
/// and a market.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[derive(Serialize, Deserialize)]
pub struct Placement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default)]
    pub market: Market,
}

impl Placement {
    /// "zone us-east-1a, spot"; "on-demand" without a zone.
    pub fn describe(&self) -> String {
        match &self.zone {
            Some(zone) => format!("zone {zone}, {}", self.market),
            None => self.market.to_string(),
        }
    }
}

/// How wide a lack of capacity is: the zone asked for, or every zone of the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityScope {
    Zone,
    Region,
}

/// What kind of failure a [`ProvisionError`] is, beyond whether a retry can help.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Anything else: retried or not as `retryable` says.
    #[default]
    Other,
    /// The place asked for has no room (`InsufficientInstanceCapacity`,
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`, spot capacity not available): try another place.
    Capacity(CapacityScope),
    /// The account's quota is used: the same everywhere, so fatal.
    Quota,
    /// The cloud asks the caller to slow down (`RequestLimitExceeded`, HTTP 429): try the
    /// same call again after `retry_after` (or a backoff), without spending the retry budget.
    Throttled(Option<Duration>),
}

impl ProvisionError {
    /// The place asked for has no room; the provider's code stays in `message`.
    pub fn capacity(scope: CapacityScope, message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            message: message.into(),
            kind: ErrorKind::Capacity(scope),
        }
    }

    /// The account's quota is used up.
    pub fn quota(message: impl Into<String>) -> Self {
        Self {
            retryable: false,
            message: message.into(),
            kind: ErrorKind::Quota,
        }
    }

    /// The cloud throttles the caller; `retry_after` when it says how long to wait.
    pub fn throttled(retry_after: Option<Duration>, message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            message: message.into(),
            kind: ErrorKind::Throttled(retry_after),
        }
    }

    /// The scope of a capacity error, if it is one.
    pub fn capacity_scope(&self) -> Option<CapacityScope> {
        match self.kind {
            ErrorKind::Capacity(scope) => Some(scope),
            ErrorKind::Other | ErrorKind::Quota | ErrorKind::Throttled(_) => None,
        }
    }
}

/// A client-side token bucket: at most `burst` calls at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub burst: u32,
    pub per_second: f64,
}

/// How fast an account may be called, by kind of call, shaped like its cloud's documented
/// limits; `None`: no limit of ebb's own.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallRates {
    /// `describe`, `find`, `list`, `lookup`.
    pub read: Option<Rate>,
    pub create: Option<Rate>,
    pub delete: Option<Rate>,
}

impl CallRates {
    /// EC2's documented request buckets: non-mutating calls 100 at once, 20 a second;
    /// `RunInstances`' resource bucket 1,000 instances, 2 a second; `TerminateInstances`'
    /// 1,000, 20 a second.
    pub const EC2: CallRates = CallRates {
        read: Some(Rate {
            burst: 100,
            per_second: 20.0,
        }),
        create: Some(Rate {
            burst: 1000,
            per_second: 2.0,
        }),
        delete: Some(Rate {
            burst: 1000,
            per_second: 20.0,
        }),
    };

    /// Compute Engine's documented rate quotas: 1,500 requests a minute per project for each
    /// group (reads, lists, mutations), counted in fixed minutes; a bucket of 300 refilled at
    /// 20 a second stays under 1,500 in any minute.
    pub const GCE: CallRates = CallRates {
        read: Some(Rate {
            burst: 300,
            per_second: 20.0,
        }),
        create: Some(Rate {
            burst: 300,
            per_second: 20.0,
        }),
        delete: Some(Rate {
            burst: 300,
            per_second: 20.0,
        }),
    };
}

/// Google's name for the market (`STANDARD`, `SPOT`), offered by `gcp-compute`: `SPOT` is
/// `marketType: spot`, and `marketType: spot-with-fallback` beside it adds the fallback.
pub const PROVISIONING_MODEL: PropertySpec = PropertySpec::optional(
    "provisioningModel",
    PropertyKind::OneOf(&["STANDARD", "SPOT"]),
);
/// The zones a node may go to, in order of preference (comma- or space-separated).
pub const ZONES: PropertySpec = PropertySpec::optional("zones", PropertyKind::Text).author_only();
/// The market to buy on: `on-demand`, `spot`, or `spot-with-fallback` (spot, and on-demand
/// where and when spot has no room).
pub const MARKET_TYPE: PropertySpec = PropertySpec::optional(
    "marketType",
    PropertyKind::OneOf(&["on-demand", "spot", "spot-with-fallback"]),
);
/// With spot: keep the master (where the program runs) on-demand. The default is `true`.
pub const SPOT_WORKERS_ONLY: PropertySpec =
    PropertySpec::optional("spotWorkersOnly", PropertyKind::Boolean);
/// Reclaims of one node by the cloud before its replacement is bought on-demand.
pub const SPOT_RETRIES: PropertySpec =
    PropertySpec::optional("spotRetries", PropertyKind::Integer { min: 0, max: 100 });
/// The most to pay per node-hour for spot (unset: up to the on-demand price, as the clouds
/// advise).
pub const MAX_SPOT_PRICE: PropertySpec = PropertySpec::optional(
    "maxSpotPrice",
    PropertyKind::Number {
        min: 0.001,
        max: 1_000_000.0,
    },
);
/// The fewest nodes a create may end with when capacity runs out (default: all of `nodes`);
/// also the floor of a resize.
pub const MIN_NODES: PropertySpec = PropertySpec::optional(
    "minNodes",
    PropertyKind::Integer {
        min: 1,
        max: crate::MAX_NODES as i64,
    },
);
/// The most nodes a resize may grow the cluster to (default: `nodes`).
pub const MAX_NODES: PropertySpec = PropertySpec::optional(
    "maxNodes",
    PropertyKind::Integer {
        min: 1,
        max: crate::MAX_NODES as i64,
    },
);

/// The most zones a profile may list.
pub const MAX_ZONES: usize = 32;

/// How a profile buys its nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MarketType {
    #[default]
    OnDemand,
    Spot,
    SpotWithFallback,
}

impl MarketType {
    /// From `marketType`'s value; unset or unknown (validation refused it) is on-demand.
    pub fn parse(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            Some("spot") => MarketType::Spot,
            Some("spot-with-fallback") => MarketType::SpotWithFallback,
            _ => MarketType::OnDemand,
        }
    }

    /// How `properties` buy: `marketType`, else Google's `provisioningModel` (`SPOT` is
    /// spot), else on-demand.
    pub fn of(properties: &Properties) -> Self {
        match properties.get(MARKET_TYPE.name) {
            Some(value) => MarketType::parse(Some(value)),
            None => match properties.get(PROVISIONING_MODEL.name).map(|v| v.trim()) {
                Some("SPOT") => MarketType::Spot,
                Some(_) | None => MarketType::OnDemand,
            },
        }
    }
}

/// The zones `properties` list (`zones`), in order, each once.
pub fn zones(properties: &Properties) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let listed = properties.get(ZONES.name).map(String::as_str).unwrap_or("");
    for zone in listed.split([',', ' ', '\n']).map(str::trim) {
        if !zone.is_empty() && !out.iter().any(|z| z == zone) {
            out.push(zone.to_string());
        }
    }
    out
}

/// Checks `zones` (a bounded list of plain names), `minNodes` ≤ `nodes` ≤ `maxNodes`, and
/// `maxSpotPrice` only with spot, for [`crate::Provisioner::validate`].
pub fn validate(properties: &Properties) -> Result<(), crate::PropertyError> {
    use crate::PropertyError;
    let listed = zones(properties);
    if properties.contains_key(ZONES.name) && listed.is_empty() {
        return Err(PropertyError::new(
            ZONES.name,
            "must name at least one zone",
        ));
    }
    if listed.len() > MAX_ZONES {
        return Err(PropertyError::new(
            ZONES.name,
            format!("may name at most {MAX_ZONES} zones, got {}", listed.len()),
        ));
    }
    if let Some(bad) = listed.iter().find(|z| {
        z.len() > 63
            || !z
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    }) {
        return Err(PropertyError::new(
            ZONES.name,
            format!("'{bad}' is not a zone name (letters, digits, '-' and '_', at most 63)"),
        ));
    }
    let number = |name: &str| {
        properties
            .get(name)
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    let nodes = number("nodes");
    let (min, max) = (number(MIN_NODES.name), number(MAX_NODES.name));
    if let (Some(min), Some(nodes)) = (min, nodes)
        && min > nodes
    {
        return Err(PropertyError::new(
            MIN_NODES.name,
            format!("must not be above nodes ({nodes}), got {min}"),
        ));
    }
    if let (Some(max), Some(nodes)) = (max, nodes)
        && max < nodes
    {
        return Err(PropertyError::new(
            MAX_NODES.name,
            format!("must not be below nodes ({nodes}), got {max}"),
        ));
    }
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        return Err(PropertyError::new(
            MIN_NODES.name,
            format!("must not be above maxNodes ({max}), got {min}"),
        ));
    }
    let market = MarketType::of(properties);
    // Both set, they must buy on the same market (SPOT with spot or spot-with-fallback).
    let model = properties.get(PROVISIONING_MODEL.name).map(|v| v.trim());
    let listed = properties.get(MARKET_TYPE.name).map(String::as_str);
    if let (Some(model), Some(listed)) = (model, listed)
        && (model == "SPOT") != (MarketType::parse(Some(listed)) != MarketType::OnDemand)
    {
        return Err(PropertyError::new(
            PROVISIONING_MODEL.name,
            format!(
                "says {model} but marketType says {listed}: set one (marketType \
                 spot-with-fallback beside provisioningModel SPOT adds the fallback)"
            ),
        ));
    }
    if properties.contains_key(MAX_SPOT_PRICE.name) && market == MarketType::OnDemand {
        return Err(PropertyError::new(
            MAX_SPOT_PRICE.name,
            "applies only with marketType spot or spot-with-fallback",
        ));
    }
    Ok(())
}

/// The places node `master` (the master, or a worker) may be made, in order: for each market
/// the profile buys on (spot first, then on-demand with a fallback), each of its zones in
/// order (none listed: the provisioner's own zone). With spot, the master stays on-demand
/// unless `spotWorkersOnly` is `false`. A provisioner that does not offer `zones` or
/// `marketType` gets one place on-demand.
pub fn candidates(spec: &ProvisionerSpec, properties: &Properties, master: bool) -> Vec<Placement> {
    let zones: Vec<Option<String>> = match spec.property(ZONES.name) {
        Some(_) => {
            let listed = zones(properties);
            if listed.is_empty() {
                vec![None]
            } else {
                listed.into_iter().map(Some).collect()
            }
        }
        None => vec![None],
    };
    let offered = spec.property(MARKET_TYPE.name).is_some()
        || spec.property(PROVISIONING_MODEL.name).is_some();
    let market = match offered {
        true => MarketType::of(properties),
        false => MarketType::OnDemand,
    };
    let workers_only = properties
        .get(SPOT_WORKERS_ONLY.name)
        .and_then(|v| crate::parse_bool(v).ok())
        .unwrap_or(true);
    let markets: &[Market] = match market {
        MarketType::OnDemand => &[Market::OnDemand],
        _ if master && workers_only => &[Market::OnDemand],
        MarketType::Spot => &[Market::Spot],
        MarketType::SpotWithFallback => &[Market::Spot, Market::OnDemand],
    };
    markets
        .iter()
        .flat_map(|market| {
            zones.iter().map(|zone| Placement {
                zone: zone.clone(),
                market: *market,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PropertySpec, properties};

    static SPEC: ProvisionerSpec = ProvisionerSpec {
        name: "t",
        label: "T",
        description: "",
        properties: &[
            PropertySpec::optional("nodes", PropertyKind::Integer { min: 1, max: 100 }),
            ZONES,
            MARKET_TYPE,
            SPOT_WORKERS_ONLY,
            MIN_NODES,
            MAX_NODES,
            MAX_SPOT_PRICE,
        ],
    };

    fn place(zone: Option<&str>, market: Market) -> Placement {
        Placement {
            zone: zone.map(str::to_string),
            market,
        }
    }

    #[test]
    fn spot_comes_first_then_on_demand_and_the_master_stays_on_demand() {
        use Market::{OnDemand, Spot};
        let p = properties([("zones", "a, b"), ("marketType", "spot-with-fallback")]);
        assert_eq!(
            candidates(&SPEC, &p, false),
            [
                place(Some("a"), Spot),
                place(Some("b"), Spot),
                place(Some("a"), OnDemand),
                place(Some("b"), OnDemand)
            ]
        );
        assert_eq!(
            candidates(&SPEC, &p, true),
            [place(Some("a"), OnDemand), place(Some("b"), OnDemand)]
        );
        let all_spot = properties([("marketType", "spot"), ("spotWorkersOnly", "false")]);
        assert_eq!(candidates(&SPEC, &all_spot, true), [place(None, Spot)]);
        assert_eq!(
            candidates(&SPEC, &properties([]), false),
            [place(None, OnDemand)]
        );
        // A provisioner without the properties buys on-demand where it always did.
        static BARE: ProvisionerSpec = ProvisionerSpec {
            name: "b",
            label: "B",
            description: "",
            properties: &[],
        };
        assert_eq!(candidates(&BARE, &p, false), [place(None, OnDemand)]);
    }

    #[test]
    fn zones_and_sizes_are_checked() {
        let ok = properties([("nodes", "4"), ("minNodes", "2"), ("maxNodes", "8")]);
        assert_eq!(validate(&ok), Ok(()));
        for (pairs, property, fragment) in [
            (vec![("zones", " , ")], "zones", "at least one"),
            (vec![("zones", "a/b")], "zones", "not a zone name"),
            (
                vec![("nodes", "4"), ("minNodes", "5")],
                "minNodes",
                "above nodes",
            ),
            (
                vec![("nodes", "4"), ("maxNodes", "3")],
                "maxNodes",
                "below nodes",
            ),
            (
                vec![("minNodes", "5"), ("maxNodes", "3")],
                "minNodes",
                "above maxNodes",
            ),
            (vec![("maxSpotPrice", "0.5")], "maxSpotPrice", "only with"),
        ] {
            let err = validate(&properties(pairs.clone())).expect_err("refused");
            assert_eq!(err.property, property, "{pairs:?}");
            assert!(err.message.contains(fragment), "{pairs:?}: {err}");
        }
        let many = (0..40)
            .map(|i| format!("z{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let err = validate(&[("zones".to_string(), many)].into()).expect_err("too many");
        assert!(err.message.contains("at most 32"), "{err}");
        assert_eq!(zones(&properties([("zones", "a,b a")])), ["a", "b"]);
    }

    #[test]
    fn provisioning_model_is_the_market_and_may_not_disagree_with_it() {
        let spot = properties([("provisioningModel", "SPOT")]);
        assert_eq!(MarketType::of(&spot), MarketType::Spot);
        assert_eq!(validate(&spot), Ok(()));
        let fallback = properties([
            ("provisioningModel", "SPOT"),
            ("marketType", "spot-with-fallback"),
        ]);
        assert_eq!(MarketType::of(&fallback), MarketType::SpotWithFallback);
        assert_eq!(validate(&fallback), Ok(()));
        for (model, market) in [("SPOT", "on-demand"), ("STANDARD", "spot")] {
            let both = properties([("provisioningModel", model), ("marketType", market)]);
            let e = validate(&both).expect_err("they disagree");
            assert_eq!(e.property, "provisioningModel", "{model} {market}");
        }
        let standard = properties([
            ("provisioningModel", "STANDARD"),
            ("marketType", "on-demand"),
        ]);
        assert_eq!(validate(&standard), Ok(()));
    }
}
