//! What the follower may apply of a row it reads, given this daemon's own writes of it
//! (docs/fleet.md, "Ownership"): a row this daemon is writing right now waits (applying
//! it would undo what memory already holds and the write has not told yet); it is read
//! again once the write is answered. A row read as of a change older than this daemon's
//! own last write of it is its echo, or news that the write has overtaken, and is not
//! applied.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::endpoint::EndpointId;
use crate::store::pairs::PairWrite;
use crate::store::{RowNow, Write};

/// A row as the follower keys it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Key {
    Endpoint(EndpointId),
    Pair(EndpointId, String),
}

/// The rows a batch of writes touches.
pub(super) fn keys(writes: &[Write]) -> Vec<Key> {
    let mut out = Vec::new();
    for w in writes {
        match w {
            Write::Transition(h, _) => out.push(Key::Endpoint(h.id)),
            Write::Exit { id, .. } => out.push(Key::Endpoint(*id)),
            Write::Claim(c) | Write::Pair(PairWrite::Claim(c)) => out.push(key_of(&c.on)),
            Write::Unclaim(u) | Write::Pair(PairWrite::Unclaim(u)) => out.push(key_of(&u.on)),
            Write::Remove(ids) => out.extend(ids.iter().map(|&id| Key::Endpoint(id))),
            Write::Pair(PairWrite::Upsert(r, _)) => {
                out.push(Key::Pair(r.endpoint, r.destination.clone()))
            }
            Write::Pair(PairWrite::Delete {
                endpoint,
                destination,
                ..
            }) => out.push(Key::Pair(*endpoint, destination.clone())),
            Write::Event(_)
            | Write::EventStatus(..)
            | Write::Pair(PairWrite::Event { .. })
            | Write::SourceResult { .. } => {}
        }
    }
    out
}

/// The rows a commit found changed elsewhere and left as they were: its fresh rows and
/// the claims it lost.
pub(super) fn not_written(applied: &crate::store::Applied) -> Vec<Key> {
    let fresh = applied.fresh.iter().map(|f| match f {
        RowNow::Endpoint(id, _) => Key::Endpoint(*id),
        RowNow::Pair(id, d, _) => Key::Pair(*id, d.clone()),
    });
    let lost = applied.claims.iter().filter_map(|c| match c {
        crate::store::ClaimResult::Lost { on, .. } => Some(key_of(on)),
        crate::store::ClaimResult::Won { .. } => None,
    });
    fresh.chain(lost).collect()
}

fn key_of(on: &crate::store::ClaimOn) -> Key {
    match on {
        crate::store::ClaimOn::Endpoint(id) => Key::Endpoint(*id),
        crate::store::ClaimOn::Pair(id, d) => Key::Pair(*id, d.clone()),
    }
}

/// Which rows this daemon is writing, and the change of its own last write of each.
#[derive(Default)]
pub(super) struct Track {
    inflight: HashMap<Key, u32>,
    own: HashMap<Key, i64>,
    /// Rows that changed elsewhere while this daemon was writing them: read again.
    deferred: HashSet<Key>,
    /// Rows being read again now, and those of them a write of ours ended on meanwhile
    /// (what was read may be older than that write: read once more).
    rereading: HashSet<Key>,
    overtaken: HashSet<Key>,
    /// The changes the feed listed lately, oldest first (at most `RECENT`): a write of
    /// ours answered after the feed listed its change needs no echo entry in `own`, which
    /// nothing would take out again (a removed endpoint's is never written again).
    recent: VecDeque<i64>,
    recent_set: HashSet<i64>,
}

/// Changes kept in `Track::recent`: seconds of a stream of commits, where a write is
/// answered within milliseconds of its change being readable.
const RECENT: usize = 4096;

impl Track {
    pub(super) fn begin(&mut self, keys: &[Key]) {
        for k in keys {
            *self.inflight.entry(k.clone()).or_default() += 1;
        }
    }

