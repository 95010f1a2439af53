//! The wall clock: whole seconds since the Unix epoch (as the API shows it), milliseconds, or
//! fractional seconds. Read in the runtime and above; `model` and `rules` are given `now`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch, now: the system's clock, or in the crate's own tests one that
/// follows tokio's (paused) clock from when [`follow_tokio`] was called on this thread.
fn since_epoch() -> std::time::Duration {
    #[cfg(test)]
    if let Some((base, start)) = VIRTUAL.with(std::cell::Cell::get) {
        return base + start.elapsed();
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
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
