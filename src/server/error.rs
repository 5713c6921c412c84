//! How an op's failure is answered: the one mapping from domain errors to wire codes.

use crate::pool::engine::EngineError;
use crate::pool::PoolError;
use crate::protocol::ErrorCode;

pub(super) struct OpError {
    pub(super) code: ErrorCode,
    pub(super) message: String,
    pub(super) retry_after_ms: Option<u64>,
}

impl OpError {
    pub(super) fn bad(m: impl Into<String>) -> Self {
        OpError {
            code: ErrorCode::BadRequest,
            message: m.into(),
            retry_after_ms: None,
        }
    }

    pub(super) fn internal(m: impl Into<String>) -> Self {
        OpError {
            code: ErrorCode::Internal,
            message: m.into(),
            retry_after_ms: None,
        }
    }
}

impl From<PoolError> for OpError {
    fn from(e: PoolError) -> Self {
        let code = match &e {
            PoolError::UnknownPool(_) => ErrorCode::UnknownPool,
            PoolError::Exhausted { .. } => ErrorCode::PoolExhausted,
            // A session stands in for the lease of a report by session (SPEC §13).
            PoolError::UnknownLease(_) | PoolError::UnknownSession { .. } => {
                ErrorCode::UnknownLease
            }
            PoolError::LeaseExpired(_) => ErrorCode::LeaseExpired,
            PoolError::UnknownEndpoint(_) | PoolError::MissingReason | PoolError::InvalidTtl(_) => {
                ErrorCode::BadRequest
            }
        };
        let retry_after_ms = match &e {
            PoolError::Exhausted { retry_after, .. } => retry_after.map(|d| d.as_millis() as u64),
            _ => None,
        };
        OpError {
            code,
            message: e.to_string(),
            retry_after_ms,
        }
    }
}

impl From<crate::store::StoreError> for OpError {
    fn from(e: crate::store::StoreError) -> Self {
        EngineError::from(e).into()
    }
}

impl From<EngineError> for OpError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Pool(p) => p.into(),
            // A full disk or a broken database is never the caller's fault.
            EngineError::Store(s) if s.is_input() => OpError::bad(s.to_string()),
            EngineError::Resolve(r) if r.is_input() => OpError::bad(r.to_string()),
            EngineError::Store(s) => OpError::internal(s.to_string()),
            EngineError::Resolve(r) => OpError::internal(r.to_string()),
            e @ EngineError::Stopped => OpError::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::engine::EngineError;
    use crate::pool::PoolError;
    use crate::store::{ResolveError, StoreError};

    #[test]
    fn engine_errors_map_to_codes() {
        let disk_full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("database or disk is full".into()),
        );
        let cases: Vec<(EngineError, ErrorCode)> = vec![
            (StoreError::Sqlite(disk_full).into(), ErrorCode::Internal),
            (EngineError::Stopped, ErrorCode::Internal),
            (
                StoreError::Duplicate {
                    url: "http://h:1".into(),
                    pool: "default".into(),
                    id: 1,
                }
                .into(),
                ErrorCode::BadRequest,
            ),
            (
                ResolveError::NotFound("9".into()).into(),
                ErrorCode::BadRequest,
            ),
            (
                PoolError::UnknownPool("x".into()).into(),
                ErrorCode::UnknownPool,
            ),
        ];
        for (e, code) in cases {
            let shown = e.to_string();
            assert_eq!(OpError::from(e).code, code, "{shown}");
        }
    }
}
