//! How an op's failure is answered: the one mapping from domain errors to wire codes, and
//! the one place an error says when to try again (`retry_after_ms`).

use std::time::Duration;

use crate::pool::engine::EngineError;
use crate::pool::PoolError;
use crate::protocol::{ErrorBody, ErrorCode};

/// An op's failure, as it goes on the wire.
#[derive(Debug)]
pub(super) struct OpError(ErrorBody);

impl OpError {
    pub(super) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        OpError(ErrorBody::new(code, message))
    }

    pub(super) fn bad(m: impl Into<String>) -> Self {
        OpError::new(ErrorCode::BadRequest, m)
    }

    pub(super) fn internal(m: impl Into<String>) -> Self {
        OpError::new(ErrorCode::Internal, m)
    }

    /// The same error, saying when to try again.
    fn retry_after(self, after: Duration) -> Self {
        OpError(self.0.retry_after_ms(Some(after.as_millis() as u64)))
    }

    /// The error object of the response.
    pub(super) fn into_body(self) -> ErrorBody {
        self.0
    }
}

impl From<PoolError> for OpError {
    fn from(e: PoolError) -> Self {
        let message = e.to_string();
        match e {
            PoolError::UnknownPool(_) => OpError::new(ErrorCode::UnknownPool, message),
            // `retry_after_ms` only when a cooldown ends: without one, a client that
            // waits would wait for nothing.
            PoolError::Exhausted { retry_after, .. } => {
                let e = OpError::new(ErrorCode::PoolExhausted, message);
                match retry_after {
                    Some(d) => e.retry_after(d),
                    None => e,
                }
            }
            PoolError::Empty { .. } => OpError::new(ErrorCode::PoolEmpty, message),
            PoolError::DestinationDown { retry_after, .. } => {
                OpError::new(ErrorCode::DestinationDown, message).retry_after(retry_after)
            }
            // A session stands in for the lease of a report by session
            // (docs/destinations.md, "Report by session").
            PoolError::UnknownLease(_)
            | PoolError::UnknownSession { .. }
            | PoolError::LeaseEnded { .. } => OpError::new(ErrorCode::UnknownLease, message),
            PoolError::LeaseExpired(_) => OpError::new(ErrorCode::LeaseExpired, message),
            PoolError::StaleClaim(_) => OpError::new(ErrorCode::StaleClaim, message),
            // As for an exhausted pool: a time only when one is known (an `in_flight`
            // cap frees a pair when a lease ends, not at a time).
            PoolError::Paced { retry_after, .. } => {
                let e = OpError::new(ErrorCode::Paced, message);
                match retry_after {
                    Some(d) => e.retry_after(d),
                    None => e,
                }
            }
            PoolError::UnknownTag { .. }
            | PoolError::UnknownTarget { .. }
            | PoolError::TtlOverMax { .. } => OpError::bad(message),
            // Nothing says when a lease will end: no `retry_after_ms`.
            PoolError::TooManyLeases { .. } => OpError::new(ErrorCode::PoolExhausted, message),
            PoolError::UnknownEndpoint(_) | PoolError::MissingReason | PoolError::InvalidTtl(_) => {
                OpError::bad(message)
            }
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
            EngineError::Store(s) if s.is_unavailable() => {
                OpError::new(ErrorCode::StoreUnavailable, s.to_string())
            }
            EngineError::Resolve(r) if r.is_input() => OpError::bad(r.to_string()),
            EngineError::Store(s) => OpError::internal(s.to_string()),
            EngineError::Resolve(r) => OpError::internal(r.to_string()),
            // Never delivered: the caller is gone.
            e @ (EngineError::Stopped | EngineError::CallerGone) => {
                OpError::internal(e.to_string())
            }
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
                    line: None,
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
            assert_eq!(OpError::from(e).into_body().code, code, "{shown}");
        }
    }

    #[test]
    fn only_errors_that_know_when_to_retry_carry_retry_after_ms() {
        let exhausted = |after| PoolError::Exhausted {
            pool: "p".into(),
            retry_after: after,
            filter: None,
        };
        let cases = [
            (
                exhausted(Some(Duration::from_millis(1500))),
                Some(Some(1500)),
            ),
            // Nothing cooling: no deadline to wait for, so no field at all.
            (exhausted(None), None),
            (
                PoolError::Empty {
                    pool: "p".into(),
                    filter: None,
                },
                None,
            ),
            (PoolError::UnknownPool("p".into()), None),
            (PoolError::MissingReason, None),
            (
                PoolError::Paced {
                    pool: "p".into(),
                    host: "shop.example".into(),
                    retry_after: Some(Duration::from_millis(12_000)),
                    wait: Duration::ZERO,
                },
                Some(Some(12_000)),
            ),
            (
                PoolError::UnknownTag {
                    key: "contry".into(),
                    known: vec!["country".into()],
                },
                None,
            ),
        ];
        for (e, want) in cases {
            let shown = e.to_string();
            assert_eq!(OpError::from(e).into_body().retry_after_ms, want, "{shown}");
        }
    }
}
