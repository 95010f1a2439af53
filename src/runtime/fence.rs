//! Programs fenced by their owner's lease, as its writes are: on a store of several servers, a
//! program this server launched on its own host lives only while this server surely owns its
//! run.
//!
//! The server keeps a fence file in each such program's run directory: the instant, on the
//! host's monotonic clock (`CLOCK_MONOTONIC`, one for every process of the host, unmoved by a
//! step of the wall clock), at which etcd may end the lease the server holds the run under —
//! its last renewal's sending plus its time to live. It moves the instant on after every
//! renewal, while the run's supervisor lives. The launcher reads it every [`POLL`] and, once
//! the instant has passed, kills the program's process group and says why: the server was
//! killed, paused, or cut from etcd, and another server may take the run over from then on.
//! A server restarted on the same data directory keeps only the fences of the runs it owns
//! again; the others' programs stop by themselves.
//!
//! The next owner claims a run only after etcd ended the lease, so after the instant; it
//! waits [`MARGIN`] more (the launcher's look and the kill) before it counts the old copy
//! dead and tries the program again.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::store::Store;

/// The fence file, in a program's run directory.
pub const FILE: &str = "fence";

/// How often the launcher looks at its fence.
pub const POLL: Duration = Duration::from_millis(100);

/// How often the server moves its fences on (a lease is renewed every third of its time to
/// live; the fence follows within this).
const REFRESH: Duration = Duration::from_millis(200);

/// How long past the end of the old owner's lease the next owner waits before it counts a
/// program on the old owner's host dead: the launcher's look, the kill, and room for the two
/// clocks' drift.
pub const MARGIN: Duration = Duration::from_secs(1);

/// The program directories this server keeps fences for, each while its run's supervisor
/// lives (the `Weak` of its ownership).
#[derive(Debug, Clone, Default)]
pub struct Fences(Arc<Mutex<BTreeMap<PathBuf, Weak<()>>>>);

impl Fences {
    /// Keeps the fence of `dir` moving while `owned` lives.
    pub fn hold(&self, dir: &Path, owned: Weak<()>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir.to_path_buf(), owned);
    }

    /// Stops keeping the fence of `dir` (its program ended).
    pub fn release(&self, dir: &Path) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(dir);
    }

    /// The directories whose runs this server still supervises; forgets the others.
    fn held(&self) -> Vec<PathBuf> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, owned| owned.strong_count() > 0);
        held.keys().cloned().collect()
    }
}

/// The host's monotonic clock now, in nanoseconds.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// `at` on the host's monotonic clock, in nanoseconds.
fn ns_of(at: Instant) -> u64 {
    let (now, ns) = (Instant::now(), now_ns());
    match at.checked_duration_since(now) {
        Some(ahead) => ns.saturating_add(u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX)),
        None => ns.saturating_sub(u64::try_from((now - at).as_nanos()).unwrap_or(u64::MAX)),
    }
}

/// Writes the fence of `dir`: its program may run until `until_ns`. Written aside and
/// renamed in, so the launcher reads the old instant or the new one, never a torn one.
pub fn write(dir: &Path, until_ns: u64) -> io::Result<()> {
    let aside = dir.join(format!("{FILE}.new"));
    std::fs::write(&aside, until_ns.to_string())?;
    std::fs::rename(&aside, dir.join(FILE))
}

/// The fence of `dir`, if it has one that reads.
pub fn read(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join(FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Until when (host monotonic nanoseconds) a program of this server, holding `lease`, may run
/// now: the end of its lease at the earliest; `None` on a store of one server (nothing to fence), or while it
/// holds no lease.
pub fn until(store: &Store, lease: i64) -> Option<u64> {
    if lease == 0 {
        return None;
    }
    store.lease_expiry(lease).map(ns_of)
}

/// How far ahead a fence must lie for a program to be launched under it.
const AHEAD: Duration = Duration::from_secs(1);

/// [`until`] for the lease held now (`lease`), once it lies at least [`AHEAD`] ahead: waits while the lease is not renewed
/// (etcd out of reach, this process just woken), so no program starts under a fence already
/// passed. `None` once this server holds no lease.
pub async fn confirmed(store: &Store, lease: impl Fn() -> i64) -> Option<u64> {
    loop {
        let until = until(store, lease())?;
        if until > now_ns().saturating_add(u64::try_from(AHEAD.as_nanos()).unwrap_or(u64::MAX)) {
            return Some(until);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Moves the fences of this server's programs (`fences`) on, every [`REFRESH`], while the
/// server runs and holds `lease`.
/// A fence whose run this server no longer supervises, or whose lease is no longer renewed,
/// stays where it is, and its program stops there.
pub async fn keep(store: Store, fences: Fences, lease: impl Fn() -> i64) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(until) = until(&store, lease()) else {
            continue;
        };
        let dirs = fences.held();
        if dirs.is_empty() {
            continue;
        }
        let written = tokio::task::spawn_blocking(move || {
            for dir in dirs {
                if let Err(e) = write(&dir, until) {
                    tracing::warn!(dir = %dir.display(), error = %e, "a program's fence was not moved on");
                }
            }
        })
        .await;
        if let Err(e) = written {
            tracing::warn!(error = %e, "the fences were not moved on");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_reads_back_and_an_instant_maps_onto_the_hosts_clock() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()), None);
        write(dir.path(), 42).expect("write");
        write(dir.path(), 43).expect("write again");
        assert_eq!(read(dir.path()), Some(43));
        let later = ns_of(Instant::now() + Duration::from_secs(3));
        let now = now_ns();
        assert!(
            later > now + 2_900_000_000 && later < now + 3_100_000_000,
            "{later} {now}"
        );
        assert!(ns_of(Instant::now() - Duration::from_secs(1)) < now);
    }

    #[test]
    fn only_the_fences_of_supervised_runs_are_kept() {
        let fences = Fences::default();
        let owned = Arc::new(());
        fences.hold(Path::new("/a"), Arc::downgrade(&owned));
        {
            let gone = Arc::new(());
            fences.hold(Path::new("/b"), Arc::downgrade(&gone));
        }
        assert_eq!(fences.held(), [PathBuf::from("/a")]);
        fences.release(Path::new("/a"));
        assert!(fences.held().is_empty());
    }
}
