//! The duty runner on the embedded store (where this server always holds every duty): a tick
//! that panics is caught and the duty goes on after the pause; a draining server gives the
//! duty up and its work forgets what a holder keeps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::paused;
use crate::runtime::deps::Member;
use crate::runtime::duty::{PANIC_PAUSE, Work, run};
use crate::runtime::membership::Duty;
use crate::store::Store;

/// What the test's work saw.
#[derive(Debug, Default)]
struct Seen {
    ticks: u32,
    lost: u32,
}

/// A duty whose first tick panics, ticking every second after.
struct Flaky(Arc<Mutex<Seen>>);

impl Work for Flaky {
    fn duty(&self) -> Duty {
        Duty::Pools
    }

    fn first(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn idle(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn tick(&mut self) -> Duration {
        let first = {
            let mut seen = self.0.lock().expect("seen");
            seen.ticks += 1;
            seen.ticks == 1
        };
        assert!(!first, "the first tick panics");
        Duration::from_secs(1)
    }

    fn lost(&mut self) {
        self.0.lock().expect("seen").lost += 1;
    }
}

#[test]
fn a_panicked_tick_is_caught_and_the_duty_goes_on_until_the_server_drains() {
    paused(|| async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let member = Member::new("ebb");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let runner = tokio::task::spawn_local(run(store, member.clone(), Flaky(Arc::clone(&seen))));
        // The panic at the first tick (1 s), the pause, then a tick a second.
        tokio::time::sleep(Duration::from_secs(1) + PANIC_PAUSE + Duration::from_millis(3500))
            .await;
        {
            let seen = seen.lock().expect("seen");
            assert_eq!(seen.lost, 1, "the panicked work forgot its state once");
            assert!(
                (4..=5).contains(&seen.ticks),
                "{} ticks: the duty did not go on after its panic",
                seen.ticks
            );
        }
        member.start_draining();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let ticks = seen.lock().expect("seen").ticks;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let seen = seen.lock().expect("seen");
        assert_eq!(seen.lost, 2, "draining gave the duty up");
        assert_eq!(seen.ticks, ticks, "a draining server ticked");
        runner.abort();
    });
}
