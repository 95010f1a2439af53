//! The metrics ebb exports at `GET /metrics` (Prometheus text format): every name, its kind
//! and what it counts, in one place, so the code that records them, the exporter's
//! descriptions and the checks of the dashboard and alert rules in `examples/monitoring/`
//! cannot drift.
//!
//! Recording goes through the `metrics` facade (`metrics::counter!` and friends), which is
//! IO-free: until the server installs its exporter, every record is a no-op. Labels are
//! bounded: statuses, actions, provisioner and profile names, route templates; never a run
//! id, a node name or a URL.

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric: its name, kind, labels and help text.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

const fn m(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        labels,
        help,
    }
}

pub const RUNS_STARTED: Metric = m(
    "ebb_runs_started_total",
    Kind::Counter,
    &["namespace"],
    "Runs started on this server (a REJECTED start included).",
);
pub const RUN_STATUS: Metric = m(
    "ebb_run_status_total",
    Kind::Counter,
    &["status"],
    "Runs that entered each program status on this server.",
);
pub const CLUSTER_STATUS: Metric = m(
    "ebb_cluster_status_total",
    Kind::Counter,
    &["status"],
    "Clusters that entered each cluster status on this server.",
);
pub const CLUSTER_REUSE: Metric = m(
    "ebb_cluster_reuse_total",
    Kind::Counter,
    &["result"],
    "Starts on a profile that reuses clusters: `hit` took an IDLE cluster over, `miss` made its own.",
);
pub const CLUSTER_REUSE_SECONDS: Metric = m(
    "ebb_cluster_reuse_claim_seconds",
    Kind::Histogram,
    &[],
    "How long taking an IDLE cluster over took, from the run's begin to the claim's commit.",
);
pub const POOL_REFILLS: Metric = m(
    "ebb_pool_refills_total",
    Kind::Counter,
    &["result"],
    "Clusters the pools' duty set out to make ahead of demand (`made`), or could not (`refused`: a limit, the host rules, a profile that does not resolve).",
);
pub const POOLS_STOPPED: Metric = m(
    "ebb_pools_stopped",
    Kind::Gauge,
    &[],
    "Warm pools stopped after failed runs in a row, until their profiles change.",
);
pub const POOL_CLUSTERS: Metric = m(
    "ebb_pool_clusters",
    Kind::Gauge,
    &["state"],
    "The installation's clusters made for pools: `ready` (IDLE) or `creating` (read from the store at each scrape).",
);
pub const NODE_SECONDS: Metric = m(
    "ebb_node_seconds_total",
    Kind::Counter,
    &["namespace", "profile"],
    "Node-seconds of runs whose usage was fixed (counted by the server that folds the usage ledger), by namespace and profile.",
);
pub const COST: Metric = m(
    "ebb_cost_micros_total",
    Kind::Counter,
    &["namespace", "profile"],
    "The cost of those node-seconds, in millionths of the price table's currency (unpriced node-seconds add nothing).",
);
pub const BUDGET_USED: Metric = m(
    "ebb_budget_used_ratio",
    Kind::Gauge,
    &["namespace"],
    "The share of each namespace's monthly budget its runs used this month (1 is all of it; the larger share of its cost and node-hour limits), for the namespaces with a budget (read from the store at each scrape).",
);
pub const LIVE_RUNS: Metric = m(
    "ebb_live_runs",
    Kind::Gauge,
    &["program_status", "cluster_status"],
    "Runs of the installation whose cluster is not deprovisioned yet, by program and cluster status (read from the store at each scrape).",
);
pub const LIVE_CLUSTERS: Metric = m(
    "ebb_live_clusters",
    Kind::Gauge,
    &["provisioner", "profile", "state"],
    "Clusters of the installation that hold or may hold resources, by provisioner, profile and state (the cluster's status in lower case: provisioning, provisioned, waiting, idle, deprovisioning, orphaned; or pool, a warm pool's).",
);
pub const CLUSTERS_NEEDING_ATTENTION: Metric = m(
    "ebb_clusters_needing_attention",
    Kind::Gauge,
    &[],
    "Live clusters that need attention: an operation on them failed and so did its rollback; only a repair may run on them (read from the store at each scrape).",
);
pub const LIVE_NODES: Metric = m(
    "ebb_live_nodes",
    Kind::Gauge,
    &["provisioner", "profile", "state"],
    "Nodes that exist now, by provisioner, profile and their cluster's state (as for ebb_live_clusters).",
);
pub const RUN_PHASE: Metric = m(
    "ebb_run_phase_seconds",
    Kind::Histogram,
    &["phase"],
    "How long runs spent provisioning (queued to RUNNING), running (RUNNING to the program's end) and deprovisioning (the delete operation).",
);
pub const OPERATIONS: Metric = m(
    "ebb_operations_total",
    Kind::Counter,
    &["operation", "status"],
    "Cluster operations that ended, by kind and how.",
);
pub const OPERATION_SECONDS: Metric = m(
    "ebb_operation_seconds",
    Kind::Histogram,
    &["operation"],
    "How long cluster operations took.",
);
pub const TASK_ATTEMPTS: Metric = m(
    "ebb_task_attempts_total",
    Kind::Counter,
    &["action", "outcome"],
    "Node task attempts that ended, by action and outcome (succeeded, failed, timed_out, cancelled).",
);
pub const TASK_ATTEMPT_SECONDS: Metric = m(
    "ebb_task_attempt_seconds",
    Kind::Histogram,
    &["action"],
    "How long node task attempts took.",
);
pub const PROVISIONER_CALLS: Metric = m(
    "ebb_provisioner_calls_total",
    Kind::Counter,
    &["provisioner", "call", "outcome"],
    "Calls to provisioners (find, create, describe, delete) by outcome: ok, retryable, fatal.",
);
pub const PROVISIONER_CALL_SECONDS: Metric = m(
    "ebb_provisioner_call_seconds",
    Kind::Histogram,
    &["provisioner", "call"],
    "How long calls to provisioners took.",
);
pub const PLACEMENT_FULL: Metric = m(
    "ebb_placement_full_total",
    Kind::Counter,
    &["provisioner", "market", "scope"],
    "Creates a place had no room for (a zone, or every zone of a region, on a market): the node moved to its next place.",
);
pub const NODES_DROPPED: Metric = m(
    "ebb_nodes_dropped_total",
    Kind::Counter,
    &["provisioner"],
    "Nodes a create gave up for want of capacity anywhere, the cluster still at its minNodes.",
);
pub const RECLAIMS: Metric = m(
    "ebb_spot_reclaims_total",
    Kind::Counter,
    &["provisioner"],
    "Spot nodes the cloud reclaimed from live clusters (each made anew with a replace-node operation).",
);
pub const THROTTLED: Metric = m(
    "ebb_provisioner_throttled_total",
    Kind::Counter,
    &["provisioner", "call"],
    "Calls a cloud throttled (its request limit): waited out and made again, never a failure of the run.",
);
pub const PLUGIN_CALLS: Metric = m(
    "ebb_plugin_calls_total",
    Kind::Counter,
    &["plugin", "method", "outcome"],
    "Calls to plugins' processes by outcome: ok, error (the plugin answered with one), broken (it crashed, hung, exited or wrote what is not an answer; its process was killed).",
);
pub const PLUGIN_STARTS: Metric = m(
    "ebb_plugin_starts_total",
    Kind::Counter,
    &["plugin"],
    "Processes of plugins started (the first, and one after each that broke).",
);
pub const RETRIES: Metric = m(
    "ebb_retries_total",
    Kind::Counter,
    &["provisioner", "call"],
    "Provisioner calls retried after a retryable error.",
);
pub const STORE_COMMIT_SECONDS: Metric = m(
    "ebb_store_commit_seconds",
    Kind::Histogram,
    &["store"],
    "How long a store commit took (a batch of writes on redb, a transaction on etcd).",
);
pub const STORE_COMMIT_BATCH: Metric = m(
    "ebb_store_commit_batch_size",
    Kind::Histogram,
    &["store"],
    "Writes per commit (group commit: one batch on redb, one transaction on etcd).",
);
pub const STORE_INTENT_SECONDS: Metric = m(
    "ebb_store_intent_seconds",
    Kind::Histogram,
    &[],
    "How long applying a write larger than one etcd transaction took, from its commit to its last batch.",
);
pub const STORE_ROUND_TRIPS: Metric = m(
    "ebb_store_round_trips_total",
    Kind::Counter,
    &["kind"],
    "Requests to etcd: reads, probes of its revision, commits, values' chunks, intents' batches.",
);
pub const JANITOR_ORPHANS_FOUND: Metric = m(
    "ebb_janitor_orphans_found_total",
    Kind::Counter,
    &["provisioner"],
    "Resources the janitor found that no run accounts for.",
);
pub const JANITOR_ORPHANS_DELETED: Metric = m(
    "ebb_janitor_orphans_deleted_total",
    Kind::Counter,
    &["provisioner"],
    "Orphaned resources the janitor deleted.",
);
pub const HTTP_REQUESTS: Metric = m(
    "ebb_http_requests_total",
    Kind::Counter,
    &["route", "method", "status"],
    "HTTP requests answered, by route template, method and status code.",
);
pub const HTTP_SECONDS: Metric = m(
    "ebb_http_request_seconds",
    Kind::Histogram,
    &["route", "method"],
    "How long HTTP requests took to answer.",
);

