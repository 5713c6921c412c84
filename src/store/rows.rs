//! The rows the store reads and the writes it applies, as plain data shared with the pool
//! engine, the server and the CLI.

use std::borrow::Borrow;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::time::Instant;

use super::{fmt_time, pairs};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::health::blame::Blame;
use crate::health::{Health, Phase, Reason, State};
use crate::protocol::EndpointView;
use crate::tags::Tags;

/// A stored endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    pub id: EndpointId,
    /// URL with credentials.
    pub url: ProxyUrl,
    pub pool: String,
    /// Operator label.
    pub label: Option<String>,
    /// Who added it: `cli`, `config`, `source:NAME`.
    pub source: Option<String>,
    /// Health state.
    pub state: State,
    /// Last reason.
    pub reason: Option<Reason>,
    /// Last phase.
    pub phase: Option<Phase>,
    /// Last detail.
    pub detail: Option<String>,
    /// Consecutive failures.
    pub streak: u32,
    /// Consecutive failures of `reason`.
    pub reason_streak: u32,
    /// Length of the current/last cooldown.
    pub cooldown_ms: Option<u64>,
    /// The stored end of the cooldown, as shown (the database's clock).
    pub cooldown_until: Option<SystemTime>,
    /// What is left of a cooling endpoint's cooldown as the store read it:
    /// `clamp(cooldown_until − the store's now, 0, cooldown_ms)`.
    pub cooldown_left: Option<Duration>,
    /// The trial claimed in the database, when one is out (PostgreSQL; SQLite keeps claims
    /// in memory).
    pub claim: Option<RowClaim>,
    /// The change that last wrote the row (PostgreSQL's change sequence; 0 in SQLite).
    pub rev: i64,
    /// RFC 3339.
    pub state_changed_at: String,
    /// RFC 3339.
    pub created_at: String,
    /// `key=value` tags (docs/selection.md, "Tags").
    pub tags: Tags,
    /// The address it leaves from, when known (docs/exit.md).
    pub exit_ip: Option<std::net::IpAddr>,
    /// RFC 3339: when `exit_ip` was last learned.
    pub exit_seen_at: Option<String>,
}

impl EndpointRow {
    /// An available endpoint `id` at `url` in `pool`, never failed: the base that tests
    /// and benchmarks change the fields they are about in (panics on a bad URL).
    #[doc(hidden)]
    pub fn fixture(id: EndpointId, url: &str, pool: &str) -> EndpointRow {
        EndpointRow::fixture_of(id, ProxyUrl::parse(url).unwrap(), pool)
    }

    /// [`EndpointRow::fixture`] of a parsed URL: no label, source, claim or times.
    pub fn fixture_of(id: EndpointId, url: ProxyUrl, pool: &str) -> EndpointRow {
        EndpointRow {
            id,
            url,
            pool: pool.into(),
            label: None,
            source: None,
            state: State::Available,
            reason: None,
            phase: None,
            detail: None,
            streak: 0,
            reason_streak: 0,
            cooldown_ms: None,
            cooldown_until: None,
            cooldown_left: None,
            claim: None,
            rev: 0,
            state_changed_at: String::new(),
            created_at: String::new(),
            tags: Tags::default(),
            exit_ip: None,
            exit_seen_at: None,
        }
    }
}

/// A stored exit address: NULL is unknown, anything else must be an address.
pub(crate) fn read_exit_ip(v: Option<String>) -> Result<Option<std::net::IpAddr>, ()> {
    v.map(|t| t.parse().map_err(|_| ())).transpose()
}

/// A claim's fencing number: it grows with every claim of one trial slot, and a result is
/// applied only while its claim's epoch is the slot's current one.
pub type Epoch = i64;

/// A trial claimed in the database, as a row read shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowClaim {
    /// The slot's current epoch.
    pub epoch: Epoch,
    /// Time until the claim lapses by the database's clock (zero: lapsed).
    pub left: Duration,
}

