//! The arguments of `ebb namespace`.

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum NamespaceCmd {
    /// List namespaces.
    List,
    /// Show one namespace.
    Get { name: String },
    /// Create a namespace (or update its description).
    Create {
        name: String,
        #[arg(long)]
        description: Option<String>,
    },
    /// Change a namespace's quota, queue and host-program settings (instance admins). A
    /// limit given as `none` is removed; what is not given stays as it is.
    Set {
        name: String,
        #[command(flatten)]
        settings: NamespaceSettings,
    },
    /// Delete a namespace and its preferences (it must hold no profiles).
    Delete { name: String },
}

/// The settings `ebb namespace set` changes.
#[derive(Debug, Clone, Args)]
pub struct NamespaceSettings {
    /// Most live runs at once (`none`: no limit).
    #[arg(long, value_name = "N|none", value_parser = parse_limit)]
    pub max_live_runs: Option<Limit>,
    /// Most nodes its live runs hold at once (`none`: no limit).
    #[arg(long, value_name = "N|none", value_parser = parse_limit)]
    pub max_live_nodes: Option<Limit>,
    /// Most nodes of one run (`none`: no limit).
    #[arg(long, value_name = "N|none", value_parser = parse_limit)]
    pub max_nodes_per_run: Option<Limit>,
    /// Queue the starts a limit refuses instead of rejecting them.
    #[arg(long, value_name = "true|false")]
    pub queue_runs: Option<bool>,
    /// Most runs waiting in the queue (`none`: the default, 1000).
    #[arg(long, value_name = "N|none", value_parser = parse_limit)]
    pub max_queued: Option<Limit>,
    /// Longest a run waits in the queue, e.g. `2h` (`none`: the default, a day).
    #[arg(long, value_name = "DURATION|none", value_parser = parse_wait)]
    pub max_queue_time: Option<Wait>,
    /// Let the namespace's admins deploy apps whose programs run on the server's host.
    #[arg(long, value_name = "true|false")]
    pub allow_host_programs: Option<bool>,
    /// A monthly budget in money (the price table's currency); with --budget-node-hours and
    /// --budget-hard-stop it makes the whole budget, replacing the one set.
    #[arg(long, value_name = "AMOUNT")]
    pub budget_cost: Option<f64>,
    /// A monthly budget in node-hours.
    #[arg(long, value_name = "HOURS")]
    pub budget_node_hours: Option<f64>,
    /// Once the budget is used, stop the namespace's live runs too.
    #[arg(long)]
    pub budget_hard_stop: bool,
    /// Remove the budget.
    #[arg(long, conflicts_with_all = ["budget_cost", "budget_node_hours", "budget_hard_stop"])]
    pub no_budget: bool,
}

/// A limit, or none.
#[derive(Debug, Clone, Copy)]
pub struct Limit(pub Option<u32>);

fn parse_limit(text: &str) -> Result<Limit, String> {
    match text {
        "none" => Ok(Limit(None)),
        n => n
            .parse()
            .map(|n| Limit(Some(n)))
            .map_err(|e| format!("a whole number or 'none': {e}")),
    }
}

/// A duration in seconds, or none.
#[derive(Debug, Clone, Copy)]
pub struct Wait(pub Option<u64>);

fn parse_wait(text: &str) -> Result<Wait, String> {
    match text {
        "none" => Ok(Wait(None)),
        d => ebb_spi::parse_duration(d).map(|d| Wait(Some(d.as_secs()))),
    }
}
