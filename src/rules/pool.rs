//! Whether a warm pool may make clusters now: a pool whose creates fail (a bad key, an
//! unreachable host, a cloud quota) must not try again every tick for ever, each try a run,
//! a record and outside calls. Its own runs say how it went: after failed ones it waits, twice
//! as long after each ([`FIRST_WAIT`] up to [`LONGEST_WAIT`]), and after [`STOP_AFTER`] in a
//! row it stops until its profile changes (written again, or disabled and enabled).

/// Failed runs in a row after which a pool stops.
pub const STOP_AFTER: usize = 5;
/// How long a pool waits after its first failed run, in seconds.
pub const FIRST_WAIT: u64 = 2;
/// The longest it waits between tries, in seconds.
pub const LONGEST_WAIT: u64 = 600;

/// One of a pool's runs, as its health needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    /// When it was requested (epoch seconds).
    pub started: u64,
    /// When it ended, if it did.
    pub ended: Option<u64>,
    pub outcome: Outcome,
}

/// How one of a pool's runs went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Still making its cluster: it counts neither way yet.
    Making,
    /// Its cluster was made.
    Made,
    /// It failed (or was refused), for this reason.
    Failed(String),
}

/// What a pool may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Make what it lacks.
    Filling,
    /// Nothing before `until` (epoch seconds): its last `failures` runs failed.
    Waiting {
        until: u64,
        failures: usize,
        reason: String,
    },
    /// Nothing until its profile changes: its last `failures` runs failed.
    Stopped { failures: usize, reason: String },
}

/// The health of a pool whose runs are `runs` (newest first), counting only those requested
/// at or after `since` (when its profile last changed), at `now`.
pub fn health(runs: &[Tried], since: u64, now: u64) -> Health {
    let failed: Vec<(&Tried, &String)> = runs
        .iter()
        .filter(|r| r.started >= since && r.outcome != Outcome::Making)
        .map_while(|r| match &r.outcome {
            Outcome::Failed(why) => Some((r, why)),
            Outcome::Made | Outcome::Making => None,
        })
        .collect();
    let Some((newest, why)) = failed.first() else {
        return Health::Filling;
    };
    let reason = (*why).clone();
    let failures = failed.len();
    if failures >= STOP_AFTER {
        return Health::Stopped { failures, reason };
    }
    let doublings = u32::try_from(failures - 1).unwrap_or(u32::MAX).min(20);
    let wait = FIRST_WAIT.saturating_mul(1 << doublings).min(LONGEST_WAIT);
    let until = newest.ended.unwrap_or(newest.started).saturating_add(wait);
    if until <= now {
        return Health::Filling;
    }
    Health::Waiting {
        until,
        failures,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tried(started: u64, failed: bool) -> Tried {
        Tried {
            started,
            ended: Some(started + 1),
            outcome: match failed {
                true => Outcome::Failed(format!("create failed at {started}")),
                false => Outcome::Made,
            },
        }
    }

    #[test]
    fn a_pool_waits_longer_after_each_failure_and_stops_after_five() {
        // (newest first, since, now, what it may do)
        let ok = tried(100, false);
        assert_eq!(health(&[], 0, 1000), Health::Filling);
        assert_eq!(health(std::slice::from_ref(&ok), 0, 1000), Health::Filling);
        // One failure: 2 s after it ended; two: 4 s; four: 16 s.
        let one = [tried(100, true), ok.clone()];
        assert!(matches!(
            health(&one, 0, 102),
            Health::Waiting {
                until: 103,
                failures: 1,
                ..
            }
        ));
        assert_eq!(health(&one, 0, 103), Health::Filling);
        let two = [tried(101, true), tried(100, true)];
        assert!(matches!(
            health(&two, 0, 104),
            Health::Waiting { until: 106, .. }
        ));
        let four: Vec<Tried> = (0..4).rev().map(|i| tried(100 + i, true)).collect();
        assert!(matches!(
            health(&four, 0, 110),
            Health::Waiting {
                until: 120,
                failures: 4,
                ..
            }
        ));
        // Five in a row: stopped, with the newest reason, however long ago.
        let five: Vec<Tried> = (0..5).rev().map(|i| tried(100 + i, true)).collect();
        assert_eq!(
            health(&five, 0, 1_000_000),
            Health::Stopped {
                failures: 5,
                reason: "create failed at 104".into()
            }
        );
        // One still making its cluster counts neither way.
        let mut making = five.clone();
        making.insert(
            0,
            Tried {
                started: 200,
                ended: None,
                outcome: Outcome::Making,
            },
        );
        assert!(matches!(health(&making, 0, 1000), Health::Stopped { .. }));
        // A success in between resets the count; a profile changed since starts afresh.
        let mut broken = five.clone();
        broken.insert(2, ok);
        assert!(matches!(health(&broken, 0, 1000), Health::Filling));
        assert_eq!(health(&five, 105, 1000), Health::Filling);
        assert!(matches!(
            health(&five, 103, 104),
            Health::Waiting { failures: 2, .. }
        ));
        // The longest wait is ten minutes.
        let many: Vec<Tried> = (0..4).rev().map(|i| tried(100 + i, true)).collect();
        let Health::Waiting { until, .. } = health(&many, 0, 0) else {
            panic!("waits");
        };
        assert!(until - 104 <= LONGEST_WAIT);
    }
}
