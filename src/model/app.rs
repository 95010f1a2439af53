//! Apps and their programs as deployed: what a run executes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::names;
use crate::model::property::Values;

/// The type of a program that runs a command, as it appears in paths.
pub const WORKFLOWS: &str = "workflows";
/// The type of a program that ebb submits to its cluster's Spark master with `spark-submit`.
pub const SPARK: &str = "spark";
/// Every program type, as paths name them (`.../apps/{app}/{type}/{program}`).
pub const PROGRAM_TYPES: [&str; 2] = [WORKFLOWS, SPARK];

/// Longest command line accepted, in arguments.
const MAX_ARGS: usize = 4096;
/// Most Spark properties a `spark` program may set.
const MAX_CONF: usize = 256;
/// Longest text of one argument, file, class, property name or value of a `spark` program.
const MAX_TEXT: usize = 64 * 1024;
/// Spark properties a `spark` program may not set: ebb sets them to its cluster's.
const SPARK_OWN: [&str; 4] = [
    "spark.master",
    "spark.submit.deployMode",
    "spark.driver.host",
    "spark.driver.bindAddress",
];

/// A program as deployed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Program {
    /// `workflows` (a command) or `spark` (a Spark application, submitted for it).
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["workflows", "spark"]))]
    pub program_type: String,
    #[schemars(schema_with = "crate::model::names::schema")]
    pub name: String,
    /// The command and its arguments (no shell); a `workflows` program's only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// A `spark` program's Python file (or a jar's path with `mainClass`), relative to the
    /// program's directory on the master node or absolute there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_file: Option<String>,
    /// A `spark` program's main class, in `jar`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_class: Option<String>,
    /// A `spark` program's application jar (with `mainClass`, or a jar whose manifest names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jar: Option<String>,
    /// A `spark` program's arguments, after its file or jar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// A `spark` program's Spark properties (`spark.executor.memory`: `512m`), given to
    /// `spark-submit` as `--conf`; the master, deploy mode and driver's address are ebb's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub conf: BTreeMap<String, String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Most runs that may hold a cluster at once; unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_runs: Option<u32>,
    /// How a failed run of it is tried again on the same cluster (over the profile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::model::retry::Retry>,
}

/// The body of `PUT .../apps/{app}`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "description": "Says hello",
    "programs": [{"type": "workflows", "name": "hello", "command": ["echo", "hello"]}]
}))]
pub struct AppSpec {
    pub description: Option<String>,
    #[serde(default)]
    pub config: Values,
    #[serde(default)]
    pub programs: Vec<Program>,
    /// Schedules deployed with the app (each with its `name`): created, or updated where
    /// they exist; deleted with the app.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub schedules: Vec<crate::model::schedule::ScheduleBody>,
}

/// A deployed app.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct App {
    pub name: String,
    pub namespace: String,
    pub description: String,
    pub config: Values,
    pub programs: Vec<Program>,
    pub created: u64,
    pub updated: u64,
    /// Whether an instance admin deployed it, so its programs may run on the server's own
    /// host whatever its namespace allows; otherwise they may while the namespace allows host
    /// programs (looked at at each start). A run that would run there otherwise is REJECTED.
    /// (Apps deployed before access control were deployed by the one admin there was.)
    #[serde(default = "yes")]
    pub host_programs: bool,
    /// The token that deployed it last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_by: Option<String>,
}

fn yes() -> bool {
    true
}

impl App {
    /// Program `name`, if the app has it.
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.programs.iter().find(|p| p.name == name)
    }
}

/// The script a `spark` program's command runs: `spark-submit` from the cluster's endpoints, to
/// its master, with the driver on this (the master) node; the program's own arguments follow
/// as `"$@"` and are never read as shell.
const SPARK_SUBMIT: &str = r#"set -eu
if [ -z "${EBB_ENDPOINT_SPARK_SUBMIT:-}" ] || [ -z "${EBB_ENDPOINT_SPARK_MASTER:-}" ]; then
  echo "this run's cluster publishes no Spark master (endpoints spark-submit and spark-master): run a spark program on a profile whose template is 'spark'" >&2
  exit 2
