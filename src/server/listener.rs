//! Binding the sockets and the accept loop shared by the Unix and TCP listeners.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use super::fd_limit::{default_caps, nofile};
use super::{serve_conn, Handler, ServerError};

/// Bind the Unix socket at `path` with mode 0600, replacing a stale file from a crashed
/// daemon and refusing when a live daemon answers there.
pub async fn bind_unix(path: &Path) -> Result<UnixListener, ServerError> {
    let bind_err = |source| ServerError::Bind {
        path: path.display().to_string(),
        source,
    };
    super::socket_file::prepare(path)
        .await
        .map_err(ServerError::Socket)?;
    // Created under a restrictive umask so no other user can connect, even briefly.
    let old = unsafe_umask(0o177);
    let l = UnixListener::bind(path);
    unsafe_umask(old);
    let l = l.map_err(bind_err)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
    Ok(l)
}

fn unsafe_umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask only swaps the process file-mode mask; no memory is touched.
    unsafe { libc::umask(mask) }
}

/// Accept on a Unix socket until `shutdown`, then wait for connections to finish.
pub async fn run(listener: UnixListener, handler: Arc<Handler>, shutdown: CancellationToken) {
    let cap = handler
        .config()
        .max_connections
        .unwrap_or_else(|| default_caps(nofile()).0);
    accept_loop(
        || async { listener.accept().await.map(|(s, _)| s) },
        false,
        cap,
        handler,
        shutdown,
    )
    .await
}

/// Accept on a TCP listener (token required) until `shutdown`.
pub async fn run_tcp(listener: TcpListener, handler: Arc<Handler>, shutdown: CancellationToken) {
    let cap = handler
        .config()
        .max_tcp_connections
        .unwrap_or_else(|| default_caps(nofile()).1);
    accept_loop(
        || async {
            let (s, _) = listener.accept().await?;
            let _ = s.set_nodelay(true);
            Ok(s)
        },
        true,
        cap,
        handler,
        shutdown,
    )
    .await
}

/// The accept loop shared by both listeners: one task per connection, at most `cap` at
/// once, and on shutdown wait for them to finish their replies. Beyond the cap a
/// connection is accepted and closed at once: left in the backlog it would hang its client.
async fn accept_loop<S, F, Fut>(
    mut accept: F,
    tcp: bool,
    cap: usize,
    handler: Arc<Handler>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<S>>,
{
    let tracker = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(cap));
    let mut refused: u64 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            a = accept() => match a {
                Ok(stream) => match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        let (h, sd) = (handler.clone(), shutdown.clone());
                        tracker.spawn(async move {
                            serve_conn(stream, h, tcp, sd).await;
                            drop(slot);
                        });
                    }
                    Err(_) => {
                        // One line per power of two: a flood must not flood the log.
                        refused += 1;
                        if refused.is_power_of_two() {
                            warn!(tcp, cap, refused, "connection limit reached; closing new connections");
                        }
                        drop(stream);
                    }
                },
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    tracker.close();
    tracker.wait().await;
}
