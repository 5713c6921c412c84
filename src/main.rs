//! The `proxypool` binary: parse the command line, set up logging, run the command.

use std::process::ExitCode;

use clap::Parser;
use proxypool::cli::{self, Cli};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match (cli.global.quiet, cli.global.verbose) {
        (q, _) if q > 0 => "error",
        (_, 0) => "warn",
        (_, 1) => "info",
        (_, 2) => "debug",
        _ => "trace",
    };
    // RUST_LOG, when set, overrides -v/-q.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("proxypool: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxypool: {e}");
            ExitCode::from(e.code)
        }
    }
}
