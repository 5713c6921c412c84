//! `fd_limit::raise_nofile` really raises the soft open-file limit to the hard one, and
//! `nofile` reads what is in force. Its own test binary: it lowers this process's limit,
//! which no other test may see.

mod common;

use proxypool::server::fd_limit::{default_caps, nofile, raise_nofile};

#[allow(clippy::unnecessary_cast)]
fn limits() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscall on a local struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    (r.rlim_cur as u64, r.rlim_max as u64)
}

#[test]
fn raise_nofile_lifts_a_low_soft_limit_to_the_hard_limit() {
    let (_, hard) = limits();
    let low: u64 = 64;
    if hard <= low {
        let _: Option<()> = common::tools::skip_unless_ci(
            &format!("the open-file hard limit is {hard}, too low to lower the soft one below it"),
            "raise it with `ulimit -Hn`",
        );
        return;
    }
    let want = libc::rlimit {
        rlim_cur: low as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: lowering our own soft limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) }, 0);
    assert_eq!(nofile(), low, "nofile reads the soft limit in force");

    assert_eq!(raise_nofile(), hard, "raised to the hard limit");
    assert_eq!(
        limits(),
        (hard, hard),
        "the process's soft limit now is the hard one"
    );
    assert_eq!(nofile(), hard);
    // Already at the hard limit: nothing left to raise.
    assert_eq!(raise_nofile(), hard);
    // And the listeners' caps follow the raised limit.
    assert_eq!(default_caps(nofile()), default_caps(hard));
}
