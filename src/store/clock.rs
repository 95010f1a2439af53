//! ebb's clock: whole seconds since the Unix epoch (as the API shows it), milliseconds, or
//! fractional seconds. It lives in the store, the lowest layer that may read the system, so
//! that the store's own time-keyed records (commit markers, event ids, session expiry) keep
//! the same time as the runtime's deadlines; `model` and `rules` are given `now`.
//!
//! It follows the system's wall clock, but never jumps with it: it moves as the host's
//! monotonic clock moves, and closes any gap with the wall clock by at most [`SLEW`] of the
//! time that passes. A step of the wall clock (an operator's `date -s`, a hypervisor that
//! resumes a VM, NTP stepping a clock that was far off) therefore neither fires a deadline
//! early nor holds it late by more than that share of its length: a keepalive of an hour ends
//! between 59.4 and 60.6 minutes after it was set, whatever the wall clock did meanwhile.
//! The clock never goes backwards, so a schedule never fires twice for one instant. How far
//! it is from the wall clock is exported as `ebb_clock_offset_seconds`, and a gap of more than
//! [`NOTED`] is logged when it opens and when it has closed.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most ebb's clock closes a gap with the wall clock by, as a share of the time that
/// passes (1 %): a ten-minute step is taken up in about seventeen hours.
pub const SLEW: u32 = 100;

/// A gap with the wall clock worth a line in the log.
pub const NOTED: Duration = Duration::from_secs(2);

/// The clock's last reading: when (on the monotonic clock) and what it showed.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Instant,
    shown: Duration,
    /// The wall clock then, less what it showed, in milliseconds.
    gap_ms: i64,
}

static LAST: Mutex<Option<Reading>> = Mutex::new(None);

/// The system's wall clock: time since the Unix epoch.
fn wall() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// What the clock shows at `now` (monotonic) with the wall clock at `wall`, after it last
/// showed `last`: the last reading moved on by the monotonic time since, then at most
/// 1/[`SLEW`] of that time nearer the wall clock.
fn follow(last: Option<&Reading>, now: Instant, wall: Duration) -> Duration {
    let Some(last) = last else { return wall };
    let passed = now.saturating_duration_since(last.at);
    let ran = last.shown.saturating_add(passed);
    let room = passed / SLEW;
    if wall >= ran {
        ran + (wall - ran).min(room)
    } else {
        ran - (ran - wall).min(room)
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Time since the Unix epoch, now: ebb's clock, or in the crate's own tests one that
/// follows tokio's (paused) clock from when [`follow_tokio`] was called on this thread.
fn since_epoch() -> Duration {
    #[cfg(test)]
    if let Some((base, start)) = VIRTUAL.with(std::cell::Cell::get) {
        return base + start.elapsed();
    }
    let (now, wall) = (Instant::now(), wall());
    let (shown, gap_ms, before) = {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        let shown = follow(last.as_ref(), now, wall);
        let gap_ms = millis(wall).saturating_sub(millis(shown));
        let before = last.map_or(0, |r| r.gap_ms);
        *last = Some(Reading {
            at: now,
            shown,
            gap_ms,
        });
        (shown, gap_ms, before)
    };
    let noted = millis(NOTED);
    if gap_ms.abs() > noted && before.abs() <= noted {
        tracing::warn!(
            gap_seconds = gap_ms as f64 / 1000.0,
            "the system's wall clock stepped; ebb's clock follows it at {}% of the time that passes, so no deadline fires early or late by more than that",
            100 / SLEW
        );
    } else if gap_ms.abs() <= noted && before.abs() > noted {
        tracing::info!(
            gap_seconds = gap_ms as f64 / 1000.0,
            "ebb's clock has caught up with the system's wall clock"
        );
    }
    shown
}

/// How far the system's wall clock is ahead of ebb's clock (negative: behind), in seconds,
/// as of the last reading.
pub fn offset_secs() -> f64 {
    since_epoch();
    LAST.lock()
        .unwrap_or_else(|e| e.into_inner())
        .map_or(0.0, |r| r.gap_ms as f64 / 1000.0)
}

#[cfg(test)]
thread_local! {
    static VIRTUAL: std::cell::Cell<Option<(std::time::Duration, tokio::time::Instant)>> =
        const { std::cell::Cell::new(None) };
}

/// From now on, on this thread, the clock moves with tokio's: a test that pauses tokio's
/// clock sees deadlines and budgets pass as its virtual time does.
#[cfg(test)]
pub fn follow_tokio() {
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    VIRTUAL.with(|v| v.set(Some((base, tokio::time::Instant::now()))));
}

/// Microseconds since the Unix epoch, now.
pub fn now_micros() -> u64 {
    u64::try_from(since_epoch().as_micros()).unwrap_or(u64::MAX)
}

/// Seconds since the Unix epoch, now.
pub fn now_secs() -> u64 {
    since_epoch().as_secs()
}

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> u64 {
    u64::try_from(since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// Seconds since the Unix epoch, now, with fractions (as the audit log shows times).
pub fn now_f64() -> f64 {
    since_epoch().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Instant, shown_s: u64) -> Reading {
        Reading {
            at,
            shown: Duration::from_secs(shown_s),
            gap_ms: 0,
        }
    }

    #[test]
    fn it_moves_with_the_monotonic_clock_while_the_wall_clock_agrees() {
        let t0 = Instant::now();
        let last = reading(t0, 1_000);
        let shown = follow(
            Some(&last),
            t0 + Duration::from_secs(60),
            Duration::from_secs(1_060),
        );
        assert_eq!(shown, Duration::from_secs(1_060));
    }

    #[test]
    fn a_step_forward_is_taken_up_at_the_slew_only() {
        let t0 = Instant::now();
        let last = reading(t0, 1_000);
        // The wall clock jumped ten minutes ahead during the minute that passed.
        let shown = follow(
            Some(&last),
            t0 + Duration::from_secs(60),
            Duration::from_secs(1_660),
        );
        assert_eq!(
            shown,
            Duration::from_millis(1_060_600),
            "60 s and 1 % of them"
        );
    }

    #[test]
    fn a_step_backward_never_moves_it_back() {
        let t0 = Instant::now();
        let last = reading(t0, 1_000);
        let shown = follow(
            Some(&last),
            t0 + Duration::from_secs(60),
            Duration::from_secs(460),
        );
        assert_eq!(
            shown,
            Duration::from_millis(1_059_400),
            "60 s less 1 % of them"
        );
        // However often it is read, a second moves it on by at least 0.99 s.
        let mut last = last;
        let mut at = t0;
        for _ in 0..1_000 {
            at += Duration::from_millis(1);
            let shown = follow(Some(&last), at, Duration::from_secs(460));
            assert!(shown >= last.shown);
            last = Reading {
                at,
                shown,
                gap_ms: 0,
            };
        }
        assert!(
            last.shown >= Duration::from_millis(1_000_990),
            "{:?}",
            last.shown
        );
    }

    #[test]
    fn the_first_reading_is_the_wall_clock() {
        assert_eq!(
            follow(None, Instant::now(), Duration::from_secs(7)),
            Duration::from_secs(7)
        );
    }
}
