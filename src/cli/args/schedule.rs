//! The arguments of `ebb schedule`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// What a schedule is made of, as flags; a `--file` body is the base they change.
#[derive(Debug, Args)]
pub struct ScheduleSpec {
    /// A schedule body as JSON (CDAP's ScheduleDetail); the flags below change it.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The program it starts (of the schedule's app).
    #[arg(long)]
    pub program: Option<String>,
    /// Fire at the times of this cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), or 6 with seconds first.
    #[arg(long, conflicts_with = "after")]
    pub cron: Option<String>,
    /// The time zone of --cron (an IANA name; default UTC).
    #[arg(long, requires = "cron")]
    pub time_zone: Option<String>,
    /// Fire when a run of this program ends: NAMESPACE/APP/PROGRAM.
    #[arg(long, value_name = "NAMESPACE/APP/PROGRAM")]
    pub after: Option<String>,
    /// With --after: the ends that fire it, comma-separated (default COMPLETED).
    #[arg(
        long,
        requires = "after",
        value_delimiter = ',',
        value_name = "STATUS,..."
    )]
    pub on: Vec<String>,
    /// A property KEY=VALUE of its runs (system.profile.name=USER:nightly, a runtime
    /// argument); repeat for more.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
    /// What it does with fire times missed while no server fired: none, last or all.
    #[arg(long, value_parser = ["none", "last", "all"])]
    pub catch_up: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    /// Enable it now (a new schedule is suspended until enabled).
    #[arg(long)]
    pub enable: bool,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCmd {
    /// Create schedule NAMESPACE/APP/NAME (suspended unless --enable).
    Create {
        /// The schedule: NAMESPACE/APP/NAME.
        schedule: String,
        #[command(flatten)]
        spec: ScheduleSpec,
    },
    /// Change what the flags (or --file) give of schedule NAMESPACE/APP/NAME.
    Update {
        schedule: String,
        #[command(flatten)]
        spec: ScheduleSpec,
    },
    /// Show a schedule and its next fire times.
    Get { schedule: String },
    /// List a namespace's schedules (or an app's).
    List {
        #[arg(short, long, default_value = "default")]
        namespace: String,
        #[arg(long)]
        app: Option<String>,
    },
    /// Delete a schedule (its runs go on).
    Delete { schedule: String },
    /// Enable a schedule: it fires from now on.
    Enable { schedule: String },
    /// Suspend a schedule.
    Disable { schedule: String },
    /// Show a schedule's next fire times, in UTC and in its time zone.
    Next {
        schedule: String,
        #[arg(long, default_value_t = 5)]
        count: usize,
    },
    /// Show what became of a schedule's fires, newest first.
    Fires {
        schedule: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}
