//! What a run did: its history of events, its cluster's operations with their tasks and
//! attempts (and an operator's cancel of one that runs), and its program's logs.

use std::time::Duration;

use crate::model::access::Act;
use crate::model::event::RunEvent;
use crate::model::operation::{OperationRecord, OperationView};
use crate::model::run::{RunError, RunKey};
use crate::model::view::Logs;
use crate::runtime::handle::Runtime;
use crate::runtime::program::{STDERR, STDOUT};
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::audit;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// Most bytes of each log stream `logs` returns (the end of it).
const MAX_LOG_BYTES: u64 = 1 << 20;

/// The operations on run `key`'s cluster, oldest first, with their tasks and attempts.
pub async fn operations(
    runtime: &Runtime,
    key: RunKey,
) -> Result<Vec<OperationView>, ServiceError> {
    key.check()?;
    runtime
        .store()
        .read(move |r| {
            catalog::require_run(r, &key)?;
            let mut out = Vec::new();
            for op in audit::operations(r, &key.run)? {
                let attempts = audit::attempts(r, &key.run, op.id)?;
                out.push(OperationView::new(op, attempts));
            }
            Ok(out)
        })
        .await
}

/// Operation `id` on run `key`'s cluster.
pub async fn operation(
    runtime: &Runtime,
    key: RunKey,
    id: String,
) -> Result<OperationView, ServiceError> {
    key.check()?;
    let not_found = |run: &str, id: &str| ServiceError::OperationNotFound {
        run: run.to_string(),
        id: id.to_string(),
    };
    let number: u32 = id.parse().map_err(|_| not_found(&key.run, &id))?;
    runtime
        .store()
        .read(move |r| {
            catalog::require_run(r, &key)?;
            let op: OperationRecord = r
                .get(Table::Operations, &keys::operation(&key.run, number))?
                .ok_or_else(|| not_found(&key.run, &id))?;
            let attempts = audit::attempts(r, &key.run, op.id)?;
            Ok(OperationView::new(op, attempts))
        })
        .await
}

/// An operator cancels operation `id` on run `key`'s cluster: its tasks stop before their
/// next outside call, and what it did is rolled back. Answers the operation as recorded with
/// the cancel. Only an admin's operation that is running (not a rollback) can be cancelled.
pub async fn cancel_operation(
    runtime: &Runtime,
    key: RunKey,
    id: String,
    act: Act,
) -> Result<crate::model::operation::OperationView, ServiceError> {
    use crate::model::operation::OpStatus;
    key.check()?;
    let not_found = || ServiceError::OperationNotFound {
        run: key.run.clone(),
        id: id.clone(),
    };
    let number: u32 = id.parse().map_err(|_| not_found())?;
    let k = key.clone();
    let (run, op) = runtime
        .store()
        .read(move |r| {
            let run = catalog::require_run(r, &k)?;
            let op: Option<OperationRecord> =
                r.get(Table::Operations, &keys::operation(&k.run, number))?;
            Ok::<_, ServiceError>((run, op))
        })
        .await?;
    let op = op.ok_or_else(not_found)?;
    let refuse = |reason: String| RunError::NotCancellable {
        run: key.run.clone(),
        id: number,
        reason,
    };
    if op.status != OpStatus::Running {
        return Err(refuse(format!("it has ended ({})", op.status)).into());
    }
    runtime.cancel_operation(&run, number, act).await?;
    operation(runtime, key, id).await
}

