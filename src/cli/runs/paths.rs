//! The API paths of the programs and runs the CLI's arguments name.

use crate::cli::client::CliError;

/// `NS/APP/PROGRAM` as an API path.
pub(super) fn program_path(program: &str) -> Result<String, CliError> {
    match program.split('/').collect::<Vec<_>>().as_slice() {
        [ns, app, prog] if !ns.is_empty() && !app.is_empty() && !prog.is_empty() => {
            Ok(format!("/v3/namespaces/{ns}/apps/{app}/workflows/{prog}"))
        }
        _ => Err(CliError::Usage(format!(
            "'{program}' is not NAMESPACE/APP/PROGRAM"
        ))),
    }
}

/// `NS/APP/PROGRAM/RUN` as an API path.
pub(super) fn run_path(run: &str) -> Result<String, CliError> {
    match run.rsplit_once('/') {
        Some((program, id)) if !id.is_empty() && run.split('/').count() == 4 => {
            Ok(format!("{}/runs/{id}", program_path(program)?))
        }
        _ => Err(CliError::Usage(format!(
            "'{run}' is not NAMESPACE/APP/PROGRAM/RUN (as `ebb run start` and `ebb run list` print it)"
        ))),
    }
}
