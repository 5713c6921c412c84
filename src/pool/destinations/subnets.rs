//! A subnet under suspicion (docs/exit.md, "A subnet under suspicion"): a site that bans
//! `subnet_after` distinct addresses of one subnet within `subnet_window` is probably
//! banning the range. The subnet is then suspect for that host: leases for the host
//! prefer endpoints outside it (never refused while only it is left), until the last ban
//! of its addresses there ends.
//!
//! A `Track` per (subnet, destination view) with a banned address: pure, table-tested.
//! The tracks are bounded by the pool's banned pairs (one is made by a ban) and by
//! `MAX_TRACKED` addresses each; one that is not suspect is forgotten once its bans left
//! the window, a suspect one once its last ban ended (checked at most once a second).

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::{DestRef, Destinations};
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::protocol::SuspectSubnet;
use crate::store::pairs::PairWrite;
use crate::store::NewEvent;

/// A subnet: the address with its host bits cleared, and the prefix length.
pub type Subnet = (IpAddr, u8);

/// Addresses a track remembers at most (an IPv6 /48 holds more than any pool).
pub(super) const MAX_TRACKED: usize = 1024;

/// How often suspicions are looked at for their end.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// `subnet_after` and `subnet_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubnetRule {
    pub after: u32,
    pub window: Duration,
}

/// The banned addresses of one subnet for one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Track {
    /// The host, as the view was named when the track began (views are reused).
    pub(super) host: Box<str>,
    /// Each address banned, with when it was last banned, oldest first.
    pub(super) bans: Vec<(u32, Instant)>,
    pub(super) suspect: bool,
}

impl Track {
    pub(super) fn new(host: &str) -> Track {
        Track {
            host: host.into(),
            bans: Vec::new(),
            suspect: false,
        }
    }

    /// Address `a` was banned at `now`; true when this made the subnet suspect. While it
    /// is not, bans older than the window do not count; once it is, every address banned
    /// is kept until its ban ends.
    pub(super) fn banned(&mut self, a: u32, now: Instant, rule: SubnetRule) -> bool {
        if !self.suspect {
            self.bans
                .retain(|&(_, t)| now.saturating_duration_since(t) < rule.window);
        }
        self.bans.retain(|&(x, _)| x != a);
        if self.bans.len() >= MAX_TRACKED {
            self.bans.remove(0);
        }
        self.bans.push((a, now));
        if !self.suspect && self.bans.len() >= rule.after as usize {
            self.suspect = true;
            return true;
        }
        false
    }

    /// A suspicion ends when no address of it holds a ban for the host any more.
    pub(super) fn ends(&self, holds: impl Fn(u32) -> bool) -> bool {
        self.suspect && !self.bans.iter().any(|&(a, _)| holds(a))
    }

    /// A track that is not suspect is forgotten once its bans all left the window.
    pub(super) fn stale(&self, now: Instant, rule: SubnetRule) -> bool {
        !self.suspect
            && self
                .bans
                .iter()
                .all(|&(_, t)| now.saturating_duration_since(t) >= rule.window)
    }
}

fn shown(s: Subnet) -> String {
    format!("{}/{}", s.0, s.1)
}

impl Destinations {
    /// Suspect subnets after `rule` (`None`: never).
    pub fn set_subnet_rule(&mut self, rule: Option<SubnetRule>) {
        self.shared.rule = rule;
        if rule.is_none() {
            self.lift_all();
            self.shared.tracks.clear();
            self.shared.suspects.clear();
        }
    }

    /// Whether some subnet is suspect for the destination of `d` (one lookup).
    pub fn has_suspects(&self, d: DestRef) -> bool {
        self.shared.suspects.contains_key(&d.0)
    }

    /// Whether endpoint `id` leaves from a subnet suspect for the destination of `d`.
    pub fn in_suspect(&self, d: DestRef, id: EndpointId) -> bool {
        if !self.has_suspects(d) {
            return false;
        }
        let Some(&(_, subnet)) = self.shared.addr.get(&id) else {
            return false;
        };
        self.subnet_suspect(d, subnet)
    }

