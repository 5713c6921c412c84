//! One address, one ban (docs/exit.md, "One address, one ban"): a site bans the address
//! it sees, so the ban of one endpoint's pair holds for every endpoint of the pool that
//! leaves from the same known address.
//!
//! The address's ban of a destination is the ban of the first of its endpoints banned
//! there, its *holder*: one cooldown (the holder pair's) and one trial (the holder pair's,
//! claimed once by compare-and-set like any pair's). Every other endpoint of the address
//! is refused for the destination while the holder's pair is not available and the
//! holder still leaves from the address; an endpoint that moves to another address
//! (`exit_changed`) is out of the old address's ban at once. Unknown addresses share
//! nothing.
//!
//! The holders are checked when they are read (`holds`), never kept in step with every
//! pair transition: a holder whose pair recovered or who moved away holds nothing, and
//! the next ban of the address takes its place. Entries that hold nothing are swept
//! when they outnumber the banned pairs twice over, so the table stays within the pairs'
//! own bound.

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use super::subnets::{Subnet, SubnetRule, Track};
use super::{DestRef, Destinations, Usable};
use crate::endpoint::EndpointId;
use crate::health::State;

/// Each endpoint's exit address (its number in the pool's address table), and the
/// holder of each (address, destination view) ban.
#[derive(Default)]
pub(super) struct Shared {
    /// Each endpoint's address number and subnet (known addresses only).
    pub(super) addr: FxHashMap<EndpointId, (u32, Subnet)>,
    /// Each address number's subnet (`Entry::exit` names the number): a dense table of
    /// the pool's addresses, small beside `addr`, for a lease's candidates.
    subnets: Vec<Option<Subnet>>,
    held: FxHashMap<(u32, u32), EndpointId>,
    /// Subnet suspicion (`subnets`): its rule, a track per (subnet, view) with a banned
    /// address, suspect tracks per view, events not yet handed out, the next sweep.
    pub(super) rule: Option<SubnetRule>,
    pub(super) tracks: FxHashMap<(Subnet, u32), Track>,
    pub(super) suspects: FxHashMap<u32, u32>,
    pub(super) pending: Vec<crate::store::pairs::PairWrite>,
    pub(super) next_sweep: Option<Instant>,
}

/// The holder of an address's ban as the rule sees it: who, and whether it still holds.
pub(super) type Holder = Option<(EndpointId, bool)>;

/// What endpoint `me` is to a destination: its own pair's answer (`own`), unless another
/// endpoint of its address holds a ban there.
pub(super) fn judge(own: Usable, me: EndpointId, holder: Holder) -> Usable {
    match holder {
        Some((h, true)) if h != me => Usable::Banned,
        _ => own,
    }
}

/// Who holds the address's ban after `me`'s pair was banned: a holder that still holds
/// keeps it (one cooldown, one trial), else `me`.
pub(super) fn on_ban(me: EndpointId, holder: Holder) -> EndpointId {
    match holder {
        Some((h, true)) => h,
        _ => me,
    }
}

impl Destinations {
    /// Endpoint `id` leaves from address number `addr` of `subnet` (`None`: unknown, or
    /// forgotten).
    pub fn set_exit(&mut self, id: EndpointId, addr: Option<(u32, Subnet)>) {
        if self.shared.addr.get(&id) != addr.as_ref() {
            // Out of its old address's bans (and its subnet's suspicion).
            self.lift_all();
        }
        match addr {
            Some((a, subnet)) => {
                let i = a as usize;
                if self.shared.subnets.len() <= i {
                    self.shared.subnets.resize(i + 1, None);
                }
                self.shared.subnets[i] = Some(subnet);
                self.shared.addr.insert(id, (a, subnet))
            }
            None => self.shared.addr.remove(&id),
        };
    }

    /// Forget every address: nothing is shared (`[pool.exit]` removed).
    pub fn clear_exits(&mut self) {
        self.lift_all();
        let rule = self.shared.rule;
        self.shared = Shared {
            rule,
            ..Shared::default()
        };
    }

