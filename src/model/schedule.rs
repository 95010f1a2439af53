//! Schedules of a program, as CDAP's v3 API spells them (`ScheduleDetail`): what starts runs
//! without anyone calling `start`. A schedule has a trigger (a cron time, the end of another
//! program's run, or a composite of those), constraints a fire must meet, and properties that
//! are a level of the profile hierarchy of its runs. Each fire is recorded ([`Fire`]) under an
//! identity derived from the schedule and what fired it, in the same write as the run it
//! starts, so it happens once.
//!
//! This module checks shapes and bounds; whether a cron expression parses and ever fires, and
//! what a fire decides, is `rules::schedule`'s.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::names;
use crate::model::property::Values;

/// The program type a schedule may start: CDAP schedules only workflows.
pub const WORKFLOW: &str = "WORKFLOW";

/// Most schedules a namespace may hold.
pub const MAX_PER_NAMESPACE: usize = 20_000;
/// Deepest nesting of composite triggers (a leaf inside an `OR` is depth 2).
pub const MAX_DEPTH: usize = 4;
/// The longest chain of program-status fires (a run's end starting a run whose end starts
/// another...): a fire past it is skipped and recorded, so schedules that trigger each other
/// across namespaces cannot fire for ever.
pub const MAX_CHAIN: u32 = 16;
/// Most triggers in one schedule, composites included.
pub const MAX_TRIGGERS: usize = 32;
/// Most constraints of one schedule.
pub const MAX_CONSTRAINTS: usize = 8;
/// Most properties of one schedule.
pub const MAX_PROPERTIES: usize = 256;
/// The most bytes of a schedule's properties, names and values together: each of its fires
/// copies them into a run.
pub const MAX_PROPERTIES_BYTES: usize = 64 * 1024;
/// The most schedules one list answers (a namespace may hold [`MAX_PER_NAMESPACE`]): the
/// rest are on the pages after (`?after=app/name`).
pub const LIST_PAGE: usize = 1000;
/// The most fires of one part of an `AND` that wait for the others: the oldest go first.
pub const MAX_PARTS: usize = 32;
/// Longest description, in bytes.
pub const MAX_DESCRIPTION: usize = 4096;
/// Longest cron expression or time zone name, in bytes.
pub const MAX_EXPRESSION: usize = 200;
/// Most fire times one catch-up starts runs for (`catchUp: all`); older ones are skipped.
pub const MAX_CATCH_UP: usize = 100;
/// Longest a fire may wait for its constraints (`timeoutMillis`): 30 days.
pub const MAX_TIMEOUT_MILLIS: u64 = 30 * 24 * 3600 * 1000;
/// CDAP's default `timeoutMillis`: one day.
pub const DEFAULT_TIMEOUT_MILLIS: u64 = 24 * 3600 * 1000;

/// Whether a schedule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ScheduleStatus {
    /// It fires.
    Scheduled,
    /// It does not: a new schedule is suspended until enabled, as in CDAP.
    #[default]
    Suspended,
}

display_as_serde!(ScheduleStatus, CatchUp, EndStatus);

/// What a schedule does with the fire times it missed while no server could fire it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// Skip them (each skip is recorded).
    #[default]
    None,
    /// Start one run for the newest, skip the rest.
    Last,
    /// Start one run for each, the newest [`MAX_CATCH_UP`] at most; skip the rest.
    All,
}

/// A run end a program-status trigger may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EndStatus {
    Completed,
    Failed,
    Killed,
    /// Refused before it began (a disabled profile, a limit): CDAP cannot trigger on it.
    Rejected,
}

/// The program a program-status trigger watches. CDAP clients send `version`, `type` and
/// `entity` too: they are accepted and must say what ebb has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProgramId {
    /// Default: the schedule's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub application: String,
    pub program: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `WORKFLOW` if given.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub program_type: Option<String>,
    /// `PROGRAM` if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
}

/// What fires a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE", deny_unknown_fields)]
pub enum Trigger {
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with a
    /// leading seconds field; in `timeZone` (IANA, default UTC).
    #[serde(rename_all = "camelCase")]
    Time {
        cron_expression: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time_zone: Option<String>,
    },
    /// Each run of `programId` that ends with one of `programStatuses`.
    #[serde(rename_all = "camelCase")]
    ProgramStatus {
        program_id: ProgramId,
        program_statuses: Vec<EndStatus>,
    },
    /// When every part has fired within the schedule's `timeoutMillis`.
    And { triggers: Vec<Trigger> },
    /// When any part fires.
    Or { triggers: Vec<Trigger> },
}