    /// A write of `keys` was answered: committed as change `seq` when given, except the
    /// rows in `not_written` (the commit found them changed elsewhere and wrote nothing).
    /// Whether a row the follower put off for this write may be read again now.
    pub(super) fn end(&mut self, keys: &[Key], seq: Option<i64>, not_written: &[Key]) -> bool {
        for k in keys {
            if let Some(n) = self.inflight.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    self.inflight.remove(k);
                }
            }
            if self.rereading.contains(k) {
                self.overtaken.insert(k.clone());
            }
            if let (Some(seq), false) = (seq, not_written.contains(k)) {
                if self.recent_set.contains(&seq) {
                    // Listed already, while this write was on its way: the row was read
                    // again for it, and the feed will not list the change again.
                    continue;
                }
                let own = self.own.entry(k.clone()).or_default();
                *own = (*own).max(seq);
            }
        }
        keys.iter().any(|k| self.ready(k))
    }

    /// Put off (or overtaken while read) with no write of ours on its way any more.
    fn ready(&self, k: &Key) -> bool {
        self.deferred.contains(k) && !self.inflight.contains_key(k)
    }

    /// Rows whose stored version carries a change memory has not read: read them again
    /// (as rows that waited for a write of ours are).
    pub(super) fn read_again(&mut self, keys: &[Key]) {
        self.deferred.extend(keys.iter().cloned());
    }

    /// The rows to read again, from now until [`Track::reread`] (with those of a reading
    /// that failed).
    pub(super) fn take_deferred(&mut self) -> Vec<Key> {
        let more = std::mem::take(&mut self.deferred);
        self.rereading.extend(more);
        self.overtaken.clear();
        self.rereading.iter().cloned().collect()
    }

    /// The rows read again have been applied (or not). Whether some must be read once
    /// more at once: a write of ours ended while they were read, and none is on its way.
    pub(super) fn reread(&mut self) -> bool {
        self.rereading.clear();
        self.overtaken.clear();
        self.deferred.iter().any(|k| self.ready(k))
    }

    /// Whether the row `k` as `read` (`rev`: the change the feed read it as of) may be
    /// applied now; if not because a write of ours is on its way or ended while it was
    /// read, it is read again later.
    pub(super) fn may_apply(&mut self, k: &Key, read: Read) -> bool {
        if self.inflight.contains_key(k) || (read == Read::Again && self.overtaken.contains(k)) {
            self.deferred.insert(k.clone());
            return false;
        }
        match (read, self.own.get(k)) {
            (Read::Feed(rev), Some(&own)) => rev > own,
            // Read by our own commit, or again with no write of ours ended since: current.
            _ => true,
        }
    }

    /// The feed listed changes `seqs`. It lists each change once: a row this daemon wrote
    /// in one of them is not read again as of that change by the feed.
    pub(super) fn listed(&mut self, seqs: &[i64]) {
        if !seqs.is_empty() && !self.own.is_empty() {
            let applied: HashSet<i64> = seqs.iter().copied().collect();
            self.own.retain(|_, seq| !applied.contains(seq));
        }
        for &seq in seqs {
            if self.recent_set.insert(seq) {
                self.recent.push_back(seq);
            }
        }
        while self.recent.len() > RECENT {
            if let Some(old) = self.recent.pop_front() {
                self.recent_set.remove(&old);
            }
        }
    }
}

