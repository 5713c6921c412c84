//! The engine's read side for observability: metrics, per-endpoint statistics, gauges.

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{EndpointNow, Engine, EngineError};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Health, State};
use crate::metrics::{GaugeSnapshot, Metrics, PoolMetrics};
use crate::pool::destinations::PairHealth;
use crate::pool::EndpointUse;
use crate::protocol::{EndpointView, PoolStatus, SlowedView};
use crate::store::{EndpointRow, EventRow, SourceRow};

/// How [`Engine::open_with`] sets the engine up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Record metrics on the lease, report, probe and commit paths. Off only to measure
    /// what recording costs (`benches/socket.rs`).
    pub record_metrics: bool,
    /// Follow what other daemons of a fleet commit (PostgreSQL; docs/fleet.md). A CLI
    /// command that acts once and ends does not.
    pub follow: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            record_metrics: true,
            follow: true,
        }
    }
}

/// Gauges come from the pools' counts at scrape time. The source holds the engine weakly:
/// the engine owns the registry, and a strong reference would keep both alive forever.
pub(super) fn set_gauge_source(engine: &Arc<Engine>) {
    let weak: Weak<Engine> = Arc::downgrade(engine);
    engine
        .metrics
        .set_gauge_source(Box::new(move || match weak.upgrade() {
            Some(e) => e.lock().gauges(),
            None => GaugeSnapshot::default(),
        }));
}

impl Engine {
    /// The registry: `/metrics` encodes it, the gateway takes its series from it.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// What the gateway keeps beside a lease of `id` from `pool`: the pool's series (None
    /// for an unknown pool, so client-given names add no series), and what the answers
    /// through `id` can teach of its exit address. One lock for both.
    pub fn beside_lease(
        &self,
        pool: &str,
        id: EndpointId,
    ) -> (Option<PoolMetrics>, Option<crate::pool::ExitSighting>) {
        let p = self.lock();
        (p.metrics_of(pool).cloned(), p.exit_sighting(id))
    }

    /// The gateway relayed `sent` bytes to endpoint `id` and `received` from it.
    pub fn record_bytes(&self, id: EndpointId, sent: u64, received: u64) {
        self.lock().record_bytes(id, sent, received);
    }

    /// See [`crate::pool::Pools::forget_session`].
    pub fn forget_session(&self, pool: &str, key: &str) {
        self.lock().forget_session(pool, key);
    }

    /// The tag keys some endpoint carries (what a gateway username may name).
    pub fn tag_keys(&self) -> std::sync::Arc<std::collections::BTreeSet<String>> {
        self.lock().tag_keys()
    }

    /// A probe of `id` finished after `took` (duration histogram, latency estimate).
    pub fn observe_probe(&self, id: EndpointId, ok: bool, took: Duration) {
        self.lock().observe_probe(id, ok, took);
    }

    /// Statistics of the given endpoints (those still held), read under one lock.
    pub fn endpoint_uses(&self, ids: &[EndpointId]) -> Vec<(EndpointId, EndpointUse)> {
        let p = self.lock();
        let now = Instant::now();
        ids.iter()
            .filter_map(|&id| p.endpoint_use(id, now).map(|u| (id, u)))
            .collect()
    }

    /// The gauges as a scrape sees them.
    pub fn gauges(&self) -> GaugeSnapshot {
        self.lock().gauges()
    }
}

impl Engine {
    /// The `endpoints` answer: stored rows as views, with the daemon's statistics.
    pub fn views_with_stats(&self, rows: &[crate::store::EndpointRow]) -> Vec<EndpointView> {
        // Rendering the views (URL redaction) happens outside the lock; under it only
        // the statistics are copied.
        let mut views: Vec<EndpointView> = rows.iter().map(|r| r.view(false)).collect();
        let p = self.lock();
        let now = Instant::now();
        for v in &mut views {
            v.stats = p.endpoint_use(v.id, now).map(|u| u.stats);
        }
        views
    }
}

/// What the pools hold now, and stored rows read in order with queued writes.
impl Engine {
    /// The store, for messages and `status`: a path, or hosts and database without the
    /// password.
    pub fn store_name(&self) -> &str {
        &self.store_name
    }

    /// Counts by state.
    pub fn status(&self, pool: Option<&str>) -> Result<Vec<PoolStatus>, EngineError> {
        Ok(self.lock().status(pool, Instant::now())?)
    }

