//! How a service's state on a node changes: the one transition function, pure, from what
//! happened to it (an action of an operation finished, or a check looked) and the state it
//! was in. `None` is a service that is not on the node (never installed, or removed).

use crate::model::service::{CheckOutcome, ServiceState};
use crate::model::template::ActionKind;

/// What happened to a service on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Happened {
    /// An operation's `action` on it finished, successfully or not. `restarts_on_configure`:
    /// the template has the service stopped and started again around a `configure`.
    Action {
        action: ActionKind,
        succeeded: bool,
        restarts_on_configure: bool,
    },
    /// Its check ran.
    Checked(CheckOutcome),
}

/// The state a service in `state` is in after `happened`.
pub fn next(state: Option<ServiceState>, happened: Happened) -> Option<ServiceState> {
    use ServiceState::*;
    match happened {
        Happened::Action {
            action,
            succeeded: false,
            ..
        } => Some(match action {
            // A stop or remove that failed may have done part of its work.
            ActionKind::Stop | ActionKind::Remove => Unknown,
            ActionKind::Install
            | ActionKind::Configure
            | ActionKind::Initialize
            | ActionKind::Start => Failed,
            // No operation plans a check or a reset; one that could not run knows nothing.
            ActionKind::Check | ActionKind::Reset => Unknown,
        }),
        Happened::Action {
            action,
            succeeded: true,
            restarts_on_configure,
        } => match action {
            ActionKind::Install => Some(state.unwrap_or(Down)),
            // The new configuration is in place; a running service still runs the old one,
            // unless the operation restarts it around the configure (its stop and start
            // decide then).
            ActionKind::Configure => Some(match state {
                None | Some(Down) => Down,
                Some(Failed) => Failed,
                Some(Up | Outdated | Unknown) if restarts_on_configure => state.unwrap_or(Down),
                Some(Up | Outdated | Unknown) => Outdated,
            }),
            ActionKind::Initialize => Some(state.unwrap_or(Down)),
            ActionKind::Start => Some(Up),
            ActionKind::Stop => Some(Down),
            ActionKind::Remove => None,
            // A check that passed, as a check.
            ActionKind::Check => next(state, Happened::Checked(CheckOutcome::Up)),
            // A reset leaves the service as it was (the check after it says how it is).
            ActionKind::Reset => state,
        },
        // A check says whether it runs, not with which configuration: a running service
        // that is outdated stays so until it restarts.
        Happened::Checked(CheckOutcome::Up) => Some(match state {
            Some(Outdated) => Outdated,
            _ => Up,
        }),
        // Not running: a failed start stays the reason until a start succeeds.
        Happened::Checked(CheckOutcome::Down) => Some(match state {
            Some(Failed) => Failed,
            _ => Down,
        }),
        Happened::Checked(CheckOutcome::Unknown) => Some(Unknown),
    }
}

/// Whether a check that moved a service from `before` to `after` calls for a heal: it is down
/// or failed, and no operation put it there on purpose (`found`: a check found it in
/// `before`). A service an operation stopped stays stopped.
pub fn wants_heal(before: ServiceState, found: bool, after: Option<ServiceState>) -> bool {
    use ServiceState::*;
    match after {
        Some(Down | Failed) => before != Down || found,
        Some(Up | Unknown | Outdated) | None => false,
    }
}

/// What to do about a service that wants a heal under `policy`, given when its earlier heals
/// began (epoch ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealStep {
    /// Heal it now (this is heal number `n` in the window).
    Heal { n: u32 },
    /// It had `attempts` heals in the window already: stop, and say so.
    Exhausted { attempts: u32 },
    /// Its policy does not heal.
    Report,
}

/// Whether a heal under `policy` may start at `now_ms` after heals begun at `past`.
pub fn heal_step(
    policy: &crate::model::template::HealPolicy,
    past: &[u64],
    now_ms: u64,
) -> HealStep {
    use crate::model::template::Heal;
    if policy.heal == Heal::None {
        return HealStep::Report;
    }
    let window = u64::try_from(policy.window.as_millis()).unwrap_or(u64::MAX);
    let since = now_ms.saturating_sub(window);
    let recent = past.iter().filter(|t| **t > since).count() as u32;
    if recent >= policy.attempts {
        HealStep::Exhausted {
            attempts: policy.attempts,
        }
    } else {
        HealStep::Heal { n: recent + 1 }
    }
}

