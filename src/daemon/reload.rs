//! SIGHUP: read the config file again and apply what can change while serving.
//!
//! Pool policies, modes, lease caps, probe settings, sources and new pools apply at once;
//! `[[endpoint]]` entries that are missing are added. A bad file, a probe setting that
//! does not build, or a pool removed while it still has endpoints changes nothing and
//! says why in the log, on one line. The store, socket, listeners and secrets need a
//! restart: each such key that changed is named in a warning.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::PoolTasks;
use crate::config::{Config, ConfigError};
use crate::pool::engine::{initial_state, Engine, EngineError};
use crate::pool::ReconfigureError;
use crate::probe::run::probers;
use crate::probe::ProbeError;
use crate::server::Handler;
use crate::store::NewEndpoint;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error(transparent)]
    Refused(#[from] ReconfigureError),
}

/// Owns what a reload replaces.
pub(super) struct Reloader {
    path: PathBuf,
    current: Arc<Config>,
    engine: Arc<Engine>,
    handler: Arc<Handler>,
    tasks: PoolTasks,
}

impl Reloader {
    pub(super) fn new(
        path: PathBuf,
        current: Arc<Config>,
        engine: Arc<Engine>,
        handler: Arc<Handler>,
        tasks: PoolTasks,
    ) -> Self {
        Reloader {
            path,
            current,
            engine,
            handler,
            tasks,
        }
    }

    /// Start receiving SIGHUP (buffered until `run` reads it); None when the signal
    /// cannot be handled, which is logged.
    pub(super) fn listen() -> Option<Signal> {
        match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGHUP; config reload is off");
                None
            }
        }
    }

    /// Reload on every SIGHUP until `shutdown`.
    pub(super) async fn run(mut self, mut hup: Signal, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                r = hup.recv() => if r.is_none() { return },
            }
            info!(config = %self.path.display(), "SIGHUP: reloading the config");
            match self.reload().await {
                Ok(added) => info!(
                    config = %self.path.display(),
                    pools = self.current.pools.len(),
                    new_pools = %added.join(","),
                    "config reloaded"
                ),
                Err(e) => error!(
                    config = %self.path.display(),
                    error = %e,
                    "config reload refused; nothing changed"
                ),
            }
        }
    }

    /// Apply the file as it is now; returns the names of new pools.
    async fn reload(&mut self) -> Result<Vec<String>, ReloadError> {
        let new = Config::load(&self.path)?;
        let probers = probers(&new)?;
        let dropped: Vec<String> = self
            .current
            .pools
            .keys()
            .filter(|name| !new.pools.contains_key(*name))
            .cloned()
            .collect();
        let added = self
            .engine
            .reconfigure(new.pools.values().cloned().collect(), &dropped)?;
        // Listeners, the store and the secrets are set up once: a change would otherwise
        // look applied. (A `--gateway` one is no file's, and no reload touches it.)
        for key in crate::config::restart_only_changes(&self.current, &new) {
            warn!(
                key = %key,
                config = %self.path.display(),
                "changed in the config, but applies only at the next start of `serve`; the running value is kept"
            );
        }
        for name in &dropped {
            self.tasks.stop(name);
        }
        for pool in new.pools.values() {
            let unchanged = self.current.pools.get(&pool.name) == Some(pool);
            if !unchanged {
                let is_new = added.contains(&pool.name);
                self.tasks.start(pool, probers.get(&pool.name), is_new);
            }
        }
        let new = Arc::new(new);
        self.handler.reconfigure(new.clone(), probers);
        if let Err(e) = self.add_declared(&new).await {
            warn!(error = %e, "could not add the config's [[endpoint]] entries");
        }
        self.current = new;
        Ok(added)
    }

    /// Add `[[endpoint]]` entries that do not exist yet (never removes any).
    async fn add_declared(&self, cfg: &Config) -> Result<(), EngineError> {
        let eps: Vec<NewEndpoint> = cfg
            .endpoints
            .iter()
            .map(|d| NewEndpoint {
                url: d.url.clone(),
                pool: d.pool.clone(),
                label: d.label.clone(),
                source: Some("config".into()),
                state: initial_state(cfg.pool(&d.pool)),
                tags: d.tags.clone(),
            })
            .collect();
        if !eps.is_empty() {
            self.engine.ensure(eps).await?;
        }
        Ok(())
    }
}
