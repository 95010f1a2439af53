//! Usage and cost, as the usage ledger keeps them: what each run used, fixed when its use of a
//! cluster ends ([`Entry`]), summed per day and per month for every namespace, app, program,
//! profile and provisioner ([`Figures`]), and read back over any range and grouping
//! ([`UsageQuery`], [`UsageReport`]).
//!
//! Money is kept in millionths of the price table's currency (`micros`), so sums are exact;
//! the API shows it as a decimal number.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::invalid::Invalid;

/// Seconds in a (UTC) day: days are the ledger's smallest period.
pub const DAY: u64 = 86_400;
/// The longest range a query covers, in days (ten years).
pub const MAX_RANGE_DAYS: i64 = 3_660;
/// The longest range grouped by day or by week, in days (about two years): each day of it is
/// read row by row.
pub const MAX_DAILY_RANGE_DAYS: i64 = 800;
/// The most groups one answer carries: a query that would make more is refused, with a hint
/// to narrow it.
pub const MAX_GROUPS: usize = 20_000;

/// What some runs used: the runs by outcome (counted on the day they ended) and their
/// clusters' node-seconds by what the nodes were doing, by market, and their cost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// Runs by program status (`COMPLETED`, `FAILED`, `KILLED`, `REJECTED`); a pool's runs
    /// make clusters, not programs, and are not counted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runs: BTreeMap<String, u64>,
    /// Node-seconds while a run held its cluster for its program (made, ran, torn down).
    #[serde(default)]
    pub program: u64,
    /// Node-seconds of clusters kept `WAITING` after a failed or killed run (keepalive).
    #[serde(default)]
    pub kept: u64,
    /// Node-seconds of clusters a run left `IDLE` for the next one (cluster reuse).
    #[serde(default)]
    pub idle: u64,
    /// Node-seconds of clusters a warm pool made ahead of demand, until a run took them.
    #[serde(default)]
    pub pool: u64,
    /// Node-seconds by market (`on-demand`, `spot`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub markets: BTreeMap<String, u64>,
    /// The cost of the priced node-seconds, in millionths of the currency.
    #[serde(default)]
    pub cost_micros: u64,
    /// Node-seconds no price was known for: their cost is unknown, not 0.
    #[serde(default)]
    pub unpriced: u64,
}

impl Figures {
    /// Every node-second, whatever the nodes did.
    pub fn node_seconds(&self) -> u64 {
        self.program + self.kept + self.idle + self.pool
    }

    /// Adds `other` to these figures.
    pub fn add(&mut self, other: &Figures) {
        for (status, n) in &other.runs {
            *self.runs.entry(status.clone()).or_default() += n;
        }
        self.program += other.program;
        self.kept += other.kept;
        self.idle += other.idle;
        self.pool += other.pool;
        for (market, s) in &other.markets {
            *self.markets.entry(market.clone()).or_default() += s;
        }
        self.cost_micros += other.cost_micros;
        self.unpriced += other.unpriced;
    }
}

/// What a ledger row is about: every dimension but time.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize
)]
#[serde(rename_all = "camelCase")]
pub struct Dims {
    pub namespace: String,
    pub app: String,
    pub program: String,
    /// `SCOPE:name`.
    pub profile: String,
    pub provisioner: String,
}

impl Dims {
    /// The row key under period `period` (`2026-11-27` or `2026-11`): the period first, so a
    /// period's rows are one prefix, then the namespace's.
    pub fn key(&self, period: &str) -> String {
        format!(
            "{period}/{}/{}/{}/{}/{}",
            self.namespace, self.app, self.program, self.profile, self.provisioner
        )
    }

    /// The dimensions of row key `key`, and its period.
    pub fn parse(key: &str) -> Option<(&str, Dims)> {
        let mut parts = key.splitn(6, '/');
        let period = parts.next()?;
        let mut next = || parts.next().map(str::to_string);
        let dims = Dims {
            namespace: next()?,
            app: next()?,
            program: next()?,
            profile: next()?,
            provisioner: next()?,
        };
        Some((period, dims))
    }

    /// The value of dimension `d` (not a time).
    pub fn get(&self, d: Dimension) -> &str {
        match d {
            Dimension::Namespace => &self.namespace,
            Dimension::App => &self.app,
            Dimension::Program => &self.program,
            Dimension::Profile => &self.profile,
            Dimension::Provisioner => &self.provisioner,
            Dimension::Day | Dimension::Week | Dimension::Month => "",
        }
    }
}

/// One run's use, fixed when its use of a cluster ended, by UTC day (`2026-11-27`): written
/// with the run's settling, and folded into the day and month rows soon after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub dims: Dims,
    pub days: BTreeMap<String, Figures>,
}

/// What a query can group by.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize
)]
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dimension {
    Namespace,
    App,
    Program,
    Profile,
    Provisioner,
    Day,
    Week,
    Month,
}

impl Dimension {
    pub const ALL: [Dimension; 8] = [
        Dimension::Namespace,
        Dimension::App,
        Dimension::Program,
        Dimension::Profile,
        Dimension::Provisioner,
        Dimension::Day,
        Dimension::Week,
        Dimension::Month,
    ];

