use super::*;
use crate::model::profile::Keepalive;
use crate::model::run::{ClusterState, Launch, RunKey};

const NOW: u64 = 1_000;

mod attempts;
mod reuse;

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
            engine: None,
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
        application: None,
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
                shorten: false,
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
            Event::Extend {
                expire_at: NOW + 5,
                shorten: false,
            },
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
        let e = on(
            &waiting,
            Event::Extend {
                expire_at,
                shorten: false,
            },
            NOW,
        )
        .expect_err("too far");
        assert!(matches!(e, RunError::ExpireTooFar { .. }), "{e}");
    }
    on(
        &waiting,
        Event::Extend {
            expire_at: NOW + crate::model::profile::MAX_SECONDS,
            shorten: false,
        },
        NOW,
    )
    .expect("ten years is fine");
}

#[test]
fn extend_by_moves_the_deadline_later_and_an_earlier_time_is_refused_unless_asked() {
    let mut waiting = run(P::Failed, Some(C::Waiting));
    waiting.timeout = None;
    waiting.cluster.expires_at = Some(NOW + 3600);
    // By: from the deadline, not from now.
    let t = on(&waiting, Event::ExtendBy { seconds: 300 }, NOW).expect("applies");
    assert_eq!(t.run.cluster.expires_at, Some(NOW + 3900));
    // An earlier time would shorten it: refused, naming both times.
    let e = on(
        &waiting,
        Event::Extend {
            expire_at: NOW + 300,
            shorten: false,
        },
        NOW,
    )
    .expect_err("shortens");
    assert_eq!(
        e,
        RunError::ExtendShortens {
            current: NOW + 3600,
            given: NOW + 300
        }
    );
    assert!(e.to_string().contains(&format!("{}", NOW + 3600)), "{e}");
    // Asked for, it shortens, and says so.
    let t = on(
        &waiting,
        Event::Extend {
            expire_at: NOW + 300,
            shorten: true,
        },
        NOW,
    )
    .expect("applies");
    assert_eq!(t.run.cluster.expires_at, Some(NOW + 300));
    assert!(
        t.notes.iter().any(|n| n.contains("shortened")),
        "{:?}",
        t.notes
    );
    // A deadline already past: by counts from now.
    waiting.cluster.expires_at = Some(NOW - 10);
    let t = on(&waiting, Event::ExtendBy { seconds: 60 }, NOW).expect("applies");
    assert_eq!(t.run.cluster.expires_at, Some(NOW + 60));
}

#[test]
fn extend_must_be_future_and_within_the_timeout() {
    let waiting = run(P::Failed, Some(C::Waiting));
    assert_eq!(
        on(
            &waiting,
            Event::Extend {
                expire_at: NOW,
                shorten: false
            },
            NOW
        ),
        Err(RunError::ExpireInPast {
            now: NOW,
            given: NOW
        })
    );
    assert_eq!(
        on(
            &waiting,
            Event::Extend {
                expire_at: 900 + 3601,
                shorten: false,
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
        Event::Extend {
            expire_at: NOW + 5,
            shorten: false,
        },
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
