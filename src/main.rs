//! The `ebb` binary: `ebb serve` runs the server; every other command is a REST client.

use std::process::ExitCode;

use clap::Parser;
use ebb::cli::{Cli, Command, LogFormat};

// The server allocates and frees small buffers on every request and store write; glibc's
// malloc took 13% of its CPU time on etcd. The launcher (`ebb-shim`) keeps the system's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // The program launcher starts once per run: skip building the whole command line.
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == "shim")
        && let (Some(run_dir), None) = (args.next(), args.next())
    {
        let code = ebb::runtime::program::shim(std::path::Path::new(&run_dir));
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(mut args) => {
            init_tracing(args.log_format);
            args.token = cli.client.token.clone();
            args.token_file = cli.client.token_file.clone();
            args.ca_cert = cli.client.ca_cert.clone();
            args.data_dir = cli.client.data_dir.clone();
            let config = ebb::server::Config::from(*args);
            match actix_web::rt::System::new().block_on(ebb::server::run(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "ebb serve failed");
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Shim { run_dir } => {
            ExitCode::from(ebb::runtime::program::shim(&run_dir).clamp(0, 255) as u8)
        }
        command @ (Command::Namespace(_)
        | Command::Provisioner(_)
        | Command::Profile(_)
        | Command::Pref(_)
        | Command::App(_)
        | Command::Run(_)
        | Command::Schedule(_)
        | Command::Template(_)
        | Command::Plan(_)
        | Command::Secure(_)
        | Command::Janitor(_)
        | Command::Server(_)
        | Command::Token(_)
        | Command::Usage(_)
        | Command::Prices(_)
        | Command::Audit(_)
        | Command::Store(_)
        | Command::Plugin(_)) => ebb::cli::run(&cli.client, command),
    }
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("EBB_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a terminal: a file or a pipe gets plain text.
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
