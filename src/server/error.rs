//! How an op's failure is answered: a domain error by the protocol's one mapping to wire
//! codes (`Refusal`), with `retry_after_ms` only when it knows a time.

use crate::pool::engine::EngineError;
use crate::pool::PoolError;
use crate::protocol::{ErrorBody, ErrorCode, Refusal};

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

    /// A domain error's answer: its code by the one mapping, `retry_after_ms` only when
    /// the refusal knows a time.
    fn refused(r: Refusal, message: String) -> Self {
        let body = ErrorBody::new(r.code, message);
        OpError(match r.retry_after {
            Some(after) => body.retry_after_ms(Some(after.as_millis() as u64)),
            None => body,
        })
    }

    /// The error object of the response.
    pub(super) fn into_body(self) -> ErrorBody {
        self.0
    }
}

impl From<PoolError> for OpError {
    fn from(e: PoolError) -> Self {
        OpError::refused(Refusal::from(&e), e.to_string())
    }
}

impl From<crate::store::StoreError> for OpError {
    fn from(e: crate::store::StoreError) -> Self {
        EngineError::from(e).into()
    }
}

impl From<EngineError> for OpError {
    fn from(e: EngineError) -> Self {
        let message = match &e {
            // The store's own words, without the engine's "store: ".
            EngineError::Store(s) => s.to_string(),
            e => e.to_string(),
        };
        OpError::refused(Refusal::from(&e), message)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
