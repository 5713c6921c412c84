//! `edit`: a new URL (same pool), label and/or tags for an endpoint, keeping id, state
//! and history.

use std::collections::BTreeMap;

use super::{resolve, Op};
use crate::endpoint::ProxyUrl;
use crate::protocol::{EditMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for EditMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let e = edit_fields(self.url, self.label, self.tags.unwrap_or_default())
            .map_err(OpError::bad)?;
        let id = resolve(cx, &self.endpoint, self.pool.as_deref()).await?;
        let row = cx.engine.edit(id, e.url, e.label, e.tags).await?;
        Ok(Payload::Endpoints {
            endpoints: vec![row.view(false)],
            store: None,
        })
    }
}

/// An edit, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct EditFields {
    pub url: Option<ProxyUrl>,
    /// `Some(None)` clears the label.
    pub label: Option<Option<String>>,
    /// Tags to set; an empty value removes its key.
    pub tags: BTreeMap<String, String>,
}

/// Check an edit's fields: at least one, the URL parsed (the message never repeats a
/// password), an empty label meaning "clear it", every tag key valid and every value
/// valid or empty ("remove it"). The CLI checks them the same way when it edits the store
/// itself.
pub fn edit_fields(
    url: Option<String>,
    label: Option<String>,
    tags: BTreeMap<String, String>,
) -> Result<EditFields, String> {
    if url.is_none() && label.is_none() && tags.is_empty() {
        return Err("nothing to edit: give a new url, label and/or tags".into());
    }
    let url = url
        .map(|u| ProxyUrl::parse(&u).map_err(|e| format!("url: {e}")))
        .transpose()?;
    let label = label.map(|l| Some(l).filter(|l| !l.is_empty()));
    for (k, v) in &tags {
        let checked = if v.is_empty() {
            crate::tags::check_key(k)
        } else {
            crate::tags::check(k, v)
        };
        checked.map_err(|e| format!("tags: {e}"))?;
    }
    Ok(EditFields { url, label, tags })
}
