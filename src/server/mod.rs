//! The lease socket: accepts connections and answers JSON-lines requests in order.
//!
//! `listener` binds and accepts, `connection` frames one client's lines, `handler` checks
//! a request and hands it to `ops` (one handler per op, given a `context`), `error` maps
//! failures to codes. `socket_file` decides what may be replaced at the socket's path,
//! `token` checks the TCP listener's secret, `fd_limit` sizes each listener's connection
//! cap from the open-file limit.

mod connection;
mod context;
mod error;
pub mod fd_limit;
mod handler;
mod listener;
mod ops;
pub(crate) mod socket_file;
pub(crate) mod token;

use std::time::Duration;

pub(crate) use connection::serve_conn;
pub use handler::Handler;
pub use listener::{bind_unix, run, run_tcp};
pub(crate) use ops::edit_fields;

/// Errors setting up the socket.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The socket path is taken by something that must not be replaced, or a live daemon.
    #[error(transparent)]
    Socket(socket_file::SocketFileError),
    /// Binding or preparing the socket failed.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// Socket path or address.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
}

/// How long requests in flight may still run once shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How long a TCP peer has to send a request carrying the valid token.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Default lease lifetime.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
