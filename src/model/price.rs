//! Prices of nodes: a table per provisioner and machine type (optionally per zone or region,
//! and per market), shipped for common EC2 and Compute Engine types
//! (`profiles/prices/shipped.json`, with the date they were taken) and replaced by instance admins
//! (`PUT /v3/prices`); a profile's `pricePerNodeHour` prices everything else (hosts, local).
//! A node's price is read from the facts its provisioner reports ([`NodeFacts`]); a node
//! without a known price has an unknown cost, never a cost of 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::invalid::Invalid;

/// The most prices one table holds.
pub const MAX_PRICES: usize = 10_000;
/// The highest price per node-hour a table or profile may state.
pub const MAX_PER_HOUR: f64 = 100_000.0;
/// The market of a node whose provisioner reports none.
pub const ON_DEMAND: &str = "on-demand";

/// The table shipped with ebb, in force until an instance admin replaces it.
pub const SHIPPED: &str = include_str!("../../profiles/prices/shipped.json");

/// The price table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceTable {
    /// The currency of every price (`USD`).
    pub currency: String,
    /// When the prices were taken (`2026-11-27`).
    pub taken: String,
    /// Where they were taken from.
    #[serde(default)]
    pub source: String,
    pub prices: Vec<Price>,
}

/// One price: a machine type of a provisioner, per node-hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    pub provisioner: String,
    /// The machine type as the provisioner reports it (`instanceType` on EC2, `machineType`
    /// on Compute Engine and sim).
    pub machine_type: String,
    /// A zone, or a region (then every zone whose name starts with it); any zone if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `on-demand` (the default) or `spot`.
    #[serde(default = "on_demand")]
    pub market: String,
    pub per_hour: f64,
}

fn on_demand() -> String {
    ON_DEMAND.to_string()
}

/// What prices a node: the facts its provisioner reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts<'a> {
    pub machine_type: Option<&'a str>,
    pub zone: Option<&'a str>,
    pub market: &'a str,
}

impl<'a> NodeFacts<'a> {
    /// Reads the facts a node's provisioner reported: `instanceType` or `machineType`,
    /// `availabilityZone` or `zone`, and `market` (on-demand unless it says otherwise).
    pub fn of(facts: &'a BTreeMap<String, String>) -> NodeFacts<'a> {
        let first = |names: &[&str]| names.iter().find_map(|n| facts.get(*n)).map(String::as_str);
        NodeFacts {
            machine_type: first(&["instanceType", "machineType"]),
            zone: first(&["availabilityZone", "zone"]),
            market: first(&["market"]).unwrap_or(ON_DEMAND),
        }
    }
}

impl PriceTable {
    /// The table shipped with ebb (read once).
    pub fn shipped() -> PriceTable {
        static SHIPPED_TABLE: std::sync::OnceLock<PriceTable> = std::sync::OnceLock::new();
        SHIPPED_TABLE
            .get_or_init(|| {
                serde_json::from_str(SHIPPED).unwrap_or_else(|_| PriceTable {
                    currency: "USD".into(),
                    taken: String::new(),
                    source: String::new(),
                    prices: Vec::new(),
                })
            })
            .clone()
    }

