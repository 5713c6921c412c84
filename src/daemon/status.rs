//! What the HTTP listener shows, read from the engine (counts, statistics) and the store
//! (endpoint rows, events, the last hour's transitions).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::health::State;
use crate::pool::engine::{Engine, EngineError};
use crate::pool::{PoolError, PoolStatus};
use crate::protocol::ErrorCode;
use crate::store::EndpointView;
use crate::web::{minute_buckets, EndpointLine, PageLimits, PageModel, PoolPage};
use crate::web::{StatusError, StatusSource};

/// Transitions read for the chart at most; beyond that a busy hour shows a lower bound.
const CHART_CAP: usize = 100_000;

/// Destinations named per pool in "banned on", and per endpoint row.
const MOST_BANNED: usize = 5;

/// The destinations an endpoint is banned on, at most [`MOST_BANNED`], then `+N more`.
fn banned_on(engine: &Engine, id: crate::endpoint::EndpointId) -> Vec<String> {
    let pairs = engine.pairs_of(id);
    let mut v: Vec<String> = pairs
        .iter()
        .take(MOST_BANNED)
        .map(|p| p.destination.clone())
        .collect();
    if pairs.len() > MOST_BANNED {
        v.push(format!("+{} more", pairs.len() - MOST_BANNED));
    }
    v
}

/// The daemon's [`StatusSource`].
pub struct DaemonStatus {
    engine: Arc<Engine>,
}

impl DaemonStatus {
    pub fn new(engine: Arc<Engine>) -> Self {
        DaemonStatus { engine }
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

    async fn status(&self, pool: Option<&str>) -> Result<Vec<PoolStatus>, StatusError> {
        self.engine.status(pool).map_err(source_error)
    }

    async fn endpoints(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> Result<Vec<EndpointView>, StatusError> {
        self.check_pool(pool)?;
        let rows = self
            .engine
            .rows(pool.map(str::to_string), state)
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
        let times = self
            .engine
            .transition_times(hour_ago, CHART_CAP)
            .await
            .map_err(source_error)?;
        let mut pools = Vec::with_capacity(statuses.len());
        for status in statuses {
            let rows = self
                .engine
                .page_rows(status.pool.clone(), limits.endpoints_per_pool)
                .await
                .map_err(source_error)?;
            let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
            let uses = self.engine.endpoint_uses(&ids);
            let endpoints = rows
                .iter()
                .map(|r| {
                    let u = uses.iter().find(|(id, _)| *id == r.id).map(|(_, u)| *u);
                    EndpointLine {
                        view: r.view(false),
                        stats: u.map(|u| u.stats).unwrap_or_default(),
                        live_leases: u.map_or(0, |u| u.live_leases),
                        cooldown_left: u.and_then(|u| u.cooldown_left),
                        banned_on: banned_on(&self.engine, r.id),
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
        let events = self
            .engine
            .recent_events(limits.events)
            .await
            .map_err(source_error)?;
        Ok(PageModel {
            generated_at: now,
            version: env!("CARGO_PKG_VERSION").into(),
            pools,
            events,
        })
    }
}