/// How a row was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// By the feed, as of the change it lists: older than this daemon's own later write
    /// of the row (or its echo), it is not applied.
    Feed(i64),
    /// By a commit of ours, which found it changed (applied while that write's end holds
    /// the pool lock, so no other row of it is applied in between).
    InOurCommit,
    /// Again, after a write of ours made the follower wait. Change numbers are taken when
    /// a transaction starts, so a newer row of ours may carry a smaller one than a row
    /// read: what counts is whether a write of ours ended while it was being read.
    Again,
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Key = Key::Endpoint(7);

    /// A write of ours of K, answered as change `seq`.
    fn wrote(t: &mut Track, seq: i64) {
        t.begin(&[K]);
        t.end(&[K], Some(seq), &[]);
    }

    /// The follower found K while a write of ours was on its way; that write was answered
    /// as change 5, and now K is being read again.
    fn rereading(t: &mut Track) {
        t.begin(&[K]);
        assert!(!t.may_apply(&K, Read::Feed(4)));
        t.end(&[K], Some(5), &[]);
        assert_eq!(t.take_deferred(), vec![K]);
    }

    /// What memory does with a row of K: each case is what happened before, then the row
    /// as read; whether it is applied.
    #[test]
    fn which_rows_memory_follows() {
        struct Case {
            what: &'static str,
            before: fn(&mut Track),
            read: Read,
            applied: bool,
            /// Not applied now, but read again later.
            waits: bool,
        }
        let cases = [
            Case {
                what: "nothing of ours: any row",
                before: |_| {},
                read: Read::Feed(3),
                applied: true,
                waits: false,
            },
            Case {
                what: "a write of ours on its way: wait",
                before: |t| t.begin(&[K]),
                read: Read::Feed(9),
                applied: false,
                waits: true,
            },
            Case {
                what: "two writes on their way, one answered: still wait",
                before: |t| {
                    t.begin(&[K, K]);
                    t.end(&[K], Some(5), &[]);
                },
                read: Read::Feed(9),
                applied: false,
                waits: true,
            },
            Case {
                what: "the echo of our write",
                before: |t| wrote(t, 5),
                read: Read::Feed(5),
                applied: false,
                waits: false,
            },
            Case {
                what: "the feed's row older than our write",
                before: |t| wrote(t, 5),
                read: Read::Feed(4),
                applied: false,
                waits: false,
            },
            Case {
                what: "a change after our write",
                before: |t| wrote(t, 5),
                read: Read::Feed(6),
                applied: true,
                waits: false,
            },
            Case {
                what: "read in our own commit, which found it changed",
                before: |t| wrote(t, 5),
                read: Read::InOurCommit,
                applied: true,
                waits: false,
            },
            Case {
                what: "a write of ours that failed tells nothing of the row",
                before: |t| {
                    t.begin(&[K]);
                    t.end(&[K], None, &[]);
                },
                read: Read::Feed(4),
                applied: true,
                waits: false,
            },
            Case {
                what: "a commit of ours that found the row changed wrote nothing to it",
                before: |t| {
                    t.begin(&[K]);
                    t.end(&[K], Some(5), &[K]);
                },
                read: Read::Feed(4),
                applied: true,
                waits: false,
            },
            Case {
                what: "our write listed by the feed: it reads newer changes only",
                before: |t| {
                    wrote(t, 5);
                    t.listed(&[5]);
                },
                read: Read::Feed(4),
                applied: true,
                waits: false,
            },
            Case {
                what: "another row's write",
                before: |t| {
                    let pair = Key::Pair(7, "example.com".into());
                    t.begin(std::slice::from_ref(&pair));
                    t.end(&[pair], Some(5), &[]);
                },
                read: Read::Feed(4),
                applied: true,
                waits: false,
            },
            Case {
                what: "read again, nothing of ours since",
                before: rereading,
                read: Read::Again,
                applied: true,
                waits: false,
            },
            Case {
                what: "read again while a write of ours was answered (the read may be older)",
                before: |t| {
                    rereading(t);
                    wrote(t, 6);
                },
                read: Read::Again,
                applied: false,
                waits: true,
            },
            Case {
                what: "read again while a write of ours is on its way",
                before: |t| {
                    rereading(t);
                    t.begin(&[K]);
                },
                read: Read::Again,
                applied: false,
                waits: true,
            },
            Case {
                what: "read again after a reading that failed, nothing of ours since",
                before: |t| {
                    rereading(t);
                    wrote(t, 6);
                    // The reading failed: no `reread`; the next one starts over.
                    assert_eq!(t.take_deferred(), vec![K]);
                },
                read: Read::Again,
                applied: true,
                waits: false,
            },
        ];
        for c in cases {
            let mut t = Track::default();
            (c.before)(&mut t);
            t.deferred.clear();
            assert_eq!(t.may_apply(&K, c.read), c.applied, "{}", c.what);
            assert_eq!(
                t.deferred.contains(&K),
                c.waits,
                "{}: read again later",
                c.what
            );
        }
    }

    /// A row whose stored version carries a change memory missed is read again, and what
    /// is read is applied, though the feed's read of it as of our write's change is not.
    #[test]
    fn a_row_that_carries_a_change_memory_missed_is_read_again() {
        let mut t = Track::default();
        t.begin(&[K]);
        t.end(&[K], Some(5), &[]);
        t.read_again(&[K]);
        assert!(!t.may_apply(&K, Read::Feed(5)), "the feed's read: our echo");
        assert_eq!(t.take_deferred(), vec![K]);
        assert!(t.may_apply(&K, Read::Again));
        t.reread();
        assert_eq!(t.take_deferred(), Vec::<Key>::new());
    }

    /// A row put off for a write of ours is ready to be read again when the last write of
    /// it on its way is answered, and when a reading that a write of ours overtook is
    /// done: the follower is woken for it then, not at its next poll.
    #[test]
    fn a_row_put_off_for_our_write_is_ready_when_that_write_ends() {
        let mut t = Track::default();
        t.begin(&[K, K]);
        assert!(!t.may_apply(&K, Read::Feed(4)));
        assert!(
            !t.end(&[K], Some(5), &[]),
            "another write of it is on its way"
        );
        assert!(t.end(&[K], Some(6), &[]));
        let other = Key::Endpoint(8);
        t.begin(std::slice::from_ref(&other));
        assert!(!t.end(&[other], Some(7), &[]), "a row nobody put off");
        // Read again; a write of ours ends meanwhile: the reading may be older than it.
        assert_eq!(t.take_deferred(), vec![K]);
        t.begin(&[K]);
        assert!(
            !t.end(&[K], Some(8), &[]),
            "nothing put off yet: the reading wakes"
        );
        assert!(!t.may_apply(&K, Read::Again));
        assert!(t.reread(), "overtaken: read once more at once");
        assert_eq!(t.take_deferred(), vec![K]);
        assert!(t.may_apply(&K, Read::Again));
        assert!(!t.reread(), "nothing left");
        // A write begun during the reading: its end wakes the follower, not the reading's.
        t.read_again(&[K]);
        assert_eq!(t.take_deferred(), vec![K]);
        t.begin(&[K]);
        assert!(!t.may_apply(&K, Read::Again));
        assert!(!t.reread());
        assert!(t.end(&[K], Some(9), &[]));
        // One write ended during the reading, another still on its way: the last one's
        // end wakes the follower.
        assert_eq!(t.take_deferred(), vec![K]);
        t.begin(&[K, K]);
        assert!(!t.end(&[K], Some(10), &[]));
        assert!(!t.may_apply(&K, Read::Again));
        assert!(!t.reread());
        assert!(t.end(&[K], Some(11), &[]));
    }

    /// A change of ours the feed listed before the write was answered (the row waited and
    /// was read again) leaves no echo entry behind: nothing would take it out, and a
    /// removed endpoint's key is never written again. One listed after it is taken out as
    /// before; the changes remembered as listed stay bounded.
    #[test]
    fn a_change_listed_before_its_write_is_answered_leaves_nothing_behind() {
        let mut t = Track::default();
        t.begin(&[K]);
        t.listed(&[5]);
        assert!(!t.may_apply(&K, Read::Feed(5)));
        t.end(&[K], Some(5), &[]);
        assert!(t.own.is_empty(), "{:?}", t.own);
        assert_eq!(t.take_deferred(), vec![K]);
        assert!(t.may_apply(&K, Read::Again));
        t.reread();
        // Answered first, listed after: the entry holds until the feed lists it.
        wrote(&mut t, 6);
        assert!(!t.may_apply(&K, Read::Feed(6)));
        t.listed(&[6]);
        assert!(t.own.is_empty(), "{:?}", t.own);
        let many: Vec<i64> = (100..100 + 3 * RECENT as i64).collect();
        t.listed(&many);
        assert_eq!((t.recent.len(), t.recent_set.len()), (RECENT, RECENT));
        assert!(!t.recent_set.contains(&5) && t.recent_set.contains(&many[many.len() - 1]));
    }
}
