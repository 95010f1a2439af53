//! A queued run's admission, and a failed program tried again on its cluster.

use super::*;

#[test]
fn a_queued_run_is_admitted_once_and_its_lifetime_counts_from_then() {
    let mut queued = run(P::Queued, None);
    queued.queue = Some(crate::model::run::QueueStay {
        since: 900_000,
        until: Some(990_000),
        reason: "a limit".into(),
        admitted: None,
    });
    let t = on(&queued, Event::Admit { now_ms: 950_000 }, 950).expect("admitted");
    assert_eq!(t.run.status, P::Pending);
    assert_eq!(t.run.queue.as_ref().and_then(|q| q.admitted), Some(950_000));
    assert!(t.notes[0].contains("admitted after 50.0s"), "{:?}", t.notes);
    // The profile's timeout counts from leaving the queue, not from the request.
    assert_eq!(t.run.deadline(), Some(950 + 3600));
    // Only a QUEUED run is admitted.
    for status in [P::Pending, P::Running, P::Completed, P::Rejected] {
        let cluster = (status == P::Running).then_some(C::Provisioned);
        assert!(
            on(&run(status, cluster), Event::Admit { now_ms: 1 }, NOW).is_err(),
            "{status}"
        );
    }
}

fn with_retry(max_attempts: u32, codes: Vec<i32>, backoff: u64) -> RunRecord {
    let mut r = run(P::Running, Some(C::Provisioned));
    r.retry = Some(crate::model::retry::Retry {
        max_attempts,
        on_exit_codes: codes,
        backoff,
    });
    r
}

#[test]
fn a_failed_attempt_with_attempts_left_waits_its_backoff_then_launches_the_next() {
    let r = with_retry(3, vec![], 30);
    let t = on(&r, exit(2), NOW).expect("retried");
    assert_eq!(
        (t.run.status, t.run.cluster.status),
        (P::Running, Some(C::Provisioned))
    );
    assert_eq!(t.effects, [Effect::Relaunch]);
    assert_eq!(t.run.relaunch_at, Some(NOW + 30));
    assert_eq!(t.run.attempt(), 2);
    assert_eq!(t.run.attempts[0].exit.and_then(|e| e.code), Some(2));
    assert!(
        t.notes[0].contains("attempt 1 of 3 failed"),
        "{:?}",
        t.notes
    );
    // After a restart the wait goes on; then the next attempt launches.
    assert_eq!(resume(&t.run), [Effect::Relaunch]);
    let t = on(&t.run, Event::Relaunch, NOW + 30).expect("relaunched");
    assert_eq!(t.effects, [Effect::Launch]);
    assert_eq!(t.run.relaunch_at, None);
    assert!(
        t.notes[0].contains("launching attempt 2 of 3"),
        "{:?}",
        t.notes
    );
    // The last attempt's failure ends the run, kept as a failure's cluster is.
    let mut last = t.run.clone();
    last = on(&last, exit(2), NOW).expect("2").run;
    last = on(&last, Event::Relaunch, NOW).expect("3").run;
    let t = on(&last, exit(2), NOW).expect("failed");
    assert_eq!(t.run.status, P::Failed);
    assert_eq!(t.run.cluster.status, Some(C::Waiting));
    assert_eq!(t.run.attempts.len(), 2);
    // A stale relaunch (the run ended meanwhile) changes nothing.
    let stale = on(&t.run, Event::Relaunch, NOW).expect("stale");
    assert_eq!(stale.run, t.run);
    assert!(stale.effects.is_empty());
}

#[test]
fn what_is_not_tried_again() {
    // An exit code the policy does not name.
    let t = on(&with_retry(3, vec![75], 0), exit(1), NOW).expect("ended");
    assert_eq!(t.run.status, P::Failed);
    // A stopped run, even one that fails.
    let mut stopped = with_retry(3, vec![], 0);
    stopped.stop = Some(Stop {
        reason: StopReason::Requested,
        keepalive: false,
    });
    let t = on(&stopped, exit(1), NOW).expect("ended");
    assert_eq!(t.run.status, P::Killed);
    // A success.
    let t = on(&with_retry(3, vec![], 0), exit(0), NOW).expect("ended");
    assert_eq!(t.run.status, P::Completed);
    // A program lost with its server is an attempt like any other.
    let t = on(
        &with_retry(2, vec![75], 0),
        Event::ProgramLost("gone".into()),
        NOW,
    )
    .expect("retried");
    assert_eq!(t.effects, [Effect::Relaunch]);
    assert_eq!(t.run.attempts[0].failure.kind, FailureKind::ServerLost);
}

#[test]
fn a_stop_or_the_timeout_between_attempts_ends_the_run_at_once() {
    let waiting = on(&with_retry(3, vec![], 60), exit(1), NOW)
        .expect("retried")
        .run;
    let t = on(&waiting, Event::Stop { keepalive: false }, NOW + 1).expect("stopped");
    assert_eq!(t.run.status, P::Killed);
    assert_eq!(t.run.cluster.status, Some(C::Deprovisioning));
    assert_eq!(t.effects, [Effect::DeleteCluster]);
    assert_eq!(t.run.relaunch_at, None);
    let t = on(&waiting, Event::TimedOut, NOW + 1).expect("timed out");
    assert_eq!(t.run.status, P::Killed);
    assert_eq!(
        t.run.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Timeout)
    );
}
