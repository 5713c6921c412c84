//! HAProxy (Debian's `haproxy`) as a layer-4 hop: bytes copied both ways to one server, so
//! whatever speaks through it (a CONNECT, TLS, HTTP/2) arrives untouched, from the
//! address HAProxy leaves from. Foreground (`-db`), a config in a temp dir, killed on drop.

use std::net::{Ipv4Addr, SocketAddr};

use super::tools::{free_port, need, ToolDaemon};

pub const INSTALL: &str = "apt-get install -y haproxy";

/// HAProxy on a free port of 127.0.0.1 forwarding every connection to `to`.
pub async fn haproxy_tcp(to: SocketAddr) -> Option<ToolDaemon> {
    haproxy_tcp_from(to, None).await
}

/// `haproxy_tcp` whose connections to `to` leave from `source` (HAProxy's `source`), so
/// `to` sees `source` as the client.
pub async fn haproxy_tcp_from(to: SocketAddr, source: Option<Ipv4Addr>) -> Option<ToolDaemon> {
    let bin = need("haproxy", INSTALL)?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let source = source.map(|ip| format!(" source {ip}")).unwrap_or_default();
    let conf = format!(
        "global\n    maxconn 1000\n\
         defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 120s\n\
         \x20   timeout server 120s\n\
         listen hop\n    bind 127.0.0.1:{port}\n    server to {to}{source}\n"
    );
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, conf).unwrap();
    let path = path.to_string_lossy().into_owned();
    Some(ToolDaemon::start("haproxy", &bin, &["-db", "-f", &path], dir, port).await)
}
