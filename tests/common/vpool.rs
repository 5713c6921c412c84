//! A virtual pool: simulated endpoints with scripted outcomes, real `Pools` and a real
//! SQLite `Store` on a temp file, driven like a scraper would (lease → use → report), and
//! an auditor that reads back the exact event trail.
//!
//! Time is the paused tokio clock; the wall clock is derived from it so deadlines written
//! to the store are exact.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use proxypool::config::{Mode, PoolConfig};
use proxypool::endpoint::{EndpointId, ProxyUrl};
use proxypool::health::{Cooldown, Failure, Health, Input, Phase, Policy, Reason, State, Step};
use proxypool::pool::engine::initial_state;
use proxypool::pool::ReportOn;
use proxypool::pool::{Outcome, PoolError, Pools, Want};
use proxypool::protocol::Grant;
use proxypool::store::{ClaimResult, EndpointRow, EventRow, NewEndpoint, Store, Write};
use tokio::time::Instant;

pub const POOL: &str = "vp";
pub const TTL: Duration = Duration::from_secs(30);

/// How a simulated endpoint answers, by its own call number (1-based).
pub enum Script {
    /// Every call works.
    SucceedsAlways,
    /// No call works.
    FailsAlways,
    /// Only the K-th call works.
    SucceedsOnlyOn(u32),
    /// The first n calls fail, the rest work.
    FailsNTimesThenSucceeds(u32),
    /// Any rule: true = success.
    Custom(Box<dyn Fn(u32) -> bool>),
}

impl Script {
    pub fn succeeds(&self, call: u32) -> bool {
        match self {
            Script::SucceedsAlways => true,
            Script::FailsAlways => false,
            Script::SucceedsOnlyOn(k) => call == *k,
            Script::FailsNTimesThenSucceeds(n) => call > *n,
            Script::Custom(f) => f(call),
        }
    }
}

/// Paused monotonic clock plus a wall clock that moves with it.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub t0: Instant,
    pub w0: SystemTime,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            t0: Instant::now(),
            // 2027-01-15T08:00:00Z: whole seconds, so stored deadlines are exact.
            w0: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        }
    }
    pub fn now(&self) -> (Instant, SystemTime) {
        let now = Instant::now();
        (now, self.wall_at(now))
    }
    pub fn wall_at(&self, at: Instant) -> SystemTime {
        self.w0 + (at - self.t0)
    }
}

/// The pool `POOL` with a deterministic policy (jitter 0).
pub fn config(mode: Mode, base: Duration, max: Duration) -> PoolConfig {
    pool_config(POOL, mode, base, max)
}

/// Pool `name` with a deterministic policy: cooldown from `base` doubling to `max`, no
/// jitter.
pub fn pool_config(name: &str, mode: Mode, base: Duration, max: Duration) -> PoolConfig {
    PoolConfig {
        mode,
        policy: Policy {
            cooldown: Cooldown {
                base,
                factor: 2.0,
                max,
                jitter: 0.0,
            },
            ..Policy::default()
        },
        ..PoolConfig::builtin(name)
    }
}

/// Endpoint `id` of `pool` in `state` as a store row (`socks5://u{id}:pw@10.0.0.{id}:1080`,
/// never failed): the base that pool-level tests change the fields they are about in.
pub fn endpoint_row(id: EndpointId, pool: &str, state: State) -> EndpointRow {
    EndpointRow {
        source: Some("test".into()),
        state,
        state_changed_at: "2027-01-15T08:00:00.000Z".into(),
        created_at: "2027-01-15T08:00:00.000Z".into(),
        ..EndpointRow::fixture(id, &format!("socks5://u{id}:pw@10.0.0.{id}:1080"), pool)
    }
}

/// One completed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub endpoint: EndpointId,
    pub trial: bool,
    pub ok: bool,
    pub lease: String,
    /// State after the report.
    pub state: State,
}