impl EndpointRow {
    /// This row with health `h`; a cooling one's `cooldown_until` is `wall` plus the time
    /// left (a row made from memory, where the store's clock is not at hand).
    pub fn with_health(self, h: StoredHealth, wall: SystemTime) -> EndpointRow {
        EndpointRow {
            state: h.state,
            reason: h.reason,
            phase: h.phase,
            detail: h.detail,
            streak: h.streak,
            reason_streak: h.reason_streak,
            cooldown_ms: h.cooldown_ms,
            cooldown_until: h.cooldown_left.map(|l| wall + l),
            cooldown_left: h.cooldown_left,
            ..self
        }
    }

    /// JSON view; `secrets` keeps the password.
    pub fn view(&self, secrets: bool) -> EndpointView {
        EndpointView {
            id: self.id,
            url: if secrets {
                self.url.to_secret_string()
            } else {
                self.url.to_redacted_string()
            },
            pool: self.pool.clone(),
            label: self.label.clone(),
            source: self.source.clone(),
            state: self.state,
            reason: self.reason,
            phase: self.phase,
            detail: self.detail.clone(),
            streak: self.streak,
            cooldown_until: self.cooldown_until.map(fmt_time),
            cooldown_ms: self.cooldown_ms,
            state_changed_at: self.state_changed_at.clone(),
            created_at: self.created_at.clone(),
            tags: self.tags.clone(),
            stats: None,
            destination_state: None,
            slowed: None,
            exit_ip: self.exit_ip.map(|ip| ip.to_string()),
            exit_seen_at: self.exit_seen_at.clone(),
        }
    }
}

/// An endpoint to insert.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    pub url: ProxyUrl,
    pub pool: String,
    pub label: Option<String>,
    /// Who adds it.
    pub source: Option<String>,
    /// Initial state (depends on the pool mode).
    pub state: State,
    pub tags: Tags,
}

/// An event row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    /// Id (the order things happened).
    pub id: i64,
    /// RFC 3339 UTC.
    pub at: String,
    /// Kind, e.g. `state_changed`.
    pub kind: String,
    /// Endpoint id.
    pub endpoint: Option<EndpointId>,
    /// State before.
    pub from: Option<String>,
    /// State after.
    pub to: Option<String>,
    pub reason: Option<String>,
    pub phase: Option<String>,
    pub detail: Option<String>,
    /// Lease id.
    pub lease: Option<String>,
    /// The pair's destination; null for endpoint-scoped events (docs/destinations.md,
    /// "Events").
    #[serde(default)]
    pub destination: Option<String>,
    /// HTTP status the report carried.
    #[serde(default)]
    pub status: Option<u16>,
    /// Whom a failure counted against (`endpoint`, `pair`, `target`, `pending`).
    #[serde(default)]
    pub blame: Option<String>,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub endpoint: Option<EndpointId>,
    pub kind: EventKind,
    /// State before.
    pub from: Option<State>,
    /// State after.
    pub to: Option<State>,
    pub reason: Option<Reason>,
    pub phase: Option<Phase>,
    /// Detail (never a password).
    pub detail: Option<String>,
    /// Lease id.
    pub lease: Option<String>,
    /// Whom a failure counted against.
    pub blame: Option<Blame>,
}

impl NewEvent {
    /// An event of `kind` about nothing in particular yet; fill in with struct update.
    pub fn new(kind: EventKind) -> NewEvent {
        NewEvent {
            endpoint: None,
            kind,
            from: None,
            to: None,
            reason: None,
            phase: None,
            detail: None,
            lease: None,
            blame: None,
        }
    }
}

/// A health machine as stored: an endpoint's transition (`HealthRecord`) and an
/// (endpoint, destination) pair's (`PairRecord`) carry the same fields.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredHealth {
    pub state: State,
    pub reason: Option<Reason>,
    pub phase: Option<Phase>,
    /// Never a password.
    pub detail: Option<String>,
    pub streak: u32,
    /// Same-reason streak.
    pub reason_streak: u32,
    /// Cooldown length.
    pub cooldown_ms: Option<u64>,
    /// Time left of a cooling one's cooldown: when the transition happened (a write; the
    /// store turns it into a deadline by its own clock), or, for a pair, as the store read
    /// it.
    pub cooldown_left: Option<Duration>,
}

