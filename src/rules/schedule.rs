//! What schedules decide, over plain data: a cron expression's times in its time zone
//! ([`Cron`]), which fire times are due and which were missed ([`due`]), whether a run end
//! meets a program-status trigger ([`meets_end`]), whether schedules would trigger each
//! other round a loop ([`trigger_loop`]), whether a fire may start its run now ([`judge`]),
//! and the run id a fire starts ([`run_id`]).
//!
//! Times are epoch milliseconds. DST follows what cron users expect (croner's rules): a fixed
//! time in a spring-forward gap runs at the first instant after the gap, a fixed time in a
//! fall-back fold runs once (at its first instance), and a job with `*` in the hour runs on
//! the wall clock as it goes; the times of one expression always strictly increase.

use std::collections::{BTreeMap, BTreeSet};

use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::model::invalid::Invalid;
use crate::model::schedule::{
    CatchUp, Constraint, EndStatus, MAX_CATCH_UP, ProgramId, Schedule, Trigger, clock_minutes,
};

/// A parsed cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct Cron {
    cron: croner::Cron,
    zone: TimeZone,
}

/// The time zone named `name` (IANA), or UTC for none; `field` names it in the error.
pub fn zone(field: &str, name: Option<&str>) -> Result<TimeZone, Invalid> {
    match name {
        None => Ok(TimeZone::UTC),
        Some(n) => TimeZone::get(n).map_err(|_| {
            Invalid::new(
                field,
                format!("'{n}' is not a known time zone (an IANA name such as Europe/Berlin)"),
            )
        }),
    }
}

