//! The `proxypool` binary: parse the command line, set up logging, run the command.

use std::process::ExitCode;

use clap::Parser;
use proxypool::cli::{self, Cli};

// A gateway tunnel makes a few dozen short-lived allocations (hyper's buffers and
// messages, the tasks' futures); mimalloc serves them for about 7 µs less CPU a tunnel than
// glibc's allocator (BENCHMARKS.md). Only the binary: tests and benches keep their own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let serve = matches!(cli.command, cli::Command::Serve { .. });
    proxypool::cli::logging::init(
        cli.global.log_format,
        proxypool::cli::logging::default_level(serve, cli.global.verbose, cli.global.quiet),
    );
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
        // Said on stderr when it happened.
        Ok(()) if cli::output::write_failed() => ExitCode::from(1),
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxypool: {e}");
            ExitCode::from(e.code)
        }
    }
}
