//! The run lifecycle as a pure function: `on(run, event, now) -> (run', effects, notes)`.
//!
//! The supervisor persists the new record (with the notes as history events) and only then
//! carries out the effects, so a crash between the two replays the effects from the store
//! ([`resume`]). Commands that are wrong for the current state are refused with a typed
//! [`RunError`], which the API maps to 409 (or 400 for a bad value).
//!
//! ```text
//! PENDING ─Begin→ STARTING/PROVISIONING ─Provisioned→ STARTING/PROVISIONED ─Launched→ RUNNING/PROVISIONED
//!   RUNNING ─Exited→ COMPLETED → DEPROVISIONING | IDLE (reuse) | FAILED/KILLED → WAITING (keepalive) | DEPROVISIONING
//!   WAITING|IDLE ─Expired|Deprovision|TimedOut→ DEPROVISIONING ─Deprovisioned→ DEPROVISIONED
//!   IDLE ─another run takes it over (`rules::reuse`)→ REUSED
//!                                         DEPROVISIONING ─DeprovisionFailed→ ORPHANED
//! ```

use crate::model::run::{
    ClusterStatus as C, Exit, Failure, FailureKind, ProgramStatus as P, RunError, RunRecord, Stop,
    StopReason,
};

/// Every program status: the arms that apply whatever the program's status say so by name,
/// so a new status does not compile until this list (and each such arm) is thought over.
macro_rules! any_status {
    () => {
        P::Queued
            | P::Pending
            | P::Starting
            | P::Running
            | P::Completed
            | P::Failed
            | P::Killed
            | P::Rejected
    };
}

/// Every cluster status, the same way.
macro_rules! any_cluster {
    () => {
        None | Some(
            C::Provisioning
                | C::Provisioned
                | C::Waiting
                | C::Idle
                | C::Reused
                | C::Deprovisioning
                | C::Deprovisioned
                | C::Orphaned,
        )
    };
}

/// Every (program, cluster) state.
macro_rules! any_state {
    () => {
        (any_status!(), any_cluster!())
    };
}

// After the macros, which the rules of `resume` use too.
mod event;
mod resume;

pub use event::{Effect, Event, Transition};
pub use resume::{next_deadline, resume};

fn wrong(run: &RunRecord, action: &'static str, reason: impl Into<String>) -> RunError {
    RunError::WrongState {
        run: run.key.run.clone(),
        action,
        reason: reason.into(),
    }
}

fn status_text(run: &RunRecord) -> String {
    match run.cluster.status {
        Some(c) => format!("the run is {} and its cluster {c}", run.status),
        None => format!("the run is {}", run.status),
    }
}

