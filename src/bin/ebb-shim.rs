//! `ebb-shim shim <run-dir>`: the program launcher alone, as `ebb shim <run-dir>` is within
//! `ebb`. A run's launcher lives as long as its program, and one starts for every run: this
//! binary holds only the launcher, so it starts in about half the CPU time and a quarter of
//! the memory of the whole `ebb` binary. A server starts it when it lies beside its own
//! executable and says the server's own build id (`ebb-shim --build-id`), and `ebb shim`
//! otherwise.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next(), args.next()) {
        (Some(flag), None, None) if flag == ebb::runtime::program::BUILD_ID_FLAG => {
            // The server asks before it uses this launcher: it must be of its own build.
            println!("{}", ebb::runtime::program::BUILD_ID);
            ExitCode::SUCCESS
        }
        (Some(shim), Some(run_dir), None) if shim == "shim" => {
            let code = ebb::runtime::program::shim(std::path::Path::new(&run_dir));
            ExitCode::from(code.clamp(0, 255) as u8)
        }
        _ => {
            eprintln!("usage: ebb-shim shim <run-dir> (started by an ebb server for each run)");
            ExitCode::from(2)
        }
    }
}
