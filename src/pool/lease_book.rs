//! The live leases of a process: each lease by number, their expiries in order, the
//! names the next lease is given under, and how the leases that ended lately ended.
//!
//! The rest of the pool reaches leases only through these methods: a lease comes in with
//! [`LeaseBook::open`] and leaves through [`LeaseBook::take`], `take_all` or
//! `pop_expired`, each of which keeps the expiry order in step with the table (a lease's
//! `expires` is never changed after `open`). How a lease ended is remembered by
//! `pop_expired` for an expiry, and by the caller (`remember`) for a report or a release;
//! a lease withdrawn (its claim lost) or gone with its endpoint is not remembered: a late
//! report on it is told it is unknown.

mod ended;
mod name;

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use crate::endpoint::EndpointId;

use super::pace::HostRef;
use super::Ended;
use ended::EndedLeases;
use name::LeaseName;

pub(super) struct Lease {
    /// The random part of its name (`Lease::name`); [`LeaseBook::open`] sets it.
    pub(super) secret: u128,
    pub(super) endpoint: EndpointId,
    pub(super) slot: u32,
    pub(super) expires: Instant,
    /// The endpoint's single recovery attempt.
    pub(super) trial: bool,
    /// The store's epoch of that trial's claim, once confirmed (docs/fleet.md).
    pub(super) epoch: Option<crate::store::Epoch>,
    /// The store's epoch of the pair trial's claim, once confirmed.
    pub(super) pair_epoch: Option<crate::store::Epoch>,
    /// The destination host the lease was taken for.
    pub(super) destination: Option<Arc<str>>,
    /// The target `host:port` it was taken for, when a port was given (else the host is
    /// the target: `target_key`).
    pub(super) target: Option<Arc<str>>,
    /// The pair (host or target key) whose trial this lease is.
    pub(super) pair_trial: Option<Arc<str>>,
    /// The down target's single trial: the claim's generation.
    pub(super) target_trial: Option<u32>,
    /// A tunnel opened through it (`Pools::reached`): a ban trial it carries waits for a
    /// report when it ends.
    pub(super) reached: bool,
    /// It counts in its (endpoint, destination) pair's `in_flight` (docs/selection.md,
    /// "Pacing"): its end is told to the pool's pacing, at this handle of the host.
    pub(super) paced: Option<HostRef>,
}

impl Lease {
    /// The name lease `lid` was given under.
    pub(super) fn name(&self, lid: u64) -> String {
        self.name_parts(lid).render()
    }

    fn name_parts(&self, lid: u64) -> LeaseName {
        LeaseName {
            lid,
            secret: self.secret,
        }
    }

    /// The target's key: `host:port`, or the host when no port was given.
    pub(super) fn target_key(&self) -> Option<&str> {
        self.target.as_deref().or(self.destination.as_deref())
    }
}

pub(super) struct LeaseBook {
    live: FxHashMap<u64, Lease>,
    /// `live`'s expiries, soonest first.
    expiry: BTreeSet<(Instant, u64)>,
    /// How the leases that ended lately ended, so that a second report says so.
    ended: EndedLeases,
    /// The name the next lease is given, drawn one lease ahead: a trial's event names
    /// its lease before the grant.
    upcoming: LeaseName,
}

impl Default for LeaseBook {
    fn default() -> Self {
        LeaseBook {
            live: FxHashMap::default(),
            expiry: BTreeSet::new(),
            ended: EndedLeases::default(),
            upcoming: LeaseName::draw(1),
        }
    }
}

impl LeaseBook {
    /// The name the next lease will be given.
    pub(super) fn upcoming_name(&self) -> String {
        self.upcoming.render()
    }

    /// Record `lease` under the upcoming name; returns its number and name.
    #[inline]
    pub(super) fn open(&mut self, mut lease: Lease) -> (u64, String) {
        let name = self.upcoming;
        self.upcoming = LeaseName::draw(name.lid + 1);
        lease.secret = name.secret;
        self.expiry.insert((lease.expires, name.lid));
        self.live.insert(name.lid, lease);
        (name.lid, name.render())
    }

    /// The live lease `name` names: its number, when its random part is right too; else
    /// how it ended, when that is remembered.
    #[inline]
    pub(super) fn find(&self, name: &str) -> Result<u64, Option<Ended>> {
        let Some(n) = LeaseName::parse(name) else {
            return Err(None);
        };
        match self.live.get(&n.lid) {
            Some(l) if n.matches(&l.name_parts(n.lid)) => Ok(n.lid),
            Some(_) => Err(None),
            None => Err(self.ended.get(n)),
        }
    }

    #[inline]
    pub(super) fn get(&self, lid: u64) -> Option<&Lease> {
        self.live.get(&lid)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, lid: u64) -> Option<&mut Lease> {
        self.live.get_mut(&lid)
    }

    /// End lease `lid`: out of the table, and out of the expiry order.
    #[inline]
    pub(super) fn take(&mut self, lid: u64) -> Option<Lease> {
        let l = self.live.remove(&lid)?;
        self.expiry.remove(&(l.expires, lid));
        Some(l)
    }

    /// Remember how lease `lid` (taken out) ended, for a later report on its name.
    pub(super) fn remember(&mut self, lid: u64, l: &Lease, how: Ended) {
        self.ended.remember(l.name_parts(lid), how);
    }

    /// Take out every lease `which` picks.
    pub(super) fn take_all(&mut self, which: impl Fn(&Lease) -> bool) -> Vec<(u64, Lease)> {
        let lids: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, l)| which(l))
            .map(|(k, _)| *k)
            .collect();
        lids.into_iter()
            .filter_map(|lid| self.take(lid).map(|l| (lid, l)))
            .collect()
    }

    /// The next lease whose time is up at `now`, taken out and remembered as expired.
    pub(super) fn pop_expired(&mut self, now: Instant) -> Option<(u64, Lease)> {
        while let Some(&(exp, lid)) = self.expiry.first() {
            if exp > now {
                return None;
            }
            self.expiry.pop_first();
            if let Some(l) = self.live.remove(&lid) {
                self.remember(lid, &l, Ended::Expired);
                return Some((lid, l));
            }
        }
        None
    }

    /// When the soonest live lease expires.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.expiry.first().map(|(d, _)| *d)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Lease)> {
        self.live.iter().map(|(k, l)| (*k, l))
    }

    /// The live leases of endpoint `id`.
    pub(super) fn of_endpoint_mut(&mut self, id: EndpointId) -> impl Iterator<Item = &mut Lease> {
        self.live.values_mut().filter(move |l| l.endpoint == id)
    }
}