/// What to do about a service a check found down or failed, all things weighed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealDecision {
    /// Nothing: its policy only reports, or its limit was reached and said so within this
    /// window already.
    Nothing,
    /// Its limit of `attempts` heals in the window is reached: stop healing, and say so.
    Exhausted { attempts: u32 },
    /// Heal it now, heal number `n` in the window: make its node anew (`replace`: the node is
    /// gone and the policy replaces nodes), or restart it with its dependent chain.
    Heal { n: u32, replace: bool },
}

/// A check's finding, as the heal decision weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found<'a> {
    pub node: &'a str,
    pub service: &'a str,
    /// The state the check moved the service to (`down`, `failed`).
    pub state: &'a str,
    /// What the check said.
    pub detail: &'a str,
    /// The node's resource is gone.
    pub gone: bool,
}

/// The heal decision for a service found as `found` at `now_ms`, under `policy`, after heals
/// begun at `past` (epoch ms), when its exhausted limit was last said at `said` (once per
/// window, not at every check).
pub fn decide_heal(
    policy: &crate::model::template::HealPolicy,
    past: &[u64],
    found: &Found<'_>,
    said: Option<u64>,
    now_ms: u64,
) -> HealDecision {
    use crate::model::template::Heal;
    match heal_step(policy, past, now_ms) {
        HealStep::Report => HealDecision::Nothing,
        HealStep::Exhausted { attempts } => {
            let window = u64::try_from(policy.window.as_millis()).unwrap_or(u64::MAX);
            if said.is_some_and(|t| now_ms.saturating_sub(t) < window) {
                HealDecision::Nothing
            } else {
                HealDecision::Exhausted { attempts }
            }
        }
        HealStep::Heal { n } => HealDecision::Heal {
            n,
            replace: found.gone && policy.heal == Heal::ReplaceNode,
        },
    }
}

/// The service `service` needs at run time, directly or through others, that is unsettled
/// (`unsettled`: found down, or its check is under way), if any: a finding of `service` waits
/// for it, since that one's heal restarts `service` with its dependent chain. Heal the root,
/// not the leaves: a Dask worker restarted while its scheduler is down waits for a scheduler
/// nobody starts.
pub fn unsettled_requirement<'a>(
    template: &'a crate::model::template::Template,
    service: &str,
    unsettled: &std::collections::BTreeSet<&str>,
) -> Option<&'a str> {
    let providers = template.providers();
    let mut seen = std::collections::BTreeSet::new();
    let mut todo: Vec<&str> = template
        .predecessors_in(&providers, service, "runtime")
        .into_iter()
        .collect();
    while let Some(s) = todo.pop() {
        if !seen.insert(s) {
            continue;
        }
        if unsettled.contains(s) {
            return Some(s);
        }
        todo.extend(template.predecessors_in(&providers, s, "runtime"));
    }
    None
}

