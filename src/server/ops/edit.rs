//! `edit`: a new URL (same pool) and/or label for an endpoint, keeping id, state and
//! history.

use super::{resolve, Op};
use crate::endpoint::ProxyUrl;
use crate::protocol::{EditMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for EditMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let (url, label) = edit_fields(self.url, self.label).map_err(OpError::bad)?;
        let id = resolve(cx, &self.endpoint, self.pool.as_deref()).await?;
        let row = cx.engine.edit(id, url, label).await?;
        Ok(Payload::Endpoints {
            endpoints: vec![row.view(false)],
        })
    }
}

/// Check an edit's fields: at least one, the URL parsed (the message never repeats a
/// password), an empty label meaning "clear it". The CLI checks them the same way when
/// it edits the store itself.
pub fn edit_fields(
    url: Option<String>,
    label: Option<String>,
) -> Result<(Option<ProxyUrl>, Option<Option<String>>), String> {
    if url.is_none() && label.is_none() {
        return Err("nothing to edit: give a new url and/or label".into());
    }
    let url = url
        .map(|u| ProxyUrl::parse(&u).map_err(|e| format!("url: {e}")))
        .transpose()?;
    let label = label.map(|l| Some(l).filter(|l| !l.is_empty()));
    Ok((url, label))
}
