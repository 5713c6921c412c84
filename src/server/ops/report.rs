//! `report`: how a use of a lease (or of the endpoint bound to a session) went.

use std::time::Duration;

use super::Op;
use crate::config::DEFAULT_POOL;
use crate::health::{Failure, Phase, Reason};
use crate::pool::destinations::place;
use crate::pool::{Outcome, PoolError, ReportOn};
use crate::protocol::{Payload, ReportMessage, ReportOutcome, RetryAfter};
use crate::server::context::Context;
use crate::server::error::OpError;
use crate::server::token::Role;

impl Op for ReportMessage {
    const ROLE: Role = Role::Lease;

    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let target = Target::new(self.lease, self.pool, self.session)?;
        // The protocol bounds it: finite, >= 0, at most MAX_DURATION.
        let took = self
            .duration_ms
            .map(|ms| Duration::from_secs_f64(ms / 1000.0));
        let place = self
            .destination
            .as_deref()
            .map(place)
            .transpose()
            .map_err(|e| OpError::bad(format!("destination: {e}")))?;
        let on = ReportOn {
            place,
            duration: took,
        };
        let outcome = match self.outcome {
            ReportOutcome::Success => Outcome::Success,
            ReportOutcome::Failure => Outcome::Failure(failure(
                self.reason,
                self.phase,
                self.status,
                self.retry_after,
                self.detail,
            )?),
        };
        let r = match target {
            Target::Lease(lease) => cx.engine.report_on(&lease, outcome, &on).await?,
            Target::Session { pool, session } => {
                cx.engine
                    .report_session(&pool, &session, outcome, &on)
                    .await?
            }
        };
        Ok(Payload::State {
            endpoint: None,
            state: r.state,
            blame: r.blame,
        })
    }
}

/// What a report is about: a lease, or the endpoint bound to a sticky session.
enum Target {
    Lease(String),
    Session { pool: String, session: String },
}

impl Target {
    fn new(
        lease: Option<String>,
        pool: Option<String>,
        session: Option<String>,
    ) -> Result<Target, OpError> {
        match (lease, session) {
            (Some(l), None) if pool.is_none() => Ok(Target::Lease(l)),
            (None, Some(session)) => {
                crate::limits::check_session_key(&session)
                    .map_err(|e| OpError::bad(format!("session: {e}")))?;
                Ok(Target::Session {
                    pool: pool.unwrap_or_else(|| DEFAULT_POOL.to_string()),
                    session,
                })
            }
            (Some(_), _) => Err(OpError::bad(
                "report takes either `lease`, or `pool` and `session`, not both",
            )),
            (None, None) => Err(OpError::bad(
                "report needs `lease`, or `session` (with `pool`, default \"default\")",
            )),
        }
    }
}

/// A failure report's fields, checked: a known reason is required, an unknown phase is
/// stored as null rather than refused (docs/reference.md, "Phases"), an unparsable
/// `retry_after` is noted in the detail.
fn failure(
    reason: Option<String>,
    phase: Option<String>,
    status: Option<u16>,
    retry_after: Option<RetryAfter>,
    detail: Option<String>,
) -> Result<Failure, OpError> {
    let reason: Reason = reason
        .ok_or_else(|| OpError::from(PoolError::MissingReason))?
        .parse()
        .map_err(|e: crate::health::UnknownName| OpError::bad(e.to_string()))?;
    let phase = phase.and_then(|p| p.parse::<Phase>().ok());
    let detail = match &retry_after {
        Some(RetryAfter::Unparsable(v)) => {
            let note = format!("retry_after {v:?} ignored: not seconds or an HTTP date");
            Some(match detail {
                Some(d) => format!("{}; {note}", truncate(&d, 900)),
                None => note,
            })
        }
        _ => detail,
    };
    Ok(Failure {
        reason: Some(reason),
        phase,
        status,
        retry_after: retry_after.as_ref().and_then(RetryAfter::duration),
        detail: detail.map(|d| truncate(&d, 1000)),
        // A client's TLS error is judged by contrast, but never taken for a substitution.
        substituted: false,
    })
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}
