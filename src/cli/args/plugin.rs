//! `ebb plugin`: the plugins a server loaded, and the conformance kit.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum PluginCmd {
    /// The plugins the server loaded, how their calls fare, and those it refused.
    List,
    /// Drives the plugin in DIR through the conformance kit's cases and prints what holds;
    /// exits 1 unless every case does. A provisioner: idempotent create, find after a lost
    /// answer, delete of what is gone, list by tags, bad properties, a call cut off. An
    /// automator: its fields checked, an action that succeeds (twice), one that fails, one
    /// stopped at its time limit.
    Test(PluginTestArgs),
}

#[derive(Debug, Args)]
pub struct PluginTestArgs {
    /// The plugin's directory (with its plugin.json).
    pub dir: PathBuf,
    /// A property the kit's profile gives the plugin, as name=value (repeatable).
    #[arg(short = 'p', long = "property", value_name = "NAME=VALUE")]
    pub properties: Vec<String>,
    /// A JSON object of properties (for secrets: a file shows in no process list).
    #[arg(long, value_name = "FILE")]
    pub properties_file: Option<PathBuf>,
    /// The work directory the plugin is given (default: a new one in the system's temporary
    /// directory, removed afterwards).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// How long a resource may take to be running, or gone.
    #[arg(long, default_value = "2m", value_parser = ebb_spi::parse_duration)]
    pub wait: std::time::Duration,
    /// For an automator: the actions it is tested with, a JSON object with the fields of one
    /// that `succeeds`, one that `fails` and one that is `slow` (default: the plugin's
    /// conformance.json).
    #[arg(long, value_name = "FILE")]
    pub fixtures: Option<PathBuf>,
}
