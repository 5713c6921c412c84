//! `disable`, `enable` and `remove`.

use super::args::Command;
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

/// `enable`: of the endpoints, or (with a destination) of their pairs for it, or (with a
/// target) of that target.
pub(super) async fn enable(ctx: &Context, cmd: Command) -> Result<(), CliError> {
    let Command::Enable {
        endpoints,
        pool,
        now,
        destination,
        target,
    } = cmd
    else {
        return Err(unexpected("enable"));
    };
    if let Some(t) = target {
        return enable_target(ctx, pool, &t).await;
    }
    let targets = &Named::new(&endpoints, &pool);
    if let Some(d) = destination {
        return super::pairs::enable_pair(ctx, targets, &d).await;
    }
    operator(ctx, targets, |r| {
        (
            Request::Enable(EnableMessage {
                endpoint: Some(r),
                pool: targets.pool.map(str::to_string),
                now: Some(now),
                destination: None,
                target: None,
            }),
            Input::Enable { now },
        )
    })
    .await
}

/// `enable --target HOST:PORT`: clear a target in the daemon's pools. Targets live in a
/// daemon's memory only: without one there is nothing to clear.
async fn enable_target(ctx: &Context, pool: Option<String>, raw: &str) -> Result<(), CliError> {
    let target = crate::pool::destinations::normalize_key(raw)
        .map_err(|e| CliError::usage(format!("--target: {e}")))?;
    let Some(mut c) = ctx.daemon().await? else {
        return Err(CliError::usage(format!(
            "--target {target}: targets are known only to a running daemon (a restart forgets them), and none is reachable; \
             for a shared database name one daemon with --connect tcp://HOST:PORT"
        )));
    };
    let req = Request::Enable(EnableMessage {
        endpoint: None,
        pool,
        now: None,
        destination: None,
        target: Some(target),
    });
    match call(&mut c, &req).await? {
        Payload::Cleared { cleared } => {
            for t in cleared {
                let was = if t.was_down {
                    "up (was down)"
                } else {
                    "cleared (was not down)"
                };
                outln!("{}\t{}\t{was}", t.pool, t.target);
            }
            Ok(())
        }
        _ => Err(unexpected("enable --target")),
    }
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