    /// The endpoint's URL, pool and health, read together.
    pub fn endpoint(&self, id: EndpointId) -> Option<EndpointNow> {
        let p = self.lock();
        Some(EndpointNow {
            url: p.url(id)?.clone(),
            pool: p.pool_of(id)?.to_string(),
            health: p.health(id)?.clone(),
        })
    }

    pub fn health(&self, id: EndpointId) -> Option<Health> {
        self.lock().health(id).cloned()
    }

    pub fn url(&self, id: EndpointId) -> Option<ProxyUrl> {
        self.lock().url(id).cloned()
    }

    pub fn pool_of(&self, id: EndpointId) -> Option<String> {
        self.lock().pool_of(id).map(str::to_string)
    }

    /// Whether the pool is configured (known to the engine).
    pub fn has_pool(&self, pool: &str) -> bool {
        self.lock().pool_config(pool).is_some()
    }

    /// Every endpoint id, of one pool or all.
    pub fn ids(&self, pool: Option<&str>) -> Vec<EndpointId> {
        self.lock().ids(pool)
    }

    /// Ids of the pool's available endpoints (periodic checks).
    pub fn available_ids(&self, pool: &str) -> Vec<EndpointId> {
        self.lock().available_ids(pool)
    }

    /// Nothing in the pool can be leased now.
    pub fn exhausted(&self, pool: &str) -> bool {
        self.lock().exhausted(pool)
    }

    /// Endpoints held in memory.
    pub fn endpoint_count(&self) -> usize {
        self.lock().len()
    }

    /// Stored endpoint rows, in id order (runs after the writes queued before it).
    pub async fn rows(
        &self,
        pool: Option<String>,
        state: Option<State>,
    ) -> Result<Vec<EndpointRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.list(pool.as_deref(), state))
            .await??)
    }

    /// Stored endpoint rows as [`Engine::rows`] reads them, or, while a fleet's database
    /// is away, what memory holds of them (`true`: from memory; docs/fleet.md, "Faults").
    pub async fn rows_or_memory(
        &self,
        pool: Option<String>,
        state: Option<State>,
    ) -> Result<(Vec<EndpointRow>, bool), EngineError> {
        if self.store_up() {
            match self.rows(pool.clone(), state).await {
                Err(e) if e.is_store_unavailable() => {}
                r => return r.map(|rows| (rows, false)),
            }
        }
        Ok((self.memory_rows(pool.as_deref(), state), true))
    }

    /// One stored endpoint row, or what memory holds of it while a fleet's database is
    /// away (`true`).
    pub async fn row_or_memory(
        &self,
        id: EndpointId,
    ) -> Result<(Option<EndpointRow>, bool), EngineError> {
        if self.store_up() {
            match self.row(id).await {
                Err(e) if e.is_store_unavailable() => {}
                r => return r.map(|row| (row, false)),
            }
        }
        let mut rows = self.memory_rows(None, None);
        rows.retain(|r| r.id == id);
        Ok((rows.pop(), true))
    }

    /// What memory holds of the endpoints (`Pools::memory_rows`).
    pub fn memory_rows(&self, pool: Option<&str>, state: Option<State>) -> Vec<EndpointRow> {
        self.lock()
            .memory_rows(pool, state, Instant::now(), SystemTime::now())
    }

    /// One stored endpoint row.
    pub async fn row(&self, id: EndpointId) -> Result<Option<EndpointRow>, EngineError> {
        Ok(self.writer.call(move |s| s.get(id)).await??)
    }

    /// The stored endpoint an operator's `ID|URL` names.
    pub async fn resolve(
        &self,
        arg: String,
        pool: Option<String>,
    ) -> Result<EndpointId, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.resolve(&arg, pool.as_deref()).map(|r| r.id))
            .await??)
    }

    /// Stored events after event id `after`, oldest first.
    pub async fn events(
        &self,
        endpoint: Option<EndpointId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.events(endpoint, after, limit))
            .await??)
    }

    /// Each source's last sniff result.
    pub async fn sources(&self, pool: Option<String>) -> Result<Vec<SourceRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.sources(pool.as_deref()))
            .await??)
    }

    /// The endpoint's non-available pairs.
    pub fn pairs_of(&self, id: EndpointId) -> Vec<PairHealth> {
        self.lock().pairs_of(id)
    }

    /// Active pair bans of a pool.
    pub fn pair_bans(&self, pool: &str) -> usize {
        self.lock().pair_bans(pool)
    }

    /// When `target` of `pool` is down (docs/blame.md): the time until its trial.
    pub fn target_down(&self, pool: &str, target: &str) -> Option<Duration> {
        self.lock().target_down(pool, target, Instant::now())
    }
}