impl Trigger {
    /// Every trigger in this one, itself first, with its depth (1 for this one).
    pub fn walk(&self) -> Vec<(usize, &Trigger)> {
        let mut out = Vec::new();
        let mut stack = vec![(1, self)];
        while let Some((depth, t)) = stack.pop() {
            out.push((depth, t));
            if let Trigger::And { triggers } | Trigger::Or { triggers } = t {
                stack.extend(triggers.iter().rev().map(|c| (depth + 1, c)));
            }
        }
        out
    }

    /// The trigger in a line: `cron '0 4 * * *' Europe/Berlin`, `after ns/app/p COMPLETED`.
    pub fn summary(&self) -> String {
        match self {
            Trigger::Time {
                cron_expression,
                time_zone,
            } => format!(
                "cron '{cron_expression}' {}",
                time_zone.as_deref().unwrap_or("UTC")
            ),
            Trigger::ProgramStatus {
                program_id,
                program_statuses,
            } => {
                let statuses: Vec<String> =
                    program_statuses.iter().map(ToString::to_string).collect();
                format!(
                    "after {}/{}/{} {}",
                    program_id
                        .namespace
                        .as_deref()
                        .unwrap_or("(same namespace)"),
                    program_id.application,
                    program_id.program,
                    statuses.join("|")
                )
            }
            Trigger::And { triggers } | Trigger::Or { triggers } => {
                let parts: Vec<String> = triggers.iter().map(Trigger::summary).collect();
                let joint = if matches!(self, Trigger::And { .. }) {
                    " and "
                } else {
                    " or "
                };
                format!("({})", parts.join(joint))
            }
        }
    }

    /// Its category as CDAP's `trigger-type` query names it.
    pub fn category(&self) -> &'static str {
        match self {
            Trigger::Time { .. } => "time",
            Trigger::ProgramStatus { .. } => "program-status",
            Trigger::And { .. } => "and",
            Trigger::Or { .. } => "or",
        }
    }
}

/// A condition a fire must meet before its run starts. With `waitUntilMet` the fire waits
/// (until the schedule's `timeoutMillis`); without, it is skipped. Left out, `waitUntilMet`
/// takes CDAP's default for the type (`DELAY` and `TIME_RANGE` wait; the others skip).
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE", deny_unknown_fields)]
pub enum Constraint {
    /// At most `maxConcurrency` runs of the program hold a cluster (any origin, provisioning
    /// included).
    #[serde(rename_all = "camelCase")]
    Concurrency {
        max_concurrency: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_until_met: Option<bool>,
    },
    /// The run starts `millisAfterTrigger` after the fire.
    #[serde(rename_all = "camelCase")]
    Delay {
        millis_after_trigger: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_until_met: Option<bool>,
    },
    /// Only between `startTime` and `endTime` (`HH:mm`, the window may wrap midnight) in
    /// `timeZone` (default UTC).
    #[serde(rename_all = "camelCase")]
    TimeRange {
        start_time: String,
        end_time: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time_zone: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_until_met: Option<bool>,
    },
    /// Only if no run of the program started within the last `millisSinceLastRun`, unless it
    /// failed.
    #[serde(rename_all = "camelCase")]
    LastRun {
        millis_since_last_run: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_until_met: Option<bool>,
    },
}

impl Constraint {
    /// Whether a fire that does not meet it waits (else it is skipped).
    pub fn waits(&self) -> bool {
        match self {
            Constraint::Concurrency { wait_until_met, .. }
            | Constraint::LastRun { wait_until_met, .. } => wait_until_met.unwrap_or(false),
            Constraint::Delay { wait_until_met, .. }
            | Constraint::TimeRange { wait_until_met, .. } => wait_until_met.unwrap_or(true),
        }
    }
}

/// The program a schedule starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleProgram {
    pub program_name: String,
    /// `WORKFLOW` (CDAP's spelling; `workflows` is accepted too).
    pub program_type: String,
}

