//! The pools' side of the exit check (docs/exit.md): which endpoints are due, and what a
//! check learned, recorded as the endpoint's `exit_ip` and an `exit_changed` event when
//! the address moved. Nothing here touches health: a failed check makes the address
//! unknown and cools nothing.

use std::net::IpAddr;

use tokio::time::Instant;
use tracing::info;

use super::Pools;
use crate::config::exit::subnet_of;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::health::State;
use crate::store::{NewEvent, Write};

/// What an answer through an endpoint can teach of its exit address: the header its
/// pool's provider names the address in (`[pool.exit] header`), and the address known now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitSighting {
    pub header: std::sync::Arc<str>,
    pub known: Option<IpAddr>,
}

/// How an address is shown in an event and a log line.
fn shown(ip: Option<IpAddr>) -> String {
    ip.map_or_else(|| "unknown".into(), |ip| ip.to_string())
}

impl super::PoolState {
    /// Tell the pairs which address `id` leaves from now (docs/exit.md); what its entry
    /// keeps of it (`Entry::exit`).
    pub(super) fn sync_exit(&mut self, id: EndpointId) -> u32 {
        let key = match (self.exits.slot(id), self.exits.ip_of(id), &self.cfg.exit) {
            (Some(a), Some(ip), Some(x)) => Some((a, subnet_of(ip, x.subnet_v4, x.subnet_v6))),
            _ => None,
        };
        self.dests.set_exit(id, key);
        key.map_or(0, |(a, _)| a + 1)
    }
}

impl Pools {
    /// [`super::PoolState::sync_exit`] for `id` of pool `p`, and its entry told.
    pub(super) fn sync_exit(&mut self, p: usize, id: EndpointId) {
        let exit = self.pools[p].sync_exit(id);
        if let Some(e) = self.entries.get_mut(&id) {
            e.exit = exit;
        }
    }
}

impl Pools {
    /// Up to `max` available endpoints of `pool` whose exit check is due. Others are
    /// passed over: they are checked when they come back.
    pub fn exit_due(
        &mut self,
        pool: &str,
        now: Instant,
        max: usize,
    ) -> Vec<(EndpointId, ProxyUrl)> {
        let Some(&p) = self.by_name.get(pool) else {
            return Vec::new();
        };
        let ids = self.pools[p].exits.take_due(now, max);
        ids.into_iter()
            .filter_map(|id| {
                let e = self.entries.get(&id)?;
                (e.pool == p && e.health.state == State::Available).then(|| (id, e.url.clone()))
            })
            .collect()
    }

    /// When the next exit check of `pool` is due.
    pub fn exit_next_due(&self, pool: &str) -> Option<Instant> {
        let &p = self.by_name.get(pool)?;
        self.pools[p].exits.next_due()
    }

    /// What an exit check of `id` learned: its address, or why it is unknown now.
    pub fn exit_learned(
        &mut self,
        id: EndpointId,
        learned: Result<IpAddr, String>,
        now: Instant,
    ) -> Vec<Write> {
        let Some(p) = self.entries.get(&id).map(|e| e.pool) else {
            return Vec::new();
        };
        let ip = learned.as_ref().ok().copied();
        let was = self.pools[p].exits.ip_of(id);
        let moved = self.pools[p].exits.learned(id, ip);
        // Out of its old address's bans, into its new one's.
        self.sync_exit(p, id);
        let Some(moved) = moved else {
            // The same address: seen again now. Unknown and still unknown: nothing.
            return match ip {
                Some(_) if was.is_some() => vec![Write::Exit { id, ip }],
                _ => Vec::new(),
            };
        };
        let (from, to) = (shown(moved.from), shown(moved.to));
        let why = learned.err();
        if self.budget.admit(now, "exit_changed") {
            info!(endpoint = id, from = %from, to = %to, why = why.as_deref().unwrap_or("-"), "exit changed");
        }
        let detail = match &why {
            Some(w) => format!("{from} -> {to}: {w}"),
            None => format!("{from} -> {to}"),
        };
        let ev = NewEvent {
            endpoint: Some(id),
            detail: Some(detail),
            ..NewEvent::new(EventKind::ExitChanged)
        };
        vec![Write::Exit { id, ip }, Write::Event(ev)]
    }

    /// A proxy's answer named `ip` as the exit address of `id` (a provider's header on a
    /// gateway tunnel): recorded as a check's would be when it is not the address known
    /// now; the known one named again writes nothing (it would be a write per tunnel).
    pub fn exit_sighted(&mut self, id: EndpointId, ip: IpAddr, now: Instant) -> Vec<Write> {
        if self.exit_of(id) == Some(ip) {
            return Vec::new();
        }
        self.exit_learned(id, Ok(ip), now)
    }

    /// What answers through `id` can teach of its exit address: none unless its pool
    /// names a provider's header.
    pub fn exit_sighting(&self, id: EndpointId) -> Option<ExitSighting> {
        let e = self.entries.get(&id)?;
        let p = &self.pools[e.pool];
        let header = p.cfg.exit.as_ref()?.header.as_deref()?;
        Some(ExitSighting {
            header: header.into(),
            known: p.exits.ip_of(id),
        })
    }

    /// The exit address of `id`, when known.
    pub fn exit_of(&self, id: EndpointId) -> Option<IpAddr> {
        let e = self.entries.get(&id)?;
        self.pools[e.pool].exits.ip_of(id)
    }
}

#[cfg(test)]
mod tests;
