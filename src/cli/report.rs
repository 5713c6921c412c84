//! `report` and `release`: the socket ops of the same names, for shell scripts.

use serde_json::Value;

use super::lease::connect_any;
use super::{call, unexpected, CliError, Context, ReportArgs};
use crate::protocol::{Payload, ReleaseMessage, ReportMessage, ReportOutcome, Request, RetryAfter};

pub(super) async fn report(ctx: &Context, a: ReportArgs) -> Result<(), CliError> {
    let outcome = a.outcome;
    if outcome == ReportOutcome::Failure && a.reason.is_none() {
        return Err(CliError::usage(
            "--outcome failure needs --reason (it decides the cooldown policy)",
        ));
    }
    // Read exactly as the daemon reads it: a far value is clamped, an unparsable one is
    // noted in the event and ignored.
    let retry_after = a
        .retry_after
        .map(|v| serde_json::from_value::<RetryAfter>(Value::String(v)))
        .transpose()
        .map_err(|e| CliError::usage(format!("--retry-after: {e}")))?;
    let destination = a
        .destination
        .as_deref()
        .map(super::pairs::destination)
        .transpose()?;
    let req = Request::Report(ReportMessage {
        lease: Some(a.lease),
        pool: None,
        session: None,
        destination,
        duration_ms: a.duration_ms.map(|ms| ms as f64),
        outcome,
        reason: a.reason,
        phase: a.phase,
        status: a.status,
        retry_after,
        detail: a.detail,
    });
    let mut c = connect_any(ctx).await?;
    match call(&mut c, &req).await? {
        Payload::State { state, .. } => outln!("{state}"),
        _ => return Err(unexpected("report")),
    }
    Ok(())
}

pub(super) async fn release(ctx: &Context, lease: String) -> Result<(), CliError> {
    let mut c = connect_any(ctx).await?;
    call(&mut c, &Request::Release(ReleaseMessage { lease })).await?;
    outln!("released");
    Ok(())
}
