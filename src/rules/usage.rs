//! What a run used, fixed when its use of a cluster ends ([`settles`]): each node's seconds
//! while the run held the cluster, split by UTC day and by what the nodes were doing (the
//! program's time, a WAITING cluster's keepalive, an IDLE cluster's wait for the next run, a
//! pool's cluster made ahead), priced node by node.
//!
//! A cluster several runs used in turn (reuse) is counted once: each run from when it took
//! the cluster over to when the next took it.

use std::collections::BTreeMap;

use crate::model::plan::NodeRecord;
use crate::model::price::NodeFacts;
use crate::model::run::{ClusterStatus, RunRecord};
use crate::model::usage::{
    DAY, Dimension, Dims, Entry, Figures, MAX_GROUPS, UsageFigures, UsageGroup, UsageQuery,
};

/// Whether run `run`'s use is over, so its usage is fixed: its cluster is gone, taken over
/// by another run, or lost (ORPHANED), or it never got one (REJECTED).
pub fn settles(run: &RunRecord) -> bool {
    !run.is_active() || run.cluster.status == Some(ClusterStatus::Orphaned)
}

/// What a stretch of node time was spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spent {
    Program,
    Kept,
    Idle,
    Pool,
}

/// The usage of run `run` at `now`, from its cluster's node records `nodes`, each priced by
/// `price` (millionths per node-hour; `None`: unknown).
pub fn settle(
    run: &RunRecord,
    nodes: &[NodeRecord],
    price: impl Fn(&NodeRecord) -> Option<u64>,
    now: u64,
) -> Entry {
    let dims = Dims {
        namespace: run.key.namespace.clone(),
        app: run.key.app.clone(),
        program: run.key.program.clone(),
        profile: run.profile.clone(),
        provisioner: run.provisioner.clone(),
    };
    let mut days: BTreeMap<u64, Figures> = BTreeMap::new();
    if !run.pooled {
        let end = run.end.unwrap_or(now);
        *days
            .entry(end / DAY)
            .or_default()
            .runs
            .entry(run.status.to_string())
            .or_default() += 1;
    }
    let c = &run.cluster;
    // The run held the cluster from its claim (when it took another's over) until the next
    // run took it (REUSED), or until now.
    let held_from = c.origin.as_ref().map_or(0, |o| o.claimed_at / 1000);
    let held_until = match c.status {
        Some(ClusterStatus::Reused) => c.idle_until.unwrap_or(now),
        _ => now,
    };
    let window = |since: Option<u64>, until: Option<u64>| since.map(|s| (s, until.unwrap_or(now)));
    let idle = window(c.idle_since, c.idle_until);
    let waiting = window(c.waiting_since, c.waiting_until);
    let spent = |t: u64| {
        let within = |w: Option<(u64, u64)>| w.is_some_and(|(a, b)| a <= t && t < b);
        if run.pooled {
            Spent::Pool
        } else if within(idle) {
            Spent::Idle
        } else if within(waiting) {
            Spent::Kept
        } else {
            Spent::Program
        }
    };
    for node in nodes {
        let Some(created) = node.create_time else {
            continue;
        };
        let from = created.max(held_from);
        let until = node.delete_time.unwrap_or(now).min(held_until);
        if until <= from {
            continue;
        }
        let facts = NodeFacts::of(&node.properties);
        let per_hour = price(node);
        // Where what the nodes did or the day changes, within [from, until).
        let mut cuts: Vec<u64> = [idle, waiting]
            .into_iter()
            .flatten()
            .flat_map(|(a, b)| [a, b])
            .chain((from / DAY + 1..=(until - 1) / DAY).map(|d| d * DAY))
            .filter(|t| from < *t && *t < until)
            .collect();
        cuts.push(from);
        cuts.push(until);
        cuts.sort_unstable();
        cuts.dedup();
        for pair in cuts.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let seconds = b - a;
            let f = days.entry(a / DAY).or_default();
            match spent(a) {
                Spent::Program => f.program += seconds,
                Spent::Kept => f.kept += seconds,
                Spent::Idle => f.idle += seconds,
                Spent::Pool => f.pool += seconds,
            }
            *f.markets.entry(facts.market.to_string()).or_default() += seconds;
            match per_hour {
                Some(p) => f.cost_micros += cost(seconds, p),
                None => f.unpriced += seconds,
            }
        }
    }
    Entry {
        dims,
        days: days
            .into_iter()
            .map(|(day, f)| (day_name(day), f))
            .collect(),
    }
}