/// Store reads and the retention delete run on the store thread, in order with writes;
/// each is bounded so that a report queued behind it waits milliseconds at most.
impl Engine {
    /// The status page's endpoint sample of a pool.
    pub async fn page_rows(
        &self,
        pool: String,
        limit: usize,
    ) -> Result<Vec<crate::store::EndpointRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.page_rows(&pool, limit))
            .await??)
    }

    /// The stored rows of these pairs (their details), as the status page shows them.
    pub async fn pairs_at(
        &self,
        keys: Vec<(EndpointId, String)>,
    ) -> Result<Vec<crate::store::pairs::PairRow>, EngineError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.writer.call(move |s| s.pairs_at(&keys)).await??)
    }

    /// The newest events, newest first.
    pub async fn recent_events(
        &self,
        limit: usize,
    ) -> Result<Vec<crate::store::EventRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.recent_events(None, limit))
            .await??)
    }

    /// Transition times per pool since `since` (the page's chart).
    pub async fn transition_times(
        &self,
        since: SystemTime,
        cap: usize,
    ) -> Result<Vec<(String, SystemTime)>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.transition_times(since, cap))
            .await??)
    }

    /// Delete up to `batch` events older than `before` in one commit.
    pub async fn prune_events(
        &self,
        before: SystemTime,
        batch: usize,
    ) -> Result<usize, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.prune_events(before, batch))
            .await??)
    }
}

impl Engine {
    /// The destinations of a pool with the most banned pairs, at most `n`.
    pub fn most_banned(&self, pool: &str, n: usize) -> Vec<(String, usize)> {
        self.lock().most_banned(pool, n)
    }

    /// Each endpoint's slow-down for a normalised host (`None`: not slowed).
    pub fn slowed_for(&self, ids: &[EndpointId], host: &str) -> Vec<Option<SlowedView>> {
        self.lock().slowed_for(ids, host, Instant::now())
    }