fi
mkdir -p spark-local
# The driver's own scratch (the job's files, Python's) in the program's directory too, not /tmp.
SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }-Djava.io.tmpdir=$PWD/spark-local"
export SPARK_SUBMIT_OPTS
if [ -n "${EBB_ENDPOINT_SPARK_PYTHON:-}" ]; then
  set -- --conf "spark.pyspark.python=$EBB_ENDPOINT_SPARK_PYTHON" "$@"
fi
# A cluster with a history server: the application logs its events where it reads them (the
# program's own conf, after these, may say otherwise).
if [ -n "${EBB_ENDPOINT_SPARK_EVENT_LOG:-}" ]; then
  set -- --conf spark.eventLog.enabled=true --conf "spark.eventLog.dir=$EBB_ENDPOINT_SPARK_EVENT_LOG" "$@"
fi
exec "$EBB_ENDPOINT_SPARK_SUBMIT" --master "$EBB_ENDPOINT_SPARK_MASTER" --deploy-mode client \
  --name "$EBB_PROGRAM" \
  --conf "spark.driver.host=${EBB_NODE_ADDRESS:-127.0.0.1}" \
  --conf "spark.driver.bindAddress=${EBB_NODE_ADDRESS:-127.0.0.1}" \
  --conf "spark.local.dir=$PWD/spark-local" \
  --conf spark.decommission.enabled=true "$@"
"#;

impl Program {
    /// What it runs, in a line: a `workflows` program's command; a `spark` program's
    /// submission (`spark-submit [--class C] FILE ARGS`), without its properties.
    pub fn summary(&self) -> String {
        if self.program_type != SPARK {
            return self.command.join(" ");
        }
        let mut words = vec!["spark-submit".to_string()];
        if let Some(class) = &self.main_class {
            words.extend(["--class".to_string(), class.clone()]);
        }
        words.extend(self.jar.clone().or_else(|| self.main_file.clone()));
        words.extend(self.args.iter().cloned());
        words.join(" ")
    }

    /// The engine it submits an application to: `spark` for a `spark` program.
    pub fn engine(&self) -> Option<String> {
        (self.program_type == SPARK).then(|| SPARK.to_string())
    }

    /// The command its run launches: a `workflows` program's own; for a `spark` program,
    /// `spark-submit` of its file or jar with its properties and arguments.
    pub fn launch_command(&self) -> Vec<String> {
        if self.program_type != SPARK {
            return self.command.clone();
        }
        let mut argv: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            SPARK_SUBMIT.into(),
            "spark-submit".into(),
        ];
        for (name, value) in &self.conf {
            argv.push("--conf".into());
            argv.push(format!("{name}={value}"));
        }
        if let Some(class) = &self.main_class {
            argv.push("--class".into());
            argv.push(class.clone());
        }
        argv.extend(self.jar.clone().or_else(|| self.main_file.clone()));
        argv.extend(self.args.iter().cloned());
        argv
    }
}

/// Checks one text of a `spark` program: not empty, bounded, no NUL.
fn check_text(field: &str, text: &str) -> Result<(), Invalid> {
    if text.trim().is_empty() {
        return Err(Invalid::new(field, "must not be empty"));
    }
    if text.len() > MAX_TEXT {
        return Err(Invalid::new(
            field,
            format!("at most {MAX_TEXT} bytes, got {}", text.len()),
        ));
    }
    if text.contains('\0') {
        return Err(Invalid::new(field, "must not contain a NUL character"));
    }
    Ok(())
}

