use super::*;
use crate::model::profile::Keepalive;
use crate::model::run::{ClusterState, Launch, RunKey};

const NOW: u64 = 1_000;

/// A run of `status` with cluster `cluster` (shared with other rules' tests).
pub(crate) fn run(status: P, cluster: Option<C>) -> RunRecord {
    RunRecord {
        key: RunKey {
            namespace: "default".into(),
            app: "a".into(),
            program: "p".into(),
            run: "r".into(),
        },
        status,
        starting: 900,
        start: None,
        end: None,
        args: Default::default(),
        profile: "SYSTEM:local".into(),
        provisioner: "local".into(),
        profile_properties: Vec::new(),
        keepalive: Keepalive {
            killed: 60,
            failed: 120,
        },
        timeout: Some(3600),
        launch: Launch {
            command: vec!["true".into()],
            env: Default::default(),
        },
        cluster: ClusterState {
            status: cluster,
            ..Default::default()
        },
        failure: None,
        stop: None,
        node_types: Default::default(),
        config: None,
        launcher: None,
        started_by: None,
        queue: None,
        retry: None,
        attempts: Vec::new(),
        relaunch_at: None,
        reuse: None,
        pooled: false,
        settled: false,
        format: 0,
        exit: None,
        template: None,
        layout: Default::default(),
    }
}

fn exit(code: i32) -> Event {
    Event::Exited(Exit {
        code: Some(code),
        signal: None,
    })
}