fn tail(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    use std::io::{Read as _, Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len > max {
        file.seek(SeekFrom::Start(len - max))?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The program's stdout and stderr (the last MiB of each), of its attempt `attempt` (from 1;
/// by default the attempt now).
pub async fn logs(
    runtime: &Runtime,
    key: RunKey,
    attempt: Option<u32>,
) -> Result<Logs, ServiceError> {
    logs_of(runtime, key, MAX_LOG_BYTES, attempt).await
}

/// The last `max` bytes (at most a MiB) of the program's stdout and of its stderr.
pub async fn logs_tail(runtime: &Runtime, key: RunKey, max: u64) -> Result<Logs, ServiceError> {
    logs_of(runtime, key, max, None).await
}

async fn logs_of(
    runtime: &Runtime,
    key: RunKey,
    max: u64,
    attempt: Option<u32>,
) -> Result<Logs, ServiceError> {
    let max = max.min(MAX_LOG_BYTES);
    key.check()?;
    let dir = runtime.deps().run_dir(&key.run);
    runtime
        .store()
        .read(move |r| {
            // Each attempt of the program keeps its own output.
            let run = catalog::require_run(r, &key)?;
            let now = run.attempt();
            let attempt = match attempt {
                None => now,
                Some(a) if (1..=now).contains(&a) => a,
                Some(a) => {
                    return Err(ServiceError::invalid(
                        "attempt",
                        format!("the run has made attempts 1 to {now}, not {a}"),
                    ));
                }
            };
            let dir = crate::runtime::launch::attempt_dir_in(dir.clone(), attempt);
            let read = |name: &str| {
                tail(&dir.join(name), max)
                    .map_err(|e| StoreError::Storage(format!("cannot read the {name}: {e}")))
            };
            Ok(Logs {
                stdout: read(STDOUT)?,
                stderr: read(STDERR)?,
            })
        })
        .await
}

/// How often a long poll looks again for news of a run another server may own: the store's
/// watch tells of every event at once ([`crate::store::Store::run_news`]); this only bounds
/// what a watch cut off for a moment would delay.
const OTHERS_NEWS: Duration = Duration::from_secs(5);

/// The run's history after sequence `after`. With `wait`, waits up to that long for at
/// least one new event while the run is live; news heard while waiting is answered with what
/// else comes within [`GATHER`], and the run's end at once.
pub async fn history(
    runtime: &Runtime,
    key: RunKey,
    after: u64,
    wait: Option<Duration>,
) -> Result<Vec<RunEvent>, ServiceError> {
    key.check()?;
    let deadline = wait.map(|w| tokio::time::Instant::now() + w);
    // Whether the last wait ended with news (not with the time to look again), and until when
    // the poll gathers the rest of a burst it has heard.
    let mut heard = false;
    let mut gather_until = None;
    loop {
        // Dropped when the request ends, however it ends (a run not found, a client gone
        // mid-wait), and with it the run's entry when nobody else waits on it.
        let subscription = runtime.deps().notifier.subscribe(&key.run);
        let notified = subscription.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let look = {
            let key = key.clone();
            move |r: &crate::store::Reader| {
                let run = catalog::require_run(r, &key)?;
                Ok::<_, ServiceError>((events::list(r, &key.run, after)?, run.needs_supervisor()))
            }
        };
        let Some(deadline) = deadline else {
            return Ok(runtime.store().read(look).await?.0);
        };
        // A long poll first looks at what this server has seen: news found there is news (the
        // poller asks again for what follows), and while the run is live and time is left it
        // waits for more. Only the answer that there is none, or that the run ended, comes
        // from a read that sees every write acknowledged before the poll began.
        match runtime.store().read_seen(look.clone()).await {
            // A run's events come in bursts (each node's task at about the same time): news
            // heard while the run is live is answered with the rest of its burst, which saves
            // the poller a request each. The run's end is answered as soon as it is heard.
            Ok((events, live)) if !events.is_empty() => {
                let until = *gather_until
                    .get_or_insert_with(|| deadline.min(tokio::time::Instant::now() + GATHER));
                if !(heard && live) || tokio::time::Instant::now() >= until {
                    return Ok(events);
                }
                heard = tokio::time::timeout_at(until, notified).await.is_ok();
                continue;
            }
            Ok((_, true)) if tokio::time::Instant::now() < deadline => {}
            _ => {
                let (events, live) = runtime.store().read(look).await?;
                if !events.is_empty() || !live || tokio::time::Instant::now() >= deadline {
                    return Ok(events);
                }
            }
        }
        heard = tokio::time::timeout_at(news_within(runtime, deadline), notified)
            .await
            .is_ok();
    }
}

/// How long a long poll that has heard news of a live run waits for the rest of its burst
/// before it answers.
const GATHER: Duration = Duration::from_millis(10);

/// Until when a long poll waits for news before it looks again (at most its `deadline`):
/// every server hears every run's news (through the store's watch on etcd); with several
/// servers it also looks again now and then, in case the watch was cut.
fn news_within(runtime: &Runtime, deadline: tokio::time::Instant) -> tokio::time::Instant {
    if runtime.deps().store.shared() {
        deadline.min(tokio::time::Instant::now() + OTHERS_NEWS)
    } else {
        deadline
    }
}

#[cfg(all(test, feature = "paused-clock"))]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use crate::model::event::EventKind;
    use crate::model::run::{ClusterStatus, POOL_APP, ProgramStatus};
    use crate::runtime::handle::Runtime;
    use crate::runtime::tests::runs::run;
    use crate::runtime::tests::{Scripted, deps, paused};
    use crate::store::{Table, events};

    use super::{GATHER, history};

    #[test]
    fn a_long_poll_that_hears_news_answers_the_rest_of_its_burst_with_it() {
        paused(|| async {
            let dir = tempfile::tempdir().expect("tempdir");
            let deps = deps(dir.path(), Scripted::new(Vec::new()));
            let runtime = Runtime::new(deps.clone(), actix::Arbiter::current());
            let mut record = run(ProgramStatus::Running, Some(ClusterStatus::Provisioned));
            record.key.app = POOL_APP.into();
            let key = record.key.clone();
            deps.store
                .write(move |tx| {
                    tx.put(
                        Table::Namespaces,
                        "default",
                        &json!({"name": "default", "description": "", "created": 0}),
                    )?;
                    tx.put(Table::Runs, &record.key.key(), &record)
                })
                .await
                .expect("write");
            let poll = {
                let (runtime, key) = (runtime.clone(), key.clone());
                tokio::task::spawn_local(async move {
                    history(&runtime, key, 0, Some(Duration::from_secs(30))).await
                })
            };
            let happen = |message: &'static str| {
                let (deps, run) = (deps.clone(), key.run.clone());
                async move {
                    let at = run.clone();
                    deps.store
                        .write(move |tx| events::append(tx, &at, EventKind::Status, None, message))
                        .await
                        .expect("event");
                    deps.notifier.notify(&run);
                }
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            happen("first").await;
            tokio::time::sleep(GATHER / 2).await;
            happen("second, of the same burst").await;
            tokio::time::sleep(GATHER * 5).await;
            happen("later").await;
            let answer = poll.await.expect("the poll").expect("history");
            let messages: Vec<&str> = answer.iter().map(|e| e.message.as_str()).collect();
            assert_eq!(messages, ["first", "second, of the same burst"]);

            // The run's end is answered as soon as it is heard, also in the middle of a burst.
            let last = {
                let run = key.run.clone();
                deps.store
                    .read(move |r| events::list(r, &run, 0))
                    .await
                    .expect("events")
                    .last()
                    .expect("an event")
                    .seq
            };
            let poll = {
                let (runtime, key) = (runtime.clone(), key.clone());
                tokio::task::spawn_local(async move {
                    history(&runtime, key, last, Some(Duration::from_secs(30))).await
                })
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            happen("deleting").await;
            tokio::time::sleep(GATHER / 2).await;
            let mut ended = run(ProgramStatus::Completed, Some(ClusterStatus::Deprovisioned));
            ended.key = key.clone();
            deps.store
                .write(move |tx| {
                    tx.put(Table::Runs, &ended.key.key(), &ended)?;
                    events::append(
                        tx,
                        &ended.key.run,
                        EventKind::Status,
                        None,
                        "cluster DEPROVISIONED",
                    )
                })
                .await
                .expect("the end");
            deps.notifier.notify(&key.run);
            let heard = tokio::time::Instant::now();
            let answer = poll.await.expect("the poll").expect("history");
            assert_eq!(answer.len(), 2, "{answer:?}");
            assert!(
                heard.elapsed() < GATHER / 2,
                "the end waited {:?}",
                heard.elapsed()
            );
        });
    }
}

/// The end of each log of `service` on `node` of run `key`'s cluster: the files the service's
/// template names (`logs`), read from the node (at most 64 KiB of each).
pub async fn service_logs(
    runtime: &Runtime,
    key: RunKey,
    node: String,
    service: String,
) -> Result<crate::model::view::ServiceLogs, ServiceError> {
    key.check()?;
    crate::model::names::check("node", &node)?;
    crate::model::names::check("service", &service)?;
    let (n, s) = (node.clone(), service.clone());
    let (run, record) = runtime
        .store()
        .read(move |r| {
            let run = catalog::require_run(r, &key)?;
            let record = r.get::<crate::model::plan::NodeRecord>(
                Table::Resources,
                &keys::node(run.cluster_id(), &n),
            )?;
            Ok::<_, ServiceError>((run, record))
        })
        .await?;
    let runs_it = run.layout.get(&node).is_some_and(|s| s.contains(&service));
    let Some(record) = record.filter(|_| runs_it) else {
        return Err(ServiceError::invalid(
            "node",
            format!("the run's cluster has no node '{node}' with service '{s}'"),
        ));
    };
    if record.status != crate::model::plan::ResourceStatus::Created {
        return Err(ServiceError::invalid(
            "node",
            format!("node '{node}' is {}: its logs went with it", record.status),
        ));
    }
    let files = run
        .template
        .as_ref()
        .and_then(|t| t.services.get(&service))
        .map(|s| s.logs.clone())
        .unwrap_or_default();
    let logs = crate::runtime::service_logs::read(runtime.deps(), &run, &record, &files).await?;
    Ok(crate::model::view::ServiceLogs {
        node,
        service,
        logs,
    })
}