impl StoredHealth {
    /// `h` as it is to be stored at `now`.
    pub fn of(h: &Health, now: Instant) -> StoredHealth {
        StoredHealth {
            state: h.state,
            reason: h.reason,
            phase: h.phase,
            detail: h.detail.clone(),
            streak: h.streak,
            reason_streak: h.reason_streak,
            cooldown_ms: h.cooldown.map(|d| d.as_millis() as u64),
            cooldown_left: h.cooldown_left(now),
        }
    }
}

/// The persisted health of an endpoint after a transition.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthRecord {
    /// Endpoint.
    pub id: EndpointId,
    /// The state the transition starts from: a store shared by several daemons applies it
    /// only while the row is still in it (docs/fleet.md, "Ownership").
    pub from: State,
    /// The claim whose outcome this transition is, when it decides a trial: applied only
    /// while that claim is the slot's current one.
    pub trial: Option<Epoch>,
    /// Its health after the transition.
    pub health: StoredHealth,
}

/// Whose trial a claim is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClaimOn {
    /// An endpoint's single recovery attempt.
    Endpoint(EndpointId),
    /// An (endpoint, destination) pair's.
    Pair(EndpointId, String),
}

impl ClaimOn {
    /// The endpoint the trial goes through.
    pub fn endpoint(&self) -> EndpointId {
        match self {
            ClaimOn::Endpoint(id) | ClaimOn::Pair(id, _) => *id,
        }
    }
}

/// A trial claimed in memory, to be confirmed by the store: of any number of daemons
/// claiming one slot at once, exactly one wins (docs/fleet.md, "Ownership").
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub on: ClaimOn,
    /// How long the claim holds unless renewed: it lapses by the store's clock.
    pub hold: Duration,
    /// The `trial_admitted` event, written only when the claim is won.
    pub event: NewEvent,
}

/// A claimed trial given back without an outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Unclaim {
    pub on: ClaimOn,
    /// The claim given back (nothing happens when the slot was claimed again since).
    pub epoch: Epoch,
    /// The `trial_abandoned` event.
    pub event: NewEvent,
}

/// What the store says of one claim.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimResult {
    /// Confirmed: the trial is this caller's, under `epoch`.
    Won { on: ClaimOn, epoch: Epoch },
    /// Another daemon holds it, for `left` more (zero: not claimable, e.g. the state moved
    /// on).
    Lost { on: ClaimOn, left: Duration },
}

/// A row as the store holds it after a write found it changed elsewhere: memory follows it.
#[derive(Debug, Clone, PartialEq)]
pub enum RowNow {
    /// An endpoint's row (None: removed).
    Endpoint(EndpointId, Option<Box<EndpointRow>>),
    /// A pair's row (None: no row, the pair is available).
    Pair(EndpointId, String, Option<Box<pairs::PairRow>>),
}

/// What one committed batch of writes did besides being durable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// The results of its claims, in order.
    pub claims: Vec<ClaimResult>,
    /// Rows a guarded write found changed by someone else: the write did not happen, and
    /// here is what the row holds instead.
    pub fresh: Vec<RowNow>,
    /// The endpoint rows it wrote, each with the change the row carried before this write
    /// (PostgreSQL): a daemon whose memory has not seen that change reads the row again,
    /// since this write may have waited for another writer's change of columns it does not
    /// write, and the row now carries that change under this write's number.
    pub before: Vec<(EndpointId, i64)>,
    /// The change number the commit gave the rows it wrote (PostgreSQL; 0 in SQLite).
    pub seq: i64,
}

impl Applied {
    /// What one daemon's commit of `g` does besides being durable: its claims are won
    /// (memory is the only claimant), and nothing was changed elsewhere. Known before the
    /// commit, so a caller that only claims need not wait for it.
    pub fn one_daemon(g: &[Write]) -> Applied {
        let claims = g
            .iter()
            .filter_map(|w| match w {
                Write::Claim(c) | Write::Pair(pairs::PairWrite::Claim(c)) => {
                    Some(ClaimResult::Won {
                        on: c.on.clone(),
                        epoch: 0,
                    })
                }
                _ => None,
            })
            .collect();
        Applied {
            claims,
            fresh: Vec::new(),
            before: Vec::new(),
            seq: 0,
        }
    }
}