    /// Whether `subnet` is suspect for the destination of `d`.
    pub(super) fn subnet_suspect(&self, d: DestRef, subnet: Subnet) -> bool {
        let Some(name) = self.view(d.0).map(|v| &v.name) else {
            return false;
        };
        self.shared
            .tracks
            .get(&(subnet, d.0))
            .is_some_and(|t| t.suspect && &t.host == name)
    }

    /// Address `a` of `subnet` was banned in view `view`.
    pub(super) fn note_subnet_ban(&mut self, view: u32, a: u32, subnet: Subnet, now: Instant) {
        let Some(rule) = self.shared.rule else {
            return;
        };
        let Some(name) = self.view(view).map(|v| v.name.clone()) else {
            return;
        };
        let t = self
            .shared
            .tracks
            .entry((subnet, view))
            .or_insert_with(|| Track::new(&name));
        if t.host != name {
            *t = Track::new(&name);
        }
        if !t.banned(a, now, rule) {
            return;
        }
        let n = t.bans.len();
        *self.shared.suspects.entry(view).or_default() += 1;
        let detail = format!(
            "subnet {}: {n} addresses banned within {}",
            shown(subnet),
            humantime::format_duration(rule.window)
        );
        if self.budget.admit(now, "subnet_suspect") {
            info!(pool = %self.pool, subnet = %shown(subnet), host = %name, addresses = n, "subnet suspect");
        }
        self.shared
            .pending
            .push(subnet_event(&name, EventKind::SubnetSuspect, detail));
    }

    /// The events of suspicions that began, and of those whose last ban ended (looked at
    /// once a second at most).
    pub fn subnet_events(&mut self, now: Instant) -> Vec<PairWrite> {
        let due = self.shared.rule.is_some() && self.shared.next_sweep.is_none_or(|t| t <= now);
        if !due || self.shared.tracks.is_empty() {
            return std::mem::take(&mut self.shared.pending);
        }
        self.shared.next_sweep = Some(now + SWEEP_EVERY);
        let rule = self.shared.rule.expect("checked");
        let keys: Vec<(Subnet, u32)> = self.shared.tracks.keys().copied().collect();
        for (subnet, view) in keys {
            let t = &self.shared.tracks[&(subnet, view)];
            let same_view = self.view(view).is_some_and(|v| v.name == t.host);
            let holds = |a| same_view && matches!(self.holder(a, view), Some((_, true)));
            if t.ends(holds) {
                let t = self.shared.tracks.remove(&(subnet, view)).expect("held");
                self.lift(view);
                if let Some(n) = self.shared.suspects.get_mut(&view) {
                    *n -= 1;
                    if *n == 0 {
                        self.shared.suspects.remove(&view);
                    }
                }
                if self.budget.admit(now, "subnet_cleared") {
                    info!(pool = %self.pool, subnet = %shown(subnet), host = %t.host, "subnet no longer suspect");
                }
                let detail = format!("subnet {}: its last ban ended", shown(subnet));
                let ev = subnet_event(&t.host, EventKind::SubnetCleared, detail);
                self.shared.pending.push(ev);
            } else if t.stale(now, rule) || !same_view && !t.suspect {
                // Never suspect: nothing to lift.
                self.shared.tracks.remove(&(subnet, view));
            }
        }
        std::mem::take(&mut self.shared.pending)
    }

    /// The suspect subnets, by host then subnet.
    pub fn suspect_subnets(&self) -> Vec<SuspectSubnet> {
        let mut v: Vec<SuspectSubnet> = self
            .shared
            .tracks
            .iter()
            .filter(|(_, t)| t.suspect)
            .map(|((s, _), t)| SuspectSubnet {
                subnet: shown(*s),
                host: t.host.to_string(),
                addresses: t.bans.len(),
            })
            .collect();
        v.sort_by(|a, b| (&a.host, &a.subnet).cmp(&(&b.host, &b.subnet)));
        v
    }

    /// How many (subnet, host) suspicions there are.
    pub fn suspect_count(&self) -> usize {
        self.shared.suspects.values().map(|&n| n as usize).sum()
    }
}

fn subnet_event(host: &str, kind: EventKind, detail: String) -> PairWrite {
    PairWrite::Event {
        destination: host.to_string(),
        status: None,
        event: NewEvent {
            detail: Some(detail),
            ..NewEvent::new(kind)
        },
    }
}

#[cfg(test)]
mod tests;