    /// Checks a table an admin sent; each error names its field.
    pub fn validate(&self) -> Result<(), Invalid> {
        let name = |field: String, v: &str| {
            if v.is_empty() || v.len() > 128 || v.chars().any(char::is_control) {
                return Err(Invalid::new(field, "must be 1 to 128 printable characters"));
            }
            Ok(())
        };
        name("currency".into(), &self.currency)?;
        if self.taken.len() > 64 || self.source.len() > 1024 {
            return Err(Invalid::new("source", "is too long"));
        }
        if self.prices.len() > MAX_PRICES {
            return Err(Invalid::new(
                "prices",
                format!("{} prices; at most {MAX_PRICES}", self.prices.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, p) in self.prices.iter().enumerate() {
            let at = |f: &str| format!("prices[{i}].{f}");
            name(at("provisioner"), &p.provisioner)?;
            name(at("machineType"), &p.machine_type)?;
            name(at("market"), &p.market)?;
            if let Some(z) = &p.zone {
                name(at("zone"), z)?;
            }
            check_per_hour(&at("perHour"), p.per_hour)?;
            if !seen.insert((&p.provisioner, &p.machine_type, &p.zone, &p.market)) {
                return Err(Invalid::new(at("machineType"), "is priced twice"));
            }
        }
        Ok(())
    }

    /// The price per node-hour of a node of `provisioner` with facts `facts`, in millionths:
    /// the entry for its machine type and market whose zone matches most closely.
    pub fn micros_per_hour(&self, provisioner: &str, facts: &NodeFacts) -> Option<u64> {
        let machine = facts.machine_type?;
        self.prices
            .iter()
            .filter(|p| p.provisioner == provisioner && p.machine_type == machine)
            .filter(|p| p.market == facts.market)
            .filter_map(|p| match (&p.zone, facts.zone) {
                (None, _) => Some((0, p)),
                (Some(z), Some(at)) if at.starts_with(z.as_str()) => Some((z.len(), p)),
                (Some(_), _) => None,
            })
            .max_by_key(|(closeness, _)| *closeness)
            .map(|(_, p)| micros(p.per_hour))
    }
}

/// Checks a price per node-hour (`field` names it in the error).
pub fn check_per_hour(field: &str, per_hour: f64) -> Result<(), Invalid> {
    if !per_hour.is_finite() || !(0.0..=MAX_PER_HOUR).contains(&per_hour) {
        return Err(Invalid::new(
            field,
            format!("must be a number from 0 to {MAX_PER_HOUR}"),
        ));
    }
    Ok(())
}

/// A price as whole millionths.
pub fn micros(per_hour: f64) -> u64 {
    (per_hour * 1_000_000.0).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_table_reads_and_is_valid() {
        let t = PriceTable::shipped();
        assert!(t.prices.len() > 20, "{t:?}");
        t.validate().expect("valid");
        let facts = BTreeMap::from([
            ("instanceType".to_string(), "m5.large".to_string()),
            ("availabilityZone".to_string(), "us-east-1b".to_string()),
        ]);
        assert_eq!(
            t.micros_per_hour("aws-ec2", &NodeFacts::of(&facts)),
            Some(96_000)
        );
        let elsewhere = BTreeMap::from([
            ("instanceType".to_string(), "m5.large".to_string()),
            ("availabilityZone".to_string(), "eu-west-1a".to_string()),
        ]);
        assert_eq!(
            t.micros_per_hour("aws-ec2", &NodeFacts::of(&elsewhere)),
            None
        );
    }

    #[test]
    fn the_closest_zone_and_the_market_decide() {
        let price = |zone: Option<&str>, market: &str, per_hour| Price {
            provisioner: "sim".into(),
            machine_type: "big".into(),
            zone: zone.map(str::to_string),
            market: market.into(),
            per_hour,
        };
        let t = PriceTable {
            currency: "USD".into(),
            taken: String::new(),
            source: String::new(),
            prices: vec![
                price(None, ON_DEMAND, 1.0),
                price(Some("r1"), ON_DEMAND, 2.0),
                price(Some("r1-b"), ON_DEMAND, 3.0),
                price(None, "spot", 0.5),
            ],
        };
        let at = |zone, market| NodeFacts {
            machine_type: Some("big"),
            zone,
            market,
        };
        assert_eq!(
            t.micros_per_hour("sim", &at(Some("r2-a"), ON_DEMAND)),
            Some(1_000_000)
        );
        assert_eq!(
            t.micros_per_hour("sim", &at(Some("r1-a"), ON_DEMAND)),
            Some(2_000_000)
        );
        assert_eq!(
            t.micros_per_hour("sim", &at(Some("r1-b"), ON_DEMAND)),
            Some(3_000_000)
        );
        assert_eq!(t.micros_per_hour("sim", &at(None, "spot")), Some(500_000));
        assert_eq!(t.micros_per_hour("local", &at(None, ON_DEMAND)), None);
        let mut twice = t.clone();
        twice.prices.push(price(None, "spot", 0.7));
        assert_eq!(
            twice.validate().expect_err("refused").field,
            "prices[4].machineType"
        );
        let mut negative = t;
        negative.prices[0].per_hour = -1.0;
        assert_eq!(
            negative.validate().expect_err("refused").field,
            "prices[0].perHour"
        );
    }
}