/// The body of `PUT` (create) and `POST` (update) of a schedule. On update every field left
/// out keeps its value. `namespace` and `application`, which CDAP clients send, must match
/// the path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "name": "nightly",
    "description": "Every night at 4",
    "program": {"programName": "etl", "programType": "WORKFLOW"},
    "properties": {"system.profile.name": "USER:spark-small"},
    "trigger": {"type": "TIME", "cronExpression": "0 4 * * *", "timeZone": "Europe/Berlin"},
    "constraints": [{"type": "CONCURRENCY", "maxConcurrency": 1}],
    "status": "SCHEDULED"
}))]
pub struct ScheduleBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ScheduleProgram>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<Values>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<Vec<Constraint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_millis: Option<u64>,
    /// `SCHEDULED` to enable it at once (a new schedule is `SUSPENDED` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ScheduleStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<CatchUp>,
    /// Accepted from CDAP clients, and ignored: the server keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<u64>,
}

/// A schedule as stored and shown (CDAP's `ScheduleDetail`, with what ebb adds).
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    pub namespace: String,
    pub application: String,
    pub name: String,
    pub description: String,
    pub program: ScheduleProgram,
    /// A level of the profile hierarchy of its runs, above program preferences.
    pub properties: Values,
    pub trigger: Trigger,
    pub constraints: Vec<Constraint>,
    /// How long a fire may wait for its constraints (and an `AND` for all its parts).
    pub timeout_millis: u64,
    pub catch_up: CatchUp,
    pub status: ScheduleStatus,
    /// When it last changed, epoch ms.
    pub last_update_time: u64,
    /// When it last became `SCHEDULED`, epoch ms: it fires for times after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_at: Option<u64>,
    /// The token that last changed it (or enabled or disabled it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
}

impl Schedule {
    /// Its name as the history of its runs shows it: `ns/app/name`.
    pub fn path(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.application, self.name)
    }
}

/// One fire of a schedule: recorded in the same write as the run it starts (or instead of
/// it), under an identity derived from what fired it, so it happens once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fire {
    pub schedule: String,
    /// `t<epoch ms>` for a time, `r<run id>` for the end of a run.
    pub id: String,
    /// The time it fired for (epoch ms): the cron time, or when the triggering run ended.
    pub time: u64,
    /// When it was recorded (epoch ms).
    pub recorded: u64,
    pub outcome: FireOutcome,
    /// The run whose end fired it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggering: Option<TriggeringRun>,
    /// The server that recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// What became of a fire.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FireOutcome {
    /// Its run was recorded (it may since have been REJECTED: see the run).
    Started { run: String },
    /// No run: `reason` says why (missed while no server could fire it, a constraint, the
    /// schedule suspended or changed, timed out waiting).
    Skipped { reason: String },
    /// Waiting for a constraint (`reason`).
    Waiting { reason: String },
    /// A part of an `AND`, kept until the other parts fire too (`reason` says which).
    Part { reason: String },
}

/// The parts of a schedule's `AND` that fired and wait for the others, each a list of the
/// fires of one leaf of its trigger (numbered as `rules::schedule::leaves` numbers them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Join {
    /// The schedule's `lastUpdateTime` the parts are for: a changed schedule starts afresh.
    pub version: u64,
    pub parts: std::collections::BTreeMap<usize, Vec<PartFire>>,
}

/// One fire of a leaf of an `AND`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartFire {
    pub id: String,
    pub time: u64,
    #[serde(default)]
    pub args: Values,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggering: Option<TriggeringRun>,
}

/// The run whose end fired a program-status trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggeringRun {
    pub namespace: String,
    pub application: String,
    pub program: String,
    pub run: String,
    pub status: EndStatus,
}

/// What started a run, kept in its record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartedBy {
    /// `ns/app/name` of the schedule.
    pub schedule: String,
    /// The fire's id (see [`Fire::id`]).
    pub fire: String,
    /// The time it fired for, epoch ms.
    pub time: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggering: Option<TriggeringRun>,
    /// How many program-status fires led to the run: 0 for a time's, the triggering run's
    /// and one for a run end's (see [`MAX_CHAIN`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl StartedBy {
    /// What fired, for a run's history: "the time 2026-11-26T04:00:00Z", "the end of run
    /// ... (COMPLETED)".
    pub fn describe(&self) -> String {
        match &self.triggering {
            Some(t) => format!(
                "the end of run {} of {}/{}/{} ({})",
                t.run, t.namespace, t.application, t.program, t.status
            ),
            None => format!("the time {}", crate::model::schedule::iso(self.time)),
        }
    }
}

