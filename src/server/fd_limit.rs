//! The process's open-file limit, how many connections each listener may hold so an idle
//! crowd on one never takes the descriptors the others (and the database) need, and the
//! gateways' descriptor budget, which leaves those listeners their share.

/// Raise the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now in force.
// `rlim_t` is u64 on Linux but not everywhere.
#[allow(clippy::unnecessary_cast)]
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
    }
    r.rlim_cur as u64
}

/// The soft `RLIMIT_NOFILE` in force.
#[allow(clippy::unnecessary_cast)]
pub fn nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscall on a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 1024;
    }
    r.rlim_cur as u64
}

/// Default connection caps `(unix, tcp)` for a descriptor limit: TCP (remote, maybe
/// unauthenticated) gets a quarter, the Unix socket half, the rest stays for the database,
/// probes, sources and the gateway.
pub fn default_caps(nofile: u64) -> (usize, usize) {
    let n = usize::try_from(nofile).unwrap_or(usize::MAX);
    ((n / 2).clamp(16, 4096), (n / 4).clamp(8, 1024))
}

/// Descriptors the daemon keeps for itself whatever else is open: the database and its
/// journal, the lock file, the listening sockets, logs, a source's pipe, DNS.
const OWN_FILES: usize = 64;

/// The descriptors all gateways together may hold under a limit of `nofile`, when the
/// other holders may take `others` at most (the lease socket's, the TCP listener's and the
/// HTTP listener's connection caps, probes in flight). They and the daemon's own files
/// keep their share; under a low limit that share is capped at half of it, so a gateway
/// still serves (docs/gateway.md, "Limits").
pub fn gateway_budget(nofile: u64, others: usize) -> usize {
    let n = usize::try_from(nofile).unwrap_or(usize::MAX);
    n - others.saturating_add(OWN_FILES).min(n / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_leave_room_for_the_rest() {
        for (nofile, want) in [
            (256, (128, 64)),
            (1024, (512, 256)),
            (1 << 20, (4096, 1024)),
            (20, (16, 8)),
        ] {
            assert_eq!(default_caps(nofile), want, "{nofile}");
        }
        assert!(raise_nofile() >= 1);
        assert_eq!(nofile(), raise_nofile());
    }

    #[test]
    fn the_gateways_leave_the_listeners_their_share() {
        for (nofile, others, want) in [
            // 20,000: the lease socket's 4,096, TCP's 1,024, HTTP's 256, 64 probes.
            (20_000, 4_096 + 1_024 + 256 + 64, 20_000 - 5_504),
            (1 << 20, 4_096 + 256, (1 << 20) - 4_416),
            // A low limit: the others' share is at most half of it.
            (1_024, 512 + 256, 512),
            (256, 128, 128),
        ] {
            assert_eq!(gateway_budget(nofile, others), want, "{nofile} {others}");
        }
    }
}
