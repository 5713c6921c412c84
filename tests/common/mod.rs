//! The one harness of the integration tests. Every `tests/*.rs` starts with `mod common;`
//! and picks what it needs:
//!
//! - `common::tools`  — real third-party software: `need()` finds a tool or skips the test
//!   (a FAILURE when env `CI` is set), `skip_unless_ci()` for any other missing prerequisite,
//!   `Proc` (child killed on drop), `free_port()`, `is_root()`.
//! - `common::fakes`  — hand-written fake proxies (HTTP, HTTPS, SOCKS4/5, scripted byte
//!   plays) and destinations on 127.0.0.1 as tokio tasks; `background()` runs one from a
//!   synchronous test; a throw-away CA; `base64`, `read_head`, `header`.
//! - `common::daemon` — a temporary proxypool home (`Home`), the real binary as CLI
//!   (`Home::run/ok/fails/bare`) and as daemon (`Home::serve` → `Daemon`), a JSON-lines
//!   socket client (`Conn`).
//! - `common::upstreams` — real upstream proxies (tinyproxy, microsocks, dante); the
//!   `_bound` ones leave from a loopback address of their own (127.0.1.2, ...).
//! - `common::origin` — `NginxOrigin`: a real nginx site over HTTPS (HTTP/2 and 1.1, a leaf
//!   from the harness CA; `bad()`: self-signed) and plain HTTP: `/ok`, `/ip`, a location
//!   refusing given client addresses, challenge pages, a gzip'd body, a large body, `/ws`.
//! - `common::mitm` — `Mitmproxy`: mitmdump (PyPI) as an upstream intercepting TLS with its
//!   own CA.
//! - `common::haproxy` — HAProxy as a layer-4 hop.
//! - `common::curl` — curl as a client (`Curl` builder, `CurlOut`).
//! - `common::websocket` — a WebSocket echo server and client.
//! - `common::gateway` — an in-process gateway over a real SQLite file, raw client helpers.
//! - `common::vpool`  — a virtual pool: real `Pools` + real SQLite store under the paused
//!   tokio clock, scripted endpoints, an event auditor; `Clock` for pool-level tests.
//! - `common::eventually` (and `eventually_async`, `eventually_paused`, `holds_for`) — wait
//!   for a state by polling it with a deadline; never a fixed sleep.
//! - `common::tcp_queue` — whether a TCP peer has read what was sent (before a RST).
//! - `common::counting` — a counting global allocator (live heap bytes, and their peak) for memory tests;
//!   a binary that uses it declares it its `#[global_allocator]`.
//! - `common::markdown` — sections, tables and code spans of the docs, for tests/docs.rs.
//! - `common::ports` — ports on 127.0.0.1 reserved for the test process (`free_port()`,
//!   `closed_port()` hand them out): nothing else can take one between its choice and use.
//! - `common::postgres` — a private PostgreSQL cluster (initdb and the server as an
//!   unprivileged user, a temp dir, a free port, scram): one per test binary (`shared()`), a
//!   fresh database per test; `Cluster::start()` for a test that stops its server.
//! - `common::fleet` — daemons of one PostgreSQL database, each with its gateway and HTTP
//!   listener (`Member`); requests through a gateway, the HTTP listener's answers.
//! - `common::writes` — store writes for tests that drive a `Store` directly.
//!
//! Each test binary compiles all of it and uses a part, hence the blanket allow.
#![allow(dead_code)]

pub mod counting;
pub mod curl;
pub mod daemon;
pub mod exit_site;
pub mod fakes;
pub mod fleet;
pub mod gateway;
pub mod haproxy;
pub mod intercepting;
pub mod markdown;
pub mod mitm;
pub mod origin;
pub mod ports;
pub mod postgres;
pub mod tcp_queue;
pub mod tools;
pub mod upstreams;
pub mod vpool;
pub mod wait;
pub mod websocket;
pub mod writes;

// Each test binary uses some of them.
#[allow(unused_imports)]
pub use wait::{eventually, eventually_async, eventually_paused, holds_for, holds_for_async};
