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
pub mod lock;
pub mod pool;
pub mod probe;
pub mod protocol;
pub mod redact;
pub mod server;
pub mod socket_file;
pub mod sources;
pub mod store;
pub mod token;