    /// Each endpoint's state for a normalised destination (`None`: not held).
    pub fn states_for(&self, ids: &[EndpointId], destination: &str) -> Vec<Option<State>> {
        let p = self.lock();
        ids.iter().map(|&id| p.state_for(id, destination)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;
    use crate::health::{Failure, Reason, State};
    use crate::pool::engine::EngineOptions;
    use crate::pool::{Outcome, ReportOn};
    use crate::store::{NewEndpoint, Store};

    async fn engine(opts: EngineOptions) -> (tempfile::TempDir, Arc<Engine>, EndpointId) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = PoolConfig::builtin("default");
        cfg.max_leases_per_endpoint = 1;
        cfg.policy.cooldown.base = Duration::from_secs(60);
        cfg.policy.cooldown.jitter = 0.0;
        // A second pool with no endpoint at all: its leases are refused `pool_empty`.
        let spare = PoolConfig::builtin("spare");
        let e = Engine::open_with(
            Store::open(&dir.path().join("t.db")).unwrap(),
            [cfg, spare],
            opts,
        )
        .unwrap();
        let ids = e
            .add(vec![NewEndpoint {
                url: "http://u:secret@10.0.0.1:8080".parse().unwrap(),
                pool: "default".into(),
                label: None,
                source: None,
                state: State::Available,
                tags: Default::default(),
            }])
            .await
            .unwrap();
        (dir, e, ids[0])
    }

    fn value(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .map(|l| l[series.len()..].trim().to_string())
    }

    #[tokio::test(start_paused = true)]
    async fn leases_reports_probes_and_commits_are_counted() {
        let (_dir, e, id) = engine(EngineOptions::default()).await;
        let g = e
            .lease("default", Duration::from_secs(60), None, Duration::ZERO)
            .await
            .unwrap();
        // The only endpoint is at its cap: this request waits 5 s, then is exhausted, and
        // counts once, with its whole wait.
        let r = e
            .lease(
                "default",
                Duration::from_secs(60),
                None,
                Duration::from_secs(5),
            )
            .await;
        assert!(r.is_err());
        // An empty pool's refusal counts at once, even for a request that would wait.
        assert!(e
            .lease(
                "spare",
                Duration::from_secs(60),
                None,
                Duration::from_secs(5)
            )
            .await
            .is_err());
        // Unknown pools are never counted (their names come from clients).
        assert!(e
            .lease("nope", Duration::from_secs(1), None, Duration::ZERO)
            .await
            .is_err());
        let on = ReportOn {
            duration: Some(Duration::from_millis(250)),
            ..ReportOn::default()
        };
        e.report_on(&g.lease, Outcome::Success, &on).await.unwrap();
        let g = e
            .lease("default", Duration::from_secs(60), None, Duration::ZERO)
            .await
            .unwrap();
        let f = Failure {
            reason: Some(Reason::ConnectRefused),
            status: Some(429),
            ..Failure::default()
        };
        let on = ReportOn {
            duration: Some(Duration::from_secs(9)),
            ..ReportOn::default()
        };
        let st = e
            .report_on(&g.lease, Outcome::Failure(f), &on)
            .await
            .unwrap();
        assert_eq!(st.state, State::Cooling);
        e.observe_probe(id, false, Duration::from_millis(40));
        e.flush().await.unwrap();

        let text = e.metrics().encode();
        let want = [
            (
                r#"proxypool_leases_total{pool="default",result="granted"}"#,
                "2",
            ),
            (
                r#"proxypool_leases_total{pool="default",result="exhausted"}"#,
                "1",
            ),
            (
                r#"proxypool_leases_total{pool="spare",result="empty"}"#,
                "1",
            ),
            (r#"proxypool_lease_wait_seconds_count{pool="spare"}"#, "1"),
            (r#"proxypool_lease_wait_seconds_sum{pool="spare"}"#, "0.0"),
            (r#"proxypool_lease_wait_seconds_count{pool="default"}"#, "3"),
            (r#"proxypool_lease_wait_seconds_sum{pool="default"}"#, "5.0"),
            (
                r#"proxypool_reports_total{pool="default",outcome="success",reason="none"}"#,
                "1",
            ),
            (
                r#"proxypool_reports_total{pool="default",outcome="failure",reason="connect_refused"}"#,
                "1",
            ),
            (
                r#"proxypool_transitions_total{pool="default",from="available",to="cooling",reason="connect_refused"}"#,
                "1",
            ),
            (
                r#"proxypool_probe_duration_seconds_count{pool="default",outcome="failure"}"#,
                "1",
            ),
            (
                r#"proxypool_endpoints{pool="default",state="cooling"}"#,
                "1",
            ),
            (
                r#"proxypool_endpoints{pool="default",state="available"}"#,
                "0",
            ),
            (r#"proxypool_destination_bans{pool="default"}"#, "0"),
        ];
        for (series, v) in want {
            assert_eq!(value(&text, series).as_deref(), Some(v), "{series}\n{text}");
        }
        assert!(!text.contains("nope") && !text.contains("secret") && !text.contains("10.0.0.1"));
        let commits = value(&text, "proxypool_store_commit_seconds_count").unwrap();
        assert!(commits.parse::<u64>().unwrap() >= 1, "{text}");

        let u = e.endpoint_uses(&[id])[0].1;
        assert_eq!(
            (u.stats.leases, u.stats.successes, u.stats.failures),
            (2, 1, 1)
        );
        // Failures (the 9 s report, the probe) do not feed the estimate; the success did.
        assert_eq!(u.stats.latency_ms, Some(250.0));
        assert_eq!(u.cooldown_left, Some(Duration::from_secs(60)));
        let views = e.views_with_stats(&e.rows(None, None).await.unwrap());
        assert_eq!(views[0].stats, Some(u.stats));
        // The report's status is stored on its event.
        let evs = e.events(Some(id), 0, 100).await.unwrap();
        assert!(
            evs.iter()
                .any(|ev| ev.kind == "report" && ev.status == Some(429)),
            "{evs:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn recording_off_leaves_only_the_gauges() {
        let (_dir, e, _) = engine(EngineOptions {
            record_metrics: false,
            ..EngineOptions::default()
        })
        .await;
        let g = e
            .lease("default", Duration::from_secs(60), None, Duration::ZERO)
            .await
            .unwrap();
        e.release(&g.lease).await.unwrap();
        let text = e.metrics().encode();
        assert!(!text.contains("proxypool_leases_total{"), "{text}");
        assert_eq!(
            value(
                &text,
                r#"proxypool_endpoints{pool="default",state="available"}"#
            )
            .as_deref(),
            Some("1")
        );
    }
}
