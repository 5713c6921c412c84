//! Following the fleet: what other daemons (and CLI commands) changed.
//!
//! Every writing transaction notifies `proxypool_changes` after commit; the feed listens on
//! a connection of its own and, woken by a notification or by its poll interval (so a lost
//! notification only delays), reads what changed (docs/fleet.md, "Propagation"); while the
//! fleet writes a stream (`pace`) it does not listen and reads every `STREAM_GAP`
//! (`Feed::next`).
//!
//! Change numbers are taken before commit, so they commit in any order: "every number past
//! the last one seen" would miss a transaction that took its number first and committed
//! last. The feed goes by transaction ids instead. A read's snapshot says which
//! transactions it saw in progress (`xip`) and the first id it did not see at all
//! (`xmax`): every other transaction had ended when it was taken, and its changes were read
//! then. Each read therefore takes the changes (`fleet_changes`) of transactions in the
//! previous read's `xip` or from its `xmax` on, and the rows, pairs and removals those
//! changes wrote (by `rev`); a transaction left open for hours elsewhere makes a read no
//! larger. A daemon that was away longer than changes are kept reloads everything.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::feed_read::{read, Changes, Next, Position, Slicing};
use super::listener::Listening;
use super::read::rows_now;
use super::statements::{FRESH_ENDPOINTS, FRESH_PAIRS};
use super::Postgres;
use crate::endpoint::EndpointId;
use crate::store::{ClaimOn, Epoch, RowNow, StoreError};

/// Reads woken by notifications are at least this far apart: each costs every daemon a
/// few statements, and under a stream of commits one read covers many of them.
const GAP: Duration = Duration::from_millis(10);

/// The gap between reads while the fleet writes a stream (`pace`): each read costs the
/// database and every daemon about as much as a group commit does, so reads that cover
/// more leave more of both to the commits. After a quiet spell a change is read at once.
const STREAM_GAP: Duration = Duration::from_millis(25);

/// Changes a second from which the fleet writes a stream: a change every 10 ms (`GAP`),
/// or more. A rate, not a count of changes a read found: at 100 to 400 changes a second
/// (two or three daemons under a moderate load) reads `GAP` apart find only 1 to 4 each,
/// yet reading on every notification would read up to 100 times a second where a stream
/// reads 40 times; and a burst of a few changes after a quiet spell is not a stream.
const STREAM_FROM: f64 = 100.0;

/// Changes a second below which the stream has ended: a read in a stream comes a little
/// more than `STREAM_GAP` after the one before, so one change in it (under 40 a second)
/// still is one, and none, or one in more than 33 ms, is not.
const STREAM_UNTIL: f64 = 30.0;

/// The gap before the next read, after a read that listed `listed` changes `since` the
/// read before it, in a stream (`stream`) or not. A stream needs two changes in a read,
/// so that a lone change read just after another is not taken for one.
fn pace(stream: bool, listed: usize, since: Duration) -> Duration {
    let rate = listed as f64 / since.as_secs_f64().max(0.001);
    let streaming = match stream {
        false => listed >= 2 && rate >= STREAM_FROM,
        true => listed > 0 && rate >= STREAM_UNTIL,
    };
    if streaming {
        STREAM_GAP
    } else {
        GAP
    }
}

/// A reader of the fleet's changes; see the module documentation.
pub struct Feed {
    pg: Postgres,
    at: Position,
    slicing: Option<Slicing>,
    listening: Listening,
    last_read: std::time::Instant,
    /// How far apart the next reads are: woken by notifications (`GAP`), or on a timer in
    /// a stream (`STREAM_GAP`).
    gap: Duration,
    /// Ends the next wait for a notification or the poll (`Feed::poke`).
    poke: Arc<Notify>,
}

impl Feed {
    /// Follow from `xmin` (`Postgres::feed_start`, read before the state it applies to was
    /// loaded).
    pub fn new(pg: Postgres, xmin: i64) -> Feed {
        Feed {
            pg,
            at: Position::from(xmin),
            slicing: None,
            listening: Listening::default(),
            last_read: std::time::Instant::now(),
            gap: GAP,
            poke: Arc::new(Notify::new()),
        }
    }