/// One audited event, compared exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct Audit {
    pub kind: String,
    pub endpoint: Option<EndpointId>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: Option<String>,
    /// The pair's destination; `None` for endpoint-scoped events.
    pub destination: Option<String>,
}

fn opt(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// Expected event: `""` stands for NULL.
pub fn ev(kind: &str, endpoint: EndpointId, from: &str, to: &str, reason: &str) -> Audit {
    Audit {
        kind: kind.into(),
        endpoint: Some(endpoint),
        from: opt(from),
        to: opt(to),
        reason: opt(reason),
        destination: None,
    }
}

/// Expected event of the pair (endpoint, `destination`).
pub fn evd(
    kind: &str,
    endpoint: EndpointId,
    destination: &str,
    from: &str,
    to: &str,
    reason: &str,
) -> Audit {
    Audit {
        destination: Some(destination.into()),
        ..ev(kind, endpoint, from, to, reason)
    }
}

impl From<&EventRow> for Audit {
    fn from(e: &EventRow) -> Audit {
        Audit {
            kind: e.kind.clone(),
            endpoint: e.endpoint,
            from: e.from.clone(),
            to: e.to.clone(),
            reason: e.reason.clone(),
            destination: e.destination.clone(),
        }
    }
}

pub fn failure() -> Failure {
    Failure::new(Reason::ConnectRefused, Some(Phase::Connect))
}

pub struct VirtualPool {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub cfg: PoolConfig,
    pub store: Store,
    pub pools: Pools,
    pub ids: Vec<EndpointId>,
    pub clock: Clock,
    scripts: HashMap<EndpointId, Script>,
    calls: HashMap<EndpointId, u32>,
    /// How the scripted failures fail.
    pub failure: Failure,
    audited: i64,
}

impl VirtualPool {
    /// Endpoints `socks5://10.0.0.<i>:1080` with one script each, ids in order.
    pub fn new(cfg: PoolConfig, scripts: Vec<Script>) -> VirtualPool {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxypool.db");
        let mut store = Store::open(&path).unwrap();
        let state = initial_state(Some(&cfg));
        let eps: Vec<NewEndpoint> = (1..=scripts.len())
            .map(|i| NewEndpoint {
                url: ProxyUrl::parse(&format!("socks5://user:secret@10.0.0.{i}:1080")).unwrap(),
                pool: POOL.into(),
                label: Some(format!("vp{i}")),
                source: Some("test".into()),
                state,
                tags: Default::default(),
            })
            .collect();
        let ids = store.add_endpoints(&eps).unwrap();
        let clock = Clock::new();
        let mut pools = Pools::new([cfg.clone()]);
        pools.seed(1);
        let (now, _) = clock.now();
        for r in store.list(Some(POOL), None).unwrap() {
            pools.insert_row(&r, now);
        }
        VirtualPool {
            dir,
            path,
            cfg,
            store,
            pools,
            scripts: ids.iter().copied().zip(scripts).collect(),
            ids,
            clock,
            calls: HashMap::new(),
            failure: failure(),
            audited: 0,
        }
    }

    pub fn now(&self) -> (Instant, SystemTime) {
        self.clock.now()
    }

    /// Make writes durable, as the engine does before answering.
    /// A claim the store confirms is this pool's, as the engine settles it.
    pub fn persist(&mut self, writes: &[Write]) {
        let applied = self
            .store
            .write_groups(&[writes.to_vec()])
            .unwrap()
            .pop()
            .expect("one batch, one result")
            .unwrap();
        for c in &applied.claims {
            if let ClaimResult::Won { on, epoch } = c {
                self.pools.claim_won(on, *epoch);
            }
        }
    }

    /// Lease without using it yet.
    pub fn lease(&mut self) -> Result<Grant, PoolError> {
        let (now, _) = self.now();
        let (r, w) = self.pools.lease(POOL, TTL, None, now);
        self.persist(&w);
        r
    }

    /// Lease for a destination (normalised) without using it yet.
    pub fn lease_for(&mut self, destination: &str) -> Result<Grant, PoolError> {
        let (now, _) = self.now();
        let want = Want::parse(Some(destination), None).unwrap();
        let (r, w) = self.pools.lease_with(POOL, TTL, None, &want, now);
        self.persist(&w);
        r
    }

    /// Report `outcome` on a lease, for `destination` (`None`: the lease's own).
    pub fn report_for(&mut self, g: &Grant, outcome: Outcome, destination: Option<&str>) -> State {
        let (now, wall) = self.now();
        let (r, w) =
            self.pools
                .report_with(&g.lease, outcome, &ReportOn::to(destination), now, wall);
        self.persist(&w);
        r.unwrap().state
    }

    /// Use a leased endpoint per its script and report the outcome.
    pub fn finish(&mut self, g: &Grant) -> Call {
        let n = self.calls.entry(g.endpoint).or_insert(0);
        *n += 1;
        let ok = self.scripts[&g.endpoint].succeeds(*n);
        let outcome = if ok {
            Outcome::Success
        } else {
            Outcome::Failure(self.failure.clone())
        };
        let (now, wall) = self.now();
        let (r, w) = self.pools.report(&g.lease, outcome, now, wall);
        self.persist(&w);
        Call {
            endpoint: g.endpoint,
            trial: g.trial,
            ok,
            lease: g.lease.clone(),
            state: r.unwrap(),
        }
    }

    /// lease → use → report.
    pub fn call(&mut self) -> Result<Call, PoolError> {
        let g = self.lease()?;
        Ok(self.finish(&g))
    }

    /// `n` calls that must all be granted; returns the endpoints used.
    pub fn calls(&mut self, n: usize) -> Vec<EndpointId> {
        (0..n).map(|_| self.call().unwrap().endpoint).collect()
    }

    /// Fail one specific endpoint (as a prober would): a trial if it is probe_allowed.
    pub fn fail(&mut self, id: EndpointId, f: Failure) -> State {
        self.tick();
        let (now, wall) = self.now();
        let trial = self.health(id).state == State::ProbeAllowed;
        if trial {
            let (won, w) = self.pools.try_claim(id, now);
            self.persist(&w);
            assert!(won, "claim {id}");
        }
        let (r, w) = self
            .pools
            .probe_result(id, Outcome::Failure(f), trial, None, now, wall);
        self.persist(&w);
        r.unwrap()
    }

    /// Operator / source input.
    pub fn input(&mut self, id: EndpointId, input: Input, detail: Option<&str>) -> Step {
        let (now, _) = self.now();
        let (r, w) = self
            .pools
            .input(id, input, None, detail.map(String::from), now);
        self.persist(&w);
        r.unwrap().0
    }

    /// Let the pool notice deadlines and lease expiries.
    pub fn tick(&mut self) {
        let (now, _) = self.now();
        let w = self.pools.advance(now);
        self.persist(&w);
    }

    pub fn health(&self, id: EndpointId) -> Health {
        self.pools.health(id).unwrap().clone()
    }

    pub fn row(&self, id: EndpointId) -> EndpointRow {
        self.store.get(id).unwrap().unwrap()
    }

    /// Time until an endpoint's in-memory deadline.
    pub fn remaining(&self, id: EndpointId) -> Option<Duration> {
        self.health(id).deadline.map(|d| d - Instant::now())
    }

    /// Every event row written since the last audit.
    pub fn new_events(&mut self) -> Vec<EventRow> {
        let rows = self.store.events(None, self.audited, 100_000).unwrap();
        if let Some(last) = rows.last() {
            self.audited = last.id;
        }
        rows
    }

    /// The audit trail written since the last audit.
    pub fn audit(&mut self) -> Vec<Audit> {
        self.new_events().iter().map(Audit::from).collect()
    }
}
