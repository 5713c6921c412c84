//! What the HTTP listener shows, read from the engine (counts, statistics) and the store
//! (endpoint rows, events, the last hour's transitions).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::endpoint::EndpointId;
use crate::health::State;
use crate::pool::engine::{Engine, EngineError};
use crate::pool::PoolError;
use crate::protocol::{EndpointView, ErrorCode, PoolStatus};
use crate::web::{minute_buckets, EndpointLine, PageLimits, PageModel, PoolPage};
use crate::web::{StatusError, StatusSource};

/// Transitions read for the chart at most; beyond that a busy hour shows a lower bound.
const CHART_CAP: usize = 100_000;

/// Destinations named per pool in "banned on", and per endpoint row.
const MOST_BANNED: usize = 5;

/// The destinations an endpoint is banned on, at most [`MOST_BANNED`], and how many more.
fn banned_on(engine: &Engine, id: EndpointId) -> (Vec<String>, usize) {
    let pairs = engine.pairs_of(id);
    let shown = pairs
        .iter()
        .take(MOST_BANNED)
        .map(|p| p.destination.clone())
        .collect();
    (shown, pairs.len().saturating_sub(MOST_BANNED))
}

/// Each row's "banned on": `site (rule NAME)` where a `[[ban]]` rule made the ban (its
/// name is in the stored detail: one store read for the whole pool), then `+N more`.
async fn banned_lines(
    engine: &Engine,
    ids: &[EndpointId],
) -> Result<Vec<Vec<String>>, EngineError> {
    let banned: Vec<_> = ids.iter().map(|id| banned_on(engine, *id)).collect();
    let keys: Vec<(EndpointId, String)> = ids
        .iter()
        .zip(&banned)
        .flat_map(|(id, (dests, _))| dests.iter().map(|d| (*id, d.clone())))
        .collect();
    let rules: HashMap<(EndpointId, String), String> = engine
        .pairs_at(keys)
        .await?
        .into_iter()
        .filter_map(|p| {
            let r = p.record;
            let rule = r
                .health
                .detail
                .as_deref()
                .and_then(crate::ban::rule_in_detail)?;
            Some(((r.endpoint, r.destination), rule.to_string()))
        })
        .collect();
    Ok(ids
        .iter()
        .zip(banned)
        .map(|(id, (dests, more))| {
            let mut v: Vec<String> = dests
                .into_iter()
                .map(|d| match rules.get(&(*id, d.clone())) {
                    Some(rule) => format!("{d} (rule {rule})"),
                    None => d,
                })
                .collect();
            if more > 0 {
                v.push(format!("+{more} more"));
            }
            v
        })
        .collect())
}

/// An endpoint's "banned on" without rule names (they are in the stored pairs' details).
fn unnamed((mut shown, more): (Vec<String>, usize)) -> Vec<String> {
    if more > 0 {
        shown.push(format!("+{more} more"));
    }
    shown
}

/// The daemon's [`StatusSource`].
pub struct DaemonStatus {
    engine: Arc<Engine>,
}

impl DaemonStatus {
    pub fn new(engine: Arc<Engine>) -> Self {
        DaemonStatus { engine }
    }

    /// A pool's rows for the page, those not available first: stored, or what memory
    /// holds while a fleet's database is away.
    async fn page_rows(
        &self,
        pool: &str,
        limits: PageLimits,
        away: bool,
    ) -> Result<Vec<crate::store::EndpointRow>, StatusError> {
        if !away {
            let read = self
                .engine
                .page_rows(pool.to_string(), limits.endpoints_per_pool)
                .await;
            match read {
                Err(e) if e.is_store_unavailable() => {}
                r => return r.map_err(source_error),
            }
        }
        let mut rows = self.engine.memory_rows(Some(pool), None);
        rows.sort_by_key(|r| (r.state == State::Available, r.id));
        rows.truncate(limits.endpoints_per_pool);
        Ok(rows)
    }

    fn check_pool(&self, pool: Option<&str>) -> Result<(), StatusError> {
        match pool {
            Some(p) if !self.engine.has_pool(p) => Err(StatusError::new(
                ErrorCode::UnknownPool,
                PoolError::UnknownPool(p.to_string()).to_string(),
            )),
            _ => Ok(()),
        }
    }
}

/// A read the page can do without while a fleet's database is away: `instead` then.
fn or_while_away<T>(r: Result<T, EngineError>, instead: T) -> Result<T, StatusError> {
    match r {
        Err(e) if e.is_store_unavailable() => Ok(instead),
        r => r.map_err(source_error),
    }
}