impl Cron {
    /// Parses `expression` (5 fields, or 6 with leading seconds) in zone `zone_name`, and
    /// checks that it fires at all after `now`.
    pub fn parse(expression: &str, zone_name: Option<&str>, now: u64) -> Result<Cron, Invalid> {
        let field = "trigger.cronExpression";
        let fields = expression.split_whitespace().count();
        if !(5..=6).contains(&fields) && !expression.trim_start().starts_with('@') {
            return Err(Invalid::new(
                field,
                format!(
                    "'{expression}' has {fields} fields: a cron expression has 5 (minute hour day-of-month month day-of-week), or 6 with seconds first"
                ),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expression)
            .map_err(|e| Invalid::new(field, format!("'{expression}': {e}")))?;
        let cron = Cron {
            cron,
            zone: zone("trigger.timeZone", zone_name)?,
        };
        if cron.after(now).is_none() {
            return Err(Invalid::new(
                field,
                format!("'{expression}' never fires (no such date)"),
            ));
        }
        Ok(cron)
    }

    fn zoned(&self, ms: u64) -> Option<jiff::Zoned> {
        let t = Timestamp::from_millisecond(i64::try_from(ms).ok()?).ok()?;
        Some(t.to_zoned(self.zone.clone()))
    }

    /// Its first time strictly after `ms`.
    pub fn after(&self, ms: u64) -> Option<u64> {
        let next = self
            .cron
            .find_next_occurrence(&self.zoned(ms)?, false)
            .ok()?;
        let next = u64::try_from(next.timestamp().as_millisecond()).ok()?;
        // Whole seconds: a time inside the second of `ms` is not after it.
        (next > ms)
            .then_some(next)
            .or_else(|| self.after(ms + 1000))
    }

    /// Its last time at or before `ms`.
    pub fn at_or_before(&self, ms: u64) -> Option<u64> {
        let z = self.zoned(ms)?;
        let prev = self.cron.find_previous_occurrence(&z, true).ok()?;
        u64::try_from(prev.timestamp().as_millisecond())
            .ok()
            .filter(|p| *p <= ms)
    }

    /// Its next `count` times after `ms`.
    pub fn next(&self, ms: u64, count: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(count);
        let mut at = ms;
        while out.len() < count {
            match self.after(at) {
                Some(t) => {
                    out.push(t);
                    at = t;
                }
                None => break,
            }
        }
        out
    }
}

/// The cron expressions of a trigger: itself, or the time parts of its composites.
pub fn time_parts(trigger: &Trigger) -> Vec<(&str, Option<&str>)> {
    trigger
        .walk()
        .into_iter()
        .filter_map(|(_, t)| match t {
            Trigger::Time {
                cron_expression,
                time_zone,
            } => Some((cron_expression.as_str(), time_zone.as_deref())),
            Trigger::ProgramStatus { .. } | Trigger::And { .. } | Trigger::Or { .. } => None,
        })
        .collect()
}

/// The leaves of `trigger` (its times and program statuses) with their place in it: the
/// index of each among all its triggers, in [`Trigger::walk`] order.
pub fn leaves(trigger: &Trigger) -> Vec<(usize, &Trigger)> {
    trigger
        .walk()
        .into_iter()
        .enumerate()
        .filter(|(_, (_, t))| matches!(t, Trigger::Time { .. } | Trigger::ProgramStatus { .. }))
        .map(|(i, (_, t))| (i, t))
        .collect()
}

/// Whether `trigger` holds an `AND`: its leaves' fires are then parts, joined before the
/// schedule fires.
pub fn joins(trigger: &Trigger) -> bool {
    trigger
        .walk()
        .iter()
        .any(|(_, t)| matches!(t, Trigger::And { .. }))
}

/// The leaves of `trigger` (as [`leaves`] numbers them) that the end of run
/// `ns/app/program` with `status` meets, for a schedule in namespace `home`.
pub fn end_leaves(
    trigger: &Trigger,
    home: &str,
    ns: &str,
    app: &str,
    program: &str,
    status: EndStatus,
) -> Vec<usize> {
    leaves(trigger)
        .into_iter()
        .filter(|(_, t)| meets_end(t, home, ns, app, program, status))
        .map(|(i, _)| i)
        .collect()
}

/// Whether `trigger` is met when the leaves in `fired` (numbered as [`leaves`] numbers them)
/// have fired: the leaves that meet it (one way, the first found), or `None`.
pub fn satisfied(trigger: &Trigger, fired: &BTreeSet<usize>) -> Option<BTreeSet<usize>> {
    fn at(t: &Trigger, index: &mut usize, fired: &BTreeSet<usize>) -> Option<BTreeSet<usize>> {
        let me = *index;
        *index += 1;
        match t {
            Trigger::Time { .. } | Trigger::ProgramStatus { .. } => {
                fired.contains(&me).then(|| BTreeSet::from([me]))
            }
            Trigger::And { triggers } => {
                let mut used = BTreeSet::new();
                let mut all = true;
                for c in triggers {
                    match at(c, index, fired) {
                        Some(u) => used.extend(u),
                        None => all = false,
                    }
                }
                all.then_some(used)
            }
            Trigger::Or { triggers } => {
                let mut first = None;
                for c in triggers {
                    let u = at(c, index, fired);
                    if first.is_none() {
                        first = u;
                    }
                }
                first
            }
        }
    }
    at(trigger, &mut 0, fired)
}

/// Checks every cron expression and time zone of `trigger`.
pub fn check_trigger(trigger: &Trigger, now: u64) -> Result<(), Invalid> {
    for (expression, zone) in time_parts(trigger) {
        Cron::parse(expression, zone, now)?;
    }
    Ok(())
}

/// Checks the time zones of `constraints`.
pub fn check_constraints(constraints: &[Constraint]) -> Result<(), Invalid> {
    for (i, c) in constraints.iter().enumerate() {
        if let Constraint::TimeRange { time_zone, .. } = c {
            zone(&format!("constraints[{i}].timeZone"), time_zone.as_deref())?;
        }
    }
    Ok(())
}

/// The schedule property that copies the triggering run's runtime arguments into the
/// triggered run's (CDAP's `triggering.properties.mapping`, its `arguments` part):
/// `{"arguments": [{"source": "day", "target": "upstream.day"}]}`; `target` defaults to
/// `source`.
pub const MAPPING: &str = "triggering.properties.mapping";

/// Most arguments one mapping copies.
pub const MAX_MAPPED: usize = 64;

/// The (source, target) pairs of the mapping in `properties`, if any.
pub fn mapping(
    properties: &crate::model::property::Values,
) -> Result<Vec<(String, String)>, Invalid> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Mapping {
        #[serde(default)]
        arguments: Vec<Argument>,
        /// CDAP's plugin-property part: accepted, and has nothing to copy in ebb.
        #[serde(default, rename = "pluginProperties")]
        _plugin_properties: Vec<serde_json::Value>,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Argument {
        source: String,
        target: Option<String>,
        #[serde(default, rename = "pipelineId")]
        _pipeline: Option<serde_json::Value>,
    }
    let field = format!("properties.{MAPPING}");
    let Some(text) = properties.get(MAPPING) else {
        return Ok(Vec::new());
    };
    let m: Mapping = serde_json::from_str(text).map_err(|e| Invalid::new(&field, e.to_string()))?;
    if m.arguments.len() > MAX_MAPPED {
        return Err(Invalid::new(
            field,
            format!("at most {MAX_MAPPED} arguments"),
        ));
    }
    Ok(m.arguments
        .into_iter()
        .map(|a| {
            let target = a.target.unwrap_or_else(|| a.source.clone());
            (a.source, target)
        })
        .collect())
}

/// The fire times of one schedule between its last fire and now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Due {
    /// The times to start runs for, oldest first.
    pub run: Vec<u64>,
    /// The missed times not run, if any: recorded as one skip at the newest of them.
    pub skipped: Option<Skipped>,
}

/// Fire times missed and not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The newest of them, where the skip is recorded.
    pub time: u64,
    /// How many: exactly, or at least, if `more` (counting stops at [`MAX_COUNTED`]).
    pub count: usize,
    pub more: bool,
    /// The oldest of them.
    pub first: u64,
}