/// Applies `event` to `run` at time `now` (epoch seconds).
// The arms for "any other state" name every state (`any_state!`), so earlier arms have
// already taken some of what they name.
#[allow(unreachable_patterns)]
pub fn on(run: &RunRecord, event: Event, now: u64) -> Result<Transition, RunError> {
    let mut next = run.clone();
    let state = (run.status, run.cluster.status);
    let t = match (state, event) {
        // A cluster another run took over: stale timers are harmless, nothing else applies.
        ((any_status!(), Some(C::Reused)), Event::Expired | Event::TimedOut) => {
            Transition::new(next)
        }
        ((any_status!(), Some(C::Reused)), _) => {
            return Err(wrong(
                run,
                "changed",
                format!(
                    "its cluster was taken over by run {}",
                    run.cluster.reused_by.as_deref().unwrap_or("(unknown)")
                ),
            ));
        }
        // Pending|Queued --Reject--> Rejected, with no cluster
        ((P::Pending | P::Queued, None), Event::Reject(message)) => {
            next.status = P::Rejected;
            next.end = Some(now);
            next.failure = Some(Failure {
                kind: FailureKind::Provisioning,
                message: message.clone(),
            });
            Transition::new(next).note(format!("run REJECTED: {message}"))
        }
        // Queued --Admit--> Pending
        ((P::Queued, None), Event::Admit { now_ms }) => {
            next.status = P::Pending;
            let waited = match next.queue.as_mut() {
                Some(stay) => {
                    stay.admitted = Some(now_ms);
                    now_ms.saturating_sub(stay.since)
                }
                None => 0,
            };
            Transition::new(next).note(format!(
                "run PENDING: admitted after {:.1}s in the queue",
                waited as f64 / 1000.0
            ))
        }
        (any_state!(), Event::Admit { .. }) => {
            return Err(wrong(
                run,
                "admitted",
                format!("{}; only a QUEUED run is", status_text(run)),
            ));
        }
        // Pending --Begin--> Starting/Provisioning
        ((P::Pending, None), Event::Begin) => {
            next.status = P::Starting;
            next.cluster.status = Some(C::Provisioning);
            Transition::new(next)
                .note("run STARTING, cluster PROVISIONING")
                .effect(Effect::CreateCluster)
        }
        // A pool's run: its cluster is made, and waits IDLE for a run to take it over (until
        // the profile's timeout, if it has one).
        ((P::Starting, Some(C::Provisioning)), Event::Provisioned)
            if run.pooled && run.stop.is_none() =>
        {
            next.status = P::Completed;
            next.end = Some(now);
            next.cluster.status = Some(C::Idle);
            next.cluster.expires_at = Some(
                run.deadline()
                    .unwrap_or(now.saturating_add(crate::model::profile::MAX_SECONDS)),
            );
            next.cluster.reuse_key = next.reuse_key();
            next.cluster.idle_since = Some(now);
            Transition::new(next).note("cluster IDLE: made ahead for the profile's pool")
        }
        // Starting/Provisioning --Provisioned--> Starting/Provisioned, or straight to teardown
        // when a stop came in while the last node was being made.
        ((P::Starting, Some(C::Provisioning)), Event::Provisioned) => match run.stop {
            Some(stop) => end_program(next, now, killed(stop), None, 0),
            None => {
                next.cluster.status = Some(C::Provisioned);
                let note = match next.cluster.origin.as_mut() {
                    Some(origin) => {
                        origin.ready = true;
                        format!(
                            "cluster PROVISIONED: the cluster run {} left is clean and its services pass their checks; launching the program",
                            origin.from
                        )
                    }
                    None => "cluster PROVISIONED; launching the program".to_string(),
                };
                Transition::new(next).note(note).effect(Effect::Launch)
            }
        },
        // Starting/Provisioning (a cluster taken over) --ReuseFailed--> Deprovisioning it,
        // then a cluster of its own
        ((P::Starting, Some(C::Provisioning)), Event::ReuseFailed(why))
            if run.cluster.origin.is_some() =>
        {
            let origin = next.cluster.origin.as_mut().expect("checked above");
            origin.discarded = Some(why.clone());
            let from = origin.from.clone();
            next.cluster.status = Some(C::Deprovisioning);
            Transition::new(next)
                .note(format!(
                    "the cluster run {from} left cannot be used ({why}); cluster DEPROVISIONING, then the run makes its own"
                ))
                .effect(Effect::DeleteCluster)
        }
        // Starting/Deprovisioning (a cluster it could not use) --Deprovisioned--> a cluster
        // of its own
        ((P::Starting, Some(C::Deprovisioning)), Event::Deprovisioned) if discarding(run) => {
            match run.stop {
                Some(stop) => {
                    let (status, failure) = killed(stop);
                    next.status = status;
                    next.failure = failure;
                    next.end = Some(now);
                    next.cluster.status = Some(C::Deprovisioned);
                    next.cluster.end = Some(now);
                    Transition::new(next)
                        .note(format!("cluster DEPROVISIONED; run {status}"))
                        .effect(Effect::Finish)
                }
                None => {
                    next.cluster.id = None;
                    next.cluster.origin = None;
                    next.cluster.status = Some(C::Provisioning);
                    Transition::new(next)
                        .note("the unusable cluster is DEPROVISIONED; cluster PROVISIONING a cluster of its own")
                        .effect(Effect::CreateCluster)
                }
            }
        }
        ((P::Starting, Some(C::Deprovisioning)), Event::DeprovisionFailed(message))
            if discarding(run) =>
        {
            next.status = P::Failed;
            next.end = Some(now);
            next.cluster.status = Some(C::Orphaned);
            next.cluster.end = Some(now);
            next.failure = Some(Failure {
                kind: FailureKind::Provisioning,
                message: format!(
                    "the cluster it took over could not be used, nor deprovisioned: {message}"
                ),
            });
            Transition::new(next)
                .note(format!("run FAILED; cluster ORPHANED: {message}"))
                .effect(Effect::Finish)
        }
        (
            (P::Starting, Some(C::Deprovisioning)),
            event @ (Event::Stop { .. } | Event::TimedOut),
        ) if discarding(run) => {
            if run.stop.is_some() {
                return Err(wrong(run, "stopped", "it is already stopping"));
            }
            next.stop = Some(stop_for(&event));
            Transition::new(next)
                .note("stop requested; the run ends once the unusable cluster is gone")
        }
        // Starting/Provisioning --ProvisionFailed--> Failed, Deprovisioning
        ((P::Starting, Some(C::Provisioning)), Event::ProvisionFailed(message)) => {
            let outcome = match run.stop {
                Some(stop) => killed(stop),
                None => (
                    P::Failed,
                    Some(Failure {
                        kind: FailureKind::Provisioning,
                        message,
                    }),
                ),
            };
            end_program(next, now, outcome, None, 0)
        }
        // Starting/Provisioning --CreateStopped--> Killed, Deprovisioning
        ((P::Starting, Some(C::Provisioning)), Event::CreateStopped) => {
            let stop = run.stop.unwrap_or(Stop {
                reason: StopReason::Requested,
                keepalive: false,
            });
            end_program(next, now, killed(stop), None, 0)
        }
        // Starting/Provisioned --Launched--> Running
        ((P::Starting, Some(C::Provisioned)), Event::Launched) => {
            next.status = P::Running;
            next.start = Some(now);
            let t = Transition::new(next).note("run RUNNING");
            match run.stop {
                Some(_) => t.effect(Effect::Kill),
                None => t,
            }
        }
        // Starting/Provisioned --LaunchFailed--> Failed, kept as after a program failure
        ((P::Starting, Some(C::Provisioned)), Event::LaunchFailed(message)) => {
            let keep = run.keepalive.failed;
            let failure = Failure {
                kind: FailureKind::Program,
                message: format!("the program could not be started: {message}"),
            };
            end_program(next, now, (P::Failed, Some(failure)), None, keep)
        }
        // Starting|Running/Provisioned --ProgramLost--> Failed (killed if a stop was asked),
        // kept as after a program failure
        ((P::Starting | P::Running, Some(C::Provisioned)), Event::ProgramLost(message)) => {
            let (outcome, keep) = match run.stop {
                Some(stop) => (killed(stop), 0),
                None => {
                    let failure = Failure {
                        kind: FailureKind::ServerLost,
                        message,
                    };
                    if let Some(t) = try_again(&next, None, &failure, now) {
                        return Ok(t);
                    }
                    ((P::Failed, Some(failure)), run.keepalive.failed)
                }
            };
            end_program(next, now, outcome, None, keep)
        }
        // Running/Provisioned --Relaunch--> the next attempt, once its backoff is over
        ((P::Running, Some(C::Provisioned)), Event::Relaunch) if run.relaunch_at.is_some() => {
            next.relaunch_at = None;
            let attempt = next.attempt();
            let of = next.retry.as_ref().map_or(attempt, |r| r.max_attempts);
            Transition::new(next)
                .note(format!("launching attempt {attempt} of {of}"))
                .effect(Effect::Launch)
        }
        (any_state!(), Event::Relaunch) => Transition::new(next),
        // Running --Application--> the same, with the application its program submitted
        ((P::Running, Some(C::Provisioned)), Event::Application(app))
            if run.application.as_ref() != Some(&app) =>
        {
            let note = format!("{} application {}", app.engine, app.id);
            next.application = Some(app);
            Transition::new(next).note(note)
        }
        (any_state!(), Event::Application(_)) => Transition::new(next),
        // Running --Exited--> Completed | Failed | Killed
        ((P::Starting | P::Running, Some(C::Provisioned)), Event::Exited(exit)) => {
            let (outcome, keep) = match run.stop {
                Some(stop) => {
                    let keep = if stop.keepalive {
                        run.keepalive.killed
                    } else {
                        0
                    };
                    (killed(stop), keep)
                }
                None if exit.success() => ((P::Completed, None), 0),
                None => {
                    let failure = Failure {
                        kind: FailureKind::Program,
                        message: format!("the program {exit}"),
                    };
                    if let Some(t) = try_again(&next, Some(exit), &failure, now) {
                        return Ok(t);
                    }
                    ((P::Failed, Some(failure)), run.keepalive.failed)
                }
            };
            end_program(next, now, outcome, Some(exit), keep)
        }
        // Pending|Queued --Stop|TimedOut--> Killed, Deprovisioned (nothing was made)
        ((P::Pending | P::Queued, None), event @ (Event::Stop { .. } | Event::TimedOut)) => {
            let stop = stop_for(&event);
            let (status, failure) = killed(stop);
            next.status = status;
            next.failure = failure;
            next.end = Some(now);
            next.stop = Some(stop);
            next.cluster.status = Some(C::Deprovisioned);
            next.cluster.end = Some(now);
            Transition::new(next)
                .note(format!(
                    "run {status} before provisioning began; nothing to deprovision"
                ))
                .effect(Effect::Finish)
        }
        // Starting|Running --Stop|TimedOut--> same state with a stop recorded
        (
            (P::Starting | P::Running, Some(cluster @ (C::Provisioning | C::Provisioned))),
            event @ (Event::Stop { .. } | Event::TimedOut),
        ) => {
            if matches!(event, Event::Stop { .. }) && run.stop.is_some() {
                return Err(wrong(run, "stopped", "it is already stopping"));
            }
            let stop = stop_for(&event);
            // Between two attempts no program runs: the run ends now.
            if run.relaunch_at.is_some() {
                next.relaunch_at = None;
                next.stop = Some(stop);
                let keep = match stop.reason {
                    StopReason::Requested if stop.keepalive => run.keepalive.killed,
                    StopReason::Requested | StopReason::Timeout => 0,
                };
                return Ok(end_program(next, now, killed(stop), None, keep));
            }
            next.stop = Some(stop);
            let note = match stop.reason {
                StopReason::Requested => "stop requested",
                StopReason::Timeout => "the profile's timeout passed; stopping",
            };
            let effect = if cluster == C::Provisioning {
                Effect::CancelCreate
            } else {
                Effect::Kill
            };
            Transition::new(next).note(note).effect(effect)
        }
        (any_state!(), Event::Stop { .. }) => {
            return Err(wrong(
                run,
                "stopped",
                format!(
                    "{}; the program already ended{}",
                    status_text(run),
                    match run.cluster.status {
                        Some(C::Waiting) => " (deprovision the WAITING cluster instead)",
                        Some(C::Idle) => " (deprovision the IDLE cluster instead)",
                        _ => "",
                    }
                ),
            ));
        }
        // Waiting|Idle --Expired|TimedOut|Deprovision--> Deprovisioning
        ((any_status!(), Some(C::Waiting)), Event::Expired) => {
            deprovision(next, "keepalive expired", now)
        }
        ((any_status!(), Some(C::Idle)), Event::Expired) => deprovision(
            next,
            "no run took the IDLE cluster over before it expired",
            now,
        ),
        ((any_status!(), Some(C::Waiting | C::Idle)), Event::TimedOut) => {
            deprovision(next, "the profile's timeout passed", now)
        }
        ((any_status!(), Some(C::Idle)), Event::Retire(why)) => deprovision(next, &why, now),
        (any_state!(), Event::Retire(_)) => {
            return Err(wrong(
                run,
                "retired",
                format!("{}; only an IDLE cluster is", status_text(run)),
            ));
        }
        ((any_status!(), Some(C::Waiting | C::Idle)), Event::Deprovision) => {
            deprovision(next, "deprovision requested", now)
        }
        // Stale timers are harmless elsewhere.
        (any_state!(), Event::Expired | Event::TimedOut) => Transition::new(next),
        (any_state!(), Event::Deprovision) => {
            return Err(wrong(
                run,
                "deprovisioned",
                format!(
                    "{}; only a WAITING or IDLE cluster can be deprovisioned by hand (use force=true for one stuck DEPROVISIONING or ORPHANED)",
                    status_text(run)
                ),
            ));
        }
        // Waiting|Idle --ExtendBy--> the same, its expiresAt later by that much
        ((any_status!(), Some(C::Waiting | C::Idle)), Event::ExtendBy { seconds }) => {
            let base = run.cluster.expires_at.unwrap_or(now).max(now);
            extended(run, next, base.saturating_add(seconds), now)?
        }
        // Waiting|Idle --Extend--> the same with a new expiresAt (an earlier one if asked)
        ((any_status!(), Some(C::Waiting | C::Idle)), Event::Extend { expire_at, shorten }) => {
            // (A time already past is refused as such, by `extended`.)
            if let Some(current) = run.cluster.expires_at
                && expire_at < current
                && expire_at > now
                && !shorten
            {
                return Err(RunError::ExtendShortens {
                    current,
                    given: expire_at,
                });
            }
            extended(run, next, expire_at, now)?
        }
        (any_state!(), Event::Extend { .. } | Event::ExtendBy { .. }) => {
            return Err(wrong(
                run,
                "extended",
                format!(
                    "{}; only a WAITING or IDLE cluster can be extended",
                    status_text(run)
                ),
            ));
        }
        // Deprovisioning --Deprovisioned--> Deprovisioned
        ((any_status!(), Some(C::Deprovisioning)), Event::Deprovisioned) => {
            next.cluster.status = Some(C::Deprovisioned);
            next.cluster.end = Some(now);
            Transition::new(next)
                .note("cluster DEPROVISIONED")
                .effect(Effect::Finish)
        }
        // Deprovisioning --DeprovisionFailed--> Orphaned
        ((any_status!(), Some(C::Deprovisioning)), Event::DeprovisionFailed(message)) => {
            next.cluster.status = Some(C::Orphaned);
            next.cluster.end = Some(now);
            if next.failure.is_none() {
                next.failure = Some(Failure {
                    kind: FailureKind::Deprovisioning,
                    message: message.clone(),
                });
            }
            Transition::new(next)
                .note(format!("cluster ORPHANED: {message}"))
                .effect(Effect::Finish)
        }
        // Deprovisioning|Orphaned --ForceDeprovision--> Deprovisioned
        ((any_status!(), Some(C::Deprovisioning | C::Orphaned)), Event::ForceDeprovision) => {
            next.cluster.status = Some(C::Deprovisioned);
            next.cluster.end = Some(now);
            Transition::new(next)
                .note("cluster recorded DEPROVISIONED by a forced deprovision")
                .effect(Effect::CancelDelete)
                .effect(Effect::Finish)
        }
        (any_state!(), Event::ForceDeprovision) => {
            return Err(wrong(
                run,
                "force-deprovisioned",
                format!(
                    "{}; force applies to a cluster stuck DEPROVISIONING or ORPHANED",
                    status_text(run)
                ),
            ));
        }
        (any_state!(), event) => {
            return Err(wrong(
                run,
                "changed",
                format!("{} and {event:?} does not apply", status_text(run)),
            ));
        }
    };
    Ok(t)
}

