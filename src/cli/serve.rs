//! `serve`: lock the database, open the engine and run the daemon.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::secrets::{ServeSecrets, GATEWAY_ENV};
use super::{CliError, Context};
use crate::daemon::{self, ServeOptions};
use crate::pool::engine::{sync_config_endpoints, Engine};
use crate::store::lock;

pub(super) async fn serve(
    ctx: &Context,
    listen_tcp: Option<SocketAddr>,
    gateway: Option<SocketAddr>,
    http: Option<SocketAddr>,
) -> Result<(), CliError> {
    let secrets = ServeSecrets::read(&ctx.config.token_files, listen_tcp.is_some())?;
    if listen_tcp.is_some() && !secrets.tcp.any() {
        return Err(CliError::usage(
            "--listen-tcp needs a token: set PROXYPOOL_TOKEN (role admin) and/or PROXYPOOL_LEASE_TOKEN (role lease), or [server] token_file / lease_token_file; clients send it as \"token\"",
        ));
    }
    crate::server::socket_file::check(&ctx.socket).map_err(|e| CliError::usage(e.to_string()))?;
    let gateway = gateway_flag(gateway, &secrets)?;
    // `--http` (or PROXYPOOL_HTTP), else `[server] http`, else no HTTP listener.
    let http = http.or(ctx.config.http);
    if let Some(addr) = http {
        crate::web::check_bind(addr, secrets.http.as_deref())
            .map_err(|e| CliError::usage(e.to_string()))?;
    }
    let ca = super::ca::for_serve(&ctx.config, &ctx.db)?;
    // Own the database before reading it: a second daemon is refused, and CLI commands
    // writing right now finish first (their writes are then in what we load).
    let socket = std::path::absolute(&ctx.socket).unwrap_or_else(|_| ctx.socket.clone());
    // PostgreSQL is shared by design: no lock, several daemons serve it at once
    // (docs/fleet.md).
    let held = match ctx.shared() {
        true => None,
        false => Some(Arc::new(
            lock::daemon_lock(&ctx.db, Duration::from_secs(10))
                .map_err(|e| CliError::failed(e.to_string()))?,
        )),
    };
    // Idle clients must not run the daemon out of descriptors at a low default soft limit.
    let nofile = crate::server::fd_limit::raise_nofile();
    tracing::debug!(nofile, "open-file limit");
    // Not `ctx.open_store()`: that refuses a missing database whose lock a daemon holds,
    // and the daemon holding it now is this one, about to create it.
    let mut store = match ctx.shared() {
        true => ctx.open_store()?,
        false => crate::store::Store::open_with(&ctx.db, ctx.config.durability)?,
    };
    sync_config_endpoints(&mut store, &ctx.config)?;
    let engine = Engine::open(store, ctx.config.pools.values().cloned())?;
    let shutdown = CancellationToken::new();
    on_signals(shutdown.clone(), socket.clone());
    let r = daemon::serve(
        ctx.config.clone(),
        engine,
        ServeOptions {
            socket,
            listen_tcp,
            tokens: secrets.tcp,
            http_token: secrets.http,
            gateway,
            http,
            database: Some(ctx.at.describe()),
            lock: held.clone(),
            ca,
            // The file this daemon started from; else the default path, where a config
            // written after the start is picked up by SIGHUP.
            reload_from: Some(
                ctx.config
                    .path
                    .clone()
                    .unwrap_or_else(crate::config::default_config_path),
            ),
        },
        shutdown,
    )
    .await
    .map_err(|e| match e {
        // A gateway `ca_file` that cannot be used is bad input, like any config error.
        daemon::DaemonError::Gateway(crate::gateway::GatewayError::Tls(t)) => {
            CliError::usage(format!("gateway: {t}"))
        }
        daemon::DaemonError::Gateway(crate::gateway::GatewayError::Roots(r)) => {
            CliError::usage(format!("gateway: {r}"))
        }
        e => CliError::failed(e.to_string()),
    });
    if let Some(held) = &held {
        lock::clear(held);
    }
    r
}

/// `--gateway ADDR`: a gateway on the built-in defaults with the token from the
/// environment.
fn gateway_flag(
    gateway: Option<SocketAddr>,
    secrets: &ServeSecrets,
) -> Result<Option<crate::config::GatewayConfig>, CliError> {
    let Some(addr) = gateway else {
        return Ok(None);
    };
    let mut g = crate::config::GatewayConfig::new(addr);
    g.token = secrets.gateway.clone();
    g.check().map_err(|(key, msg)| {
        CliError::usage(format!(
            "--gateway: {key}: {msg} (set {GATEWAY_ENV}; clients send it as the proxy password)"
        ))
    })?;
    Ok(Some(g))
}

/// The first signal asks for an orderly stop; a second one means "now".
fn on_signals(shutdown: CancellationToken, own_socket: std::path::PathBuf) {
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        shutdown.cancel();
        // Acknowledged writes are already committed; the socket file is ours and goes too.
        wait_for_signal().await;
        eprintln!("proxypool: second signal, exiting at once");
        crate::server::socket_file::remove_own(&own_socket);
        std::process::exit(1);
    });
}

pub(super) async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