/// Most missed times [`due`] counts one by one.
pub const MAX_COUNTED: usize = 10_000;

/// Which times of `cron` after `cursor` (the last time fired, or when the schedule was
/// enabled) and at or before `now` to start runs for. A time later than `now - grace` is on
/// time and runs; older ones were missed (no server fired schedules then) and follow
/// `catch_up`: none runs, the newest runs, or the newest [`MAX_CATCH_UP`] run; the rest are
/// skipped.
pub fn due(cron: &Cron, cursor: u64, now: u64, grace: u64, catch_up: CatchUp) -> Due {
    let late = now.saturating_sub(grace);
    let mut missed = Vec::new();
    let mut run = Vec::new();
    let mut count = 0usize;
    let mut at = cursor;
    // Count the missed times forward (bounded), keeping the newest the policy runs.
    let keep = match catch_up {
        CatchUp::None => 0,
        CatchUp::Last => 1,
        CatchUp::All => MAX_CATCH_UP,
    };
    let mut first = None;
    while let Some(t) = cron.after(at).filter(|t| *t <= late) {
        count += 1;
        first.get_or_insert(t);
        if count > MAX_COUNTED {
            // Too many to walk: the newest ones are found walking back from `late`.
            break;
        }
        missed.push(t);
        at = t;
    }
    if count > MAX_COUNTED {
        missed.clear();
        let mut back = late;
        while missed.len() < keep.max(1) {
            match cron.at_or_before(back) {
                Some(t) if t > cursor => {
                    missed.push(t);
                    back = t.saturating_sub(1);
                }
                _ => break,
            }
        }
        missed.reverse();
        at = late;
    }
    let ran_missed = missed.split_off(missed.len().saturating_sub(keep));
    // The newest time skipped: the newest missed one not run.
    let newest_skipped = missed.last().copied().or_else(|| {
        let before = ran_missed.first().map_or(late, |t| t.saturating_sub(1));
        cron.at_or_before(before).filter(|t| *t > cursor)
    });
    let skipped_count = count.saturating_sub(ran_missed.len());
    run.extend(ran_missed);
    while let Some(t) = cron.after(at).filter(|t| *t <= now) {
        run.push(t);
        at = t;
    }
    let skipped = match (skipped_count, first, newest_skipped) {
        (0, _, _) | (_, None, _) | (_, _, None) => None,
        (n, Some(first), Some(time)) => Some(Skipped {
            time,
            count: n,
            more: count > MAX_COUNTED,
            first,
        }),
    };
    Due { run, skipped }
}

/// Whether the end of run `run` of `ns/app/program` with `status` meets `trigger` (itself or
/// any part of an `OR`), for a schedule in namespace `home`.
pub fn meets_end(
    trigger: &Trigger,
    home: &str,
    ns: &str,
    app: &str,
    program: &str,
    status: EndStatus,
) -> bool {
    match trigger {
        Trigger::ProgramStatus {
            program_id,
            program_statuses,
        } => watches(program_id, home, ns, app, program) && program_statuses.contains(&status),
        Trigger::Or { triggers } => triggers
            .iter()
            .any(|t| meets_end(t, home, ns, app, program, status)),
        // An AND's parts are joined: see `joins` and `end_leaves`.
        Trigger::And { .. } | Trigger::Time { .. } => false,
    }
}

