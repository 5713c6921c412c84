//! Leases: an endpoint that fits, waiting up to `wait`, a fallback pool, a trial whose
//! claim another daemon won tried again.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Commit, Engine, EngineError, CLAIM_TRIES};
use crate::pool::{PoolError, Want};
use crate::protocol::Grant;

/// What one attempt of a lease came to: its result, whether it is the request's last, and
/// until when the request may wait.
type Attempt = (Result<Grant, PoolError>, bool, Instant);

/// One lease request as the pools see it, whichever pool of the fallback hop serves it.
#[derive(Clone, Copy)]
struct Ask<'a> {
    pool: &'a str,
    ttl: Duration,
    session: Option<&'a str>,
    wait: Duration,
    want: &'a Want,
}

impl<'a> Ask<'a> {
    fn new(
        pool: &'a str,
        ttl: Duration,
        session: Option<&'a str>,
        wait: Duration,
        want: &'a Want,
    ) -> Self {
        Ask {
            pool,
            ttl,
            session,
            wait,
            want,
        }
    }
}

impl Engine {
    /// Lease an endpoint, waiting up to `wait` for one to become available.
    pub async fn lease(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
    ) -> Result<Grant, EngineError> {
        self.lease_with(pool, ttl, session, wait, &Want::default())
            .await
    }

    /// Lease an endpoint that fits `want` (destination, schemes, tags), waiting up to
    /// `wait` (docs/selection.md): a paced lease waits at least the pool's `[pool.pace]
    /// wait`. A pool with a `fallback` that has nothing (empty or exhausted at once, or
    /// paced past its wait) is served from that pool instead: one hop, the grant names the
    /// pool.
    pub async fn lease_with(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
        want: &Want,
    ) -> Result<Grant, EngineError> {
        let ask = Ask::new(pool, ttl, session, wait, want);
        self.lease_waiting(ask, None).await.map(|(g, _)| g)
    }

    /// [`Engine::lease_with`] for a socket client, which may go away while it waits (a
    /// `ttl` over the pool's `max_ttl` is refused): once `gone`
    /// is cancelled the wait ends with [`EngineError::CallerGone`] and nothing is granted;
    /// a grant from the wait that races it is given back at once. A lease whose answer
    /// cannot be delivered is never left behind (nobody could release it). One granted
    /// without waiting is answered whatever `gone` says: a client that only shut down its
    /// sending side still reads it.
    pub async fn lease_while_there(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
        want: &Want,
        gone: &CancellationToken,
    ) -> Result<Grant, EngineError> {
        self.lock().check_ttl(pool, ttl)?;
        let ask = Ask::new(pool, ttl, session, wait, want);
        let (g, waited) = self.lease_waiting(ask, Some(gone)).await?;
        if waited && gone.is_cancelled() {
            self.release(&g.lease).await?;
            return Err(EngineError::CallerGone);
        }
        Ok(g)
    }

    /// The pool's lease, then its fallback's when it has nothing (one hop).
    async fn lease_waiting(
        &self,
        ask: Ask<'_>,
        gone: Option<&CancellationToken>,
    ) -> Result<(Grant, bool), EngineError> {
        let fallback = self.lock().fallback(ask.pool);
        let first = self.lease_in(ask, gone, fallback.is_some()).await;
        let Some(next) = fallback else {
            return first;
        };
        let e = match first {
            Err(EngineError::Pool(e)) if e.nothing_to_lease() => e,
            r => return r,
        };
        match self.lease_in(Ask { pool: &next, ..ask }, gone, false).await {
            // The fallback has nothing either: the first pool's answer says more (its
            // pacing's time to come back, its cooldowns).
            Err(EngineError::Pool(f)) if f.nothing_to_lease() => Err(e.into()),
            r => r,
        }
    }

    /// One pool's lease, waiting as `lease_with` says; `eager`: an exhausted pool answers
    /// at once (a fallback is there to serve). Returns whether it waited.
    async fn lease_in(
        &self,
        ask: Ask<'_>,
        gone: Option<&CancellationToken>,
        eager: bool,
    ) -> Result<(Grant, bool), EngineError> {
        let started = Instant::now();
        let attempt = || self.attempt(ask, started, eager);
        // The common case answers at once, without registering as a waiter.
        match attempt().await? {
            (Err(PoolError::Exhausted { .. } | PoolError::Paced { .. }), false, _) => {}
            (r, _, _) => return Ok((r?, false)),
        }
        let gone = async {
            match gone {
                Some(g) => g.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(gone);
        loop {
            // Registered before the attempt, so a release in between is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match attempt().await? {
                (Ok(g), _, _) => return Ok((g, true)),
                (
                    Err(
                        PoolError::Exhausted { retry_after, .. }
                        | PoolError::Paced { retry_after, .. },
                    ),
                    false,
                    give_up,
                ) => {
                    // Woken by a release (an endpoint or a pair's in_flight freed), or at
                    // the soonest time something is ready again.
                    let mut until = give_up;
                    if let Some(d) = retry_after {
                        until = until.min(Instant::now() + d);
                    }
                    tokio::select! {
                        _ = &mut freed => {}
                        _ = tokio::time::sleep_until(until) => {}
                        _ = &mut gone => return Err(EngineError::CallerGone),
                    }
                }
                (Err(e), _, _) => return Err(e.into()),
            }
        }
    }

    /// One attempt of a lease (only the request's last is counted, and `lease_in` gives
    /// up on the same decision). A trial whose claim another daemon of the fleet won is withdrawn,
    /// and the request looks again at once (docs/fleet.md, "Ownership").
    async fn attempt(
        &self,
        ask: Ask<'_>,
        started: Instant,
        eager: bool,
    ) -> Result<Attempt, EngineError> {
        let Ask {
            pool,
            ttl,
            session,
            wait,
            want,
        } = ask;
        let mut tries = 0;
        loop {
            tries += 1;
            let (out, done) = self
                .run_as(Commit::Ride, |p, now, _| {
                    let (r, w) = p.lease_with(pool, ttl, session, want, now);
                    let limit = match &r {
                        Err(PoolError::Paced { wait: paced, .. }) => wait.max(*paced),
                        Err(PoolError::Exhausted { .. }) if eager => Duration::ZERO,
                        _ => wait,
                    };
                    let give_up = started
                        .checked_add(limit)
                        .unwrap_or_else(|| started + crate::limits::MAX_DURATION);
                    let last = limit.is_zero() || now >= give_up;
                    p.observe_lease(pool, &r, now - started, last);
                    ((r, last, give_up), w)
                })
                .await?;
            let withdrawn = matches!(&out.0, Ok(g) if done.withdrawn.contains(&g.lease));
            if !withdrawn {
                return Ok(out);
            }
            if tries >= CLAIM_TRIES {
                // Every try's trial went to another daemon: nothing to lease here now.
                let e = PoolError::Exhausted {
                    pool: pool.to_string(),
                    retry_after: None,
                    filter: None,
                };
                return Ok((Err(e), out.1, out.2));
            }
        }
    }
}
