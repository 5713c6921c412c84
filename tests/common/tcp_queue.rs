//! Whether a TCP peer on this machine has read what was sent to it, from the kernel's
//! socket table (/proc/net/tcp): a fake that ends a connection with a RST waits for this
//! first, because a RST wipes whatever the peer has received but not yet read. Polled with
//! a deadline, never a fixed sleep that a loaded machine can outrun.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Wait until the socket at `peer` (connected to `local`) has read everything it received
/// and `local`'s sent bytes are all acknowledged, at most `within`. Returns what was last
/// seen when the deadline passes; a peer that is gone has nothing left to read.
pub async fn peer_has_read(
    local: SocketAddr,
    peer: SocketAddr,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let ours = queues(local, peer);
        let theirs = queues(peer, local);
        match (ours, theirs) {
            (_, None) => return Ok(()),
            (Some((0, _)), Some((_, 0))) => return Ok(()),
            seen if Instant::now() >= deadline => {
                return Err(format!("(unacked, unread) after {within:?}: {seen:?}"))
            }
            _ => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

/// The (send, receive) queue lengths of the IPv4 socket `local` -> `remote`.
fn queues(local: SocketAddr, remote: SocketAddr) -> Option<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 || addr(f[1])? != local || addr(f[2])? != remote {
            return None;
        }
        let (tx, rx) = f[4].split_once(':')?;
        Some((
            u64::from_str_radix(tx, 16).ok()?,
            u64::from_str_radix(rx, 16).ok()?,
        ))
    })
}

/// "0100007F:1F90": the address as a u32 in the kernel's (host) byte order, the port in
/// hex.
fn addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::from(ip.to_ne_bytes()),
        port,
    )))
}
