//! `events`.

use std::io::Write as _;
use std::time::Duration;

use super::table::fmt_event;
use super::{CliError, Context};
use crate::endpoint::EndpointId;

pub(super) async fn events(
    ctx: &Context,
    endpoint: Option<EndpointId>,
    follow: bool,
    json_out: bool,
    limit: Option<usize>,
) -> Result<(), CliError> {
    let store = ctx.store()?;
    let mut after = 0;
    if let Some(n) = limit {
        let recent = store.recent_events(endpoint, n)?;
        after = recent.last().map(|e| e.id - 1).unwrap_or(0);
    }
    let mut out = std::io::stdout().lock();
    loop {
        let batch = store.events(endpoint, after, 1000)?;
        for e in &batch {
            let line = if json_out {
                serde_json::to_string(e).unwrap_or_default()
            } else {
                fmt_event(e)
            };
            if writeln!(out, "{line}").is_err() {
                return Ok(());
            }
            after = e.id;
        }
        if batch.len() == 1000 {
            continue;
        }
        if !follow {
            return Ok(());
        }
        let _ = out.flush();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