/// Epoch ms as an RFC 3339 time in UTC (the epoch itself if out of range).
pub fn iso(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// A run end waiting for the scheduler to fire the program-status triggers it meets: written
/// in the same write as the end, removed once its fires are recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEnd {
    pub run: TriggeringRun,
    /// When it ended, epoch ms.
    pub time: u64,
    /// Its runtime arguments, which a triggered run may copy.
    #[serde(default)]
    pub args: Values,
    /// How many program-status fires led to the run that ended ([`StartedBy::depth`]).
    #[serde(default)]
    pub depth: u32,
}

/// Schedule `ns/app/name` as `body` makes it: a new one (`old` none: `program` and `trigger`
/// required, `SUSPENDED` unless the body says otherwise), or `old` with the fields the body
/// gives (its program cannot change), changed by `by` at `now` (epoch ms). Unchecked: see
/// [`check`].
pub fn merge(
    (ns, app, name): (&str, &str, &str),
    body: &ScheduleBody,
    old: Option<&Schedule>,
    by: &str,
    now: u64,
) -> Result<Schedule, Invalid> {
    for (field, given, path) in [
        ("name", &body.name, name),
        ("namespace", &body.namespace, ns),
        ("application", &body.application, app),
    ] {
        if let Some(g) = given
            && g != path
        {
            return Err(Invalid::new(
                field,
                format!("'{g}' differs from the path's '{path}'"),
            ));
        }
    }
    let Some(old) = old else {
        let program = body
            .program
            .clone()
            .ok_or_else(|| Invalid::new("program", "required: {programName, programType}"))?;
        let trigger = body
            .trigger
            .clone()
            .ok_or_else(|| Invalid::new("trigger", "required"))?;
        let status = body.status.unwrap_or_default();
        return Ok(Schedule {
            namespace: ns.to_string(),
            application: app.to_string(),
            name: name.to_string(),
            description: body.description.clone().unwrap_or_default(),
            program,
            properties: body.properties.clone().unwrap_or_default(),
            trigger,
            constraints: body.constraints.clone().unwrap_or_default(),
            timeout_millis: body.timeout_millis.unwrap_or(DEFAULT_TIMEOUT_MILLIS),
            catch_up: body.catch_up.unwrap_or_default(),
            status,
            last_update_time: now,
            enabled_at: (status == ScheduleStatus::Scheduled).then_some(now),
            updated_by: Some(by.to_string()),
        });
    };
    if let Some(p) = &body.program
        && (p.program_name != old.program.program_name
            || !p
                .program_type
                .eq_ignore_ascii_case(&old.program.program_type))
    {
        return Err(Invalid::new(
            "program",
            "a schedule's program cannot change: delete the schedule and create a new one",
        ));
    }
    let status = body.status.unwrap_or(old.status);
    Ok(Schedule {
        description: body.description.clone().unwrap_or(old.description.clone()),
        properties: body.properties.clone().unwrap_or(old.properties.clone()),
        trigger: body.trigger.clone().unwrap_or(old.trigger.clone()),
        constraints: body.constraints.clone().unwrap_or(old.constraints.clone()),
        timeout_millis: body.timeout_millis.unwrap_or(old.timeout_millis),
        catch_up: body.catch_up.unwrap_or(old.catch_up),
        status,
        last_update_time: now,
        enabled_at: match (old.status, status) {
            (ScheduleStatus::Suspended, ScheduleStatus::Scheduled) => Some(now),
            (_, ScheduleStatus::Suspended) => None,
            (ScheduleStatus::Scheduled, ScheduleStatus::Scheduled) => old.enabled_at,
        },
        updated_by: Some(by.to_string()),
        ..old.clone()
    })
}

