//! `lease`: take an endpoint from a running daemon.

use std::time::Duration;

use super::{daemon_error, unexpected, CliError, Context};
use crate::client::Client;
use crate::protocol::{Body, Dur, Request};

pub(super) async fn lease(
    ctx: &Context,
    pool: String,
    ttl: Duration,
    wait: Duration,
    session: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    // This database's daemon, else whatever serves the configured socket: a
    // lease changes nothing in the database.
    let c = match ctx.daemon().await? {
        Some(c) => Some(c),
        None => Client::connect(&ctx.socket).await?,
    };
    let Some(mut c) = c else {
        return Err(CliError::failed(format!(
            "no daemon is serving on {}; start one with `proxypool serve`",
            ctx.socket.display()
        )));
    };
    c.set_timeout(wait + crate::client::DEFAULT_TIMEOUT);
    let req = Request::Lease {
        pool: Some(pool),
        ttl: Some(Dur(ttl)),
        wait: Some(Dur(wait)),
        session,
        destination: None,
        schemes: None,
    };
    let resp = c.request(&req).await?;
    if json {
        // Through a `Value`, so the keys print sorted as they always have.
        let v = serde_json::to_value(&resp).unwrap_or_default();
        resp.into_result().map_err(daemon_error)?;
        println!("{v}");
        return Ok(());
    }
    match resp.into_result().map_err(daemon_error)? {
        Body::Lease(g) => println!("{}", g.proxy),
        _ => return Err(unexpected("lease")),
    }
    Ok(())
}
