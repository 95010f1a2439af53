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
use crate::rules::usage::Grouping;
use crate::runtime::Runtime;
use crate::runtime::duty::Work;
use crate::runtime::membership::Duty;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::{Read, Store, StoreError, Table, changes, usage};

/// How often the ledger is folded.
pub const TICK: Duration = Duration::from_secs(2);
/// Most entries folded, or runs settled, in one write: each is a read compared and a write,
/// so a write fits in one etcd transaction on etcd's default flags (see
/// [`crate::store::SPLIT_WRITES`]).
const BATCH: usize = 40;
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
    let today = crate::rules::usage::date_of(clock::now_secs());
    let q = UsageQuery::parse(params, today)?;
    if let Some(ns) = &q.namespace
        && !grants.sees(ns)
    {
        return Err(ServiceError::NotAllowed(format!(
            "your token has no role in namespace '{ns}'"
        )));
    }
    let (grants, query) = (grants.clone(), q.clone());
    let (grouped, currency) = store
        .read(move |r| {
            let mut grouping = Grouping::new(&query);
            let fed = usage::rows(r, &query, |period, dims, figures| {
                match grants.sees(&dims.namespace) {
                    true => grouping.add(period, dims, figures),
                    false => Ok(()),
                }
            })?;
            Ok::<_, StoreError>((fed.map(|()| grouping.finish()), usage::prices(r)?.currency))
        })
        .await?;
    let (groups, total) = grouped.map_err(|_| {
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

/// The share of its monthly budget each namespace with one used this month.
pub async fn budget_shares(store: &Store) -> Result<Vec<(String, f64)>, ServiceError> {
    let month = crate::rules::usage::month_of(clock::now_secs());
    Ok(store
        .read(move |r| {
            let mut out = Vec::new();
            for (name, ns) in r.scan::<crate::model::namespace::Namespace>(Table::Namespaces, "")? {
                if let Some(budget) = ns.budget {
                    out.push((
                        name.clone(),
                        budget.used(&usage::month_total(r, &name, &month)?),
                    ));
                }
            }
            Ok::<_, StoreError>(out)
        })
        .await?)
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

/// The usage ledger, as a duty (`runtime::duty` runs it): folded while this server holds the
/// duty; and on every server, its own runs of a namespace whose budget with `hardStop` is used
/// up stopped.
#[derive(Debug)]
pub struct Ledger(pub Runtime);

impl Work for Ledger {
    fn duty(&self) -> Duty {
        Duty::Usage
    }

    fn idle(&self) -> Duration {
        TICK
    }

    async fn everywhere(&mut self) {
        if let Err(e) = hard_stop(&self.0).await {
            tracing::warn!(error = %e, "cannot check the budgets with hardStop; retried");
        }
    }

    async fn tick(&mut self) -> Duration {
        if let Err(e) = tend(&self.0.deps().store).await {
            tracing::warn!(error = %e, "folding the usage ledger failed; retried");
        }
        TICK
    }
}

/// One round: the backfill if it is not done, every entry folded, then the budgets' warnings.
pub async fn tend(store: &Store) -> Result<(), StoreError> {
    backfill(store).await?;
    loop {
        let keys = store.keys_under(Table::UsageEntries, "").await?;
        if keys.is_empty() {
            break;
        }
        for batch in keys.chunks(BATCH) {
            let batch = batch.to_vec();
            let folded = store.write(move |tx| usage::fold(tx, &batch)).await?;
            counted(&folded);
        }
    }
    let budgeted: Vec<String> = store
        .read(|r| {
            Ok::<_, StoreError>(
                r.scan::<crate::model::namespace::Namespace>(Table::Namespaces, "")?
                    .into_iter()
                    .filter(|(_, ns)| ns.budget.is_some())
                    .map(|(name, _)| name)
                    .collect(),
            )
        })
        .await?;
    for namespace in budgeted {
        warn_of_budget(store, namespace).await?;
    }
    Ok(())
}

/// The `Meta` key of the highest share of namespace `ns`'s budget warned of in month `month`.
fn warned_key(month: &str, ns: &str) -> String {
    format!("budget_warned/{month}/{ns}")
}

/// Records, once a month for each, that namespace `ns`'s runs used [`BUDGET_WARNING`] of its
/// budget and all of it: an entry in its audit log and a log line.
async fn warn_of_budget(store: &Store, ns: String) -> Result<(), StoreError> {
    let month = crate::rules::usage::month_of(clock::now_secs());
    let (m, n) = (month.clone(), ns.clone());
    let pending = store.read(move |r| level_due(r, &n, &m)).await?;
    if pending.is_none() {
        return Ok(());
    }
    let said = store
        .write(move |tx| {
            let Some((share, level)) = level_due(tx, &ns, &month)? else {
                return Ok::<_, StoreError>(None);
            };
            tx.put(Table::Meta, &warned_key(&month, &ns), &level)?;
            let action = if level == 100 {
                "budget.used"
            } else {
                "budget.warning"
            };
            let target = format!("{month}: {:.0}% of the budget used", share * 100.0);
            let act = Act {
                namespace: Some(ns.clone()),
                ..Act::by_server(action, &target)
            };
            changes::record(tx, &act)?;
            Ok(Some((ns.clone(), level, share)))
        })
        .await?;
    if let Some((ns, level, share)) = said {
        tracing::warn!(namespace = %ns, share = format!("{:.0}%", share * 100.0), "namespace used {level}% of its monthly budget");
    }
    Ok(())
}

/// The share of namespace `ns`'s budget used in month `month` and the level of warning (80
/// or 100) it calls for, if that level was not yet given.
fn level_due(r: &impl Read, ns: &str, month: &str) -> Result<Option<(f64, u8)>, StoreError> {
    use crate::model::namespace::{BUDGET_WARNING, Namespace};
    let Some(budget) = r
        .get::<Namespace>(Table::Namespaces, ns)?
        .and_then(|n| n.budget)
    else {
        return Ok(None);
    };
    let share = budget.used(&usage::month_total(r, ns, month)?);
    let level: u8 = match share {
        s if s >= 1.0 => 100,
        s if s >= BUDGET_WARNING => 80,
        _ => return Ok(None),
    };
    let given = r
        .get::<u8>(Table::Meta, &warned_key(month, ns))?
        .unwrap_or(0);
    Ok((given < level).then_some((share, level)))
}

/// Stops this server's live runs of each namespace whose budget with `hardStop` is used up
/// this month, and deprovisions its IDLE and WAITING clusters.
async fn hard_stop(runtime: &Runtime) -> Result<(), ServiceError> {
    use crate::model::namespace::Namespace;
    use crate::model::run::ClusterStatus;
    use crate::rules::lifecycle::Event;
    let month = crate::rules::usage::month_of(clock::now_secs());
    let over: Vec<RunRecord> = runtime
        .store()
        .read(move |r| {
            let mut runs = Vec::new();
            for (name, ns) in r.scan::<Namespace>(Table::Namespaces, "")? {
                let Some(budget) = ns.budget.filter(|b| b.hard_stop) else {
                    continue;
                };
                if budget.used(&usage::month_total(r, &name, &month)?) < 1.0 {
                    continue;
                }
                for (key, _) in r.scan::<serde_json::Value>(Table::Active, &format!("{name}/"))? {
                    if let Some(run) = r.get::<RunRecord>(Table::Runs, &key)? {
                        runs.push(run);
                    }
                }
            }
            Ok::<_, StoreError>(runs)
        })
        .await?;
    for run in over {
        if !runtime.supervises(&run.key.run) {
            continue;
        }
        let event = match run.cluster.status {
            Some(ClusterStatus::Idle | ClusterStatus::Waiting) => Event::Deprovision,
            _ if run.status.is_end() || run.stop.is_some() => continue,
            _ => Event::Stop { keepalive: false },
        };
        let act = Act {
            namespace: Some(run.key.namespace.clone()),
            ..Act::by_server("run.stop", &run.key.run)
        };
        tracing::warn!(run = %run.key.run, namespace = %run.key.namespace, "the namespace's budget is used up (hardStop): the run is stopped");
        if let Err(e) = runtime.command(run.key.clone(), event, act).await {
            tracing::warn!(run = %run.key.run, error = %e, "cannot stop the run over budget; retried");
        }
    }
    Ok(())
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