/// Whether `id` names program `ns/app/program`, for a schedule in namespace `home`.
fn watches(id: &ProgramId, home: &str, ns: &str, app: &str, program: &str) -> bool {
    id.namespace.as_deref().unwrap_or(home) == ns && id.application == app && id.program == program
}

/// The program schedule `s` starts: `ns/app/program`.
fn started(s: &Schedule) -> String {
    format!(
        "{}/{}/{}",
        s.namespace, s.application, s.program.program_name
    )
}

/// The programs whose ends schedule `s`'s program-status triggers watch: `ns/app/program`.
fn watched(s: &Schedule) -> Vec<String> {
    s.trigger
        .walk()
        .into_iter()
        .filter_map(|(_, t)| match t {
            Trigger::ProgramStatus { program_id, .. } => Some(format!(
                "{}/{}/{}",
                program_id.namespace.as_deref().unwrap_or(&s.namespace),
                program_id.application,
                program_id.program
            )),
            Trigger::Time { .. } | Trigger::And { .. } | Trigger::Or { .. } => None,
        })
        .collect()
}

/// The loop schedule `s` would close among `others` (the other schedules of its namespace,
/// whatever their status: a suspended one may be resumed), if any: the programs from the one
/// whose end fires `s` round to it again, each starting the next. A program that a run's end
/// starts again and again (itself, or through others) would run for ever, and a refused start
/// is an end like the others.
pub fn trigger_loop(s: &Schedule, others: &[Schedule]) -> Option<Vec<String>> {
    let watching = watched(s);
    if watching.is_empty() {
        return None;
    }
    let start = started(s);
    // Which programs each program's end starts, through the other schedules.
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for other in others {
        for w in watched(other) {
            edges.entry(w).or_default().push(started(other));
        }
    }
    // From the program `s` starts, along the edges: does a path reach a program `s` watches?
    let mut before: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    let mut seen = BTreeSet::from([start.clone()]);
    while let Some(p) = queue.pop_front() {
        if watching.contains(&p) {
            let mut path = vec![p.clone()];
            let mut at = p;
            while let Some(prev) = before.get(&at) {
                path.push(prev.clone());
                at = prev.clone();
            }
            path.reverse();
            // The end of the last starts `s`'s program, the first: round again.
            path.push(start);
            return Some(path);
        }
        for next in edges.get(&p).into_iter().flatten() {
            if seen.insert(next.clone()) {
                before.insert(next.clone(), p.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

/// What a fire's constraints need to know, read from the store at the time of judging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub now: u64,
    /// When the fire happened.
    pub fired: u64,
    /// Runs of the program that hold a cluster (any origin, provisioning included).
    pub active: usize,
    /// The newest run of the program that did not fail: when it started (epoch ms).
    pub last_run: Option<u64>,
    /// How long the fire may wait, from `fired`.
    pub timeout: u64,
}

/// Whether a fire may start its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Go,
    /// Not yet: judge again at `until` at the latest (sooner if something may change it).
    Wait {
        reason: String,
        until: u64,
    },
    /// Never: the reason is recorded.
    Skip {
        reason: String,
    },
}

/// How often a waiting fire whose wait has no known end (a concurrency limit) is judged again.
pub const RECHECK: u64 = 1000;

/// Judges `constraints` for a fire with `facts`: the first unmet constraint decides (skip if it
/// does not wait, or if the fire has waited its `timeout`).
pub fn judge(constraints: &[Constraint], facts: &Facts) -> Verdict {
    let deadline = facts.fired.saturating_add(facts.timeout);
    for c in constraints {
        let Some((reason, until)) = unmet(c, facts) else {
            continue;
        };
        if !c.waits() {
            return Verdict::Skip { reason };
        }
        if facts.now >= deadline || until > deadline {
            return Verdict::Skip {
                reason: format!(
                    "{reason}, and the fire may wait at most {} ms (timeoutMillis)",
                    facts.timeout
                ),
            };
        }
        return Verdict::Wait { reason, until };
    }
    Verdict::Go
}

/// Why `c` is not met for `facts`, and when it may be; `None` if it is met.
fn unmet(c: &Constraint, facts: &Facts) -> Option<(String, u64)> {
    let now = facts.now;
    match c {
        Constraint::Concurrency {
            max_concurrency, ..
        } => (facts.active >= *max_concurrency as usize).then(|| {
            (
                format!(
                    "{} run(s) of the program hold a cluster (maxConcurrency {max_concurrency})",
                    facts.active
                ),
                now + RECHECK,
            )
        }),
        Constraint::Delay {
            millis_after_trigger,
            ..
        } => {
            let at = facts.fired.saturating_add(*millis_after_trigger);
            (now < at).then(|| {
                (
                    format!("delayed {millis_after_trigger} ms after the fire"),
                    at,
                )
            })
        }
        Constraint::TimeRange {
            start_time,
            end_time,
            time_zone,
            ..
        } => {
            let start = clock_minutes("startTime", start_time).ok()?;
            let end = clock_minutes("endTime", end_time).ok()?;
            let zone = zone("timeZone", time_zone.as_deref()).ok()?;
            let local = Timestamp::from_millisecond(i64::try_from(now).ok()?)
                .ok()?
                .to_zoned(zone);
            let minute =
                u32::try_from(local.hour()).ok()? * 60 + u32::try_from(local.minute()).ok()?;
            let inside = if start < end {
                (start..end).contains(&minute)
            } else {
                minute >= start || minute < end
            };
            (!inside).then(|| {
                // Judged again each minute: a DST change moves the window's start.
                let to_next_minute = 60_000 - (now % 60_000);
                (
                    format!(
                        "outside {start_time}-{end_time} {}",
                        time_zone.as_deref().unwrap_or("UTC")
                    ),
                    now + to_next_minute,
                )
            })
        }
        Constraint::LastRun {
            millis_since_last_run,
            ..
        } => {
            let last = facts.last_run?;
            let free_at = last.saturating_add(*millis_since_last_run);
            (now < free_at).then(|| {
                (
                    format!(
                        "a run of the program started less than {millis_since_last_run} ms ago"
                    ),
                    free_at,
                )
            })
        }
    }
}

/// The run id a fire starts: a UUIDv7 whose time is the fire's and whose other bits come from
/// the fire's identity, so the same fire always names the same run.
pub fn run_id(schedule_path: &str, fire: &str, time: u64) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{schedule_path}\n{fire}").as_bytes());
    let mut bytes = [0u8; 10];
    bytes.copy_from_slice(&digest[..10]);
    uuid::Builder::from_unix_timestamp_millis(time, &bytes)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Schedule `name` of app `app` in `default`, starting its program `p` after the end of
    /// each of `after` (`app/program`, or `ns/app/program`), joined by OR.
    fn chained(app: &str, name: &str, after: &[&str]) -> Schedule {
        use crate::model::schedule::{ScheduleProgram, ScheduleStatus};
        let leaf = |w: &str| {
            let parts: Vec<&str> = w.split('/').collect();
            let (namespace, application, program) = match parts.as_slice() {
                [ns, a, p] => (Some(ns.to_string()), a.to_string(), p.to_string()),
                [a, p] => (None, a.to_string(), p.to_string()),
                _ => panic!("{w}"),
            };
            Trigger::ProgramStatus {
                program_id: ProgramId {
                    namespace,
                    application,
                    program,
                    version: None,
                    program_type: None,
                    entity: None,
                },
                program_statuses: vec![EndStatus::Completed],
            }
        };
        let trigger = match after {
            [] => Trigger::Time {
                cron_expression: "* * * * *".into(),
                time_zone: None,
            },
            [one] => leaf(one),
            many => Trigger::Or {
                triggers: many.iter().map(|w| leaf(w)).collect(),
            },
        };
        Schedule {
            namespace: "default".into(),
            application: app.into(),
            name: name.into(),
            description: String::new(),
            program: ScheduleProgram {
                program_name: "p".into(),
                program_type: "WORKFLOW".into(),
            },
            properties: Default::default(),
            trigger,
            constraints: vec![],
            timeout_millis: 1000,
            catch_up: CatchUp::None,
            status: ScheduleStatus::Suspended,
            last_update_time: 0,
            enabled_at: None,
            updated_by: None,
        }
    }

    #[test]
    fn schedules_may_chain_but_not_loop() {
        let (a, b, c) = ("default/a/p", "default/b/p", "default/c/p");
        // Its own program, alone or in an OR, in any status.
        assert_eq!(
            trigger_loop(&chained("a", "s", &["a/p"]), &[]),
            Some(vec![a.to_string(), a.to_string()])
        );
        assert!(trigger_loop(&chained("a", "s", &["x/p", "default/a/p"]), &[]).is_some());
        // A chain a → b → c is fine; c → a closes it, through both others.
        let others = [chained("b", "s", &["a/p"]), chained("c", "s", &["b/p"])];
        assert_eq!(trigger_loop(&chained("a", "s", &[]), &others), None);
        assert_eq!(trigger_loop(&chained("d", "s", &["c/p"]), &others), None);
        assert_eq!(
            trigger_loop(&chained("a", "s", &["c/p"]), &others),
            Some(vec![a.into(), b.into(), c.into(), a.into()])
        );
        // Another namespace's program of the same name is another program.
        assert_eq!(
            trigger_loop(&chained("a", "s", &["team/c/p"]), &others),
            None
        );
    }

    fn ms(s: &str) -> u64 {
        s.parse::<Timestamp>().expect("time").as_millisecond() as u64
    }

    fn cron(e: &str, z: Option<&str>) -> Cron {
        Cron::parse(e, z, ms("2024-01-01T00:00:00Z")).expect("parses")
    }

    #[test]
    fn five_and_six_fields_parse_and_others_do_not() {
        let every_2s = cron("*/2 * * * * *", None);
        let t = ms("2024-05-01T10:00:01Z");
        assert_eq!(every_2s.next(t, 3), vec![t + 1000, t + 3000, t + 5000]);
        let nightly = cron("0 4 * * *", Some("Europe/Berlin"));
        assert_eq!(nightly.after(t), Some(ms("2024-05-02T02:00:00Z")));
        let now = ms("2024-01-01T00:00:00Z");
        for (bad, says) in [
            ("* * * *", "4 fields"),
            ("0 0 0 1 1 * 2030", "7 fields"),
            ("61 * * * *", "61 * * * *"),
            ("0 0 31 2 *", "never fires"),
        ] {
            let e = Cron::parse(bad, None, now).expect_err(bad);
            assert_eq!(e.field, "trigger.cronExpression");
            assert!(e.message.contains(says), "{bad}: {e}");
        }
        let e = Cron::parse("* * * * *", Some("Mars/Olympus"), now).expect_err("zone");
        assert_eq!(e.field, "trigger.timeZone");
    }

    #[test]
    fn dst_gaps_run_after_the_gap_and_folds_run_once() {
        // New York: spring forward 2024-03-10 02:00 → 03:00; fall back 2024-11-03 02:00 → 01:00.
        let gap = cron("30 2 * * *", Some("America/New_York"));
        let times = gap.next(ms("2024-03-09T12:00:00Z"), 2);
        assert_eq!(
            times,
            vec![ms("2024-03-10T07:00:00Z"), ms("2024-03-11T06:30:00Z")]
        );
        let fold = cron("30 1 * * *", Some("America/New_York"));
        let times = fold.next(ms("2024-11-02T12:00:00Z"), 2);
        assert_eq!(
            times,
            vec![ms("2024-11-03T05:30:00Z"), ms("2024-11-04T06:30:00Z")]
        );
        // Every 30 minutes runs on both halves of the fold, in order.
        let half = cron("*/30 * * * *", Some("America/New_York"));
        let times = half.next(ms("2024-11-03T04:50:00Z"), 5);
        assert_eq!(
            times,
            vec![
                ms("2024-11-03T05:00:00Z"),
                ms("2024-11-03T05:30:00Z"),
                ms("2024-11-03T06:00:00Z"),
                ms("2024-11-03T06:30:00Z"),
                ms("2024-11-03T07:00:00Z"),
            ]
        );
    }

    #[test]
    fn times_strictly_increase_across_every_change_of_some_zones() {
        // Zones whose change happens at midnight too (Santiago, Cairo, São Paulo until 2019).
        for zone in [
            "America/New_York",
            "Europe/Berlin",
            "America/Santiago",
            "Africa/Cairo",
            "America/Sao_Paulo",
            "Australia/Lord_Howe",
        ] {
            for expression in ["0 0 * * *", "30 2 * * *", "0 */2 * * *", "15 0,1,2,3 * * *"] {
                let c = cron(expression, Some(zone));
                let mut at = ms("2016-01-01T00:00:00Z");
                let end = ms("2025-01-01T00:00:00Z");
                while at < end {
                    let next = c.after(at).expect("fires");
                    assert!(next > at, "{zone} {expression}: {next} after {at}");
                    at = next;
                }
            }
        }
    }

    #[test]
    fn on_time_fires_run_and_missed_ones_follow_the_policy() {
        let c = cron("*/2 * * * * *", None);
        let t0 = ms("2024-05-01T10:00:00Z");
        // 4 s of fires, all within the grace: all run.
        let d = due(&c, t0, t0 + 4000, 10_000, CatchUp::None);
        assert_eq!(d.run, vec![t0 + 2000, t0 + 4000]);
        assert_eq!(d.skipped, None);
        // Down for 100 s with a 10 s grace: 45 missed (t0+2 … t0+90), 5 on time.
        let now = t0 + 100_000;
        let on_time: Vec<u64> = (46..=50).map(|i| t0 + i * 2000).collect();
        let none = due(&c, t0, now, 10_000, CatchUp::None);
        assert_eq!(none.run, on_time);
        assert_eq!(
            none.skipped,
            Some(Skipped {
                time: t0 + 90_000,
                count: 45,
                more: false,
                first: t0 + 2000
            })
        );
        let last = due(&c, t0, now, 10_000, CatchUp::Last);
        assert_eq!(last.run[0], t0 + 90_000);
        assert_eq!(&last.run[1..], &on_time[..]);
        assert_eq!(
            last.skipped.as_ref().map(|s| (s.time, s.count)),
            Some((t0 + 88_000, 44))
        );
        let all = due(&c, t0, now, 10_000, CatchUp::All);
        assert_eq!(all.run.len(), 50);
        assert_eq!(all.skipped, None);
    }

    #[test]
    fn a_long_outage_is_counted_within_bounds() {
        let c = cron("* * * * * *", None);
        let t0 = ms("2024-05-01T00:00:00Z");
        let now = t0 + 3 * 86_400_000;
        let d = due(&c, t0, now, 10_000, CatchUp::All);
        assert_eq!(d.run.len(), MAX_CATCH_UP + 10);
        assert!(d.run.windows(2).all(|w| w[0] < w[1]));
        let s = d.skipped.expect("skipped");
        assert!(s.more && s.count >= MAX_COUNTED - MAX_CATCH_UP, "{s:?}");
        assert_eq!(s.time, now - 10_000 - MAX_CATCH_UP as u64 * 1000);
    }

    fn facts(now: u64) -> Facts {
        Facts {
            now,
            fired: 1_000_000,
            active: 0,
            last_run: None,
            timeout: 60_000,
        }
    }

    #[test]
    fn constraints_wait_or_skip() {
        let j = |v| serde_json::from_value::<Constraint>(v).expect("constraint");
        let conc = j(serde_json::json!({"type": "CONCURRENCY", "maxConcurrency": 1}));
        let busy = Facts {
            active: 1,
            ..facts(1_000_000)
        };
        assert!(matches!(
            judge(std::slice::from_ref(&conc), &busy),
            Verdict::Skip { .. }
        ));
        assert_eq!(judge(&[conc], &facts(1_000_000)), Verdict::Go);
        let wait = j(
            serde_json::json!({"type": "CONCURRENCY", "maxConcurrency": 1, "waitUntilMet": true}),
        );
        assert!(matches!(
            judge(std::slice::from_ref(&wait), &busy),
            Verdict::Wait { .. }
        ));
        let late = Facts {
            now: 1_000_000 + 60_000,
            ..busy
        };
        match judge(&[wait], &late) {
            Verdict::Skip { reason } => assert!(reason.contains("timeoutMillis"), "{reason}"),
            v @ (Verdict::Go | Verdict::Wait { .. }) => panic!("{v:?}"),
        }
        let delay = j(serde_json::json!({"type": "DELAY", "millisAfterTrigger": 5000}));
        assert_eq!(
            judge(std::slice::from_ref(&delay), &facts(1_001_000)),
            Verdict::Wait {
                reason: "delayed 5000 ms after the fire".into(),
                until: 1_005_000
            }
        );
        assert_eq!(judge(&[delay], &facts(1_005_000)), Verdict::Go);
        let recent = Facts {
            last_run: Some(990_000),
            ..facts(1_000_000)
        };
        let last = j(serde_json::json!({"type": "LAST_RUN", "millisSinceLastRun": 20000}));
        assert!(matches!(
            judge(std::slice::from_ref(&last), &recent),
            Verdict::Skip { .. }
        ));
        let old = Facts {
            last_run: Some(900_000),
            ..facts(1_000_000)
        };
        assert_eq!(judge(&[last], &old), Verdict::Go);
    }

    #[test]
    fn a_time_range_may_wrap_midnight_in_its_zone() {
        let j = |v| serde_json::from_value::<Constraint>(v).expect("constraint");
        let night = j(
            serde_json::json!({"type": "TIME_RANGE", "startTime": "22:00",
            "endTime": "06:00", "timeZone": "Europe/Berlin", "waitUntilMet": false}),
        );
        let at = |t: &str| Facts {
            now: ms(t),
            fired: ms(t),
            ..facts(0)
        };
        // 23:30 and 05:59 Berlin (summer, UTC+2) are inside; 12:00 is not.
        assert_eq!(
            judge(std::slice::from_ref(&night), &at("2024-07-01T21:30:00Z")),
            Verdict::Go
        );
        assert_eq!(
            judge(std::slice::from_ref(&night), &at("2024-07-02T03:59:00Z")),
            Verdict::Go
        );
        assert!(matches!(
            judge(&[night], &at("2024-07-02T10:00:00Z")),
            Verdict::Skip { .. }
        ));
    }

    #[test]
    fn a_fire_always_names_the_same_run() {
        let a = run_id("default/app/s", "t0001700000000000", 1_700_000_000_000);
        assert_eq!(
            a,
            run_id("default/app/s", "t0001700000000000", 1_700_000_000_000)
        );
        assert_ne!(
            a,
            run_id("default/app/t", "t0001700000000000", 1_700_000_000_000)
        );
        let u = uuid::Uuid::parse_str(&a).expect("uuid");
        assert_eq!(u.get_version_num(), 7);
        let (secs, _) = u.get_timestamp().expect("time").to_unix();
        assert_eq!(secs, 1_700_000_000);
    }

    #[test]
    fn an_and_is_met_once_each_part_has_fired() {
        // AND(time 0, OR(status 2, status 3), time 4): walk order 0 AND, 1 TIME, 2 OR, 3 PS, 4 PS, 5 TIME.
        let t: Trigger = serde_json::from_value(serde_json::json!({"type": "AND", "triggers": [
            {"type": "TIME", "cronExpression": "0 4 * * *"},
            {"type": "OR", "triggers": [
                {"type": "PROGRAM_STATUS", "programStatuses": ["COMPLETED"],
                 "programId": {"application": "a", "program": "p"}},
                {"type": "PROGRAM_STATUS", "programStatuses": ["COMPLETED"],
                 "programId": {"application": "b", "program": "p"}}]},
            {"type": "TIME", "cronExpression": "0 5 * * *"}]}))
        .expect("trigger");
        let numbers: Vec<usize> = leaves(&t).into_iter().map(|(i, _)| i).collect();
        assert_eq!(numbers, vec![1, 3, 4, 5]);
        assert!(joins(&t));
        let set = |v: &[usize]| v.iter().copied().collect::<BTreeSet<usize>>();
        assert_eq!(satisfied(&t, &set(&[1, 5])), None);
        assert_eq!(satisfied(&t, &set(&[1, 4, 5])), Some(set(&[1, 4, 5])));
        assert_eq!(satisfied(&t, &set(&[1, 3, 4, 5])), Some(set(&[1, 3, 5])));
        assert_eq!(
            end_leaves(&t, "ns", "ns", "b", "p", EndStatus::Completed),
            vec![4]
        );
        assert!(!meets_end(&t, "ns", "ns", "b", "p", EndStatus::Completed));
    }

    #[test]
    fn run_ends_meet_the_triggers_that_name_them() {
        let t: Trigger = serde_json::from_value(serde_json::json!({"type": "OR", "triggers": [
            {"type": "TIME", "cronExpression": "0 4 * * *"},
            {"type": "PROGRAM_STATUS", "programStatuses": ["COMPLETED", "FAILED"],
             "programId": {"application": "a", "program": "p"}}]}))
        .expect("trigger");
        assert!(meets_end(&t, "ns", "ns", "a", "p", EndStatus::Failed));
        assert!(!meets_end(&t, "ns", "ns", "a", "p", EndStatus::Killed));
        assert!(!meets_end(&t, "ns", "other", "a", "p", EndStatus::Failed));
        assert!(!meets_end(&t, "ns", "ns", "a", "q", EndStatus::Completed));
    }
}
