//! Waiting for a state: poll it with a deadline, never sleep a fixed time and hope.
//!
//! ```ignore
//! let id = common::eventually(Duration::from_secs(5), "endpoint 3 cooling", || {
//!     let e = h.listed(3);
//!     if e["state"] == "cooling" { Ok(e) } else { Err(format!("{e}")) }
//! });
//! ```
//!
//! The check returns `Ok(value)` when the state is reached, or `Err(what it saw)`; the
//! panic at the deadline names what was awaited and the last thing seen. A check that
//! asserts or unwraps inside may panic at once: a wrong state is a failure, not a wait.
//!
//! `holds_for` is the other half: "nothing happens for a while" (no second sniff, no
//! cooldown extended) has no state to wait for, so it polls the check for the whole
//! window and fails the moment it breaks.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a state is polled.
pub const POLL: Duration = Duration::from_millis(20);

/// Poll `check` until it returns `Ok`, at most `within`.
#[track_caller]
pub fn eventually<T>(
    within: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return v,
            Err(seen) if Instant::now() >= deadline => {
                panic!("{what}: not reached within {within:?}; last seen: {seen}")
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// `eventually` for async checks, on tokio's clock. On a paused clock the deadline is
/// virtual and passes while the runtime waits on real I/O: use it there only for state
/// that moves with the clock.
pub async fn eventually_async<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(seen) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not reached within {within:?}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// `eventually_async` under a paused clock: the deadline is real time, because the paused
/// clock jumps ahead whenever the runtime idles (while a blocking thread commits, say) and
/// would pass a virtual deadline at once; each poll sleeps [`POLL`] on tokio's clock, so
/// timers due meanwhile fire.
pub async fn eventually_paused<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(seen) if Instant::now() >= deadline => {
                panic!("{what}: not reached within {within:?} of real time; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Assert that `check` keeps holding for the whole `window`, polled every [`POLL`].
#[track_caller]
pub fn holds_for(window: Duration, what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let end = Instant::now() + window;
    loop {
        if let Err(seen) = check() {
            panic!("{what}: broken within {window:?}: {seen}");
        }
        if Instant::now() >= end {
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// `holds_for` for async checks, on tokio's clock (see `eventually_async` on paused clocks).
pub async fn holds_for_async<F, Fut>(window: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let end = tokio::time::Instant::now() + window;
    loop {
        if let Err(seen) = check().await {
            panic!("{what}: broken within {window:?}: {seen}");
        }
        if tokio::time::Instant::now() >= end {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}
