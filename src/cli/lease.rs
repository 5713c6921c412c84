//! `lease`: take an endpoint from a running daemon.

use super::client::Client;
use super::{daemon_error, unexpected, CliError, Context, LeaseArgs};
use crate::protocol::{Dur, LeaseMessage, Payload, Request};

/// The session, destination and schemes go as given: the daemon checks each (tags are
/// checked here first, as every `--tag` is).
pub(super) async fn lease(ctx: &Context, a: LeaseArgs) -> Result<(), CliError> {
    let mut c = connect_any(ctx).await?;
    c.set_timeout(a.wait + super::client::DEFAULT_TIMEOUT);
    let req = Request::Lease(LeaseMessage {
        pool: Some(a.pool),
        ttl: Some(Dur(a.ttl)),
        wait: Some(Dur(a.wait)),
        session: a.session,
        destination: a.destination,
        schemes: (!a.schemes.is_empty()).then_some(a.schemes),
        tags: Some(super::parse_tags(&a.tags)?).filter(|t| !t.is_empty()),
    });
    let resp = c.request(&req).await?;
    if a.json {
        // Through a `Value`, so the keys print sorted as they always have.
        // A failure prints its error object too (`pool_exhausted` with its
        // `retry_after_ms`), for scripts; the exit code still says it failed.
        let v = serde_json::to_value(&resp).unwrap_or_default();
        outln!("{v}");
        resp.into_result().map_err(daemon_error)?;
        return Ok(());
    }
    match resp.into_result().map_err(daemon_error)? {
        Payload::Lease(g) => outln!("{}", g.proxy),
        _ => return Err(unexpected("lease")),
    }
    Ok(())
}

/// The `--connect` daemon, else this database's daemon, else whatever serves the
/// configured socket: leases live only in a daemon's memory, so without one these
/// commands fail (exit 1).
pub(super) async fn connect_any(ctx: &Context) -> Result<Client, CliError> {
    let c = match ctx.running_daemon().await? {
        Some(c) => Some(c),
        None => Client::connect(&ctx.socket).await?,
    };
    c.ok_or_else(|| {
        CliError::failed(format!(
            "no daemon is serving on {}; start one with `proxypool serve`",
            ctx.socket.display()
        ))
    })
}
