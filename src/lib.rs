//! proxypool: a forward-proxy pool manager.
//!
//! Endpoints live in SQLite with an explicit health state; cooldowns run on the monotonic
//! clock; exactly one recovery attempt is admitted when a cooldown ends; scrapers lease
//! endpoints over a local socket and report how each use went.

pub mod ban;
pub mod cli;
pub mod config;
pub(crate) mod daemon;
pub(crate) mod dial;
pub mod endpoint;
pub mod event_kind;
pub mod gateway;
pub mod health;
pub mod ip_literal;
pub mod limits;
pub mod metrics;
pub mod pool;
pub mod probe;
pub mod protocol;
pub mod redact;
pub(crate) mod retry_after;
pub mod server;
pub mod sources;
pub mod stats;
pub mod store;
pub mod tags;
pub mod tls;
pub(crate) mod wall_time;
pub mod web;
