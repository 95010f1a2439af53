//! The runtime: the actors that drive runs, on their own arbiter (thread).
//!
//! - [`supervisor`]: one `RunSupervisor` per live run, the only writer of its record; it also
//!   keeps the run's deadline (keepalive expiry, profile timeout) as a timer re-armed from the
//!   record, so deadlines survive restarts.
//! - [`planner`]: one `Planner` per cluster operation, running the plan's tasks.
//! - [`task`]: one `TaskRunner` per node-level task, its attempts recorded;
//!   [`resource_task`]: a node task's resource steps, persisting the resource state around
//!   every outside call.
//! - [`health`]: the checks of a run's live cluster and what their findings lead to, for its
//!   supervisor; [`checker`] runs and records one check; [`spot`]: the watch of a live
//!   cluster's spot nodes, which the cloud may reclaim.
//! - [`transition`]: the one way a run's record changes (lifecycle rule, commit, count).
//! - [`attempt`]: what the task runner, the automator and the remote launcher share.
//! - [`handle`]: the [`Runtime`] handle that spawns supervisors and routes commands to them;
//!   [`deps`]: what the actors share.
//! - [`program`]: launching the program detached, re-attaching after a restart; [`launch`]:
//!   what it is launched with, here or on a remote master.
//! - [`remote`]: the same, and service scripts, on nodes reached over SSH.
//! - [`clock`]: the wall clock, read here and above; `model` and `rules` take `now` as an
//!   argument.
//! - [`shares`]: each claimant's share of a bounded resource (a namespace's running checks).
//! - [`calls`]: calls to clouds within their accounts' buckets, and a cluster's polls from
//!   shared lookups.
//!
//! The runtime never decides a transition itself; `rules::lifecycle` and `rules::plan` do. It never
//! touches HTTP.

pub mod application;
pub mod attempt;
pub mod automator;
pub mod calls;
pub mod checker;
pub mod confine;
pub mod deps;
pub mod duty;
pub mod error;
pub mod fence;
pub mod handle;
pub mod health;
pub mod janitor;
pub mod launch;
pub mod membership;
pub mod native;
pub mod on_node;
pub mod planner;
pub mod plugin_automator;
pub mod plugins;
pub mod program;
pub mod registry;
pub mod remote;
pub mod resource_task;
pub mod retention;
pub mod reuse;
pub mod service_logs;
pub mod shares;
pub mod spot;
pub mod supervisor;
pub mod task;
pub mod transition;

#[cfg(all(test, feature = "paused-clock"))]
pub(crate) mod tests;

/// Without `paused-clock` the in-process actor tests cannot run: say so, failing, rather than
/// skip them in silence.
#[cfg(all(test, not(feature = "paused-clock")))]
#[test]
fn the_actor_tests_need_the_paused_clock_feature() {
    panic!(
        "the in-process actor tests (src/runtime/tests) need `--features paused-clock`; \
         tests/run.sh passes it"
    );
}

pub use deps::Deps;
pub use handle::Runtime;