/// Whether `run` is deprovisioning a cluster it took over and could not use, before it
/// makes its own.
fn discarding(run: &RunRecord) -> bool {
    run.status == P::Starting
        && run
            .cluster
            .origin
            .as_ref()
            .is_some_and(|o| o.discarded.is_some())
}

/// A WAITING or IDLE cluster goes, for reason `why`, at `now`.
fn deprovision(mut next: RunRecord, why: &str, now: u64) -> Transition {
    if next.cluster.status == Some(C::Idle) {
        next.cluster.idle_until = Some(now);
    } else if next.cluster.status == Some(C::Waiting) {
        next.cluster.waiting_until = Some(now);
    }
    next.cluster.status = Some(C::Deprovisioning);
    next.cluster.expires_at = None;
    Transition::new(next)
        .note(format!("{why}; cluster DEPROVISIONING"))
        .effect(Effect::DeleteCluster)
}

/// The stop that `event` records: a stop asked for, or else the profile's timeout, which
/// never keeps the cluster.
fn stop_for(event: &Event) -> Stop {
    if let Event::Stop { keepalive } = event {
        return Stop {
            reason: StopReason::Requested,
            keepalive: *keepalive,
        };
    }
    Stop {
        reason: StopReason::Timeout,
        keepalive: false,
    }
}

