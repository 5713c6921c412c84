//! SIGHUP: read the config file again and apply what can change while serving.
//!
//! Pool policies, modes, lease caps, probe settings, sources and new pools apply at once;
//! `[[endpoint]]` entries that are missing are added. A bad file, a probe setting that
//! does not build, or a pool removed while it still has endpoints changes nothing and
//! says why in the log, on one line. The store, socket, listeners and secrets need a
//! restart: each such key that changed is named in a warning.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    /// The file did not come in time (a stalled mount): the read goes on in the
    /// background, and the running config stays.
    #[error("reading {} took longer than {}s (a stalled mount?)", path.display(), READ_DEADLINE.as_secs())]
    Stalled { path: PathBuf },
    /// A read that stalled before has not ended: another would stall beside it.
    #[error("the previous read of {} has not finished", path.display())]
    StillReading { path: PathBuf },
}

/// How long a reload waits for the config file. Reading is done on a thread of its own:
/// a file that never comes (a stalled network mount) must not hold the runtime, whose
/// sockets, gateway and signals go on.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// Owns what a reload replaces.
pub(super) struct Reloader {
    path: PathBuf,
    current: Arc<Config>,
    engine: Arc<Engine>,
    handler: Arc<Handler>,
    tasks: PoolTasks,
    /// A read of the file that has not ended (set while its thread runs).
    reading: Arc<AtomicBool>,
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
            reading: Arc::new(AtomicBool::new(false)),
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
            // A reload waiting for its file must not hold up a shutdown.
            let reloaded = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = self.reload() => r,
            };
            match reloaded {
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
        let new = self.read().await?;
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

    /// The config file read and checked on a thread of its own, within [`READ_DEADLINE`].
    async fn read(&self) -> Result<Config, ReloadError> {
        read_within(&self.path, &self.reading, Config::load).await
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

/// `load(path)` on a thread of its own, waited for [`READ_DEADLINE`] at most; while a read
/// that stalled has not ended (`reading`), no other is started.
async fn read_within(
    path: &Path,
    reading: &Arc<AtomicBool>,
    load: impl FnOnce(&Path) -> Result<Config, ConfigError> + Send + 'static,
) -> Result<Config, ReloadError> {
    let path = path.to_path_buf();
    if reading.swap(true, Ordering::AcqRel) {
        return Err(ReloadError::StillReading { path });
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let done = reading.clone();
    let file = path.clone();
    let spawned = std::thread::Builder::new()
        .name("config-read".into())
        .spawn(move || {
            let loaded = load(&file);
            // Cleared before the answer goes, so whoever gets it may read again at once.
            done.store(false, Ordering::Release);
            let _ = tx.send(loaded);
        });
    if let Err(source) = spawned {
        reading.store(false, Ordering::Release);
        return Err(ConfigError::Read { path, source }.into());
    }
    match tokio::time::timeout(READ_DEADLINE, rx).await {
        Ok(Ok(loaded)) => Ok(loaded?),
        // The thread ended without an answer (it panicked, which `load` must not): said
        // as a stall rather than taken for a config.
        Ok(Err(_)) | Err(_) => Err(ReloadError::Stalled { path }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_read_that_stalls_is_refused_at_the_deadline_and_not_doubled() {
        let reading = Arc::new(AtomicBool::new(false));
        let (release, stalled) = std::sync::mpsc::channel::<()>();
        let path = Path::new("/stalled/proxies.toml");
        let started = tokio::time::Instant::now();
        let r = read_within(path, &reading, move |_| {
            let _ = stalled.recv();
            Ok(Config::default())
        })
        .await;
        assert!(matches!(r, Err(ReloadError::Stalled { .. })), "{r:?}");
        assert_eq!(started.elapsed(), READ_DEADLINE);
        // The stalled read goes on: a second one is refused at once.
        let r = read_within(path, &reading, |_| Ok(Config::default())).await;
        assert!(matches!(r, Err(ReloadError::StillReading { .. })), "{r:?}");
        assert_eq!(started.elapsed(), READ_DEADLINE);
        // Once it ends, reading works again.
        release.send(()).unwrap();
        while reading.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // On the paused clock a wait for a thread would be a stall at once.
        tokio::time::resume();
        let r = read_within(path, &reading, |_| Ok(Config::default())).await;
        assert!(r.is_ok(), "{r:?}");
    }

    #[tokio::test]
    async fn a_bad_file_is_the_loads_error() {
        let reading = Arc::new(AtomicBool::new(false));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxies.toml");
        std::fs::write(&path, "[[pool]]\nname = 1\n").unwrap();
        let r = read_within(&path, &reading, Config::load).await;
        assert!(matches!(r, Err(ReloadError::Config(_))), "{r:?}");
        assert!(!reading.load(Ordering::Acquire));
    }
}
