//! The usage ledger. A run's usage is fixed in the write that ends its use of a cluster
//! ([`settle`], called by every transition's write): one entry under its own key, so runs
//! ending at once never write the same key. One server then folds the entries into the
//! ledger's rows ([`fold`]): per UTC day, per month, and per namespace and month (what a budget
//! reads), each entry folded and removed in the same write, so it counts once. A read adds the
//! entries not yet folded ([`rows`]), so an answer counts every settled run.
//!
//! Prices are read when a run settles: a later price change never rewrites what was counted.

use crate::model::access::Trust;
use crate::model::plan::NodeRecord;
use crate::model::price::{NodeFacts, PriceTable};
use crate::model::profile::{ProfileId, StoredProfile};
use crate::model::run::RunRecord;
use crate::model::usage::{Dims, Entry, Figures, UsageQuery};
use crate::rules::usage as rules;

use super::{Read, StoreError, Table, Txn, keys};

/// The `Meta` key of the price table an admin set (the shipped one while unset).
pub const PRICES: &str = "prices";

/// The price table in force.
pub fn prices(r: &impl Read) -> Result<PriceTable, StoreError> {
    Ok(r.get::<PriceTable>(Table::Meta, PRICES)?
        .unwrap_or_else(PriceTable::shipped))
}

/// Fixes run `run`'s usage at `now` and marks it settled, unless it already is (then
/// nothing is written twice). Reads its cluster's nodes, the prices in force and its
/// profile's `pricePerNodeHour`: an instance admin's prices a node as it says; a namespace
/// admin's may price a node above the table's, never below (a tenant does not price its own
/// runs down past its budget), and prices what the table does not.
pub fn settle(tx: &mut Txn, run: &mut RunRecord, now: u64) -> Result<(), StoreError> {
    if run.settled {
        return Ok(());
    }
    let nodes: Vec<NodeRecord> = match run.cluster.status {
        None => Vec::new(),
        Some(_) => tx
            .scan::<NodeRecord>(Table::Resources, &keys::of_run(run.cluster_id()))?
            .into_iter()
            .map(|(_, n)| n)
            .collect(),
    };
    let priced = nodes.iter().any(|n| n.create_time.is_some());
    let (table, own) = match priced {
        true => (Some(prices(tx)?), profile_price(tx, run)?),
        false => (None, None),
    };
    let price = |node: &NodeRecord| {
        let listed = table
            .as_ref()
            .and_then(|t| t.micros_per_hour(&run.provisioner, &NodeFacts::of(&node.properties)));
        match (own, listed) {
            (Some((own, Trust::InstanceAdmin)), _) => Some(own),
            (Some((own, _)), Some(listed)) => Some(own.max(listed)),
            (Some((own, _)), None) => Some(own),
            (None, listed) => listed,
        }
    };
    let entry = rules::settle(run, &nodes, price, now);
    tx.put(
        Table::UsageEntries,
        &format!("{}/{}", run.key.namespace, run.key.run),
        &entry,
    )?;
    run.settled = true;
    Ok(())
}

/// The `pricePerNodeHour` of run `run`'s profile, in millionths, with its author's trust, if
/// it is still there and sets one.
fn profile_price(r: &impl Read, run: &RunRecord) -> Result<Option<(u64, Trust)>, StoreError> {
    let Ok(id) = ProfileId::parse_scoped(&run.key.namespace, &run.profile) else {
        return Ok(None);
    };
    Ok(r.get::<StoredProfile>(Table::Profiles, &id.key())?
        .and_then(|s| {
            let author = s.author();
            s.profile
                .price_per_node_hour
                .map(|p| (crate::model::price::micros(p), author))
        }))
}

/// Folds the entries under `keys` (keys of `UsageEntries`) into the ledger's rows and removes
/// them; answers what was folded (an entry another fold took meanwhile is skipped).
pub fn fold(tx: &mut Txn, entries: &[String]) -> Result<Vec<Entry>, StoreError> {
    let mut folded = Vec::new();
    for key in entries {
        let Some(entry) = tx.get::<Entry>(Table::UsageEntries, key)? else {
            continue;
        };
        for (day, figures) in &entry.days {
            let month = &day[..day.len().min(7)];
            for row in [
                format!("d/{}", entry.dims.key(day)),
                format!("m/{}", entry.dims.key(month)),
                total_key(month, &entry.dims.namespace),
            ] {
                let mut sum: Figures = tx.get(Table::Ledger, &row)?.unwrap_or_default();
                sum.add(figures);
                tx.put(Table::Ledger, &row, &sum)?;
            }
        }
        tx.delete(Table::UsageEntries, key);
        folded.push(entry);
    }
    Ok(folded)
}

