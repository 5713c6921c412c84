//! Real upstream proxies from Debian (tinyproxy, microsocks, dante), each on a free port
//! of 127.0.0.1, killed on drop. A missing binary skips the test (fails it under `CI`).
//! The `_bound` ones leave for their destinations from a loopback address of their own.

use std::net::Ipv4Addr;

use super::tools::{free_port, is_root, need, ToolDaemon};

pub const INSTALL: &str = "apt-get install -y tinyproxy microsocks dante-server";

/// tinyproxy with Basic auth alice:s3cret, CONNECT allowed to `connect_ports`.
pub async fn tinyproxy(connect_ports: &[u16]) -> Option<ToolDaemon> {
    tinyproxy_with(None, connect_ports, "").await
}

/// As [`tinyproxy`], adding `X-Upstream: <mark>` to every plain-HTTP request it forwards:
/// a fake site (`fakes::site_banning`) can then answer one upstream differently.
pub async fn tinyproxy_marked(connect_ports: &[u16], mark: &str) -> Option<ToolDaemon> {
    tinyproxy_with(
        None,
        connect_ports,
        &format!(
            "AddHeader \"X-Upstream\" \"{mark}\"
"
        ),
    )
    .await
}

/// `tinyproxy` whose connections to destinations leave from `bind` (a loopback address
/// such as 127.0.1.2: all of 127.0.0.0/8 is local), so a destination sees `bind` as the
/// client: one exit identity per proxy.
pub async fn tinyproxy_bound(bind: Ipv4Addr, connect_ports: &[u16]) -> Option<ToolDaemon> {
    tinyproxy_with(Some(bind), connect_ports, "").await
}

async fn tinyproxy_with(
    bind: Option<Ipv4Addr>,
    connect_ports: &[u16],
    extra: &str,
) -> Option<ToolDaemon> {
    let bin = need("tinyproxy", INSTALL)?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut conf = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 100\nAllow 127.0.0.1\n\
         BasicAuth alice s3cret\nLogLevel Info\n{extra}"
    );
    for p in connect_ports {
        conf.push_str(&format!("ConnectPort {p}\n"));
    }
    if let Some(ip) = bind {
        conf.push_str(&format!("Bind {ip}\n"));
    }
    if is_root() {
        // tinyproxy refuses to keep running as root.
        conf.push_str("User nobody\nGroup nogroup\n");
    }
    let path = dir.path().join("tinyproxy.conf");
    std::fs::write(&path, conf).unwrap();
    let path = path.to_string_lossy().into_owned();
    Some(ToolDaemon::start("tinyproxy", &bin, &["-d", "-c", &path], dir, port).await)
}

/// microsocks with user alice:s3cret.
pub async fn microsocks() -> Option<ToolDaemon> {
    microsocks_with(None).await
}

/// `microsocks` whose connections to destinations leave from `bind` (`-b`).
pub async fn microsocks_bound(bind: Ipv4Addr) -> Option<ToolDaemon> {
    microsocks_with(Some(bind)).await
}

async fn microsocks_with(bind: Option<Ipv4Addr>) -> Option<ToolDaemon> {
    let bin = need("microsocks", INSTALL)?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let p = port.to_string();
    let mut args = vec!["-i", "127.0.0.1", "-p", &p, "-u", "alice", "-P", "s3cret"];
    let b = bind.map(|ip| ip.to_string());
    if let Some(b) = &b {
        args.extend(["-b", b.as_str()]);
    }
    Some(ToolDaemon::start("microsocks", &bin, &args, dir, port).await)
}

/// dante, no authentication.
pub async fn dante() -> Option<ToolDaemon> {
    dante_with("").await
}

/// `dante` whose connections to destinations leave from `bind` (its `external`).
pub async fn dante_bound(bind: Ipv4Addr) -> Option<ToolDaemon> {
    dante_from(bind, "").await
}

/// dante that refuses (SOCKS5 reply 0x02, "not allowed by ruleset") every target its
/// `socks block` rules match: `blocks` holds `to:` clauses, e.g. `"127.0.0.1/32 port = 8080"`,
/// or `"0.0.0.0/0"` for everything.
pub async fn dante_blocking(blocks: &[&str]) -> Option<ToolDaemon> {
    let rules: String = blocks
        .iter()
        .map(|to| format!("socks block {{\n  from: 127.0.0.0/8 to: {to}\n  log: error\n}}\n"))
        .collect();
    dante_with(&rules).await
}

/// dante with `rules` before its catch-all `socks pass` (the first rule that matches wins).
async fn dante_with(rules: &str) -> Option<ToolDaemon> {
    dante_from(Ipv4Addr::LOCALHOST, rules).await
}

async fn dante_from(external: Ipv4Addr, rules: &str) -> Option<ToolDaemon> {
    let bin = need("danted", INSTALL)?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let users = if is_root() {
        "user.privileged: root\nuser.unprivileged: nobody\n"
    } else {
        ""
    };
    let conf = format!(
        "logoutput: stderr\n\
         internal: 127.0.0.1 port = {port}\n\
         external: {external}\n\
         clientmethod: none\n\
         socksmethod: none\n\
         {users}\
         client pass {{\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n}}\n\
         {rules}\
         socks pass {{\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n}}\n"
    );
    let path = dir.path().join("danted.conf");
    std::fs::write(&path, conf).unwrap();
    let path = path.to_string_lossy().into_owned();
    Some(ToolDaemon::start("danted", &bin, &["-f", &path, "-N", "1"], dir, port).await)
}
