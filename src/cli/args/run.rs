//! The arguments of `ebb run`: start, list, read and change runs and their clusters.

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum RunCmd {
    /// Start a run of NAMESPACE/APP/PROGRAM.
    Start {
        /// The program: NAMESPACE/APP/PROGRAM.
        program: String,
        /// Runtime argument KEY=VALUE; repeat for more (e.g. system.profile.name=USER:dev).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
        /// Follow the run until its cluster is gone (or kept WAITING), print the program's
        /// output, and exit with the program's exit status.
        #[arg(long)]
        wait: bool,
    },
    /// List runs of NAMESPACE/APP/PROGRAM, or of a whole namespace with --namespace.
    List {
        /// The program: NAMESPACE/APP/PROGRAM.
        #[arg(required_unless_present = "namespace")]
        program: Option<String>,
        /// List every run in this namespace instead.
        #[arg(short, long, conflicts_with = "program")]
        namespace: Option<String>,
        /// Only runs in this program or cluster status (QUEUED, RUNNING, WAITING...).
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Show a run: NAMESPACE/APP/PROGRAM/RUN.
    Get { run: String },
    /// Stop a run; with --keepalive its cluster is kept for the profile's keepalive.killed.
    Stop {
        run: String,
        #[arg(long)]
        keepalive: bool,
    },
    /// Deprovision a WAITING cluster now (--force: record a stuck one as deprovisioned).
    Deprovision {
        run: String,
        #[arg(long)]
        force: bool,
    },
    /// Run an operation on a live (PROVISIONED or WAITING) cluster: expand, shrink,
    /// start-services, stop-services, restart-services, configure, replace-node,
    /// add-services, remove-services, or repair (back to its last good layout; the only one
    /// a cluster that needs attention takes).
    Cluster {
        run: String,
        #[arg(value_parser = ["expand", "shrink", "start-services", "stop-services", "restart-services", "configure", "replace-node", "add-services", "remove-services", "repair"])]
        operation: String,
        /// expand: nodes to add; shrink: nodes to remove.
        #[arg(long)]
        nodes: Option<u32>,
        /// start-, stop- or restart-services: only this service, with its dependent chains
        /// (repeatable; default: every service); add- or remove-services: the service to add
        /// or remove (repeatable).
        #[arg(long = "service", value_name = "SERVICE")]
        services: Vec<String>,
        /// start-, stop- or restart-services: only on this node (repeatable; default: every
        /// node); replace-node: the node to replace; add-services: put them on this node
        /// (default: where the template's rules place them).
        #[arg(long = "node", value_name = "NODE", conflicts_with = "nodes")]
        on: Vec<String>,
        /// shrink: this node goes (repeatable).
        #[arg(long, value_name = "NODE")]
        remove: Vec<String>,
        /// configure: the new config, as JSON text or @FILE.
        #[arg(long, value_name = "JSON|@FILE")]
        config: Option<String>,
        /// Wait for the operation to end and show it; exit 1 if it failed.
        #[arg(long, conflicts_with = "dry_run")]
        wait: bool,
        /// Show the plan the operation would have now (the layout after it, its tasks in
        /// stages), touching nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Move a WAITING or IDLE cluster's deadline.
    Extend {
        run: String,
        /// Keep it this much longer than its deadline now (e.g. 30m, 2h).
        #[arg(
            long,
            value_name = "DURATION",
            required_unless_present = "until",
            conflicts_with = "until"
        )]
        by: Option<String>,
        /// Keep it until this time (epoch seconds).
        #[arg(long, value_name = "EPOCH_SECONDS")]
        until: Option<u64>,
        /// With --until: the time may be earlier than the deadline now (shorten the keepalive).
        #[arg(long, requires = "until")]
        shorten: bool,
    },
    /// Print the program's stdout and stderr, or with --service a service's daemon logs.
    Logs {
        run: String,
        /// A service's logs (the files its template names) instead of the program's output:
        /// on every node that runs it, or on --node.
        #[arg(long)]
        service: Option<String>,
        /// With --service: only on this node.
        #[arg(long, requires = "service")]
        node: Option<String>,
    },
    /// Show the operations on the run's cluster as a timeline: each task with its attempts.
    Ops {
        run: String,
        /// Only this operation.
        #[arg(long)]
        op: Option<u32>,
    },
    /// Cancel a running operation on the run's cluster: its tasks stop before their next
    /// outside call, then what it did is rolled back.
    Cancel {
        run: String,
        /// The operation's id (`ebb run ops` lists them).
        #[arg(long)]
        op: u32,
        /// Wait for the rollback to end and show the operation; exit 1 unless it was undone.
        #[arg(long)]
        wait: bool,
    },
    /// Print the run's history of events.
    Events {
        run: String,
        /// Keep printing new events until the run's cluster is gone.
        #[arg(long, short)]
        follow: bool,
    },
}
