//! TCP to the proxy, and client-side name resolution for SOCKS variants without remote DNS.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpStream;

use super::{Dest, DialFailure};
use crate::endpoint::ProxyUrl;
use crate::health::{Phase, Reason};

pub(super) async fn connect(proxy: &ProxyUrl) -> Result<TcpStream, DialFailure> {
    let phase = Phase::Connect;
    let addrs: Vec<SocketAddr> =
        match tokio::net::lookup_host((proxy.host.as_str(), proxy.port)).await {
            Ok(a) => a.collect(),
            Err(e) => {
                return Err(DialFailure::new(
                    Reason::DnsFailed,
                    phase,
                    format!("resolving proxy host {:?}: {e}", proxy.host),
                ))
            }
        };
    if addrs.is_empty() {
        return Err(DialFailure::new(
            Reason::DnsFailed,
            phase,
            format!("proxy host {:?} has no address", proxy.host),
        ));
    }
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    let Some((addr, e)) = last else {
        return Err(DialFailure::new(
            Reason::ConnectRefused,
            phase,
            "no address tried",
        ));
    };
    let reason = match e.kind() {
        io::ErrorKind::TimedOut => Reason::ConnectTimeout,
        _ => Reason::ConnectRefused,
    };
    Err(DialFailure::new(
        reason,
        phase,
        format!("TCP connect to {addr}: {e}"),
    ))
}

/// Resolve the destination here, for the SOCKS variants that carry addresses only.
pub(super) async fn resolve_destination(
    t: &Dest,
    v4_only: bool,
) -> Result<SocketAddr, DialFailure> {
    let phase = Phase::ProxyHandshake;
    let addrs = tokio::net::lookup_host((t.host.as_str(), t.port))
        .await
        .map_err(|e| {
            DialFailure::new(
                Reason::DnsFailed,
                phase,
                format!("resolving destination {:?}: {e}", t.host),
            )
        })?;
    let mut addrs = addrs.filter(|a| !v4_only || a.is_ipv4());
    addrs.next().ok_or_else(|| {
        let what = if v4_only {
            "IPv4 address (SOCKS4)"
        } else {
            "address"
        };
        DialFailure::new(
            Reason::DnsFailed,
            phase,
            format!("destination {:?} has no {what}", t.host),
        )
    })
}