type Row = (P, Option<C>, Event, P, Option<C>, &'static [Effect]);

#[test]
fn every_allowed_transition() {
    use Effect::*;
    let rows: &[Row] = &[
        (
            P::Pending,
            None,
            Event::Reject("limit".into()),
            P::Rejected,
            None,
            &[],
        ),
        (
            P::Queued,
            None,
            Event::Reject("waited too long".into()),
            P::Rejected,
            None,
            &[],
        ),
        (
            P::Queued,
            None,
            Event::Admit { now_ms: 1_000_000 },
            P::Pending,
            None,
            &[],
        ),
        (
            P::Queued,
            None,
            Event::Stop { keepalive: false },
            P::Killed,
            Some(C::Deprovisioned),
            &[Finish],
        ),
        (
            P::Pending,
            None,
            Event::Begin,
            P::Starting,
            Some(C::Provisioning),
            &[CreateCluster],
        ),
        (
            P::Starting,
            Some(C::Provisioning),
            Event::Provisioned,
            P::Starting,
            Some(C::Provisioned),
            &[Launch],
        ),
        (
            P::Starting,
            Some(C::Provisioning),
            Event::ProvisionFailed("x".into()),
            P::Failed,
            Some(C::Deprovisioning),
            &[DeleteCluster],
        ),
        (
            P::Starting,
            Some(C::Provisioning),
            Event::CreateStopped,
            P::Killed,
            Some(C::Deprovisioning),
            &[DeleteCluster],
        ),
        (
            P::Starting,
            Some(C::Provisioning),
            Event::Stop { keepalive: false },
            P::Starting,
            Some(C::Provisioning),
            &[CancelCreate],
        ),
        (
            P::Starting,
            Some(C::Provisioning),
            Event::TimedOut,
            P::Starting,
            Some(C::Provisioning),
            &[CancelCreate],
        ),
        (
            P::Starting,
            Some(C::Provisioned),
            Event::Launched,
            P::Running,
            Some(C::Provisioned),
            &[],
        ),
        (
            P::Starting,
            Some(C::Provisioned),
            Event::LaunchFailed("x".into()),
            P::Failed,
            Some(C::Waiting),
            &[],
        ),
        (
            P::Running,
            Some(C::Provisioned),
            exit(0),
            P::Completed,
            Some(C::Deprovisioning),
            &[DeleteCluster],
        ),
        (
            P::Running,
            Some(C::Provisioned),
            exit(3),
            P::Failed,
            Some(C::Waiting),
            &[],
        ),
        (
            P::Running,
            Some(C::Provisioned),
            Event::Stop { keepalive: true },
            P::Running,
            Some(C::Provisioned),
            &[Kill],
        ),
        (
            P::Running,
            Some(C::Provisioned),
            Event::TimedOut,
            P::Running,
            Some(C::Provisioned),
            &[Kill],
        ),
        (
            P::Pending,
            None,
            Event::Stop { keepalive: false },
            P::Killed,
            Some(C::Deprovisioned),
            &[Finish],
        ),
        (
            P::Failed,
            Some(C::Waiting),
            Event::Expired,
            P::Failed,
            Some(C::Deprovisioning),
            &[DeleteCluster],
        ),
        (
            P::Failed,
            Some(C::Waiting),
            Event::Deprovision,
            P::Failed,
            Some(C::Deprovisioning),
            &[DeleteCluster],
        ),
        (
            P::Failed,
            Some(C::Waiting),
            Event::TimedOut,
            P::Failed,
            Some(C::Deprovisioning),
            &[DeleteCluster],
        ),
        (
            P::Failed,
            Some(C::Waiting),
            Event::Extend {
                expire_at: NOW + 10,
            },
            P::Failed,
            Some(C::Waiting),
            &[],
        ),
        (
            P::Completed,
            Some(C::Deprovisioning),
            Event::Deprovisioned,
            P::Completed,
            Some(C::Deprovisioned),
            &[Finish],
        ),
        (
            P::Completed,
            Some(C::Deprovisioning),
            Event::DeprovisionFailed("x".into()),
            P::Completed,
            Some(C::Orphaned),
            &[Finish],
        ),
        (
            P::Completed,
            Some(C::Deprovisioning),
            Event::ForceDeprovision,
            P::Completed,
            Some(C::Deprovisioned),
            &[CancelDelete, Finish],
        ),
        (
            P::Completed,
            Some(C::Orphaned),
            Event::ForceDeprovision,
            P::Completed,
            Some(C::Deprovisioned),
            &[CancelDelete, Finish],
        ),
        (
            P::Completed,
            Some(C::Deprovisioning),
            Event::Expired,
            P::Completed,
            Some(C::Deprovisioning),
            &[],
        ),
    ];
    for (status, cluster, event, to_status, to_cluster, effects) in rows {
        let t = on(&run(*status, *cluster), event.clone(), NOW)
            .unwrap_or_else(|e| panic!("{status:?}/{cluster:?} {event:?}: {e}"));
        assert_eq!(
            (t.run.status, t.run.cluster.status, t.effects.as_slice()),
            (*to_status, *to_cluster, *effects),
            "{status:?}/{cluster:?} --{event:?}-->"
        );
    }
}

#[test]
fn commands_in_the_wrong_state_are_refused() {
    let cases: &[(P, Option<C>, Event, &str)] = &[
        (
            P::Completed,
            Some(C::Deprovisioned),
            Event::Stop { keepalive: false },
            "already ended",
        ),
        (
            P::Failed,
            Some(C::Waiting),
            Event::Stop { keepalive: false },
            "deprovision the WAITING",
        ),
        (
            P::Running,
            Some(C::Provisioned),
            Event::Deprovision,
            "only a WAITING",
        ),
        (
            P::Running,
            Some(C::Provisioned),
            Event::Extend { expire_at: NOW + 5 },
            "only a WAITING",
        ),
        (
            P::Failed,
            Some(C::Waiting),
            Event::ForceDeprovision,
            "stuck DEPROVISIONING",
        ),
        (
            P::Completed,
            Some(C::Deprovisioned),
            Event::Deprovision,
            "only a WAITING",
        ),
    ];
    for (status, cluster, event, fragment) in cases {
        let err = on(&run(*status, *cluster), event.clone(), NOW).expect_err("refused");
        assert!(matches!(err, RunError::WrongState { .. }), "{err}");
        assert!(err.to_string().contains(fragment), "{event:?}: {err}");
    }
    let mut stopping = run(P::Running, Some(C::Provisioned));
    stopping.stop = Some(Stop {
        reason: StopReason::Requested,
        keepalive: false,
    });
    let err = on(&stopping, Event::Stop { keepalive: false }, NOW).expect_err("twice");
    assert!(err.to_string().contains("already stopping"), "{err}");
}

#[test]
fn an_extend_past_ten_years_is_refused_not_wrapped() {
    let mut waiting = run(P::Failed, Some(C::Waiting));
    waiting.timeout = None;
    for expire_at in [
        u64::MAX,
        u64::MAX / 1000 + 1,
        NOW + crate::model::profile::MAX_SECONDS + 1,
    ] {
        let e = on(&waiting, Event::Extend { expire_at }, NOW).expect_err("too far");
        assert!(matches!(e, RunError::ExpireTooFar { .. }), "{e}");
    }
    on(
        &waiting,
        Event::Extend {
            expire_at: NOW + crate::model::profile::MAX_SECONDS,
        },
        NOW,
    )
    .expect("ten years is fine");
}

#[test]
fn extend_must_be_future_and_within_the_timeout() {
    let waiting = run(P::Failed, Some(C::Waiting));
    assert_eq!(
        on(&waiting, Event::Extend { expire_at: NOW }, NOW),
        Err(RunError::ExpireInPast {
            now: NOW,
            given: NOW
        })
    );
    assert_eq!(
        on(
            &waiting,
            Event::Extend {
                expire_at: 900 + 3601
            },
            NOW
        ),
        Err(RunError::ExpireBeyondTimeout { deadline: 4500 })
    );
}

#[test]
fn keepalive_follows_the_outcome_and_is_bounded_by_the_timeout() {
    let running = run(P::Running, Some(C::Provisioned));
    let failed = on(&running, exit(1), NOW).expect("exit");
    assert_eq!(failed.run.cluster.expires_at, Some(NOW + 120));
    assert_eq!(
        failed.run.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Program)
    );

    let stopped = on(&running, Event::Stop { keepalive: true }, NOW).expect("stop");
    let killed = on(
        &stopped.run,
        Event::Exited(Exit {
            code: None,
            signal: Some(15),
        }),
        NOW,
    )
    .expect("exit");
    assert_eq!(killed.run.status, P::Killed);
    assert_eq!(killed.run.cluster.expires_at, Some(NOW + 60));

    let stopped = on(&running, Event::Stop { keepalive: false }, NOW).expect("stop");
    let killed = on(&stopped.run, exit(0), NOW).expect("exit");
    assert_eq!(killed.run.cluster.status, Some(C::Deprovisioning));

    let mut short = running.clone();
    short.timeout = Some(130); // deadline 1030
    let failed = on(&short, exit(1), NOW).expect("exit");
    assert_eq!(failed.run.cluster.expires_at, Some(1030));

    let mut no_keep = running;
    no_keep.keepalive.failed = 0;
    let failed = on(&no_keep, exit(1), NOW).expect("exit");
    assert_eq!(failed.run.cluster.status, Some(C::Deprovisioning));
}

