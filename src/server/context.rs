//! What an op's handler may use: the engine, and the config and probers in force.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::pool::engine::Engine;
use crate::probe::Prober;

/// What a config reload replaces.
#[derive(Clone)]
pub(super) struct Live {
    pub(super) config: Arc<Config>,
    pub(super) probers: Arc<HashMap<String, Prober>>,
}

/// The `Live` state, swapped whole by a reload: a request in flight keeps what it read.
pub(super) struct LiveCell(RwLock<Live>);

impl LiveCell {
    pub(super) fn new(config: Arc<Config>) -> Self {
        LiveCell(RwLock::new(Live {
            config,
            probers: Arc::new(HashMap::new()),
        }))
    }

    pub(super) fn get(&self) -> Live {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn set(&self, live: Live) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = live;
    }

    pub(super) fn set_probers(&self, probers: HashMap<String, Prober>) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).probers = Arc::new(probers);
    }
}

/// What every op's handler is given: never the dispatcher itself.
pub(super) struct Context<'a> {
    pub(super) engine: &'a Arc<Engine>,
    /// The database the daemon serves, as `status` names it.
    pub(super) database: Option<&'a str>,
    live: &'a LiveCell,
    /// Cancelled when the client's connection has closed: an op that waits stops waiting.
    pub(super) gone: &'a CancellationToken,
}

impl<'a> Context<'a> {
    pub(super) fn new(
        engine: &'a Arc<Engine>,
        database: Option<&'a str>,
        live: &'a LiveCell,
        gone: &'a CancellationToken,
    ) -> Self {
        Context {
            engine,
            database,
            live,
            gone,
        }
    }

    /// The config and probers in force now.
    pub(super) fn live(&self) -> Live {
        self.live.get()
    }
}