/// What the heal operation records as its trigger: what was found, and which heal it is.
pub fn heal_trigger(
    policy: &crate::model::template::HealPolicy,
    found: &Found<'_>,
    n: u32,
    replace: bool,
) -> serde_json::Value {
    serde_json::json!({
        "heal": if replace { "replace-node" } else { "restart" },
        "node": found.node,
        "service": found.service,
        "state": found.state,
        "found": found.detail,
        "attempt": n,
        "of": policy.attempts,
        "window": humantime::format_duration(policy.window).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ServiceState::*;

    const STATES: [Option<ServiceState>; 6] = [
        None,
        Some(Up),
        Some(Down),
        Some(Failed),
        Some(Unknown),
        Some(Outdated),
    ];

    fn act(action: ActionKind, succeeded: bool) -> Happened {
        Happened::Action {
            action,
            succeeded,
            restarts_on_configure: false,
        }
    }

    /// Every state × what happened, the expected state beside it: the whole table, read
    /// row by row.
    #[test]
    fn the_transition_table() {
        use ActionKind::{
            Check, Configure as C, Initialize as Init, Install as I, Remove, Start, Stop,
        };
        let checked = Happened::Checked;
        let restarting_configure = Happened::Action {
            action: C,
            succeeded: true,
            restarts_on_configure: true,
        };
        // (what happened, the state after it from: none, up, down, failed, unknown, outdated)
        #[rustfmt::skip]
        let table: Vec<(Happened, [Option<ServiceState>; 6])> = vec![
            (act(I, true),    [Some(Down), Some(Up), Some(Down), Some(Failed), Some(Unknown), Some(Outdated)]),
            (act(I, false),   [Some(Failed); 6]),
            (act(C, true),    [Some(Down), Some(Outdated), Some(Down), Some(Failed), Some(Outdated), Some(Outdated)]),
            (restarting_configure, [Some(Down), Some(Up), Some(Down), Some(Failed), Some(Unknown), Some(Outdated)]),
            (act(C, false),   [Some(Failed); 6]),
            (act(Init, true), [Some(Down), Some(Up), Some(Down), Some(Failed), Some(Unknown), Some(Outdated)]),
            (act(Init, false), [Some(Failed); 6]),
            (act(Start, true), [Some(Up); 6]),
            (act(Start, false), [Some(Failed); 6]),
            (act(Stop, true), [Some(Down); 6]),
            (act(Stop, false), [Some(Unknown); 6]),
            (act(Remove, true), [None; 6]),
            (act(Remove, false), [Some(Unknown); 6]),
            (checked(CheckOutcome::Up),      [Some(Up), Some(Up), Some(Up), Some(Up), Some(Up), Some(Outdated)]),
            (checked(CheckOutcome::Down),    [Some(Down), Some(Down), Some(Down), Some(Failed), Some(Down), Some(Down)]),
            (checked(CheckOutcome::Unknown), [Some(Unknown); 6]),
            // No operation plans a check; if one ran, it would count as a check.
            (act(Check, true),  [Some(Up), Some(Up), Some(Up), Some(Up), Some(Up), Some(Outdated)]),
            (act(Check, false), [Some(Unknown); 6]),
        ];
        for (happened, after) in table {
            for (before, expected) in STATES.iter().zip(after) {
                assert_eq!(
                    next(*before, happened),
                    expected,
                    "{happened:?} from {before:?}"
                );
            }
        }
    }

    #[test]
    fn a_restart_brings_an_outdated_service_up_to_date() {
        let mut state = Some(Outdated);
        for happened in [act(ActionKind::Stop, true), act(ActionKind::Start, true)] {
            state = next(state, happened);
        }
        assert_eq!(state, Some(Up));
    }

    #[test]
    fn check_exit_codes() {
        assert_eq!(CheckOutcome::of_exit(Some(0)), CheckOutcome::Up);
        assert_eq!(CheckOutcome::of_exit(Some(3)), CheckOutcome::Down);
        for other in [Some(1), Some(2), Some(4), Some(-1), None] {
            assert_eq!(
                CheckOutcome::of_exit(other),
                CheckOutcome::Unknown,
                "{other:?}"
            );
        }
    }

    #[test]
    fn a_heal_is_wanted_for_what_a_check_found_down_not_for_what_an_operation_stopped() {
        // (state before, found by a check, state after the check, heal?)
        let table = [
            (Up, false, Some(Down), true),
            (Outdated, false, Some(Down), true),
            (Unknown, true, Some(Down), true),
            (Failed, false, Some(Failed), true),
            (Down, true, Some(Down), true),
            (Down, false, Some(Down), false),
            (Up, false, Some(Up), false),
            (Up, false, Some(Unknown), false),
            (Outdated, false, Some(Outdated), false),
            (Up, false, None, false),
        ];
        for (before, found, after, heal) in table {
            assert_eq!(
                wants_heal(before, found, after),
                heal,
                "{before:?} found={found} -> {after:?}"
            );
        }
    }

    #[test]
    fn heals_stop_at_their_limit_within_the_window() {
        use crate::model::template::{Heal, HealPolicy};
        let policy = HealPolicy {
            heal: Heal::Restart,
            attempts: 2,
            window: std::time::Duration::from_secs(60),
        };
        let now = 1_000_000;
        assert_eq!(heal_step(&policy, &[], now), HealStep::Heal { n: 1 });
        assert_eq!(
            heal_step(&policy, &[now - 1_000], now),
            HealStep::Heal { n: 2 }
        );
        assert_eq!(
            heal_step(&policy, &[now - 2_000, now - 1_000], now),
            HealStep::Exhausted { attempts: 2 }
        );
        // Heals older than the window no longer count.
        assert_eq!(
            heal_step(&policy, &[now - 120_000, now - 1_000], now),
            HealStep::Heal { n: 2 }
        );
        let report = HealPolicy {
            heal: Heal::None,
            ..policy
        };
        assert_eq!(heal_step(&report, &[], now), HealStep::Report);
    }

    #[test]
    fn the_heal_decision_table() {
        use crate::model::template::{Heal, HealPolicy};
        let now = 1_000_000;
        let policy = |heal| HealPolicy {
            heal,
            attempts: 2,
            window: std::time::Duration::from_secs(60),
        };
        let down = Found {
            node: "worker-1",
            service: "zk",
            state: "down",
            detail: "exit 1",
            gone: false,
        };
        let gone = Found { gone: true, ..down };
        let full = [now - 2_000, now - 1_000];
        let one = [now - 1_000];
        type Row<'a> = (Heal, &'a [u64], &'a Found<'a>, Option<u64>, HealDecision);
        let rows: Vec<Row<'_>> = vec![
            // restart a service that is down, whatever the node's state
            (
                Heal::Restart,
                &[],
                &down,
                None,
                HealDecision::Heal {
                    n: 1,
                    replace: false,
                },
            ),
            (
                Heal::Restart,
                &[],
                &gone,
                None,
                HealDecision::Heal {
                    n: 1,
                    replace: false,
                },
            ),
            // a gone node is made anew only where the policy replaces nodes
            (
                Heal::ReplaceNode,
                &[],
                &gone,
                None,
                HealDecision::Heal {
                    n: 1,
                    replace: true,
                },
            ),
            (
                Heal::ReplaceNode,
                &one,
                &down,
                None,
                HealDecision::Heal {
                    n: 2,
                    replace: false,
                },
            ),
            // the limit: said once per window
            (
                Heal::Restart,
                &full,
                &down,
                None,
                HealDecision::Exhausted { attempts: 2 },
            ),
            (
                Heal::Restart,
                &full,
                &down,
                Some(now - 59_000),
                HealDecision::Nothing,
            ),
            (
                Heal::Restart,
                &full,
                &down,
                Some(now - 60_000),
                HealDecision::Exhausted { attempts: 2 },
            ),
            (
                Heal::ReplaceNode,
                &full,
                &gone,
                Some(now - 1),
                HealDecision::Nothing,
            ),
            // a policy that only reports
            (Heal::None, &[], &gone, None, HealDecision::Nothing),
        ];
        for (heal, past, found, said, want) in rows {
            assert_eq!(
                decide_heal(&policy(heal), past, found, said, now),
                want,
                "{heal:?} {past:?} {found:?} {said:?}"
            );
        }
        let trigger = heal_trigger(&policy(Heal::ReplaceNode), &gone, 1, true);
        assert_eq!(
            trigger,
            serde_json::json!({"heal": "replace-node", "node": "worker-1", "service": "zk",
                "state": "down", "found": "exit 1", "attempt": 1, "of": 2, "window": "1m"})
        );
    }

    /// A leaf waits for an unsettled service it needs, directly or through another; a root,
    /// or a service whose needs are settled, does not.
    #[test]
    fn a_finding_waits_for_the_unsettled_service_it_needs() {
        let template: crate::model::template::Template =
            serde_json::from_value(serde_json::json!({
                "services": {
                    "zk": {},
                    "master": {"dependencies": {"runtime": {"requires": ["zk"]}}},
                    "worker": {"dependencies": {"runtime": {"uses": ["master"]}}},
                    "side": {}
                }
            }))
            .expect("template");
        let set = |s: &[&'static str]| s.iter().copied().collect::<std::collections::BTreeSet<_>>();
        assert_eq!(
            unsettled_requirement(&template, "worker", &set(&["zk"])),
            Some("zk")
        );
        assert_eq!(
            unsettled_requirement(&template, "worker", &set(&["master"])),
            Some("master")
        );
        assert_eq!(
            unsettled_requirement(&template, "master", &set(&["worker", "side"])),
            None
        );
        assert_eq!(
            unsettled_requirement(&template, "zk", &set(&["zk", "master"])),
            None
        );
        assert_eq!(
            unsettled_requirement(&template, "side", &set(&["zk"])),
            None
        );
    }
}