/// The ledger key of namespace `namespace`'s total for month `month` (`2026-11`).
pub fn total_key(month: &str, namespace: &str) -> String {
    format!("t/{month}/{namespace}")
}

/// What namespace `namespace` used in month `month` (`2026-11`): its folded total and its
/// entries not yet folded.
pub fn month_total(r: &impl Read, namespace: &str, month: &str) -> Result<Figures, StoreError> {
    let mut total: Figures = r
        .get(Table::Ledger, &total_key(month, namespace))?
        .unwrap_or_default();
    for (_, entry) in r.scan::<Entry>(Table::UsageEntries, &format!("{namespace}/"))? {
        for (day, figures) in &entry.days {
            if day.starts_with(month) {
                total.add(figures);
            }
        }
    }
    Ok(total)
}

/// Feeds month `month`'s totals of the namespaces query `q` admits to `each`, as rows about
/// their namespace alone.
fn namespace_totals<E>(
    r: &impl Read,
    q: &UsageQuery,
    month: &str,
    each: &mut impl FnMut(&str, &Dims, &Figures) -> Result<(), E>,
) -> Result<Result<(), E>, StoreError> {
    let prefix = match &q.namespace {
        Some(ns) => total_key(month, ns),
        None => format!("t/{month}/"),
    };
    for (key, figures) in r.scan::<Figures>(Table::Ledger, &prefix)? {
        let Some((_, namespace)) = key.get(2..).and_then(|k| k.split_once('/')) else {
            continue;
        };
        if q.namespace.as_deref().is_some_and(|n| n != namespace) {
            continue;
        }
        let dims = Dims {
            namespace: namespace.to_string(),
            app: String::new(),
            program: String::new(),
            profile: String::new(),
            provisioner: String::new(),
        };
        if let Err(e) = each(month, &dims, &figures) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}

/// Feeds `each` the rows query `q` counts, one by one as they are read (period, what it is
/// about, figures): whole months from the month rows unless it groups by day or week (from
/// the namespaces' totals when it asks by namespace and month alone), the other days from the
/// day rows, and the entries not yet folded. Stops at the first error of `each`, and answers
/// it.
pub fn rows<E>(
    r: &impl Read,
    q: &UsageQuery,
    mut each: impl FnMut(&str, &Dims, &Figures) -> Result<(), E>,
) -> Result<Result<(), E>, StoreError> {
    let by_day = q.group_by.iter().any(|d| {
        matches!(
            d,
            crate::model::usage::Dimension::Day | crate::model::usage::Dimension::Week
        )
    });
    // Asked by namespace and month only, a whole month is its namespaces' totals.
    let by_namespace = q.app.is_none()
        && q.program.is_none()
        && q.profile.is_none()
        && q.provisioner.is_none()
        && q.group_by.iter().all(|d| {
            matches!(
                d,
                crate::model::usage::Dimension::Namespace | crate::model::usage::Dimension::Month
            )
        });
    let ns = q
        .namespace
        .as_deref()
        .map_or_else(String::new, |n| format!("{n}/"));
    let scan = |prefix: String,
                each: &mut dyn FnMut(&str, &Dims, &Figures) -> Result<(), E>|
     -> Result<Result<(), E>, StoreError> {
        for (key, figures) in r.scan::<Figures>(Table::Ledger, &prefix)? {
            let Some((period, dims)) = key.get(2..).and_then(Dims::parse) else {
                continue;
            };
            if q.admits(&dims)
                && let Err(e) = each(period, &dims, &figures)
            {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    };
    let mut day = q.from;
    while day < q.to {
        let first = day.first_of_month();
        let next_month = first
            .checked_add(jiff::Span::new().months(1))
            .map_err(|e| StoreError::Storage(e.to_string()))?;
        if !by_day && day == first && next_month <= q.to {
            let month = &first.to_string()[..7];
            let fed = match by_namespace {
                true => namespace_totals(r, q, month, &mut each)?,
                false => scan(format!("m/{month}/{ns}"), &mut each)?,
            };
            if fed.is_err() {
                return Ok(fed);
            }
            day = next_month;
        } else {
            let fed = scan(format!("d/{day}/{ns}"), &mut each)?;
            if fed.is_err() {
                return Ok(fed);
            }
            day = day
                .tomorrow()
                .map_err(|e| StoreError::Storage(e.to_string()))?;
        }
    }
    let (from, to) = (q.from.to_string(), q.to.to_string());
    for (_, entry) in r.scan::<Entry>(Table::UsageEntries, &ns)? {
        if !q.admits(&entry.dims) {
            continue;
        }
        for (day, figures) in &entry.days {
            if from <= *day
                && *day < to
                && let Err(e) = each(day, &entry.dims, figures)
            {
                return Ok(Err(e));
            }
        }
    }
    Ok(Ok(()))
}
