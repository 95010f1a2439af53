//! Admission of runs, as pure functions: whether a start goes ahead, waits in its
//! namespace's queue or is refused ([`decide`]), and in which order the queued runs are
//! offered when capacity frees ([`Pass`]).
//!
//! The order is fair across namespaces and by arrival within one:
//! - namespaces take turns, one run each, starting after the one served last, so a
//!   namespace's thousand queued runs do not starve another's one;
//! - within a namespace runs are offered oldest first. A run held by its program's
//!   `maxConcurrentRuns` is passed over for this round (runs of other programs are not held
//!   up by it, and its program's later runs wait behind it); a run held by the namespace's
//!   quota ends the namespace's turn for the round, so a large run is not overtaken forever
//!   by smaller ones that still fit.

use std::collections::{BTreeMap, BTreeSet};

/// What holds a run back from starting now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// It can never start as it is (a part may not run on the server's host, or it asks for
    /// more nodes than its namespace allows one run): no wait helps.
    Never,
    /// Its program's `maxConcurrentRuns` is reached.
    Program,
    /// Its namespace's `maxLiveRuns` or `maxLiveNodes` is reached.
    Namespace,
}

/// What a start does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It starts now.
    Start,
    /// It waits in the queue.
    Queue,
    /// It is REJECTED for what holds it.
    Refuse,
    /// It is REJECTED: it would wait, but the namespace's queue is full.
    QueueFull,
}

/// What a start does, held by `hold` (if anything), when queueing is `wanted` and its
/// namespace's queue holds `queued` of at most `max_queued` runs. A run waits only for a
/// limit that frees as other runs end, and only when it arrives with no run queued ahead
/// of it in the namespace being passed by it: a start while others wait queues behind
/// them whatever it could take now (`queued > 0`, with queueing wanted).
pub fn decide(hold: Option<Hold>, wanted: bool, queued: u32, max_queued: u32) -> Decision {
    match hold {
        Some(Hold::Never) => Decision::Refuse,
        None if !wanted || queued == 0 => Decision::Start,
        Some(Hold::Program | Hold::Namespace) if !wanted => Decision::Refuse,
        None | Some(Hold::Program | Hold::Namespace) if queued >= max_queued => Decision::QueueFull,
        None | Some(Hold::Program | Hold::Namespace) => Decision::Queue,
    }
}

/// One round of offering queued runs: which to offer next, and what held back so far.
#[derive(Debug, Default)]
pub struct Pass {
    /// Programs (`ns/app/program`) held by their limit this round.
    programs: BTreeSet<String>,
    /// Namespaces held by their quota this round.
    namespaces: BTreeSet<String>,
}

impl Pass {
    /// The order to offer queued runs in: `queues` holds each namespace's runs oldest first,
    /// as (program, item); namespaces take turns starting after `after` (the namespace served
    /// last). Answers (namespace, index in its queue).
    pub fn order<'a, T>(
        queues: &'a BTreeMap<String, Vec<(String, T)>>,
        after: Option<&str>,
    ) -> Vec<(&'a str, usize)> {
        let mut names: Vec<&String> = queues.keys().collect();
        if let Some(after) = after {
            let turn = names.partition_point(|n| n.as_str() <= after);
            names.rotate_left(turn);
        }
        let longest = queues.values().map(Vec::len).max().unwrap_or(0);
        let mut out = Vec::with_capacity(queues.values().map(Vec::len).sum());
        for i in 0..longest {
            for name in &names {
                if queues.get(*name).is_some_and(|q| i < q.len()) {
                    out.push((name.as_str(), i));
                }
            }
        }
        out
    }

    /// Whether a run of `program` in namespace `ns` is to be offered this round.
    pub fn offers(&self, ns: &str, program: &str) -> bool {
        !self.namespaces.contains(ns) && !self.programs.contains(program)
    }

    /// A run of `program` in `ns` was held back by `hold`: what it holds back for the rest of
    /// the round.
    pub fn held(&mut self, ns: &str, program: &str, hold: Hold) {
        match hold {
            Hold::Program => {
                self.programs.insert(program.to_string());
            }
            Hold::Namespace => {
                self.namespaces.insert(ns.to_string());
            }
            Hold::Never => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_start_does() {
        use Decision::*;
        use Hold::*;
        let cases = [
            // (hold, wanted, queued, max) -> decision
            ((None, false, 0, 10), Start),
            ((None, true, 0, 10), Start),
            // Others wait: a start that could go queues behind them.
            ((None, true, 3, 10), Queue),
            ((None, false, 3, 10), Start),
            ((Some(Program), false, 0, 10), Refuse),
            ((Some(Namespace), false, 5, 10), Refuse),
            ((Some(Program), true, 0, 10), Queue),
            ((Some(Namespace), true, 9, 10), Queue),
            ((Some(Namespace), true, 10, 10), QueueFull),
            ((None, true, 10, 10), QueueFull),
            ((Some(Program), true, 0, 0), QueueFull),
            // No wait helps a run that can never start.
            ((Some(Never), true, 0, 10), Refuse),
            ((Some(Never), false, 0, 10), Refuse),
        ];
        for ((hold, wanted, queued, max), want) in cases {
            assert_eq!(
                decide(hold, wanted, queued, max),
                want,
                "{hold:?} wanted={wanted} queued={queued}/{max}"
            );
        }
    }

    fn queues(spec: &[(&str, &[&str])]) -> BTreeMap<String, Vec<(String, ())>> {
        spec.iter()
            .map(|(ns, programs)| {
                let runs = programs.iter().map(|p| (p.to_string(), ())).collect();
                (ns.to_string(), runs)
            })
            .collect()
    }

    #[test]
    fn namespaces_take_turns_from_the_one_after_the_last_served() {
        let q = queues(&[("a", &["p", "p", "p"]), ("b", &["p"]), ("c", &["p", "p"])]);
        let order = |after| {
            Pass::order(&q, after)
                .into_iter()
                .map(|(ns, i)| format!("{ns}{i}"))
                .collect::<Vec<_>>()
        };
        // b's one run goes second, not after a's three.
        assert_eq!(order(None), ["a0", "b0", "c0", "a1", "c1", "a2"]);
        assert_eq!(order(Some("a")), ["b0", "c0", "a0", "c1", "a1", "a2"]);
        assert_eq!(order(Some("c")), ["a0", "b0", "c0", "a1", "c1", "a2"]);
        // A namespace that no longer queues anything still places the turn.
        assert_eq!(order(Some("bb")), ["c0", "a0", "b0", "c1", "a1", "a2"]);
        assert!(Pass::order(&queues(&[]), Some("a")).is_empty());
    }

    #[test]
    fn a_program_at_its_limit_is_passed_over_and_a_full_quota_ends_the_turn() {
        let mut pass = Pass::default();
        assert!(pass.offers("a", "a/x/p"));
        pass.held("a", "a/x/p", Hold::Program);
        // Its later runs wait behind it; the namespace's other programs go on.
        assert!(!pass.offers("a", "a/x/p"));
        assert!(pass.offers("a", "a/x/q"));
        assert!(pass.offers("b", "b/x/p"));
        pass.held("a", "a/x/q", Hold::Namespace);
        assert!(!pass.offers("a", "a/x/r"));
        assert!(pass.offers("b", "b/x/p"));
        // A run that can never start holds nothing else back.
        pass.held("b", "b/x/p", Hold::Never);
        assert!(pass.offers("b", "b/x/p"));
    }
}