    /// What ends the follower's wait for the next read (or the next wait, if it is not
    /// waiting), at the pace's gap after the last read at the soonest (`GAP`, or
    /// `STREAM_GAP` in a stream): rows to read again after a write of this daemon's
    /// (`rows_now`) need not wait for a notification or the poll, and pokes after each
    /// commit under load leave the stream's pace as it is.
    pub fn poke(&self) -> Arc<Notify> {
        self.poke.clone()
    }

    /// Wait up to `wait` for a notification (not at all while a large change is being
    /// read), then read what changed. In a stream (`STREAM_GAP`) the session does not
    /// listen and the read comes `STREAM_GAP` after the last: every notification wakes
    /// each daemon's listening session on the server, and in a stream a read is due before
    /// the next one would help (BENCHMARKS.md, "PostgreSQL fleet"). After a read that found
    /// fewer, it listens again, and reads once more when it does. Without a session (the
    /// database away, or refusing to listen) it waits all of `wait`: the caller's poll. A
    /// poke (`Feed::poke`) ends a wait for a notification or the poll `GAP` after the
    /// last read at the soonest; in a stream the read comes at its pace anyway.
    pub fn next(&mut self, wait: Duration) -> Result<Changes, StoreError> {
        let session = self.listening.session(&self.pg);
        if self.slicing.is_none() {
            let (last, gap) = (self.last_read, self.gap);
            let stream = gap == STREAM_GAP;
            let poke = &self.poke;
            let poked = || async {
                poke.notified().await;
                tokio::time::sleep(gap.saturating_sub(last.elapsed())).await;
            };
            // In a stream, and without a session, the wait is a sleep: the same pace as
            // with one, or the poll (the database is away, or refuses to listen).
            let nap = match stream {
                true => gap.saturating_sub(last.elapsed()).min(wait),
                false => wait,
            };
            let nap_or_poked = || async {
                tokio::select! {
                    _ = tokio::time::sleep(nap) => {}
                    _ = poked() => {}
                }
            };
            if let Some(l) = session {
                l.want(!stream);
                self.pg.block(async {
                    if stream {
                        nap_or_poked().await;
                    } else {
                        let woken = tokio::select! {
                            w = l.woken(wait) => w,
                            _ = poked() => false,
                        };
                        if woken && !l.is_ended() {
                            // Under a stream of commits, one read for all that arrive
                            // within `gap` of the last one.
                            let since = last.elapsed();
                            if since < gap {
                                tokio::time::sleep(gap - since).await;
                            }
                        }
                    }
                    l.drain();
                });
                self.listening.settle();
            } else {
                self.pg.block(nap_or_poked());
            }
        }
        let before = std::mem::replace(&mut self.last_read, std::time::Instant::now());
        let changes = self.read();
        self.listening.read_done(changes.is_ok());
        let changes = changes?;
        let since = self.last_read.duration_since(before);
        self.gap = pace(self.gap == STREAM_GAP, changes.seqs.len(), since);
        Ok(changes)
    }

    fn read(&mut self) -> Result<Changes, StoreError> {
        let pg = self.pg.clone();
        let (at, slicing) = (&self.at, &self.slicing);
        let (out, next) = pg.block(async {
            let mut c = pg.client().await?;
            read(&mut c, at, slicing.as_ref())
                .await
                .map_err(|e| e.into_store(&pg))
        })?;
        match next {
            Next::Slice(s) => self.slicing = Some(s),
            Next::Done(p) => {
                self.slicing = None;
                self.at = p;
            }
        }
        Ok(out)
    }