fn source_error(e: EngineError) -> StatusError {
    match e {
        EngineError::Pool(PoolError::UnknownPool(p)) => StatusError::new(
            ErrorCode::UnknownPool,
            PoolError::UnknownPool(p).to_string(),
        ),
        e => StatusError::new(ErrorCode::Internal, e.to_string()),
    }
}

impl StatusSource for DaemonStatus {
    fn store_up(&self) -> bool {
        self.engine.store_up()
    }

    fn daemons(&self) -> Option<Vec<crate::protocol::DaemonRow>> {
        self.engine.fleet_daemons()
    }

    fn store_state(&self) -> Option<&'static str> {
        self.engine.store_state()
    }

    async fn status(&self, pool: Option<&str>) -> Result<Vec<PoolStatus>, StatusError> {
        self.engine.status(pool).map_err(source_error)
    }

    async fn endpoints(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> Result<Vec<EndpointView>, StatusError> {
        self.check_pool(pool)?;
        let (rows, _) = self
            .engine
            .rows_or_memory(pool.map(str::to_string), state)
            .await
            .map_err(source_error)?;
        Ok(self.engine.views_with_stats(&rows))
    }

    async fn endpoints_for(
        &self,
        pool: Option<&str>,
        destination: &str,
    ) -> Result<Vec<(EndpointView, State)>, StatusError> {
        let views = self.endpoints(pool, None).await?;
        let ids: Vec<_> = views.iter().map(|v| v.id).collect();
        let states = self.engine.states_for(&ids, destination);
        Ok(views
            .into_iter()
            .zip(states)
            .map(|(v, st)| {
                let st = st.unwrap_or(v.state);
                (v, st)
            })
            .collect())
    }

    async fn page(&self, limits: PageLimits) -> Result<PageModel, StatusError> {
        let now = SystemTime::now();
        let hour_ago = now - Duration::from_secs(3600);
        let statuses = self.engine.status(None).map_err(source_error)?;
        // While a fleet's database is away, what memory holds (docs/fleet.md, "Faults").
        let away = !self.engine.store_up();
        let times = match away {
            true => Vec::new(),
            false => or_while_away(
                self.engine.transition_times(hour_ago, CHART_CAP).await,
                Vec::new(),
            )?,
        };
        let mut pools = Vec::with_capacity(statuses.len());
        for status in statuses {
            let rows = self.page_rows(&status.pool, limits, away).await?;
            let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
            let uses = self.engine.endpoint_uses(&ids);
            let banned = match away {
                true => ids
                    .iter()
                    .map(|id| unnamed(banned_on(&self.engine, *id)))
                    .collect(),
                false => {
                    let plain = || ids.iter().map(|id| unnamed(banned_on(&self.engine, *id)));
                    or_while_away(banned_lines(&self.engine, &ids).await, plain().collect())?
                }
            };
            let endpoints = rows
                .iter()
                .zip(banned)
                .map(|(r, banned_on)| {
                    let u = uses.iter().find(|(id, _)| *id == r.id).map(|(_, u)| *u);
                    EndpointLine {
                        view: r.view(false),
                        stats: u.map(|u| u.stats).unwrap_or_default(),
                        live_leases: u.map_or(0, |u| u.live_leases),
                        cooldown_left: u.and_then(|u| u.cooldown_left),
                        banned_on,
                    }
                })
                .collect();
            let transitions = minute_buckets(
                now,
                times
                    .iter()
                    .filter(|(p, _)| *p == status.pool)
                    .map(|(_, t)| *t),
            );
            let banned_pairs = self.engine.pair_bans(&status.pool);
            let most_banned = self.engine.most_banned(&status.pool, MOST_BANNED);
            pools.push(PoolPage {
                banned_pairs,
                most_banned,
                endpoints_total: status.available
                    + status.cooling
                    + status.probe_allowed
                    + status.disabled,
                transitions,
                endpoints,
                status,
            });
        }
        let events = match away {
            true => Vec::new(),
            false => or_while_away(self.engine.recent_events(limits.events).await, Vec::new())?,
        };
        Ok(PageModel {
            generated_at: now,
            version: env!("CARGO_PKG_VERSION").into(),
            pools,
            events,
            store_down: !self.engine.store_up(),
            daemons: self.engine.fleet_daemons(),
        })
    }
}