/// The `method` label of an HTTP request: one of the methods the API answers, else `other`.
/// HTTP lets a client send any token as its method; each must not become a series.
pub fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"];
    KNOWN.into_iter().find(|m| *m == method).unwrap_or("other")
}

/// Every metric ebb exports.
pub const SERVICE_CHECKS: Metric = m(
    "ebb_service_checks_total",
    Kind::Counter,
    &["outcome"],
    "Checks of live clusters' services run by this server, by what they found (up, down, unknown).",
);
pub const HEALS: Metric = m(
    "ebb_heals_total",
    Kind::Counter,
    &["heal"],
    "Heals this server started (restart, replace-node), and those it held back at their limit (exhausted).",
);
pub const SCHEDULES_ENABLED: Metric = m(
    "ebb_schedules_enabled",
    Kind::Gauge,
    &[],
    "Schedules that fire (SCHEDULED), as the server that fires schedules last read them.",
);
pub const SCHEDULE_FIRES: Metric = m(
    "ebb_schedule_fires_total",
    Kind::Counter,
    &["outcome"],
    "Schedule fires this server recorded, by outcome (started, skipped, waiting, part of an AND).",
);
pub const SCHEDULE_MISSED: Metric = m(
    "ebb_schedule_missed_total",
    Kind::Counter,
    &[],
    "Cron times missed while no server fired schedules, and skipped per the schedule's catchUp.",
);
pub const SCHEDULE_THROTTLED: Metric = m(
    "ebb_schedule_fires_throttled_total",
    Kind::Counter,
    &["namespace"],
    "Schedule fires held back because the schedule or its namespace fired faster than its rate.",
);
pub const SCHEDULES_READ: Metric = m(
    "ebb_schedules_read_total",
    Kind::Counter,
    &[],
    "Schedule records the scheduler read from the store (at first every one, then only those of namespaces whose schedules changed).",
);
pub const SCHEDULE_FIRE_LAG: Metric = m(
    "ebb_schedule_fire_lag_seconds",
    Kind::Histogram,
    &[],
    "From a cron time to its fire being recorded on this server.",
);
pub const RUNS_QUEUED: Metric = m(
    "ebb_runs_queued",
    Kind::Gauge,
    &[],
    "Runs waiting in the admission queue, over every namespace, as the server that starts queued runs last read them.",
);
pub const RUN_QUEUE_WAIT: Metric = m(
    "ebb_run_queue_wait_seconds",
    Kind::Histogram,
    &[],
    "How long a run waited in the admission queue before it started (on the server that started it).",
);
pub const RUN_QUEUE_LAG: Metric = m(
    "ebb_run_queue_admit_lag_seconds",
    Kind::Histogram,
    &[],
    "From the server that starts queued runs hearing that a slot freed (or a run was queued) to the first queued run it starts after.",
);
pub const PROGRAM_RETRIES: Metric = m(
    "ebb_program_retries_total",
    Kind::Counter,
    &["kind"],
    "Failed program attempts tried again under a retry policy, by why the attempt failed (program, server-lost).",
);

