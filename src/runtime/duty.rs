//! The one runner of the installation-wide duties (the janitor's sweeps, retention, the
//! scheduler, the queue's dispatcher, the pools, the usage ledger): each is a [`Work`] that
//! says how to wait and what one tick does; the runner owns the rest, the same for every
//! duty:
//! - **leadership:** one server of an installation performs a duty (its record in the store
//!   is bound to the holder's lease); the runner asks before acting, at most once a
//!   [`LEAD_CACHE`], and tells the work when the duty is lost so it forgets what a holder
//!   keeps;
//! - **draining:** a draining server resigns every duty it holds, so another takes it at once;
//! - **panics:** a tick that panics is caught, logged and counted
//!   (`ebb_duty_panics_total`); the work forgets its state, the server resigns the duty and
//!   leaves it for [`PANIC_PAUSE`] (at least twice the lease), so another server takes it over
//!   rather than the duty dying with its task while its record stays held by a live server.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::time::Instant;

use super::deps::Member;
use super::membership::{Duty, leads, resign};
use crate::store::Store;

/// How long an answer to "does this server hold the duty?" is used before the store is asked
/// again (a stale answer is safe: what a duty does is checked in its own writes).
pub const LEAD_CACHE: Duration = Duration::from_secs(1);

/// How long a server leaves a duty whose tick panicked, at least: room for another to take
/// it. Twice the lease's time to live when that is longer.
pub const PANIC_PAUSE: Duration = Duration::from_secs(5);

/// One installation-wide duty's work.
pub trait Work: Send {
    /// Which duty it is.
    fn duty(&self) -> Duty;

    /// Waits until the next tick is due: `wait` is what the last tick asked for (the first
    /// tick's is [`Work::first`]).
    fn wait(&mut self, wait: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(wait)
    }

    /// How long before the first tick: [`Work::idle`] unless the work says otherwise.
    fn first(&self) -> Duration {
        self.idle()
    }

    /// Done on every server at every tick, before leadership is asked (what each server does
    /// for its own runs).
    fn everywhere(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// One tick, while this server holds the duty: how long until the next. A failure is the
    /// work's to log; the next tick tries again.
    fn tick(&mut self) -> impl Future<Output = Duration> + Send;

    /// How long until the next tick while another server holds the duty.
    fn idle(&self) -> Duration;

    /// This server does not hold the duty (any more): forget what only a holder keeps.
    fn lost(&mut self) {}
}

/// Whether this server holds the duty, as last asked.
#[derive(Debug, Clone, Copy)]
struct Asked {
    leads: bool,
    at: Instant,
}

/// Runs `work` until the server stops.
pub async fn run<W: Work>(store: Store, member: Member, mut work: W) {
    let duty = work.duty();
    let mut asked: Option<Asked> = None;
    let mut wait = work.first();
    // Until when this server leaves the duty to the others (after a panic).
    let mut away_until: Option<Instant> = None;
    loop {
        work.wait(wait).await;
        wait = work.idle();
        // What every server does for its own runs: a panic is tried again at the next tick.
        let _ = caught(duty, "everywhere", work.everywhere()).await;
        let held = asked.is_some_and(|a| a.leads);
        if member.draining() {
            if held && let Err(e) = resign(&store, &member, duty).await {
                tracing::warn!(duty = duty.name(), error = %e, "cannot resign the duty while draining; retried");
                continue;
            }
            if held {
                tracing::info!(duty = duty.name(), "draining: the duty resigned");
                work.lost();
            }
            asked = Some(Asked {
                leads: false,
                at: Instant::now(),
            });
            continue;
        }
        if away_until.is_some_and(|until| Instant::now() < until) {
            continue;
        }
        away_until = None;
        let leads_now = match asked {
            Some(a) if a.at.elapsed() < LEAD_CACHE => a.leads,
            _ => match leads(&store, &member, duty).await {
                Ok(leads) => {
                    asked = Some(Asked {
                        leads,
                        at: Instant::now(),
                    });
                    leads
                }
                Err(e) => {
                    tracing::warn!(error = %e, duty = duty.name(), "cannot tell which server performs the duty; retried");
                    continue;
                }
            },
        };
        if held && !leads_now {
            work.lost();
        }
        if !leads_now {
            continue;
        }
        match caught(duty, "tick", tick(&mut work)).await {
            Ok(next) => wait = next,
            Err(()) => {
                work.lost();
                if let Err(e) = resign(&store, &member, duty).await {
                    tracing::warn!(duty = duty.name(), error = %e, "cannot resign the duty after a panic; it moves when this server's lease ends");
                }
                asked = None;
                let pause = PANIC_PAUSE.max(member.ttl() * 2);
                away_until = Some(Instant::now() + pause);
                wait = pause;
            }
        }
    }
}

/// One tick of `work`. The tests' build panics in it instead for the duty named by
/// `EBB_TEST_PANIC_DUTY`, to show another server takes a panicked duty over.
async fn tick<W: Work>(work: &mut W) -> Duration {
    #[cfg(feature = "paused-clock")]
    if std::env::var("EBB_TEST_PANIC_DUTY").is_ok_and(|d| d == work.duty().name()) {
        panic!("EBB_TEST_PANIC_DUTY names this duty");
    }
    work.tick().await
}

/// Runs `part` of a duty's work, catching a panic: logged and counted, `Err`.
async fn caught<T>(duty: Duty, part: &str, f: impl Future<Output = T>) -> Result<T, ()> {
    match AssertUnwindSafe(f).catch_unwind().await {
        Ok(value) => Ok(value),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            tracing::error!(duty = duty.name(), part, panic = %message, "a duty panicked: it is resigned for another server to take over");
            metrics::counter!(crate::model::metrics::DUTY_PANICS.name, "duty" => duty.name())
                .increment(1);
            Err(())
        }
    }
}