    /// Keep this daemon's claims from lapsing while their trials run: each (slot, epoch)
    /// holds for `hold` more, by the database's clock. Returns how many were still current.
    pub fn renew(&self, claims: &[(ClaimOn, Epoch, Duration)]) -> Result<u64, StoreError> {
        if claims.is_empty() {
            return Ok(0);
        }
        let (mut ids, mut epochs, mut holds) = (Vec::new(), Vec::new(), Vec::new());
        let (mut pids, mut pdests, mut pepochs, mut pholds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (on, epoch, hold) in claims {
            let ms = hold.as_millis().clamp(1, i64::MAX as u128) as i64;
            match on {
                ClaimOn::Endpoint(id) => {
                    ids.push(*id);
                    epochs.push(*epoch);
                    holds.push(ms);
                }
                ClaimOn::Pair(id, d) => {
                    pids.push(*id);
                    pdests.push(d.clone());
                    pepochs.push(*epoch);
                    pholds.push(ms);
                }
            }
        }
        let pg = &self.pg;
        pg.block(async {
            let c = pg.client().await?;
            let r: Result<u64, tokio_postgres::Error> = async {
                let a = c
                    .execute(
                        "UPDATE endpoints e SET claim_until = now() + v.ms * interval '1 millisecond' \
                         FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[]) AS v(id, ep, ms) \
                         WHERE e.id = v.id AND e.claim_epoch = v.ep AND e.claim_until IS NOT NULL",
                        &[&ids, &epochs, &holds],
                    )
                    .await?;
                let b = c
                    .execute(
                        "UPDATE destination_pairs p SET claim_until = now() + v.ms * interval '1 millisecond' \
                         FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::bigint[]) AS v(id, d, ep, ms) \
                         WHERE p.endpoint = v.id AND p.destination = v.d AND p.claim_epoch = v.ep \
                           AND p.claim_until IS NOT NULL",
                        &[&pids, &pdests, &pepochs, &pholds],
                    )
                    .await?;
                Ok(a + b)
            }
            .await;
            r.map_err(|e| pg.err(e))
        })
    }

    /// The rows of these endpoints and pairs as they are now (`read::rows_now`), for
    /// memory to follow after writes it could not commit.
    pub fn rows_now(
        &self,
        endpoints: &[EndpointId],
        pairs: &[(EndpointId, String)],
    ) -> Result<Vec<RowNow>, StoreError> {
        let pg = &self.pg;
        pg.block(async {
            let c = pg.client().await?;
            let r = async {
                let (e, p) = futures_util::join!(
                    c.prepare_cached(&FRESH_ENDPOINTS),
                    c.prepare_cached(&FRESH_PAIRS)
                );
                rows_now(&c, (&e?, endpoints), (&p?, pairs)).await
            }
            .await;
            r.map_err(|e| pg.err(e))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a stream or not, `listed` changes found by a read `since` ms after the one
    /// before: the gap before the next.
    #[test]
    fn reads_go_on_a_timer_while_the_fleet_writes_a_stream() {
        let cases = [
            // (what, stream, listed, since ms, gap)
            ("quiet: nothing", false, 0, 250, GAP),
            ("one change after a quiet spell", false, 1, 800, GAP),
            ("one change right after another", false, 1, 10, GAP),
            ("2 in 10 ms: 200 a second", false, 2, 10, STREAM_GAP),
            ("three daemons: 3 in 11 ms", false, 3, 11, STREAM_GAP),
            ("a burst of 4 after a quiet second", false, 4, 1000, GAP),
            ("2 in 30 ms: under 100 a second", false, 2, 30, GAP),
            ("stream: 1 in 25 ms", true, 1, 25, STREAM_GAP),
            ("stream: 1 in 27 ms (slow read)", true, 1, 27, STREAM_GAP),
            ("stream: many", true, 9, 26, STREAM_GAP),
            ("stream: nothing, it ended", true, 0, 26, GAP),
            ("stream: 1 in 40 ms, 25 a second", true, 1, 40, GAP),
        ];
        for (what, stream, listed, since, gap) in cases {
            let got = pace(stream, listed, Duration::from_millis(since));
            assert_eq!(got, gap, "{what}");
        }
    }
}