pub const DUTY_PANICS: Metric = m(
    "ebb_duty_panics_total",
    Kind::Counter,
    &["duty"],
    "Ticks of an installation-wide duty (janitor, retention, scheduler, queue, pools, usage) that panicked on this server; the duty was resigned for another server to take over.",
);
pub const CLOCK_OFFSET: Metric = m(
    "ebb_clock_offset_seconds",
    Kind::Gauge,
    &[],
    "How far the system's wall clock is ahead of this server's clock (negative: behind): after a step of the wall clock, ebb's clock closes the gap at 1 % of the time that passes rather than jumping.",
);

pub const ALL: &[Metric] = &[
    RUNS_STARTED,
    RUN_STATUS,
    CLUSTER_STATUS,
    CLUSTER_REUSE,
    CLUSTER_REUSE_SECONDS,
    POOL_REFILLS,
    POOLS_STOPPED,
    POOL_CLUSTERS,
    NODE_SECONDS,
    COST,
    BUDGET_USED,
    LIVE_RUNS,
    CLUSTERS_NEEDING_ATTENTION,
    LIVE_CLUSTERS,
    LIVE_NODES,
    RUN_PHASE,
    OPERATIONS,
    OPERATION_SECONDS,
    TASK_ATTEMPTS,
    TASK_ATTEMPT_SECONDS,
    PROVISIONER_CALLS,
    PROVISIONER_CALL_SECONDS,
    PLACEMENT_FULL,
    NODES_DROPPED,
    RECLAIMS,
    THROTTLED,
    PLUGIN_CALLS,
    PLUGIN_STARTS,
    RETRIES,
    CLOCK_OFFSET,
    DUTY_PANICS,
    STORE_COMMIT_SECONDS,
    STORE_COMMIT_BATCH,
    STORE_INTENT_SECONDS,
    STORE_ROUND_TRIPS,
    JANITOR_ORPHANS_FOUND,
    JANITOR_ORPHANS_DELETED,
    HTTP_REQUESTS,
    HTTP_SECONDS,
    SERVICE_CHECKS,
    HEALS,
    SCHEDULES_ENABLED,
    SCHEDULE_FIRES,
    SCHEDULE_MISSED,
    SCHEDULE_THROTTLED,
    SCHEDULES_READ,
    SCHEDULE_FIRE_LAG,
    RUNS_QUEUED,
    RUN_QUEUE_WAIT,
    RUN_QUEUE_LAG,
    PROGRAM_RETRIES,
];

/// The buckets of the histograms of seconds: from a millisecond to an hour.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// The buckets of batch sizes.
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_methods_are_labels() {
        assert_eq!(method_label("GET"), "GET");
        assert_eq!(method_label("DELETE"), "DELETE");
        for other in ["get", "XMETHOD1", "", "PROPFIND"] {
            assert_eq!(method_label(other), "other", "{other}");
        }
    }

    #[test]
    fn names_are_unique_prometheus_names_and_labels_are_bounded() {
        let mut seen = std::collections::BTreeSet::new();
        for m in ALL {
            assert!(seen.insert(m.name), "{} twice", m.name);
            assert!(m.name.starts_with("ebb_"), "{}", m.name);
            assert!(
                m.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                m.name
            );
            match m.kind {
                Kind::Counter => assert!(m.name.ends_with("_total"), "{}", m.name),
                Kind::Gauge | Kind::Histogram => {
                    assert!(!m.name.ends_with("_total"), "{}", m.name)
                }
            }
            for label in m.labels {
                assert!(
                    !["run", "run_id", "node", "url", "id"].contains(label),
                    "{}: unbounded label {label}",
                    m.name
                );
            }
        }
    }
}