#[test]
fn timeout_kills_with_a_timeout_failure() {
    let running = run(P::Running, Some(C::Provisioned));
    let stopping = on(&running, Event::TimedOut, NOW).expect("timeout");
    let ended = on(&stopping.run, exit(0), NOW).expect("exit");
    assert_eq!(ended.run.status, P::Killed);
    assert_eq!(
        ended.run.failure.map(|f| f.kind),
        Some(FailureKind::Timeout)
    );
    assert_eq!(ended.run.cluster.status, Some(C::Deprovisioning));
    assert_eq!(next_deadline(&stopping.run), None, "the timeout fires once");
}

#[test]
fn deadlines_and_resume() {
    let mut waiting = run(P::Failed, Some(C::Waiting));
    waiting.cluster.expires_at = Some(2_000);
    assert_eq!(next_deadline(&waiting), Some((2_000, Event::Expired)));
    waiting.timeout = Some(100);
    assert_eq!(next_deadline(&waiting), Some((1_000, Event::TimedOut)));
    assert_eq!(
        next_deadline(&run(P::Running, Some(C::Provisioned))),
        Some((4_500, Event::TimedOut))
    );
    assert_eq!(
        next_deadline(&run(P::Completed, Some(C::Deprovisioning))),
        None
    );

    assert_eq!(
        resume(&run(P::Starting, Some(C::Provisioning))),
        [Effect::CreateCluster]
    );
    assert_eq!(
        resume(&run(P::Running, Some(C::Provisioned))),
        [Effect::Launch]
    );
    assert_eq!(
        resume(&run(P::Failed, Some(C::Deprovisioning))),
        [Effect::DeleteCluster]
    );
    assert_eq!(resume(&run(P::Failed, Some(C::Waiting))), []);
}