    /// Endpoint `id`'s address number + 1 as `set_exit` was told (0: unknown).
    pub fn exit_number(&self, id: EndpointId) -> u32 {
        self.shared.addr.get(&id).map_or(0, |&(a, _)| a + 1)
    }

    /// The holder of address `a`'s ban in view `view`, and whether it still holds: its
    /// pair there is not available and it still leaves from `a`.
    pub(super) fn holder(&self, a: u32, view: u32) -> Holder {
        let &h = self.shared.held.get(&(a, view))?;
        let there = self.shared.addr.get(&h).map(|x| x.0) == Some(a);
        let banned = self
            .view(view)
            .and_then(|v| v.pairs.get(&h))
            .is_some_and(|p| p.state != State::Available);
        Some((h, there && banned))
    }

    /// `own` (endpoint `id`'s own pair's answer) under its address's ban, if any: a hash
    /// lookup or two, none while no address holds a ban.
    pub(super) fn shared_usable(&self, d: DestRef, id: EndpointId, own: Usable) -> Usable {
        if self.shared.held.is_empty() {
            return own;
        }
        let Some(&(a, _)) = self.shared.addr.get(&id) else {
            return own;
        };
        judge(own, id, self.holder(a, d.0))
    }

    /// Whether endpoint `id`, whose address number + 1 is `exit` (0: unknown; what
    /// `set_exit` was last told), may be leased for the views `views` (each `usable` says
    /// `Available`) and, when `spare` names the host's view, leaves from no subnet suspect
    /// for it (`in_suspect`): the same answers with no lookup of the endpoint's address,
    /// and no address asked at all when its own pair says no. A lease's candidates ask this.
    pub fn leasable(
        &self,
        views: [Option<DestRef>; 2],
        spare: Option<DestRef>,
        id: EndpointId,
        exit: u32,
    ) -> bool {
        let views = views.into_iter().flatten();
        if views
            .clone()
            .any(|d| self.own_usable(d, id) != Usable::Available)
        {
            return false;
        }
        let spare = spare.filter(|&d| self.has_suspects(d));
        if self.shared.held.is_empty() && spare.is_none() {
            return true;
        }
        let Some(a) = exit.checked_sub(1) else {
            return true;
        };
        let Some(&Some(subnet)) = self.shared.subnets.get(a as usize) else {
            return true;
        };
        let held = !self.shared.held.is_empty();
        if held
            && views
                .clone()
                .any(|d| judge(Usable::Available, id, self.holder(a, d.0)) != Usable::Available)
        {
            return false;
        }
        spare.is_none_or(|d| !self.subnet_suspect(d, subnet))
    }

    /// Endpoint `id`'s pair in view `view` is not available: its address's ban, if the
    /// address is known.
    pub(super) fn note_ban(&mut self, view: u32, id: EndpointId) {
        let Some(&(a, subnet)) = self.shared.addr.get(&id) else {
            return;
        };
        let by = on_ban(id, self.holder(a, view));
        self.shared.held.insert((a, view), by);
        self.note_subnet_ban(view, a, subnet, Instant::now());
        if self.shared.held.len() > 2 * self.banned + 64 {
            self.sweep_holders();
        }
    }

    fn sweep_holders(&mut self) {
        let keys: Vec<(u32, u32)> = self.shared.held.keys().copied().collect();
        for (a, view) in keys {
            if !matches!(self.holder(a, view), Some((_, true))) {
                self.shared.held.remove(&(a, view));
            }
        }
    }

    /// Address bans held now (tests and the status of a pool).
    pub fn address_bans(&self) -> usize {
        let held = self.shared.held.keys();
        held.filter(|(a, view)| matches!(self.holder(*a, *view), Some((_, true))))
            .count()
    }
}

#[cfg(test)]
pub(super) mod tests;