    pub fn is_time(self) -> bool {
        matches!(self, Dimension::Day | Dimension::Week | Dimension::Month)
    }

    pub fn name(self) -> &'static str {
        match self {
            Dimension::Namespace => "namespace",
            Dimension::App => "app",
            Dimension::Program => "program",
            Dimension::Profile => "profile",
            Dimension::Provisioner => "provisioner",
            Dimension::Day => "day",
            Dimension::Week => "week",
            Dimension::Month => "month",
        }
    }

    fn parse(s: &str) -> Option<Dimension> {
        Dimension::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// `GET /v3/usage`'s parameters, as written.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageParams {
    pub namespace: Option<String>,
    pub app: Option<String>,
    pub program: Option<String>,
    /// `SCOPE:name`, or a name (a namespace's profile, else the SYSTEM one).
    pub profile: Option<String>,
    pub provisioner: Option<String>,
    /// The first day counted (`2026-11-01`, UTC); the first of this month unless set.
    pub from: Option<String>,
    /// The day after the last counted (`2026-12-01`); tomorrow unless set.
    pub to: Option<String>,
    /// Comma-separated: `namespace`, `app`, `program`, `profile`, `provisioner`, and at most
    /// one of `day`, `week` (starting Mondays), `month`.
    pub group_by: Option<String>,
}

/// A checked usage query: the range as UTC days since 1970-01-01, `[from, to)`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageQuery {
    pub namespace: Option<String>,
    pub app: Option<String>,
    pub program: Option<String>,
    pub profile: Option<String>,
    pub provisioner: Option<String>,
    pub from: jiff::civil::Date,
    pub to: jiff::civil::Date,
    pub group_by: Vec<Dimension>,
}

impl UsageQuery {
    /// Checks `params`, with `today` the default's reference. Each error names its field.
    pub fn parse(params: UsageParams, today: jiff::civil::Date) -> Result<UsageQuery, Invalid> {
        let date = |field: &str, v: &str| {
            v.trim()
                .parse::<jiff::civil::Date>()
                .map_err(|_| Invalid::new(field, format!("{v:?} is not a date like 2026-11-01")))
        };
        let from = match &params.from {
            Some(v) => date("from", v)?,
            None => today.first_of_month(),
        };
        let to = match &params.to {
            Some(v) => date("to", v)?,
            None => today
                .tomorrow()
                .map_err(|e| Invalid::new("to", e.to_string()))?,
        };
        if to <= from {
            return Err(Invalid::new("to", "must be after from"));
        }
        let days = (to - from).get_days() as i64;
        if days > MAX_RANGE_DAYS {
            return Err(Invalid::new(
                "to",
                format!("the range covers {days} days; at most {MAX_RANGE_DAYS}"),
            ));
        }
        let mut group_by = Vec::new();
        for part in params.group_by.as_deref().unwrap_or("").split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let d = Dimension::parse(part).ok_or_else(|| {
                Invalid::new(
                    "groupBy",
                    format!(
                        "{part:?} is not one of namespace, app, program, profile, provisioner, day, week, month"
                    ),
                )
            })?;
            if group_by.contains(&d) {
                return Err(Invalid::new("groupBy", format!("{part} is named twice")));
            }
            if d.is_time() && group_by.iter().any(|g: &Dimension| g.is_time()) {
                return Err(Invalid::new(
                    "groupBy",
                    "at most one of day, week and month",
                ));
            }
            group_by.push(d);
        }
        // Time first, then the dimensions in the order asked.
        group_by.sort_by_key(|d| !d.is_time());
        if group_by
            .iter()
            .any(|d| matches!(d, Dimension::Day | Dimension::Week))
            && days > MAX_DAILY_RANGE_DAYS
        {
            return Err(Invalid::new(
                "groupBy",
                format!(
                    "by day or week, a range covers at most {MAX_DAILY_RANGE_DAYS} days (this one {days}); group by month, or narrow it"
                ),
            ));
        }
        for (field, value) in [
            ("namespace", &params.namespace),
            ("app", &params.app),
            ("program", &params.program),
            ("profile", &params.profile),
            ("provisioner", &params.provisioner),
        ] {
            if let Some(v) = value
                && (v.len() > 256 || v.contains('/'))
            {
                return Err(Invalid::new(field, "is not a name"));
            }
        }
        Ok(UsageQuery {
            namespace: params.namespace.filter(|v| !v.is_empty()),
            app: params.app.filter(|v| !v.is_empty()),
            program: params.program.filter(|v| !v.is_empty()),
            profile: params.profile.filter(|v| !v.is_empty()),
            provisioner: params.provisioner.filter(|v| !v.is_empty()),
            from,
            to,
            group_by,
        })
    }

    /// Whether a row about `dims` is counted.
    pub fn admits(&self, dims: &Dims) -> bool {
        let matches = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        matches(&self.namespace, &dims.namespace)
            && matches(&self.app, &dims.app)
            && matches(&self.program, &dims.program)
            && matches(&self.provisioner, &dims.provisioner)
            && self.profile.as_deref().is_none_or(|p| {
                p == dims.profile || dims.profile.split_once(':').is_some_and(|(_, n)| n == p)
            })
    }
}

