//! `edit`: a new URL, label or tags for an endpoint, through the daemon when one runs.

use std::collections::BTreeMap;

use super::{call, unexpected, CliError, Context, Named};
use crate::protocol::EndpointView;
use crate::protocol::{EditMessage, EndpointRef, Payload, Request};
use crate::server::edit_fields;

pub(super) async fn edit(
    ctx: &Context,
    target: &str,
    pool: Option<String>,
    url: Option<String>,
    label: Option<String>,
    tags: &[String],
) -> Result<(), CliError> {
    // Checked before anything is reached, so bad input changes nothing in either path.
    let mut changes = BTreeMap::new();
    for t in tags {
        let (k, v) = crate::tags::split(t).map_err(|e| CliError::usage(format!("--tag: {e}")))?;
        if changes.insert(k.to_string(), v.to_string()).is_some() {
            return Err(CliError::usage(format!("--tag: key {k:?} is given twice")));
        }
    }
    let fields =
        edit_fields(url.clone(), label.clone(), changes.clone()).map_err(CliError::usage)?;
    let args = [target.to_string()];
    let endpoint = ctx.endpoint_refs(&Named::new(&args, &pool))?.remove(0);
    let view: EndpointView = if let Some(mut c) = ctx.daemon().await? {
        let req = Request::Edit(EditMessage {
            endpoint,
            pool,
            url,
            label,
            tags: (!changes.is_empty()).then_some(changes),
        });
        match call(&mut c, &req).await? {
            Payload::Endpoints { mut endpoints, .. } if endpoints.len() == 1 => endpoints.remove(0),
            _ => return Err(unexpected("edit")),
        }
    } else {
        let EndpointRef::Id(id) = endpoint else {
            unreachable!("resolved against this host's database")
        };
        let engine = ctx.engine()?;
        let row = engine
            .edit(id, fields.url, fields.label, fields.tags)
            .await?;
        engine.flush().await?;
        row.view(false)
    };
    outln!(
        "{}\t{}\t{}\t{}\t{}",
        view.id,
        view.url,
        view.state,
        view.label.as_deref().unwrap_or("-"),
        if view.tags.is_empty() {
            "-".to_string()
        } else {
            view.tags.to_string()
        }
    );
    Ok(())
}