/// The end status a stop gives the program.
fn killed(stop: Stop) -> (P, Option<Failure>) {
    let failure = (stop.reason == StopReason::Timeout).then(|| Failure {
        kind: FailureKind::Timeout,
        message: "the profile's timeout passed before the run finished".into(),
    });
    (P::Killed, failure)
}

/// Ends the program with `outcome` and keeps the cluster `keep` seconds (bounded by the
/// profile's timeout), or deprovisions it now.
fn end_program(
    mut run: RunRecord,
    now: u64,
    (status, failure): (P, Option<Failure>),
    exit: Option<Exit>,
    keep: u64,
) -> Transition {
    run.status = status;
    run.end = Some(now);
    run.exit = exit;
    if run.failure.is_none() {
        run.failure = failure;
    }
    let mut note = format!("run {status}");
    if let Some(f) = &run.failure {
        note.push_str(&format!(" ({}: {})", f.kind, f.message));
    }
    let provisioned = run.cluster.status == Some(C::Provisioned);
    if let Some(reuse) = run.reuse
        && status == P::Completed
        && provisioned
        && run.cluster.attention.is_none()
    {
        let expires = now.saturating_add(reuse.idle);
        let expires = run.deadline().map_or(expires, |d| expires.min(d));
        if expires > now {
            run.cluster.status = Some(C::Idle);
            run.cluster.expires_at = Some(expires);
            run.cluster.reuse_key = run.reuse_key();
            run.cluster.idle_since = Some(now);
            return Transition::new(run).note(note).note(format!(
                "cluster IDLE until {expires}, for the next run that matches"
            ));
        }
    }
    let expires = now.saturating_add(keep);
    let expires = run.deadline().map_or(expires, |d| expires.min(d));
    if provisioned && keep > 0 && expires > now {
        run.cluster.status = Some(C::Waiting);
        run.cluster.expires_at = Some(expires);
        run.cluster.waiting_since = Some(now);
        Transition::new(run)
            .note(note)
            .note(format!("cluster WAITING until {expires}"))
    } else {
        run.cluster.status = Some(C::Deprovisioning);
        Transition::new(run)
            .note(note)
            .note("cluster DEPROVISIONING")
            .effect(Effect::DeleteCluster)
    }
}