/// Checks what only a `spark` program has.
fn check_spark(p: &Program, field: &dyn Fn(&str) -> String) -> Result<(), Invalid> {
    if !p.command.is_empty() {
        return Err(Invalid::new(
            field("command"),
            "a spark program has no command: it names its mainFile (or jar), which ebb submits with spark-submit",
        ));
    }
    match (&p.main_file, &p.jar) {
        (None, None) => {
            return Err(Invalid::new(
                field("mainFile"),
                "a spark program needs mainFile (a Python file) or jar (with mainClass)",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(Invalid::new(
                field("jar"),
                "give mainFile (a Python file) or jar, not both",
            ));
        }
        (Some(file), None) => check_text(&field("mainFile"), file)?,
        (None, Some(jar)) => check_text(&field("jar"), jar)?,
    }
    if let Some(class) = &p.main_class {
        if p.jar.is_none() {
            return Err(Invalid::new(
                field("mainClass"),
                "a main class is looked for in a jar: give jar as well",
            ));
        }
        check_text(&field("mainClass"), class)?;
        if !class
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '$'))
        {
            return Err(Invalid::new(
                field("mainClass"),
                format!("'{class}' is not a Java class name"),
            ));
        }
    }
    if p.args.len() > MAX_ARGS {
        return Err(Invalid::new(
            field("args"),
            format!("at most {MAX_ARGS} arguments"),
        ));
    }
    for (i, arg) in p.args.iter().enumerate() {
        if arg.len() > MAX_TEXT || arg.contains('\0') {
            return Err(Invalid::new(
                field(&format!("args[{i}]")),
                format!("at most {MAX_TEXT} bytes, without a NUL character"),
            ));
        }
    }
    if p.conf.len() > MAX_CONF {
        return Err(Invalid::new(
            field("conf"),
            format!("at most {MAX_CONF} properties, got {}", p.conf.len()),
        ));
    }
    for (name, value) in &p.conf {
        let at = field(&format!("conf.{name}"));
        let well_formed = name.starts_with("spark.")
            && name.len() <= 256
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !well_formed {
            return Err(Invalid::new(
                at,
                "a Spark property's name starts with 'spark.' and has letters, digits, '.', '_' and '-' (at most 256)",
            ));
        }
        if SPARK_OWN.contains(&name.as_str()) {
            return Err(Invalid::new(
                at,
                "is set by ebb to its cluster's (the master, client mode, the driver on the master node)",
            ));
        }
        if value.len() > MAX_TEXT || value.contains('\0') {
            return Err(Invalid::new(
                at,
                format!("at most {MAX_TEXT} bytes, without a NUL character"),
            ));
        }
    }
    Ok(())
}

/// Checks what only a `workflows` program has: a command, and none of a `spark` program's
/// fields.
fn check_workflow(p: &Program, field: &dyn Fn(&str) -> String) -> Result<(), Invalid> {
    let spark_only = [
        ("mainFile", p.main_file.is_some()),
        ("mainClass", p.main_class.is_some()),
        ("jar", p.jar.is_some()),
        ("args", !p.args.is_empty()),
        ("conf", !p.conf.is_empty()),
    ];
    if let Some((name, _)) = spark_only.iter().find(|(_, given)| *given) {
        return Err(Invalid::new(
            field(name),
            format!("only a spark program has {name}; a workflows program runs its command"),
        ));
    }
    match p.command.first() {
        None => return Err(Invalid::new(field("command"), "must not be empty")),
        Some(exe) if exe.trim().is_empty() => {
            return Err(Invalid::new(field("command[0]"), "must name a program"));
        }
        Some(_) => {}
    }
    if p.command.len() > MAX_ARGS {
        return Err(Invalid::new(
            field("command"),
            format!("at most {MAX_ARGS} arguments"),
        ));
    }
    Ok(())
}

