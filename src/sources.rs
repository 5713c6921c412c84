//! Sources of sniffing pools: fetch endpoint lists, sniff with fallback, reconcile.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::PoolConfig;
use crate::event_kind::EventKind;
use crate::health::{Input, Reason, State};
use crate::pool::engine::{initial_state, Engine, EngineError};
use crate::store::{NewEndpoint, NewEvent, Write};

mod fetch;
pub use fetch::{fetch, parse_list, Listed, SourceError};

/// Least time between two sniffs triggered by exhaustion, so a dead provider is not hammered.
pub const EXHAUSTION_BACKOFF: Duration = Duration::from_secs(30);

/// What started a sniff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Daemon start.
    Startup,
    /// `refresh` elapsed.
    Refresh,
    /// Every endpoint of the pool is cooling or disabled.
    Exhaustion,
}

impl Trigger {
    fn kind(self) -> EventKind {
        match self {
            Trigger::Startup => EventKind::SniffOnStartup,
            Trigger::Refresh => EventKind::SniffRefresh,
            Trigger::Exhaustion => EventKind::SniffOnExhaustion,
        }
    }
}

/// Result of a successful sniff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sniffed {
    /// Source that answered.
    pub source: String,
    /// Endpoints it listed.
    pub listed: usize,
    /// Newly added.
    pub added: usize,
    /// Disabled because they vanished.
    pub removed: usize,
    /// Back from `source_removed`.
    pub returned: usize,
}

fn pool_event(kind: EventKind, detail: String) -> Write {
    // A source's name is its location, which may carry credentials.
    Write::Event(NewEvent {
        detail: Some(crate::redact::redact_text(&detail, &[])),
        ..NewEvent::new(kind)
    })
}

/// Sniff a pool: sources in order (preferred first), first success wins and is reconciled.
/// `None` when every source failed (then nothing changed).
pub async fn sniff(
    engine: &Engine,
    pool: &PoolConfig,
    trigger: Trigger,
) -> Result<Option<Sniffed>, EngineError> {
    engine
        .record(vec![pool_event(
            trigger.kind(),
            format!("pool {}", pool.name),
        )])
        .await?;
    for src in &pool.sources {
        let name = src.name();
        let shown = crate::redact::redact_text(&name, &[]);
        match fetch(src).await {
            Err(e) => {
                // A provider's error can quote a URL with its credentials: never keep it;
                // nor a control character (a command's words, a path's), which PostgreSQL
                // would refuse where SQLite stores it.
                let e = crate::redact::redact_text(&e.to_string(), &[]);
                let e = crate::redact::printable(&e).into_owned();
                warn!(pool = %pool.name, source = %shown, error = %e, "sniff failed");
                engine
                    .record(vec![
                        pool_event(
                            EventKind::SniffFailure,
                            format!("pool {} source {name}: {e}", pool.name),
                        ),
                        Write::SourceResult {
                            pool: pool.name.clone(),
                            name: name.clone(),
                            ok: false,
                            detail: Some(e),
                            count: None,
                        },
                    ])
                    .await?;
            }
            Ok(urls) => {
                let s = reconcile(engine, pool, &name, urls).await?;
                info!(pool = %pool.name, source = %shown, listed = s.listed, added = s.added,
                      removed = s.removed, returned = s.returned, "sniff succeeded");
                engine
                    .record(vec![
                        pool_event(
                            EventKind::SniffSuccess,
                            format!(
                                "pool {} source {name}: {} endpoints ({} new, {} removed, {} returned)",
                                pool.name, s.listed, s.added, s.removed, s.returned
                            ),
                        ),
                        Write::SourceResult {
                            pool: pool.name.clone(),
                            name: name.clone(),
                            ok: true,
                            detail: None,
                            count: Some(s.listed),
                        },
                    ])
                    .await?;
                return Ok(Some(s));
            }
        }
    }
    Ok(None)
}

/// The job of sniffing `pool`, which one daemon of a fleet does for all (docs/fleet.md,
/// "Sources in a fleet").
fn job(pool: &PoolConfig) -> String {
    format!("sniff:{}", pool.name)
}

/// How long a daemon of a fleet holds a pool's sniffing without asking again: three
/// refreshes (it asks at each), or, for a pool with no refresh, as long as a daemon counts
/// as alive without a heartbeat.
fn hold(pool: &PoolConfig) -> Duration {
    refresh_interval(pool).map_or(crate::store::daemons::GONE_AFTER, |r| r * 3)
}

/// [`sniff`] when it is this daemon's turn: always on SQLite; in a fleet, when this daemon
/// holds the pool's sniffing (or takes it over from a daemon gone, or one that stopped
/// asking) and the last sniff by any daemon was at least `every` ago. The others follow
/// what it writes. `None` when it is not this daemon's turn (or every source failed).
pub async fn sniff_in_turn(
    engine: &Engine,
    pool: &PoolConfig,
    trigger: Trigger,
    every: Duration,
) -> Result<Option<Sniffed>, EngineError> {
    if !engine.take_turn(&job(pool), every, hold(pool)).await {
        debug!(pool = %pool.name, trigger = ?trigger, "another daemon of the fleet sniffs this pool");
        return Ok(None);
    }
    sniff(engine, pool, trigger).await
}

