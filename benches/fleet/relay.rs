//! The most a fleet in which one daemon commits for all (a write leader) could reach:
//! HAProxy in TCP mode relaying unix sockets to the one daemon that serves, so that the
//! clients of the two other daemons reach it through one more hop each way, as a
//! leader's followers would forward their reports to it. A relay that parses nothing is
//! the cheapest forwarding there is (a leader's followers would also read each request
//! and answer leases themselves): its cost is a floor of that design's. The two other
//! daemons run and follow, as they would.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// HAProxy relaying `n` sockets of its own to one daemon's socket.
pub struct Relay {
    child: Child,
    pub socks: Vec<PathBuf>,
}

impl Relay {
    /// `None` (and a note) where `haproxy` is not installed.
    pub fn start(dir: &Path, to: &Path, n: usize) -> Option<Relay> {
        let socks: Vec<PathBuf> = (0..n)
            .map(|i| dir.join(format!("relay-{i}.sock")))
            .collect();
        let mut cfg = String::from(
            "global\n  nbthread 1\n  maxconn 1000\n\
             defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n\
             backend daemon\n",
        );
        cfg += &format!("  server d unix@{}\n", to.display());
        for (i, s) in socks.iter().enumerate() {
            cfg += &format!(
                "frontend r{i}\n  bind unix@{}\n  default_backend daemon\n",
                s.display()
            );
        }
        let file = dir.join("relay.cfg");
        std::fs::write(&file, cfg).unwrap();
        let log = dir.join("relay.log");
        let mut cmd = Command::new("haproxy");
        cmd.arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        // SAFETY: prctl(2) only, in the child before exec. A bench killed by a signal
        // leaves no relay behind.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                println!("(no relayed cell: cannot run haproxy: {e})");
                return None;
            }
        };
        let mut relay = Relay { child, socks };
        let until = Instant::now() + Duration::from_secs(10);
        while !relay.socks.iter().all(|s| s.exists()) {
            let exited = relay.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > until {
                let why = std::fs::read_to_string(&log).unwrap_or_default();
                println!("(no relayed cell: haproxy did not bind its sockets: {why})");
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(relay)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