/// Every state a record can be in, and every event: `on` answers each pair without
/// panicking, and what it accepts is a consistent record.
#[test]
fn every_state_and_event_is_answered_consistently() {
    let statuses = [
        P::Pending,
        P::Starting,
        P::Running,
        P::Completed,
        P::Failed,
        P::Killed,
        P::Rejected,
    ];
    let clusters = [
        None,
        Some(C::Provisioning),
        Some(C::Provisioned),
        Some(C::Waiting),
        Some(C::Idle),
        Some(C::Reused),
        Some(C::Deprovisioning),
        Some(C::Deprovisioned),
        Some(C::Orphaned),
    ];
    let events = [
        Event::Reject("limit".into()),
        Event::Begin,
        Event::Provisioned,
        Event::ProvisionFailed("x".into()),
        Event::CreateStopped,
        Event::Launched,
        Event::LaunchFailed("x".into()),
        Event::Exited(Exit {
            code: Some(0),
            signal: None,
        }),
        Event::Stop { keepalive: false },
        Event::Stop { keepalive: true },
        Event::TimedOut,
        Event::Expired,
        Event::Deprovision,
        Event::Extend { expire_at: NOW + 5 },
        Event::Deprovisioned,
        Event::DeprovisionFailed("x".into()),
        Event::ForceDeprovision,
        Event::ReuseFailed("x".into()),
        Event::Retire("x".into()),
    ];
    let (mut accepted, mut refused) = (0, 0);
    for status in statuses {
        for cluster in clusters {
            for event in events.clone() {
                let pair = format!("{status:?}/{cluster:?} --{event:?}-->");
                let Ok(t) = on(&run(status, cluster), event, NOW) else {
                    refused += 1;
                    continue;
                };
                accepted += 1;
                let next = &t.run;
                if t.effects.contains(&Effect::DeleteCluster) {
                    assert_eq!(next.cluster.status, Some(C::Deprovisioning), "{pair}");
                }
                if t.effects.contains(&Effect::CreateCluster) {
                    assert_eq!(next.cluster.status, Some(C::Provisioning), "{pair}");
                }
                if next.status != status && next.status.is_end() {
                    assert_eq!(next.end, Some(NOW), "{pair}: an end has a time");
                }
                if matches!(next.cluster.status, Some(C::Waiting | C::Idle)) {
                    assert!(next.cluster.expires_at.is_some(), "{pair}: WAITING expires");
                }
                if cluster == Some(C::Reused) {
                    assert_eq!(next, &run(status, cluster), "{pair}: a REUSED run is done");
                }
                if next != &run(status, cluster) {
                    assert!(!t.notes.is_empty(), "{pair}: a change is in the history");
                }
            }
        }
    }
    assert_eq!(
        accepted + refused,
        statuses.len() * clusters.len() * events.len()
    );
    assert!(
        accepted > 40 && refused > 300,
        "{accepted} accepted, {refused} refused"
    );
}

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

fn reusing(status: P, cluster: Option<C>) -> RunRecord {
    RunRecord {
        reuse: Some(crate::model::profile::Reuse { idle: 600 }),
        ..run(status, cluster)
    }
}

#[test]
fn a_completed_run_of_a_reusing_profile_leaves_its_cluster_idle() {
    let t = on(&reusing(P::Running, Some(C::Provisioned)), exit(0), NOW).expect("applies");
    assert_eq!(
        (t.run.status, t.run.cluster.status),
        (P::Completed, Some(C::Idle))
    );
    assert_eq!(t.run.cluster.expires_at, Some(NOW + 600));
    assert_eq!(t.run.cluster.reuse_key, t.run.reuse_key());
    assert!(t.run.cluster.reuse_key.is_some());
    assert!(t.effects.is_empty(), "{:?}", t.effects);
    // Bounded by the profile's timeout (900 + 3600).
    let late = on(&reusing(P::Running, Some(C::Provisioned)), exit(0), 4_200).expect("applies");
    assert_eq!(late.run.cluster.expires_at, Some(4_500));
    // A failed or killed run keeps its cluster under keepalive, never for reuse.
    let failed = on(&reusing(P::Running, Some(C::Provisioned)), exit(3), NOW).expect("applies");
    assert_eq!(failed.run.cluster.status, Some(C::Waiting));
    let mut stopped = reusing(P::Running, Some(C::Provisioned));
    stopped.stop = Some(Stop {
        reason: StopReason::Requested,
        keepalive: false,
    });
    let killed = on(&stopped, exit(0), NOW).expect("applies");
    assert_eq!(killed.run.cluster.status, Some(C::Deprovisioning));
    // A cluster that needs attention is never offered.
    let mut broken = reusing(P::Running, Some(C::Provisioned));
    broken.cluster.attention = Some(crate::model::run::Attention {
        reason: "x".into(),
        since: 1,
    });
    let t = on(&broken, exit(0), NOW).expect("applies");
    assert_eq!(t.run.cluster.status, Some(C::Deprovisioning));
    // Without reuse a completed run deprovisions.
    let t = on(&run(P::Running, Some(C::Provisioned)), exit(0), NOW).expect("applies");
    assert_eq!(t.run.cluster.status, Some(C::Deprovisioning));
}

