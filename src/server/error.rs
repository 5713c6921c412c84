//! How an op's failure is answered: a domain error by the protocol's one mapping to wire
//! codes (`Refusal`), with `retry_after_ms` only when it knows a time.

use crate::pool::engine::EngineError;
use crate::pool::PoolError;
use crate::pool::Refusal;
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
    use crate::store::{ResolveError, StoreError};

    /// An op's answer is the one mapping's (`Refusal`, whose tests hold the table), with
    /// its time in milliseconds and the domain error's own words.
    #[test]
    fn an_answer_carries_the_refusal_of_its_error() {
        let exhausted = |after| PoolError::Exhausted {
            pool: "p".into(),
            retry_after: after,
            filter: None,
        };
        let cases: Vec<EngineError> = vec![
            EngineError::Stopped,
            StoreError::Duplicate {
                url: "http://h:1".into(),
                pool: "default".into(),
                id: 1,
                line: None,
            }
            .into(),
            ResolveError::NotFound("9".into()).into(),
            PoolError::UnknownPool("x".into()).into(),
            exhausted(Some(Duration::from_millis(1500))).into(),
            exhausted(None).into(),
            PoolError::Paced {
                pool: "p".into(),
                host: "shop.example".into(),
                retry_after: Some(Duration::from_millis(12_000)),
                wait: Duration::ZERO,
            }
            .into(),
        ];
        for e in cases {
            let (r, shown) = (Refusal::from(&e), e.to_string());
            let body = OpError::from(e).into_body();
            assert_eq!(body.code, r.code, "{shown}");
            let ms = r.retry_after.map(|d| Some(d.as_millis() as u64));
            assert_eq!(body.retry_after_ms, ms, "{shown}");
        }
        let ms = |e: PoolError| OpError::from(e).into_body().retry_after_ms;
        assert_eq!(
            ms(exhausted(Some(Duration::from_millis(1500)))),
            Some(Some(1500))
        );
        assert_eq!(ms(exhausted(None)), None, "no deadline: no field at all");
    }
}
