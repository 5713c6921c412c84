//! The one mapping from domain errors to wire codes: the socket's error answers, the
//! gateway's `X-Proxypool-Error` and the CLI's exit codes all read it, so a refusal is
//! named the same on every front.

use std::time::Duration;

use super::engine::EngineError;
use super::PoolError;
use crate::protocol::ErrorCode;

/// How a refusal is answered: its code and, only when a time is known, when to try again
/// (a client told to come back without one would wait for nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub retry_after: Option<Duration>,
}

impl Refusal {
    fn new(code: ErrorCode) -> Refusal {
        Refusal {
            code,
            retry_after: None,
        }
    }

    fn after(code: ErrorCode, retry_after: Option<Duration>) -> Refusal {
        Refusal { code, retry_after }
    }
}

impl From<&PoolError> for Refusal {
    fn from(e: &PoolError) -> Self {
        match e {
            PoolError::UnknownPool(_) => Refusal::new(ErrorCode::UnknownPool),
            // A time only when a cooldown ends.
            PoolError::Exhausted { retry_after, .. } => {
                Refusal::after(ErrorCode::PoolExhausted, *retry_after)
            }
            PoolError::Empty { .. } => Refusal::new(ErrorCode::PoolEmpty),
            PoolError::DestinationDown { retry_after, .. } => {
                Refusal::after(ErrorCode::DestinationDown, Some(*retry_after))
            }
            // A session stands in for the lease of a report by session
            // (docs/destinations.md, "Report by session").
            PoolError::UnknownLease(_)
            | PoolError::UnknownSession { .. }
            | PoolError::LeaseEnded { .. } => Refusal::new(ErrorCode::UnknownLease),
            PoolError::LeaseExpired(_) => Refusal::new(ErrorCode::LeaseExpired),
            PoolError::StaleClaim(_) => Refusal::new(ErrorCode::StaleClaim),
            // As for an exhausted pool: a time only when one is known (an `in_flight`
            // cap frees a pair when a lease ends, not at a time).
            PoolError::Paced { retry_after, .. } => Refusal::after(ErrorCode::Paced, *retry_after),
            // Nothing says when a lease will end: no time.
            PoolError::TooManyLeases { .. } => Refusal::new(ErrorCode::PoolExhausted),
            PoolError::UnknownTag { .. }
            | PoolError::UnknownTarget { .. }
            | PoolError::TtlOverMax { .. }
            | PoolError::UnknownEndpoint(_)
            | PoolError::MissingReason
            | PoolError::InvalidTtl(_) => Refusal::new(ErrorCode::BadRequest),
        }
    }
}

impl From<&EngineError> for Refusal {
    fn from(e: &EngineError) -> Self {
        match e {
            EngineError::Pool(p) => p.into(),
            // A full disk or a broken database is never the caller's fault.
            EngineError::Store(s) if s.is_input() => Refusal::new(ErrorCode::BadRequest),
            EngineError::Store(s) if s.is_unavailable() => {
                Refusal::new(ErrorCode::StoreUnavailable)
            }
            EngineError::Resolve(r) if r.is_input() => Refusal::new(ErrorCode::BadRequest),
            EngineError::Store(_) | EngineError::Resolve(_) => Refusal::new(ErrorCode::Internal),
            // Never delivered: the caller is gone.
            EngineError::Stopped | EngineError::CallerGone => Refusal::new(ErrorCode::Internal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            (EngineError::CallerGone, ErrorCode::Internal),
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
            (
                PoolError::TooManyLeases {
                    pool: "p".into(),
                    max: 1,
                }
                .into(),
                ErrorCode::PoolExhausted,
            ),
            (PoolError::MissingReason.into(), ErrorCode::BadRequest),
        ];
        for (e, code) in cases {
            assert_eq!(Refusal::from(&e).code, code, "{e}");
        }
    }

    #[test]
    fn only_refusals_that_know_when_to_retry_carry_a_time() {
        let exhausted = |after| PoolError::Exhausted {
            pool: "p".into(),
            retry_after: after,
            filter: None,
        };
        let secs = Duration::from_secs;
        let cases = [
            (exhausted(Some(secs(2))), Some(secs(2))),
            (exhausted(None), None),
            (
                PoolError::DestinationDown {
                    pool: "p".into(),
                    target: "shop.example:443".into(),
                    retry_after: secs(3),
                    trial_out: false,
                    certificate: false,
                },
                Some(secs(3)),
            ),
            (
                PoolError::Paced {
                    pool: "p".into(),
                    host: "shop.example".into(),
                    retry_after: None,
                    wait: Duration::ZERO,
                },
                None,
            ),
            (
                PoolError::Paced {
                    pool: "p".into(),
                    host: "shop.example".into(),
                    retry_after: Some(Duration::from_millis(12_000)),
                    wait: Duration::ZERO,
                },
                Some(Duration::from_millis(12_000)),
            ),
            (
                PoolError::TooManyLeases {
                    pool: "p".into(),
                    max: 1,
                },
                None,
            ),
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
                PoolError::UnknownTag {
                    key: "contry".into(),
                    known: vec!["country".into()],
                },
                None,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(Refusal::from(&e).retry_after, want, "{e}");
        }
    }
}
