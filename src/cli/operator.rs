//! `disable`, `enable` and `remove`.

use super::{call, unexpected, CliError, Context};
use crate::health::Input;
use crate::protocol::{EndpointRef, Payload, RemoveMessage, Request};

pub(super) async fn operator(
    ctx: &Context,
    targets: &[String],
    make: impl Fn(EndpointRef) -> (Request, Input),
) -> Result<(), CliError> {
    if let Some(mut c) = ctx.daemon().await? {
        for id in ctx.resolve_ids(targets)? {
            let (req, _) = make(EndpointRef::Id(id));
            match call(&mut c, &req).await? {
                Payload::State { state, .. } => println!("{id}\t{state}"),
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
        println!("{id}\t{state}");
    }
    engine.flush().await?;
    Ok(())
}

pub(super) async fn remove(ctx: &Context, targets: &[String]) -> Result<(), CliError> {
    let ids = ctx.resolve_ids(targets)?;
    if let Some(mut c) = ctx.daemon().await? {
        let endpoints = ids.iter().map(|&id| EndpointRef::Id(id)).collect();
        call(&mut c, &Request::Remove(RemoveMessage { endpoints })).await?;
    } else {
        ctx.store()?.remove(&ids)?;
    }
    for id in ids {
        println!("{id}\tremoved");
    }
    Ok(())
}