/// Checks the programs of an app being deployed: type, unique names, a command (or a Spark
/// application's file), variable names, a concurrency limit of at least 1.
pub fn check_spec(spec: &AppSpec) -> Result<(), Invalid> {
    let mut seen = BTreeSet::new();
    for (i, p) in spec.programs.iter().enumerate() {
        let field = |f: &str| format!("programs[{i}].{f}");
        match p.program_type.as_str() {
            WORKFLOWS => check_workflow(p, &field)?,
            SPARK => check_spark(p, &field)?,
            other => {
                return Err(Invalid::new(
                    field("type"),
                    format!("must be '{WORKFLOWS}' or '{SPARK}', got '{other}'"),
                ));
            }
        }
        names::check(&field("name"), &p.name)?;
        if let Some(retry) = &p.retry {
            retry.check(&field("retry"))?;
        }
        if !seen.insert(p.name.as_str()) {
            return Err(Invalid::new(
                field("name"),
                format!("program '{}' appears twice", p.name),
            ));
        }
        if let Some(bad) = p
            .env
            .keys()
            .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return Err(Invalid::new(
                field("env"),
                format!("'{bad}' is not a valid variable name"),
            ));
        }
        if p.max_concurrent_runs == Some(0) {
            return Err(Invalid::new(
                field("maxConcurrentRuns"),
                "must be at least 1 (leave it out for no limit)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spark(program: serde_json::Value) -> Result<(), Invalid> {
        let mut p = serde_json::json!({"type": "spark", "name": "job"});
        p.as_object_mut()
            .expect("object")
            .extend(program.as_object().expect("object").clone());
        let spec: AppSpec =
            serde_json::from_value(serde_json::json!({"programs": [p]})).expect("an app");
        check_spec(&spec)
    }

    #[track_caller]
    fn refused(program: serde_json::Value, field: &str) {
        let e = spark(program.clone()).expect_err("refused");
        assert_eq!(e.field, format!("programs[0].{field}"), "{program}: {e}");
    }

    #[test]
    fn a_spark_program_names_one_file_and_only_properties_of_its_own() {
        assert!(spark(serde_json::json!({"mainFile": "job.py"})).is_ok());
        assert!(
            spark(serde_json::json!({"jar": "/opt/job.jar", "mainClass": "com.example.Job$Main"}))
                .is_ok()
        );
        assert!(
            spark(serde_json::json!({"jar": "job.jar"})).is_ok(),
            "a jar whose manifest names its class"
        );
        refused(serde_json::json!({}), "mainFile");
        refused(
            serde_json::json!({"mainFile": "a.py", "jar": "b.jar"}),
            "jar",
        );
        refused(
            serde_json::json!({"mainFile": "a.py", "mainClass": "A"}),
            "mainClass",
        );
        refused(
            serde_json::json!({"jar": "b.jar", "mainClass": "A; rm -rf /"}),
            "mainClass",
        );
        refused(serde_json::json!({"mainFile": " "}), "mainFile");
        refused(
            serde_json::json!({"mainFile": "a.py", "command": ["echo"]}),
            "command",
        );
        refused(
            serde_json::json!({"mainFile": "a.py", "conf": {"spark.master": "local[*]"}}),
            "conf.spark.master",
        );
        refused(
            serde_json::json!({"mainFile": "a.py", "conf": {"executor.memory": "1g"}}),
            "conf.executor.memory",
        );
        refused(
            serde_json::json!({"mainFile": "a.py", "args": ["a\u{0}b"]}),
            "args[0]",
        );
        let many: serde_json::Map<String, serde_json::Value> = (0..=MAX_CONF)
            .map(|i| (format!("spark.x{i}"), serde_json::json!("1")))
            .collect();
        refused(
            serde_json::json!({"mainFile": "a.py", "conf": many}),
            "conf",
        );
    }

    #[test]
    fn a_workflows_program_has_none_of_a_spark_programs_fields() {
        let spec: AppSpec = serde_json::from_value(serde_json::json!({"programs": [
            {"type": "workflows", "name": "w", "command": ["echo"], "mainFile": "a.py"}
        ]}))
        .expect("an app");
        assert_eq!(
            check_spec(&spec).expect_err("refused").field,
            "programs[0].mainFile"
        );
        let spec: AppSpec = serde_json::from_value(serde_json::json!({"programs": [
            {"type": "mapreduce", "name": "m", "command": ["echo"]}
        ]}))
        .expect("an app");
        assert_eq!(
            check_spec(&spec).expect_err("refused").field,
            "programs[0].type"
        );
    }

    #[test]
    fn a_spark_programs_own_words_are_arguments_never_shell() {
        let p: Program = serde_json::from_value(serde_json::json!({
            "type": "spark", "name": "job", "mainFile": "job.py",
            "args": ["$(touch /tmp/x)", "two words"],
            "conf": {"spark.executor.memory": "512m", "spark.x": "a b;c"}
        }))
        .expect("a program");
        let argv = p.launch_command();
        assert_eq!(argv[..2], ["sh", "-c"]);
        assert_eq!(
            argv[3..],
            [
                "spark-submit",
                "--conf",
                "spark.executor.memory=512m",
                "--conf",
                "spark.x=a b;c",
                "job.py",
                "$(touch /tmp/x)",
                "two words"
            ]
        );
        assert!(!argv[2].contains("job.py") && !argv[2].contains("touch"));
        assert_eq!(p.summary(), "spark-submit job.py $(touch /tmp/x) two words");
        let jar: Program = serde_json::from_value(serde_json::json!({
            "type": "spark", "name": "job", "jar": "j.jar", "mainClass": "a.B", "args": ["1"]
        }))
        .expect("a program");
        assert_eq!(jar.launch_command()[4..], ["--class", "a.B", "j.jar", "1"]);
        assert_eq!(jar.engine().as_deref(), Some(SPARK));
    }
}
