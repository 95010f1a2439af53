//! Usage and cost: the answers of `GET /v3/usage` from the usage ledger (`store::usage`), the
//! price table, and the duty that keeps the ledger folded.
//!
//! One server of an installation folds ([`run`], an elected duty): every [`TICK`] it folds
//! the settled runs' entries into the ledger's day and month rows, a batch per write. The
//! first time it runs on a store it also settles the ended runs a build before the ledger left
//! unsettled, so they are counted too (with the prices then in force).

use std::time::Duration;

use crate::model::access::{Act, Grants};
use crate::model::price::PriceTable;
use crate::model::run::RunRecord;
use crate::model::usage::{Figures, UsageParams, UsageQuery, UsageReport};
use crate::runtime::Runtime;
use crate::runtime::clock;
use crate::runtime::membership::{Duty, leads};
use crate::service::error::ServiceError;
use crate::store::{Read, Store, StoreError, Table, changes, usage};

/// How often the ledger is folded.
pub const TICK: Duration = Duration::from_secs(2);
/// Most entries folded, or runs settled, in one write.
const BATCH: usize = 100;
/// The `Meta` key that says the runs ended before the ledger existed were settled.
const BACKFILLED: &str = "usage_backfilled";

/// Usage as query `params` asks for it, as far as `grants` see: a namespace's viewers see its
/// usage; without a namespace, instance admins see every namespace's and others the
/// namespaces they have a role in.
pub async fn report(
    store: &Store,
    grants: &Grants,
    params: UsageParams,
) -> Result<UsageReport, ServiceError> {
    let today = jiff::Timestamp::from_second(i64::try_from(clock::now_secs()).unwrap_or(0))
        .map_err(|e| ServiceError::Internal(e.to_string()))?
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let q = UsageQuery::parse(params, today)?;
    if let Some(ns) = &q.namespace
        && !grants.sees(ns)
    {
        return Err(ServiceError::NotAllowed(format!(
            "your token has no role in namespace '{ns}'"
        )));
    }
    let (grants, query) = (grants.clone(), q.clone());
    let (rows, currency) = store
        .read(move |r| {
            let mut rows = usage::rows(r, &query)?;
            rows.retain(|(_, dims, _)| grants.sees(&dims.namespace));
            Ok::<_, StoreError>((rows, usage::prices(r)?.currency))
        })
        .await?;
    let (groups, total) = crate::rules::usage::group(rows, &q).map_err(|_| {
        ServiceError::invalid(
            "groupBy",
            format!(
                "the answer would hold more than {} groups; narrow the range or the grouping",
                crate::model::usage::MAX_GROUPS
            ),
        )
    })?;
    Ok(UsageReport {
        from: q.from.to_string(),
        to: q.to.to_string(),
        group_by: q.group_by,
        currency,
        groups,
        total: (&total).into(),
    })
}

/// The price table in force.
pub async fn prices(store: &Store) -> Result<PriceTable, ServiceError> {
    Ok(store.read(|r| usage::prices(r)).await?)
}

/// Replaces the price table: runs that settle from now on are priced by it; what was counted
/// stays as it was.
pub async fn set_prices(
    store: &Store,
    act: Act,
    table: PriceTable,
) -> Result<PriceTable, ServiceError> {
    table.validate()?;
    store
        .write(move |tx| {
            tx.put(Table::Meta, usage::PRICES, &table)?;
            changes::record(tx, &act)?;
            Ok::<_, ServiceError>(table.clone())
        })
        .await
}

/// Keeps the ledger folded until the server stops, while this server holds the duty.
pub async fn run(runtime: Runtime) {
    loop {
        tokio::time::sleep(TICK).await;
        let store = runtime.deps().store.clone();
        match leads(&store, &runtime.deps().member, Duty::Usage).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell which server keeps the usage ledger; retried");
                continue;
            }
        }
        if let Err(e) = tend(&store).await {
            tracing::warn!(error = %e, "folding the usage ledger failed; retried");
        }
    }
}

/// One round: the backfill if it is not done, then every entry folded.
pub async fn tend(store: &Store) -> Result<(), StoreError> {
    backfill(store).await?;
    loop {
        let keys = store.keys_under(Table::UsageEntries, "").await?;
        if keys.is_empty() {
            return Ok(());
        }
        for batch in keys.chunks(BATCH) {
            let batch = batch.to_vec();
            let folded = store.write(move |tx| usage::fold(tx, &batch)).await?;
            counted(&folded);
        }
    }
}

/// Counts what was folded in the metrics.
fn counted(folded: &[crate::model::usage::Entry]) {
    use crate::model::metrics::{COST, NODE_SECONDS};
    for entry in folded {
        let mut sum = Figures::default();
        for figures in entry.days.values() {
            sum.add(figures);
        }
        let labels = [
            ("namespace", entry.dims.namespace.clone()),
            ("profile", entry.dims.profile.clone()),
        ];
        metrics::counter!(NODE_SECONDS.name, &labels).increment(sum.node_seconds());
        metrics::counter!(COST.name, &labels).increment(sum.cost_micros);
    }
}

/// Settles the ended runs no write settled (they ended before the ledger existed), once per
/// store.
async fn backfill(store: &Store) -> Result<(), StoreError> {
    if store
        .read(|r| r.get::<bool>(Table::Meta, BACKFILLED))
        .await?
        .unwrap_or(false)
    {
        return Ok(());
    }
    let keys = store.keys_under(Table::Runs, "").await?;
    for batch in keys.chunks(BATCH) {
        let batch = batch.to_vec();
        store
            .write(move |tx| {
                let now = clock::now_secs();
                for key in &batch {
                    let Some(mut run) = tx.get::<RunRecord>(Table::Runs, key)? else {
                        continue;
                    };
                    if run.settled || !crate::rules::usage::settles(&run) {
                        continue;
                    }
                    usage::settle(tx, &mut run, now)?;
                    tx.put(Table::Runs, key, &run)?;
                }
                Ok::<_, StoreError>(())
            })
            .await?;
    }
    store
        .write(|tx| tx.put(Table::Meta, BACKFILLED, &true))
        .await
}
