//! The CLI's error: message and exit code, and how daemon answers map to it.

use super::client::ClientError;
use crate::config::ConfigError;
use crate::pool::engine::EngineError;
use crate::pool::Refusal;
use crate::protocol::{ErrorBody, ErrorCode};
use crate::store::{ResolveError, StoreError};

/// A failed command: the message and the exit code (1 failed, 2 bad usage or input).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// Exit code.
    pub code: u8,
    /// Message (never a password).
    pub message: String,
}

impl CliError {
    /// Bad usage or input: exit 2, nothing changed.
    pub fn usage(m: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: m.into(),
        }
    }
    /// The operation failed: exit 1.
    pub fn failed(m: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: m.into(),
        }
    }
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::usage(e.to_string())
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Duplicate { .. }
            | StoreError::DuplicateInBatch { .. }
            | StoreError::NotFound(_)
            | StoreError::Ambiguous { .. }
            | StoreError::HardLinked { .. }
            // A database string or its TLS settings that cannot be used.
            | StoreError::Config(_) => CliError::usage(e.to_string()),
            _ => CliError::failed(e.to_string()),
        }
    }
}

impl From<ResolveError> for CliError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::Store(s) => s.into(),
            other => CliError::usage(other.to_string()),
        }
    }
}

impl From<EngineError> for CliError {
    /// As the daemon would answer it: the code of the one mapping decides the exit code.
    fn from(e: EngineError) -> Self {
        let message = match &e {
            // The store's own words, without the engine's "store: ".
            EngineError::Store(s) => s.to_string(),
            e => e.to_string(),
        };
        refused(Refusal::from(&e).code, message)
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError::failed(e.to_string())
    }
}

pub(super) fn daemon_error(e: ErrorBody) -> CliError {
    refused(e.code, e.message)
}

/// A refusal by its code, whether the daemon answered it or the engine here said it:
/// the caller's input (exit 2), or the operation failed (exit 1).
fn refused(code: ErrorCode, message: String) -> CliError {
    match code {
        ErrorCode::BadRequest | ErrorCode::UnknownPool | ErrorCode::UnknownOp => {
            CliError::usage(message)
        }
        // The CLI sends the lease token first (the least a scraper needs): an operator
        // holding both learns which one went.
        ErrorCode::Forbidden => {
            let lease_set =
                std::env::var_os(crate::server::token::LEASE_ENV).is_some_and(|v| !v.is_empty());
            CliError::usage(if lease_set {
                format!(
                    "{message} (PROXYPOOL_LEASE_TOKEN is set, and is sent before PROXYPOOL_TOKEN: unset it for operator commands)"
                )
            } else {
                message
            })
        }
        _ => CliError::failed(message),
    }
}

// The reply's shape is not what the request asks for: a daemon of another version.
pub(super) fn unexpected(op: &str) -> CliError {
    CliError::failed(format!("unexpected reply from the daemon to {op}"))
}