/// Usage figures as the API shows them.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
#[serde(rename_all = "camelCase")]
pub struct UsageFigures {
    /// Runs by program status, counted on the day they ended.
    pub runs: BTreeMap<String, u64>,
    pub node_seconds: u64,
    pub node_hours: f64,
    /// Of `nodeSeconds`: while runs held their clusters for their programs.
    pub program_node_seconds: u64,
    /// Of `nodeSeconds`: clusters kept WAITING after failed or killed runs (keepalive).
    pub kept_node_seconds: u64,
    /// Of `nodeSeconds`: clusters left IDLE for the next run (cluster reuse).
    pub idle_node_seconds: u64,
    /// Of `nodeSeconds`: clusters warm pools made ahead, until a run took them.
    pub pool_node_seconds: u64,
    /// Node-seconds by market.
    pub markets: BTreeMap<String, u64>,
    /// The cost of the priced node-seconds; `null` when none was priced but some were used.
    pub cost: Option<f64>,
    /// Node-seconds without a known price: when not 0, `cost` is a lower bound.
    pub unpriced_node_seconds: u64,
}

impl From<&Figures> for UsageFigures {
    fn from(f: &Figures) -> Self {
        let node_seconds = f.node_seconds();
        let priced = node_seconds - f.unpriced.min(node_seconds);
        UsageFigures {
            runs: f.runs.clone(),
            node_seconds,
            node_hours: node_seconds as f64 / 3600.0,
            program_node_seconds: f.program,
            kept_node_seconds: f.kept,
            idle_node_seconds: f.idle,
            pool_node_seconds: f.pool,
            markets: f.markets.clone(),
            cost: (priced > 0 || f.unpriced == 0).then(|| money(f.cost_micros)),
            unpriced_node_seconds: f.unpriced,
        }
    }
}

/// `micros` millionths as a decimal amount.
pub fn money(micros: u64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// One group of a usage answer: its values of the grouped dimensions, and its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageGroup {
    /// The group's value of each dimension grouped by (`month`: `2026-11`, `week`: its
    /// Monday, `day`: the date).
    pub key: BTreeMap<String, String>,
    #[serde(flatten)]
    pub figures: UsageFigures,
}

/// `GET /v3/usage`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    pub from: String,
    /// The day after the last counted.
    pub to: String,
    pub group_by: Vec<Dimension>,
    /// The price table's currency.
    pub currency: String,
    /// Ordered by their keys, time first.
    pub groups: Vec<UsageGroup>,
    pub total: UsageFigures,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(from: &str, to: &str, group_by: &str) -> UsageParams {
        UsageParams {
            from: Some(from.into()),
            to: Some(to.into()),
            group_by: Some(group_by.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_query_is_checked_field_by_field() {
        let today = jiff::civil::date(2026, 11, 27);
        let q = UsageQuery::parse(UsageParams::default(), today).expect("defaults");
        assert_eq!(
            (q.from, q.to),
            (
                jiff::civil::date(2026, 11, 1),
                jiff::civil::date(2026, 11, 28)
            )
        );
        let q = UsageQuery::parse(
            params("2026-01-01", "2027-01-01", "month, namespace"),
            today,
        )
        .expect("a year by month");
        assert_eq!(q.group_by, vec![Dimension::Month, Dimension::Namespace]);
        for (p, field) in [
            (params("2026-13-01", "2027-01-01", ""), "from"),
            (params("2026-02-01", "2026-01-01", ""), "to"),
            (params("2000-01-01", "2027-01-01", ""), "to"),
            (params("2026-01-01", "2027-01-01", "day,month"), "groupBy"),
            (params("2026-01-01", "2027-01-01", "team"), "groupBy"),
            (params("2026-01-01", "2027-01-01", "app,app"), "groupBy"),
            (params("2020-01-01", "2027-01-01", "day"), "groupBy"),
            (
                UsageParams {
                    namespace: Some("a/b".into()),
                    ..Default::default()
                },
                "namespace",
            ),
        ] {
            let e = UsageQuery::parse(p, today).expect_err("refused");
            assert_eq!(e.field, field, "{e}");
        }
    }

    #[test]
    fn a_row_key_reads_back_and_cost_is_unknown_only_when_nothing_was_priced() {
        let dims = Dims {
            namespace: "ns".into(),
            app: "a".into(),
            program: "p".into(),
            profile: "USER:x".into(),
            provisioner: "sim".into(),
        };
        assert_eq!(Dims::parse(&dims.key("2026-11")), Some(("2026-11", dims)));
        let unpriced = Figures {
            program: 10,
            unpriced: 10,
            ..Default::default()
        };
        assert_eq!(UsageFigures::from(&unpriced).cost, None);
        let partly = Figures {
            program: 20,
            unpriced: 10,
            cost_micros: 1_500_000,
            ..Default::default()
        };
        assert_eq!(UsageFigures::from(&partly).cost, Some(1.5));
        assert_eq!(UsageFigures::from(&Figures::default()).cost, Some(0.0));
    }
}