/// The failed attempt of `run`'s program (ended by `exit`, or lost with its server), tried
/// again when its retry policy allows: recorded among its attempts, and the next launched
/// after the policy's backoff. `None` when the run ends instead.
fn try_again(
    run: &RunRecord,
    exit: Option<Exit>,
    failure: &Failure,
    now: u64,
) -> Option<Transition> {
    let retry = run.retry.as_ref()?;
    let attempt = run.attempt();
    if !retry.again(attempt, exit.and_then(|e| e.code)) {
        return None;
    }
    let mut next = run.clone();
    next.status = P::Running;
    next.attempts.push(crate::model::run::ProgramAttempt {
        attempt,
        application: next.application.take(),
        exit,
        failure: failure.clone(),
        ended: now,
    });
    next.relaunch_at = Some(now.saturating_add(retry.backoff));
    let wait = match retry.backoff {
        0 => "now".to_string(),
        s => format!(
            "in {}",
            humantime::format_duration(std::time::Duration::from_secs(s))
        ),
    };
    Some(
        Transition::new(next)
            .note(format!(
                "attempt {attempt} of {} failed ({}: {}); trying again {wait}",
                retry.max_attempts, failure.kind, failure.message
            ))
            .effect(Effect::Relaunch),
    )
}

/// `next`, the WAITING or IDLE `run` kept until `expire_at`: checked against now, the
/// profile's timeout and ten years; its note says from when to when.
fn extended(
    run: &RunRecord,
    mut next: RunRecord,
    expire_at: u64,
    now: u64,
) -> Result<Transition, RunError> {
    if expire_at <= now {
        return Err(RunError::ExpireInPast {
            now,
            given: expire_at,
        });
    }
    if let Some(deadline) = run.deadline()
        && expire_at > deadline
    {
        return Err(RunError::ExpireBeyondTimeout { deadline });
    }
    let limit = now.saturating_add(crate::model::profile::MAX_SECONDS);
    if expire_at > limit {
        return Err(RunError::ExpireTooFar {
            limit,
            given: expire_at,
        });
    }
    let current = run.cluster.expires_at;
    next.cluster.expires_at = Some(expire_at);
    let note = match current {
        Some(current) if expire_at < current => {
            format!("keepalive shortened to {expire_at} (from {current})")
        }
        Some(current) => format!("keepalive extended to {expire_at} (from {current})"),
        None => format!("keepalive extended to {expire_at}"),
    };
    Ok(Transition::new(next).note(note))
}

#[cfg(test)]
pub(crate) mod tests;
