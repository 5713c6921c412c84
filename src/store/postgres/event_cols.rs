//! The columns of an `events` insert, one array each, so that one `UNNEST` statement
//! inserts a whole batch: from the writes of a commit (`push_new`) or from stored events
//! being moved (`push_stored`), bound in one order (`params`).

use tokio_postgres::types::ToSql;

use super::guard::opt_i32;
use crate::endpoint::EndpointId;
use crate::store::{EventRow, NewEvent};

#[derive(Default)]
pub(super) struct EventCols {
    endpoint: Vec<Option<i64>>,
    kind: Vec<String>,
    from: Vec<Option<String>>,
    to: Vec<Option<String>>,
    reason: Vec<Option<String>>,
    phase: Vec<Option<String>>,
    detail: Vec<Option<String>>,
    lease: Vec<Option<String>>,
    destination: Vec<Option<String>>,
    status: Vec<Option<i32>>,
    blame: Vec<Option<String>>,
}

impl EventCols {
    /// An event a commit writes, about `endpoint` (and `destination`, with `status`).
    pub(super) fn push_new(
        &mut self,
        ev: &NewEvent,
        endpoint: Option<EndpointId>,
        destination: Option<&str>,
        status: Option<u16>,
    ) {
        self.endpoint.push(endpoint);
        self.kind.push(ev.kind.as_str().to_string());
        self.from.push(ev.from.map(|s| s.as_str().to_string()));
        self.to.push(ev.to.map(|s| s.as_str().to_string()));
        self.reason.push(ev.reason.map(|r| r.as_str().to_string()));
        self.phase.push(ev.phase.map(|p| p.as_str().to_string()));
        self.detail.push(super::text(&ev.detail));
        self.lease.push(super::text(&ev.lease));
        self.destination
            .push(destination.map(|d| crate::redact::printable(d).into_owned()));
        self.status.push(opt_i32(status));
        self.blame.push(ev.blame.map(|b| b.as_str().to_string()));
    }

    /// A stored event, as it was stored.
    pub(super) fn push_stored(&mut self, e: &EventRow) {
        self.endpoint.push(e.endpoint);
        self.kind.push(e.kind.clone());
        self.from.push(e.from.clone());
        self.to.push(e.to.clone());
        self.reason.push(e.reason.clone());
        self.phase.push(e.phase.clone());
        self.detail.push(e.detail.clone());
        self.lease.push(e.lease.clone());
        self.destination.push(e.destination.clone());
        self.status.push(e.status.map(i32::from));
        self.blame.push(e.blame.clone());
    }

    pub(super) fn is_empty(&self) -> bool {
        self.kind.is_empty()
    }

    /// The arrays in the order of the statement's columns: `endpoint, kind, from_state,
    /// to_state, reason, phase, detail, lease, destination, status, blame`.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 11] {
        [
            &self.endpoint,
            &self.kind,
            &self.from,
            &self.to,
            &self.reason,
            &self.phase,
            &self.detail,
            &self.lease,
            &self.destination,
            &self.status,
            &self.blame,
        ]
    }
}
