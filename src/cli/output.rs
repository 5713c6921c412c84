//! What commands print on stdout. A reader that stops early (`proxypool list | head -2`)
//! closes the pipe; Rust ignores SIGPIPE, so a plain `println!` would panic there. Output
//! to a closed pipe is dropped instead and the command finishes what it was doing (an
//! `enable` of four endpoints enables all four), exiting as it would have; any other
//! failure to write is said once on stderr and makes the exit code 1.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// 0: writing; 1: the reader closed the pipe; 2: writing failed otherwise.
static STDOUT: AtomicU8 = AtomicU8::new(0);

/// `println!` for commands: see the module's comment.
macro_rules! outln {
    () => {
        $crate::cli::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::line(format_args!($($arg)*))
    };
}

/// Write one line on stdout unless stdout already failed.
pub fn line(args: fmt::Arguments<'_>) {
    if STDOUT.load(Ordering::Relaxed) != 0 {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written.and_then(|()| out.flush()) {
        failed(&e);
    }
}

/// Write `bytes` on stdout as they are (a completion script, a man page).
pub(super) fn bytes(bytes: &[u8]) {
    if STDOUT.load(Ordering::Relaxed) != 0 {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        failed(&e);
    }
}

/// Whether output still reaches a reader (a follower stops once it does not).
pub(super) fn open() -> bool {
    STDOUT.load(Ordering::Relaxed) == 0
}

/// Writing stdout failed for another reason than a closed pipe: the exit code is 1.
pub fn write_failed() -> bool {
    STDOUT.load(Ordering::Relaxed) == 2
}

fn failed(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT.store(1, Ordering::Relaxed);
    } else if STDOUT.swap(2, Ordering::Relaxed) == 0 {
        eprintln!("proxypool: writing to stdout: {e}");
    }
}
