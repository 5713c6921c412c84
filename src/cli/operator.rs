//! `disable`, `enable` and `remove`.

use super::{call, unexpected, CliError, Context, Named};
use crate::health::Input;
use crate::protocol::{
    DisableMessage, EnableMessage, EndpointRef, Payload, RemoveMessage, Request,
};

/// `disable`.
pub(super) async fn disable(
    ctx: &Context,
    targets: &Named<'_>,
    reason: Option<String>,
) -> Result<(), CliError> {
    operator(ctx, targets, |r| {
        (
            Request::Disable(DisableMessage {
                endpoint: r,
                pool: targets.pool.map(str::to_string),
                reason: reason.clone(),
            }),
            Input::Disable {
                detail: reason.clone(),
            },
        )
    })
    .await
}

/// `enable`: of the endpoints, or (with a destination) of their pairs for it.
pub(super) async fn enable(
    ctx: &Context,
    targets: &Named<'_>,
    now: bool,
    destination: Option<String>,
) -> Result<(), CliError> {
    if let Some(d) = destination {
        return super::pairs::enable_pair(ctx, targets, &d).await;
    }
    operator(ctx, targets, |r| {
        (
            Request::Enable(EnableMessage {
                endpoint: r,
                pool: targets.pool.map(str::to_string),
                now: Some(now),
                destination: None,
            }),
            Input::Enable { now },
        )
    })
    .await
}

/// Send each endpoint's act to the daemon, or apply it to the store without one.
async fn operator(
    ctx: &Context,
    targets: &Named<'_>,
    make: impl Fn(EndpointRef) -> (Request, Input),
) -> Result<(), CliError> {
    if let Some(mut c) = ctx.daemon().await? {
        for r in ctx.endpoint_refs(targets)? {
            let (req, _) = make(r.clone());
            match call(&mut c, &req).await? {
                Payload::State {
                    state, endpoint, ..
                } => outln!("{}\t{state}", super::table::shown_id(endpoint, &r)),
                _ => return Err(unexpected("an operator command")),
            }
        }
        return Ok(());
    }
    let ids = ctx.resolve_ids(targets)?;
    let engine = ctx.engine()?;
    for id in ids {
        let (_, input) = make(EndpointRef::Id(id));
        let detail =
            matches!(input, Input::Enable { .. }).then(|| "enabled by operator".to_string());
        let (_, state) = engine.input(id, input, None, detail).await?;
        outln!("{id}\t{state}");
    }
    engine.flush().await?;
    Ok(())
}

pub(super) async fn remove(ctx: &Context, targets: &Named<'_>) -> Result<(), CliError> {
    let refs = ctx.endpoint_refs(targets)?;
    if let Some(mut c) = ctx.daemon().await? {
        call(
            &mut c,
            &Request::Remove(RemoveMessage {
                endpoints: refs.clone(),
                pool: targets.pool.map(str::to_string),
            }),
        )
        .await?;
    } else {
        let ids: Vec<_> = refs
            .iter()
            .filter_map(|r| match r {
                EndpointRef::Id(id) => Some(*id),
                EndpointRef::Url(_) => None,
            })
            .collect();
        ctx.store()?.remove(&ids)?;
    }
    for r in refs {
        outln!("{}\tremoved", crate::endpoint::redact_raw(&r.as_arg()));
    }
    Ok(())
}