/// Too many groups for one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooManyGroups;

/// The groups a query asks for, summed row by row as rows are read (so an answer holds its
/// groups, never every row it read), ordered by their keys (time first), and their total.
#[derive(Debug)]
pub struct Grouping {
    order: Vec<Dimension>,
    groups: BTreeMap<Vec<String>, Figures>,
    total: Figures,
}

impl Grouping {
    pub fn new(q: &UsageQuery) -> Grouping {
        let mut order = q.group_by.clone();
        order.sort_by_key(|d| !d.is_time());
        Grouping {
            order,
            groups: BTreeMap::new(),
            total: Figures::default(),
        }
    }

    /// Adds a row: its period (`2026-11-27`, or `2026-11` for a whole month), what it is
    /// about, its figures. Refused past [`MAX_GROUPS`] groups.
    pub fn add(
        &mut self,
        period: &str,
        dims: &Dims,
        figures: &Figures,
    ) -> Result<(), TooManyGroups> {
        let key: Vec<String> = self
            .order
            .iter()
            .map(|d| match d {
                Dimension::Month => period[..period.len().min(7)].to_string(),
                Dimension::Day => period.to_string(),
                Dimension::Week => week_of(period),
                Dimension::Namespace
                | Dimension::App
                | Dimension::Program
                | Dimension::Profile
                | Dimension::Provisioner => dims.get(*d).to_string(),
            })
            .collect();
        if !self.groups.contains_key(&key) && self.groups.len() >= MAX_GROUPS {
            return Err(TooManyGroups);
        }
        self.total.add(figures);
        self.groups.entry(key).or_default().add(figures);
        Ok(())
    }

    /// The groups, each with its key by dimension name, and the total.
    pub fn finish(self) -> (Vec<UsageGroup>, Figures) {
        let order = self.order;
        let groups = self
            .groups
            .into_iter()
            .map(|(key, figures)| UsageGroup {
                key: order
                    .iter()
                    .map(|d| d.name().to_string())
                    .zip(key)
                    .collect(),
                figures: UsageFigures::from(&figures),
            })
            .collect();
        (groups, self.total)
    }
}

/// The Monday that starts the week of day `day` (`2026-11-27` → `2026-11-23`).
pub fn week_of(day: &str) -> String {
    day.parse::<jiff::civil::Date>()
        .ok()
        .and_then(|d| {
            let back = i64::from(d.weekday().to_monday_zero_offset());
            d.checked_sub(jiff::Span::new().days(back)).ok()
        })
        .map_or_else(|| day.to_string(), |d| d.to_string())
}

/// The cost of `seconds` at `per_hour` millionths an hour, in millionths (rounded).
pub fn cost(seconds: u64, per_hour: u64) -> u64 {
    let micros = (u128::from(seconds) * u128::from(per_hour) + 1800) / 3600;
    u64::try_from(micros).unwrap_or(u64::MAX)
}

/// The UTC month of epoch second `secs`, as `2026-11`.
pub fn month_of(secs: u64) -> String {
    let mut day = day_name(secs / DAY);
    day.truncate(7);
    day
}

/// Day `day` (since 1970-01-01, UTC) as `2026-11-27`.
pub fn day_name(day: u64) -> String {
    date_of_day(day).map_or_else(|| format!("day-{day}"), |d| d.to_string())
}

/// The UTC date of epoch second `secs` (1970-01-01 if out of range).
pub fn date_of(secs: u64) -> jiff::civil::Date {
    date_of_day(secs / DAY).unwrap_or(jiff::civil::date(1970, 1, 1))
}

/// Day `day` since 1970-01-01 (UTC), if it is a date.
fn date_of_day(day: u64) -> Option<jiff::civil::Date> {
    let days = i64::try_from(day).ok()?;
    jiff::civil::date(1970, 1, 1)
        .checked_add(jiff::Span::new().days(days))
        .ok()
}

#[cfg(test)]
mod tests;
