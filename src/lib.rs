//! proxypool: a forward-proxy pool manager.
//!
//! Endpoints live in SQLite with an explicit health state; cooldowns run on the monotonic
//! clock; exactly one recovery attempt is admitted when a cooldown ends; scrapers lease
//! endpoints over a local socket and report how each use went.

#![warn(missing_docs)]

pub mod cli;
pub mod client;
pub mod config;
pub mod daemon;
pub mod endpoint;
pub mod health;
pub mod http;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod pool;
pub mod probe;
pub mod protocol;
pub mod server;
pub mod sources;
pub mod stats;
pub mod store;