/// Checks the shape and bounds of a complete schedule `s` (after an update's merge).
pub fn check(s: &Schedule) -> Result<(), Invalid> {
    names::check("name", &s.name)?;
    names::check("program.programName", &s.program.program_name)?;
    let t = s.program.program_type.to_ascii_uppercase();
    if t != WORKFLOW && t != "WORKFLOWS" && t != "SPARK" {
        return Err(Invalid::new(
            "program.programType",
            format!(
                "only a WORKFLOW or a SPARK program can be scheduled, not '{}'",
                s.program.program_type
            ),
        ));
    }
    if s.description.len() > MAX_DESCRIPTION {
        return Err(Invalid::new(
            "description",
            format!("at most {MAX_DESCRIPTION} bytes"),
        ));
    }
    if s.properties.len() > MAX_PROPERTIES {
        return Err(Invalid::new(
            "properties",
            format!("at most {MAX_PROPERTIES} properties"),
        ));
    }
    let bytes: usize = s.properties.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_PROPERTIES_BYTES {
        return Err(Invalid::new(
            "properties",
            format!("at most {MAX_PROPERTIES_BYTES} bytes of names and values in all, not {bytes}"),
        ));
    }
    if s.timeout_millis == 0 || s.timeout_millis > MAX_TIMEOUT_MILLIS {
        return Err(Invalid::new(
            "timeoutMillis",
            format!("must be between 1 and {MAX_TIMEOUT_MILLIS} (30 days)"),
        ));
    }
    check_trigger(&s.trigger)?;
    if s.constraints.len() > MAX_CONSTRAINTS {
        return Err(Invalid::new(
            "constraints",
            format!("at most {MAX_CONSTRAINTS} constraints"),
        ));
    }
    for (i, c) in s.constraints.iter().enumerate() {
        check_constraint(&format!("constraints[{i}]"), c)?;
    }
    Ok(())
}

