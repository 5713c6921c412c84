//! Sources of sniffing pools.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::pool::engine::Engine;

/// Sniff on startup, then refresh, until `shutdown`.
pub async fn run(_engine: Arc<Engine>, _pool: PoolConfig, shutdown: CancellationToken) {
    shutdown.cancelled().await;
}