/// Apply a source's list to the pool: add new URLs, disable vanished ones
/// (`source_removed`, rows kept), bring returning ones back to `probe_allowed`.
pub async fn reconcile(
    engine: &Engine,
    pool: &PoolConfig,
    source_name: &str,
    listed: impl IntoIterator<Item = impl Into<Listed>>,
) -> Result<Sniffed, EngineError> {
    let tag = format!("source:{source_name}");
    let mut seen = HashSet::new();
    let eps: Vec<NewEndpoint> = listed
        .into_iter()
        .map(Into::into)
        .filter(|l: &Listed| {
            let u = &l.url;
            seen.insert((u.scheme, u.host.clone(), u.port, u.user_key().to_string()))
        })
        .map(|l| NewEndpoint {
            url: l.url,
            pool: pool.name.clone(),
            label: None,
            source: Some(tag.clone()),
            state: initial_state(Some(pool)),
            tags: l.tags,
        })
        .collect();
    let listed = eps.len();
    let res = engine.ensure(eps).await?;
    let added = res.iter().filter(|(_, a)| *a).count();
    let listed_ids: HashSet<_> = res.iter().map(|(id, _)| *id).collect();
    let pool_name = pool.name.clone();
    let tag2 = tag.clone();
    let mine = engine
        .rows(Some(pool_name), None)
        .await?
        .into_iter()
        .filter(|r| r.source.as_deref() == Some(tag2.as_str()))
        .collect::<Vec<_>>();
    let (mut removed, mut returned) = (0, 0);
    for row in &mine {
        let here = listed_ids.contains(&row.id);
        let h = engine.health(row.id);
        let Some(h) = h else { continue };
        if !here && h.state != State::Disabled {
            engine
                .input(
                    row.id,
                    Input::SourceRemoved,
                    None,
                    Some(format!("no longer listed by {source_name}")),
                )
                .await?;
            removed += 1;
        } else if here && h.state == State::Disabled && h.reason == Some(Reason::SourceRemoved) {
            engine
                .input(
                    row.id,
                    Input::SourceReturned,
                    None,
                    Some(format!("listed again by {source_name}")),
                )
                .await?;
            returned += 1;
        }
    }
    Ok(Sniffed {
        source: source_name.to_string(),
        listed,
        added,
        removed,
        returned,
    })
}

/// The refresh interval of a pool: the shortest non-zero `refresh` of its sources.
pub fn refresh_interval(pool: &PoolConfig) -> Option<Duration> {
    pool.sources
        .iter()
        .map(|s| s.refresh)
        .filter(|d| !d.is_zero())
        .min()
}

/// Sniff on startup (once), then on refresh and on exhaustion, until `shutdown`.
pub async fn run(engine: Arc<Engine>, pool: PoolConfig, shutdown: CancellationToken) {
    let log = |r: Result<Option<Sniffed>, EngineError>| {
        if let Err(e) = r {
            warn!(pool = %pool.name, error = %e, "sniff could not be recorded");
        }
    };
    log(sniff_in_turn(&engine, &pool, Trigger::Startup, Duration::ZERO).await);
    run_after_startup(engine, pool.clone(), shutdown).await;
}

/// The refresh / exhaustion loop (startup sniff already done).
pub async fn run_after_startup(engine: Arc<Engine>, pool: PoolConfig, shutdown: CancellationToken) {
    let refresh = refresh_interval(&pool);
    let mut next_refresh = refresh.map(|r| tokio::time::Instant::now() + r);
    let mut last_exhaustion: Option<tokio::time::Instant> = None;
    loop {
        let wake =
            next_refresh.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(wake) => {}
            _ = engine.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let now = tokio::time::Instant::now();
        // In a fleet, one daemon sniffs per refresh: a turn is due three quarters of a
        // refresh after the last sniff of any daemon (the holder's own ticks wander).
        let trigger = if next_refresh.is_some_and(|t| now >= t) {
            next_refresh = refresh.map(|r| now + r);
            Some((Trigger::Refresh, refresh.unwrap_or_default().mul_f64(0.75)))
        } else if engine.exhausted(&pool.name)
            && last_exhaustion.is_none_or(|t| now.duration_since(t) >= EXHAUSTION_BACKOFF)
        {
            last_exhaustion = Some(now);
            Some((Trigger::Exhaustion, Duration::ZERO))
        } else {
            None
        };
        if let Some((t, every)) = trigger {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                r = sniff_in_turn(&engine, &pool, t, every) => {
                    if let Err(e) = r {
                        warn!(pool = %pool.name, error = %e, "sniff could not be recorded");
                    }
                }
            }
        }
    }
}
