//! The `ebb` command line: `ebb serve`, and REST client commands for everything else.
//!
//! Client commands print human tables by default and the server's JSON with `--json`. A
//! refusal from the server is printed as the server's message and exits 1. This module only
//! talks HTTP; it never opens the store.

mod apps;
pub mod args;
mod client;
mod commands;
mod input;
mod namespaces;
mod output;
mod plugins;
mod preferences;
mod profiles;
mod runs;
mod schedules;
mod securekeys;
mod store;
mod system;
mod templates;
mod tokens;
mod usage;

use std::process::ExitCode;

pub use args::*;
pub use client::CliError;

/// Runs a client command and turns the outcome into an exit code.
pub fn run(args: &ClientArgs, command: Command) -> ExitCode {
    match commands::run(args, command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