#[test]
fn an_idle_cluster_expires_is_deprovisioned_or_extended_like_a_waiting_one() {
    let mut idle = reusing(P::Completed, Some(C::Idle));
    idle.cluster.expires_at = Some(NOW + 10);
    assert_eq!(next_deadline(&idle), Some((NOW + 10, Event::Expired)));
    assert!(resume(&idle).is_empty());
    for event in [Event::Expired, Event::Deprovision, Event::TimedOut] {
        let t = on(&idle, event.clone(), NOW).expect("applies");
        assert_eq!(t.run.cluster.status, Some(C::Deprovisioning), "{event:?}");
        assert_eq!(t.effects, vec![Effect::DeleteCluster]);
    }
    let t = on(
        &idle,
        Event::Extend {
            expire_at: NOW + 60,
        },
        NOW,
    )
    .expect("applies");
    assert_eq!(t.run.cluster.expires_at, Some(NOW + 60));
    assert!(on(&idle, Event::Stop { keepalive: false }, NOW).is_err());
}

#[test]
fn a_taken_over_cluster_is_made_ready_or_replaced() {
    let mut taker = reusing(P::Starting, Some(C::Provisioning));
    taker.cluster.id = Some("maker".into());
    taker.cluster.origin = Some(crate::model::run::Origin {
        from: "maker".into(),
        claimed_at: 1,
        claim_ms: 2,
        ready: false,
        discarded: None,
        pooled: false,
    });
    assert_eq!(resume(&taker), vec![Effect::PrepareCluster]);
    let ready = on(&taker, Event::Provisioned, NOW).expect("applies");
    assert_eq!(ready.run.cluster.status, Some(C::Provisioned));
    assert!(ready.run.cluster.origin.as_ref().expect("applies").ready);
    assert_eq!(ready.effects, vec![Effect::Launch]);

    let bad = on(&taker, Event::ReuseFailed("db is down".into()), NOW).expect("applies");
    assert_eq!(bad.run.cluster.status, Some(C::Deprovisioning));
    assert_eq!(bad.effects, vec![Effect::DeleteCluster]);
    assert_eq!(
        bad.run.cluster_id(),
        "maker",
        "the taken cluster is deleted"
    );
    assert_eq!(resume(&bad.run), vec![Effect::DeleteCluster]);
    let own = on(&bad.run, Event::Deprovisioned, NOW).expect("applies");
    assert_eq!(
        (own.run.status, own.run.cluster.status),
        (P::Starting, Some(C::Provisioning))
    );
    assert_eq!(own.effects, vec![Effect::CreateCluster]);
    assert_eq!(own.run.cluster_id(), "r", "then it makes its own");
    assert_eq!(resume(&own.run), vec![Effect::CreateCluster]);

    // A stop while the unusable cluster goes ends the run once it is gone.
    let stopping = on(&bad.run, Event::Stop { keepalive: false }, NOW).expect("applies");
    let gone = on(&stopping.run, Event::Deprovisioned, NOW).expect("applies");
    assert_eq!(
        (gone.run.status, gone.run.cluster.status),
        (P::Killed, Some(C::Deprovisioned))
    );
    assert_eq!(gone.effects, vec![Effect::Finish]);
    // One that cannot be deleted fails the run.
    let stuck = on(&bad.run, Event::DeprovisionFailed("x".into()), NOW).expect("applies");
    assert_eq!(
        (stuck.run.status, stuck.run.cluster.status),
        (P::Failed, Some(C::Orphaned))
    );
}
