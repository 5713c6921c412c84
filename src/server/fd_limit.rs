//! The process's open-file limit, and how many connections each listener may hold so an
//! idle crowd on one never takes the descriptors the others (and the database) need.

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
}
