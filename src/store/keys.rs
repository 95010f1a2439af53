//! The key of every table's records, built here and nowhere else. Keys are `/`-joined paths
//! whose prefixes group what is read together: a namespace's records, a program's runs, a
//! run's nodes, events, operations and attempts. Numbers are zero-padded so that keys sort
//! as the numbers do.
//!
//! A model id that names a record spells its own key, and this module only hands it on:
//! `Namespaces` by name, `Profiles` by [`ProfileId::key`], `Templates` by
//! [`TemplateId::key`], `Preferences` by [`Scope::key`], `Runs` and `Active` by
//! [`RunKey::key`].
//!
//! [`ProfileId::key`]: crate::model::profile::ProfileId::key
//! [`TemplateId::key`]: crate::model::template::TemplateId::key
//! [`Scope::key`]: crate::model::preference::Scope::key
//! [`RunKey::key`]: crate::model::run::RunKey::key

/// The prefix of namespace `ns`'s records in `Apps`, `Profiles`, `Templates`, `SecureKeys`,
/// `Runs`, `Active` and `RunIndex`.
/// Where `Meta` keeps the names every server that joined the installation tags its
/// resources with, one key each (`members/<tag>`).
pub const MEMBERS: &str = "members/";

/// The `Meta` key of a server's resource tag, under [`MEMBERS`].
pub fn member(tag: &str) -> String {
    format!("{MEMBERS}{tag}")
}

pub fn in_namespace(ns: &str) -> String {
    format!("{ns}/")
}

/// `Apps`: app `app` of namespace `ns`.
pub fn app(ns: &str, app: &str) -> String {
    format!("{ns}/{app}")
}

/// The prefix of app `app`'s runs in `Runs` and `Active`.
pub fn app_runs(ns: &str, app: &str) -> String {
    format!("{ns}/{app}/")
}

/// The prefix of program `program`'s runs in `Runs` and `Active`.
pub fn program_runs(ns: &str, app: &str, program: &str) -> String {
    format!("{ns}/{app}/{program}/")
}

/// `Schedules`: schedule `name` of app `app` in namespace `ns`; also the prefix of its fires
/// in `Fires` (with a `/`).
pub fn schedule(ns: &str, app: &str, name: &str) -> String {
    format!("{ns}/{app}/{name}")
}

/// `Fires`: fire `fire` of schedule `schedule` (its key in `Schedules`).
pub fn fire(schedule: &str, fire: &str) -> String {
    format!("{schedule}/{fire}")
}

/// `StartKeys`: the idempotency key whose digest is `digest`, of a start of
/// `ns/app/program`.
pub fn start_key(ns: &str, app: &str, program: &str, digest: &str) -> String {
    format!("{ns}/{app}/{program}/{digest}")
}

/// `SecureKeys`: secure key `name` of namespace `ns`.
pub fn secure_key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// `RunIndex`: run `run` of namespace `ns` (run ids follow time, so a namespace's runs list
/// newest first from the end).
pub fn run_index(ns: &str, run: &str) -> String {
    format!("{ns}/{run}")
}

/// A bound on run ids: every run created before `epoch_ms` (milliseconds since the epoch) has
/// an id that sorts before it. Run ids are UUIDv7, whose text begins with their creation time
/// in milliseconds, in hexadecimal (`tttttttt-tttt-7…`).
pub fn run_ids_before(epoch_ms: u64) -> String {
    format!("{:08x}-{:04x}", epoch_ms >> 16, epoch_ms & 0xffff)
}

/// The `RunIndex` entry of the run stored in `Runs` under `runs_key`
/// (`<ns>/<app>/<program>/<run>`).
pub fn run_index_of(runs_key: &str) -> Option<String> {
    let (ns, rest) = runs_key.split_once('/')?;
    let run = rest.rsplit('/').next()?;
    Some(run_index(ns, run))
}

/// The prefix of run `run`'s records in `Resources`, `Events`, `Operations` and `Attempts`.
pub fn of_run(run: &str) -> String {
    format!("{run}/")
}

/// `Resources`: node `node` of run `run`.
pub fn node(run: &str, node: &str) -> String {
    format!("{run}/{node}")
}

/// `Services`: service `service` on node `node` of run `run`.
pub fn service(run: &str, node: &str, service: &str) -> String {
    format!("{run}/{node}/{service}")
}

/// `Events`: event `seq` of run `run`.
/// `Changes`: a change of namespace `ns` (`system` for instance-wide ones) at `seq`.
pub fn change(ns: &str, seq: u64) -> String {
    format!("{ns}/{seq:020}")
}

pub fn event(run: &str, seq: u64) -> String {
    format!("{run}/{seq:020}")
}

/// `Operations`: operation `id` of run `run`.
pub fn operation(run: &str, id: u32) -> String {
    format!("{run}/{id:06}")
}

/// The prefix of operation `op`'s attempts in `Attempts`.
pub fn attempts_of(run: &str, op: u32) -> String {
    format!("{run}/{op:06}/")
}

/// `Attempts`: attempt `attempt` (from 1) of task `task` of operation `op`.
pub fn attempt(run: &str, op: u32, task: usize, attempt: u32) -> String {
    format!("{run}/{op:06}/{task:06}/{attempt:03}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_keys_sort_as_their_numbers() {
        assert!(operation("r", 9) < operation("r", 10));
        assert!(attempt("r", 1, 9, 2) < attempt("r", 1, 10, 1));
        assert!(attempt("r", 1, 3, 9) < attempt("r", 1, 3, 10));
        assert!(event("r", 9) < event("r", 10));
        assert!(attempt("r", 1, 3, 1).starts_with(&attempts_of("r", 1)));
        assert!(node("r", "master").starts_with(&of_run("r")));
    }

    #[test]
    fn the_run_index_entry_is_the_namespace_and_the_run() {
        assert_eq!(
            run_index_of("ns/app/p/0190-a").as_deref(),
            Some("ns/0190-a")
        );
        assert_eq!(run_index_of("nothing"), None);
    }

    /// A run created at any millisecond sorts before the bound of the next one, and not
    /// before its own.
    #[test]
    fn run_ids_sort_before_the_bound_of_any_later_instant() {
        for ms in [0u64, 1, 65_535, 65_536, 1_795_686_527_398, (1 << 48) - 2] {
            let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
                uuid::NoContext,
                ms / 1000,
                (ms % 1000) as u32 * 1_000_000,
            ))
            .to_string();
            assert!(id < run_ids_before(ms + 1), "{id} at {ms}");
            assert!(id >= run_ids_before(ms), "{id} at {ms}");
        }
    }
}