/// One durable write; a batch of them commits atomically.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Update an endpoint's health and append its event.
    Transition(HealthRecord, NewEvent),
    /// Append an event only.
    Event(NewEvent),
    /// Delete endpoints (the only deletion), with a `removed` event each.
    Remove(Vec<EndpointId>),
    /// Per-destination health (docs/destinations.md, "Pairs"): a pair transition or event.
    Pair(pairs::PairWrite),
    /// An endpoint-scoped event that carries the HTTP status of its report.
    EventStatus(NewEvent, Option<u16>),
    /// Confirm a trial claimed in memory.
    Claim(Claim),
    /// Give a claimed trial back.
    Unclaim(Unclaim),
    /// An endpoint's exit address learned (`None`: unknown now), seen at the store's now.
    Exit {
        id: EndpointId,
        ip: Option<std::net::IpAddr>,
    },
    /// Record a source's last sniff.
    SourceResult {
        pool: String,
        /// Source name.
        name: String,
        /// Succeeded.
        ok: bool,
        /// Why / what.
        detail: Option<String>,
        /// Endpoints returned.
        count: Option<usize>,
    },
}

/// The last sniff of a source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceRow {
    pub pool: String,
    /// Source name.
    pub name: String,
    /// RFC 3339 of the last sniff.
    pub last_at: Option<String>,
    /// Whether it succeeded.
    pub last_ok: Option<bool>,
    /// Why it failed, or a summary.
    pub last_detail: Option<String>,
    /// How many endpoints it returned.
    pub last_count: Option<i64>,
}

/// What an edit changed, for its event: never a password.
pub(crate) fn edit_detail(
    old: &EndpointRow,
    url: &ProxyUrl,
    label: Option<&str>,
    tags: &crate::tags::Tags,
) -> String {
    let mut parts = Vec::new();
    let (was, now) = (old.url.to_redacted_string(), url.to_redacted_string());
    if was != now {
        parts.push(format!("url {was} -> {now}"));
    }
    if old.url.password != url.password {
        parts.push("password changed".to_string());
    }
    if old.label.as_deref() != label {
        let show = |l: Option<&str>| l.map(|l| format!("{l:?}")).unwrap_or("none".into());
        parts.push(format!(
            "label {} -> {}",
            show(old.label.as_deref()),
            show(label)
        ));
    }
    if &old.tags != tags {
        let show = |t: &crate::tags::Tags| {
            if t.is_empty() {
                "none".to_string()
            } else {
                t.to_string()
            }
        };
        parts.push(format!("tags {} -> {}", show(&old.tags), show(tags)));
    }
    if parts.is_empty() {
        "nothing changed".to_string()
    } else {
        parts.join("; ")
    }
}

/// What a batch does with an endpoint that is already stored, or listed earlier in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnExisting {
    /// The whole batch is refused, naming the first one (`add`, `import`).
    #[default]
    Refuse,
    /// It is left as it is and counted (`import --skip-existing`).
    Skip,
}

/// A row to insert. An import's rows know the line of the file they came from, so that an
/// error names it.
pub trait ToInsert: Borrow<NewEndpoint> {
    /// The line of the import file, when there is one.
    fn line(&self) -> Option<usize> {
        None
    }
}

impl ToInsert for NewEndpoint {}
impl ToInsert for &NewEndpoint {}

/// An endpoint read from line `line` of an import file.
#[derive(Debug, Clone)]
pub struct Numbered {
    pub line: usize,
    pub endpoint: NewEndpoint,
}

impl Borrow<NewEndpoint> for Numbered {
    fn borrow(&self) -> &NewEndpoint {
        &self.endpoint
    }
}

impl ToInsert for Numbered {
    fn line(&self) -> Option<usize> {
        Some(self.line)
    }
}