fn check_trigger(trigger: &Trigger) -> Result<(), Invalid> {
    let all = trigger.walk();
    if all.len() > MAX_TRIGGERS {
        return Err(Invalid::new(
            "trigger",
            format!("at most {MAX_TRIGGERS} triggers, composites included"),
        ));
    }
    if let Some((depth, _)) = all.iter().find(|(d, _)| *d > MAX_DEPTH) {
        return Err(Invalid::new(
            "trigger",
            format!("composites nest at most {MAX_DEPTH} deep, not {depth}"),
        ));
    }
    for (_, t) in all {
        match t {
            Trigger::Time {
                cron_expression,
                time_zone,
            } => {
                if cron_expression.len() > MAX_EXPRESSION {
                    return Err(Invalid::new(
                        "trigger.cronExpression",
                        format!("at most {MAX_EXPRESSION} bytes"),
                    ));
                }
                if time_zone.as_ref().is_some_and(|z| z.len() > MAX_EXPRESSION) {
                    return Err(Invalid::new(
                        "trigger.timeZone",
                        format!("at most {MAX_EXPRESSION} bytes"),
                    ));
                }
            }
            Trigger::ProgramStatus {
                program_id,
                program_statuses,
            } => check_program_id(program_id, program_statuses)?,
            Trigger::And { triggers } | Trigger::Or { triggers } => {
                if triggers.is_empty() {
                    return Err(Invalid::new(
                        "trigger.triggers",
                        format!("an {} needs at least one trigger", t.category()),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_program_id(id: &ProgramId, statuses: &[EndStatus]) -> Result<(), Invalid> {
    if let Some(ns) = &id.namespace {
        names::check("trigger.programId.namespace", ns)?;
    }
    names::check("trigger.programId.application", &id.application)?;
    names::check("trigger.programId.program", &id.program)?;
    if let Some(t) = &id.program_type
        && !t.eq_ignore_ascii_case(WORKFLOW)
    {
        return Err(Invalid::new(
            "trigger.programId.type",
            format!("only a WORKFLOW's runs can trigger, not '{t}'"),
        ));
    }
    if let Some(e) = &id.entity
        && !e.eq_ignore_ascii_case("PROGRAM")
    {
        return Err(Invalid::new(
            "trigger.programId.entity",
            format!("must be PROGRAM, not '{e}'"),
        ));
    }
    if let Some(v) = &id.version
        && v != "-SNAPSHOT"
    {
        return Err(Invalid::new(
            "trigger.programId.version",
            format!("apps have one version ('-SNAPSHOT'), not '{v}'"),
        ));
    }
    if statuses.is_empty() {
        return Err(Invalid::new(
            "trigger.programStatuses",
            "name at least one of COMPLETED, FAILED, KILLED, REJECTED",
        ));
    }
    if statuses.iter().collect::<BTreeSet<_>>().len() != statuses.len() {
        return Err(Invalid::new(
            "trigger.programStatuses",
            "names a status twice",
        ));
    }
    Ok(())
}

fn check_constraint(field: &str, c: &Constraint) -> Result<(), Invalid> {
    let positive = |name: &str, n: u64| {
        if n == 0 || n > MAX_TIMEOUT_MILLIS {
            Err(Invalid::new(
                format!("{field}.{name}"),
                format!("must be between 1 and {MAX_TIMEOUT_MILLIS}"),
            ))
        } else {
            Ok(())
        }
    };
    match c {
        Constraint::Concurrency {
            max_concurrency, ..
        } => {
            if *max_concurrency == 0 || *max_concurrency > 10_000 {
                return Err(Invalid::new(
                    format!("{field}.maxConcurrency"),
                    "must be between 1 and 10000",
                ));
            }
        }
        Constraint::Delay {
            millis_after_trigger,
            wait_until_met,
        } => {
            positive("millisAfterTrigger", *millis_after_trigger)?;
            if *wait_until_met == Some(false) {
                return Err(Invalid::new(
                    format!("{field}.waitUntilMet"),
                    "a DELAY always waits: leave it out or set it true",
                ));
            }
        }
        Constraint::TimeRange {
            start_time,
            end_time,
            time_zone,
            ..
        } => {
            let start = clock_minutes(&format!("{field}.startTime"), start_time)?;
            let end = clock_minutes(&format!("{field}.endTime"), end_time)?;
            if start == end {
                return Err(Invalid::new(
                    format!("{field}.endTime"),
                    "must differ from startTime",
                ));
            }
            if time_zone.as_ref().is_some_and(|z| z.len() > MAX_EXPRESSION) {
                return Err(Invalid::new(
                    format!("{field}.timeZone"),
                    format!("at most {MAX_EXPRESSION} bytes"),
                ));
            }
        }
        Constraint::LastRun {
            millis_since_last_run,
            ..
        } => positive("millisSinceLastRun", *millis_since_last_run)?,
    }
    Ok(())
}

/// Minutes after midnight of `HH:mm`.
pub fn clock_minutes(field: &str, value: &str) -> Result<u32, Invalid> {
    let bad = || Invalid::new(field, format!("'{value}' is not a time of day as HH:mm"));
    let (h, m) = value.split_once(':').ok_or_else(bad)?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return Err(bad());
    }
    let h: u32 = h.parse().map_err(|_| bad())?;
    let m: u32 = m.parse().map_err(|_| bad())?;
    if h > 23 || m > 59 {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// The id of a fire for cron time `ms`.
pub fn time_fire(ms: u64) -> String {
    format!("t{ms:013}")
}

/// The id of a fire for the end of run `run`.
pub fn end_fire(run: &str) -> String {
    format!("r{run}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(trigger: Trigger) -> Schedule {
        Schedule {
            namespace: "default".into(),
            application: "app".into(),
            name: "s".into(),
            description: String::new(),
            program: ScheduleProgram {
                program_name: "p".into(),
                program_type: "WORKFLOW".into(),
            },
            properties: Values::new(),
            trigger,
            constraints: vec![],
            timeout_millis: DEFAULT_TIMEOUT_MILLIS,
            catch_up: CatchUp::None,
            status: ScheduleStatus::Suspended,
            last_update_time: 0,
            enabled_at: None,
            updated_by: None,
        }
    }

    fn time() -> Trigger {
        Trigger::Time {
            cron_expression: "* * * * *".into(),
            time_zone: None,
        }
    }

    #[test]
    fn cdap_bodies_parse_with_their_extra_fields() {
        let body: ScheduleBody = serde_json::from_value(serde_json::json!({
            "name": "after", "namespace": "default", "application": "a",
            "program": {"programName": "p", "programType": "WORKFLOW"},
            "properties": {}, "constraints": [{"type": "DELAY", "millisAfterTrigger": 5}],
            "trigger": {"type": "PROGRAM_STATUS", "programStatuses": ["COMPLETED"],
                "programId": {"namespace": "default", "application": "b", "version": "-SNAPSHOT",
                              "type": "WORKFLOW", "entity": "PROGRAM", "program": "q"}},
            "timeoutMillis": 1000
        }))
        .expect("parses");
        assert!(body.constraints.expect("constraints")[0].waits());
    }

    #[test]
    fn an_unknown_field_inside_a_trigger_is_refused() {
        let err = serde_json::from_value::<ScheduleBody>(serde_json::json!({
            "trigger": {"type": "TIME", "cronExpression": "* * * * *", "cron": "x"}
        }))
        .expect_err("refused");
        assert!(err.to_string().contains("cron"), "{err}");
    }

    #[test]
    fn waiting_defaults_follow_cdaps_builder() {
        let c = |v| serde_json::from_value::<Constraint>(v).expect("constraint");
        assert!(!c(serde_json::json!({"type": "CONCURRENCY", "maxConcurrency": 1})).waits());
        assert!(!c(serde_json::json!({"type": "LAST_RUN", "millisSinceLastRun": 1})).waits());
        assert!(c(serde_json::json!({"type": "DELAY", "millisAfterTrigger": 1})).waits());
        assert!(
            c(serde_json::json!({"type": "TIME_RANGE", "startTime": "22:00", "endTime": "06:00"}))
                .waits()
        );
        assert!(c(serde_json::json!({"type": "CONCURRENCY", "maxConcurrency": 1, "waitUntilMet": true})).waits());
    }

    #[test]
    fn deep_or_wide_composites_are_refused() {
        let mut deep = time();
        for _ in 0..MAX_DEPTH {
            deep = Trigger::Or {
                triggers: vec![deep],
            };
        }
        let err = check(&schedule(deep)).expect_err("too deep");
        assert_eq!(err.field, "trigger");
        assert!(err.message.contains("nest"), "{err}");
        let wide = Trigger::Or {
            triggers: vec![time(); MAX_TRIGGERS],
        };
        assert!(check(&schedule(wide)).is_err());
        let ok = Trigger::Or {
            triggers: vec![time(); MAX_TRIGGERS - 1],
        };
        check(&schedule(ok)).expect("within bounds");
        let empty = Trigger::And { triggers: vec![] };
        assert_eq!(
            check(&schedule(empty)).expect_err("empty").field,
            "trigger.triggers"
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let mut s = schedule(time());
        s.program.program_type = "MAPREDUCE".into();
        assert_eq!(check(&s).expect_err("type").field, "program.programType");
        s.program.program_type = "SPARK".into();
        assert!(
            check(&s).is_ok(),
            "a spark program is scheduled as CDAP names it"
        );
        let mut s = schedule(time());
        s.timeout_millis = 0;
        assert_eq!(check(&s).expect_err("timeout").field, "timeoutMillis");
        let mut s = schedule(time());
        s.constraints = vec![Constraint::TimeRange {
            start_time: "25:00".into(),
            end_time: "06:00".into(),
            time_zone: None,
            wait_until_met: None,
        }];
        assert_eq!(
            check(&s).expect_err("range").field,
            "constraints[0].startTime"
        );
        let mut s = schedule(time());
        s.constraints = vec![Constraint::Delay {
            millis_after_trigger: 10,
            wait_until_met: Some(false),
        }];
        assert_eq!(
            check(&s).expect_err("delay").field,
            "constraints[0].waitUntilMet"
        );
        let s = schedule(Trigger::ProgramStatus {
            program_id: ProgramId {
                namespace: None,
                application: "a".into(),
                program: "p".into(),
                version: None,
                program_type: None,
                entity: None,
            },
            program_statuses: vec![],
        });
        assert_eq!(
            check(&s).expect_err("statuses").field,
            "trigger.programStatuses"
        );
    }

    #[test]
    fn clock_times_parse_strictly() {
        assert_eq!(clock_minutes("f", "22:00"), Ok(22 * 60));
        assert_eq!(clock_minutes("f", "6:05"), Ok(365));
        for bad in ["24:00", "12:60", "1200", "12:5", "", "aa:bb", "-1:00"] {
            assert!(clock_minutes("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fire_ids_sort_by_time() {
        assert!(time_fire(999) < time_fire(1_000));
        assert_eq!(time_fire(1_700_000_000_000), "t1700000000000");
    }
}
