//! "The same rows, bare": the floor of storing what the daemon stores for lease + failure
//! report pairs. A traced daemon's store connection logs every statement it runs (SQLite's
//! own statement trace, with the values bound); one of its commits that answered 8 reports
//! is taken as it was run, and one thread replays it on a plain connection to a database
//! made by the project's `Store` (the real migrations and pragmas), with cached
//! statements, each transaction on fresh random endpoints of a 10,000-endpoint pool.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proxypool::config::Durability;
use proxypool::store::Store;
use rusqlite::types::Value;
use rusqlite::{ffi, Connection};

static RECORDING: AtomicBool = AtomicBool::new(false);
/// (statement as written, statement with its bound values) of each statement a traced
/// connection ran while recording.
static LOG: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

unsafe extern "C" fn on_statement(
    _mask: c_uint,
    _ctx: *mut c_void,
    stmt: *mut c_void,
    sql: *mut c_void,
) -> c_int {
    if !RECORDING.load(Ordering::Relaxed) {
        return 0;
    }
    // SAFETY: for SQLITE_TRACE_STMT, `stmt` is the statement being run and `sql` its
    // unexpanded text, both valid for the duration of the callback.
    let (template, expanded) = unsafe {
        let template = CStr::from_ptr(sql as *const c_char)
            .to_string_lossy()
            .into_owned();
        let e = ffi::sqlite3_expanded_sql(stmt as *mut ffi::sqlite3_stmt);
        let expanded = if e.is_null() {
            template.clone()
        } else {
            let s = CStr::from_ptr(e).to_string_lossy().into_owned();
            ffi::sqlite3_free(e as *mut c_void);
            s
        };
        (template, expanded)
    };
    LOG.lock().unwrap().push((template, expanded));
    0
}

/// Installs the statement trace on `db`.
///
/// # Safety
/// `db` is an open connection.
unsafe fn trace(db: *mut ffi::sqlite3) -> c_int {
    unsafe {
        ffi::sqlite3_trace_v2(
            db,
            ffi::SQLITE_TRACE_STMT as c_uint,
            Some(on_statement),
            std::ptr::null_mut(),
        )
    }
}

unsafe extern "C" fn trace_new_connection(
    db: *mut ffi::sqlite3,
    _err: *mut *mut c_char,
    _api: *const ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: SQLite calls an auto extension with the connection it just opened.
    unsafe { trace(db) }
}

/// Runs `open` with every connection it opens traced (the trace logs only while
/// recording); connections opened later are not.
pub fn traced<T>(open: impl FnOnce() -> T) -> T {
    // SAFETY: the extension opens no database, closes none and leaves the list alone.
    unsafe { rusqlite::auto_extension::register_auto_extension(trace_new_connection) }
        .expect("register the trace");
    let out = open();
    rusqlite::auto_extension::cancel_auto_extension(trace_new_connection);
    out
}

/// The statements traced connections run during `f`, in order.
pub fn record(f: impl FnOnce()) -> Vec<(String, String)> {
    LOG.lock().unwrap().clear();
    RECORDING.store(true, Ordering::SeqCst);
    f();
    RECORDING.store(false, Ordering::SeqCst);
    std::mem::take(&mut *LOG.lock().unwrap())
}

/// The values bound to `template`'s `?N` parameters, read back from SQLite's expanded text.
fn bound_values(template: &str, expanded: &str) -> Vec<(usize, Value)> {
    let (t, e) = (template.as_bytes(), expanded.as_bytes());
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < t.len() {
        if t[i] == b'?' {
            let start = i + 1;
            i = start;
            while i < t.len() && t[i].is_ascii_digit() {
                i += 1;
            }
            let n = template[start..i].parse().expect("numbered parameters");
            let (v, len) = literal(&expanded[j..]);
            out.push((n, v));
            j += len;
        } else {
            assert_eq!(t[i], e[j], "expanded text off its statement: {expanded}");
            i += 1;
            j += 1;
        }
    }
    out
}

/// The SQL literal at the start of `s` (as `sqlite3_expanded_sql` writes one) and its length.
fn literal(s: &str) -> (Value, usize) {
    if s.starts_with("NULL") {
        return (Value::Null, 4);
    }
    if let Some(rest) = s.strip_prefix('\'') {
        let mut text = String::new();
        let mut chars = rest.char_indices().peekable();
        while let Some((k, c)) = chars.next() {
            if c != '\'' {
                text.push(c);
            } else if chars.peek().is_some_and(|&(_, c)| c == '\'') {
                text.push('\'');
                chars.next();
            } else {
                return (Value::Text(text), k + 2);
            }
        }
        panic!("unterminated text literal in {s}");
    }
    let len = s
        .find(|c: char| !(c.is_ascii_digit() || "-+.eE".contains(c)))
        .unwrap_or(s.len());
    let n = &s[..len];
    let v = n
        .parse()
        .map(Value::Integer)
        .unwrap_or_else(|_| Value::Real(n.parse().unwrap_or_else(|_| panic!("a number at {s}"))));
    (v, len)
}

/// One statement of a commit: the transaction's own, or a row written.
#[derive(Clone)]
pub enum Step {
    Control(String),
    Write {
        sql: String,
        values: Vec<(usize, Value)>,
        /// The parameter holding the endpoint id, and which of the commit's endpoints it is.
        endpoint: Option<(usize, usize)>,
        /// What it writes, for the composition line: "event report", "endpoint row".
        what: String,
    },
}

/// The parameter that names the endpoint in the store's writes, and what the write is.
fn write_kind(sql: &str, values: &[(usize, Value)]) -> (usize, String) {
    let text = |n: usize| match values.iter().find(|(i, _)| *i == n) {
        Some((_, Value::Text(t))) => t.clone(),
        _ => "?".into(),
    };
    if sql.starts_with("UPDATE endpoints SET state=?2") && sql.ends_with("WHERE id=?1") {
        (1, format!("endpoint row -> {}", text(2)))
    } else if sql.starts_with("INSERT INTO events (at, endpoint, kind,") {
        (2, format!("event {}", text(3)))
    } else if sql.starts_with("UPDATE endpoints SET last_event = ?1 WHERE id = ?2") {
        // The head of the endpoint's chain of events: the replay writes the traced event
        // id, a value of the same size in the same row.
        (2, "endpoint's newest event".into())
    } else {
        panic!("the store ran a write this bench does not know how to replay: {sql}")
    }
}

/// The traced statements split into commits (BEGIN .. COMMIT).
fn commits(log: &[(String, String)]) -> (Vec<Vec<Step>>, Vec<Vec<i64>>) {
    let (mut out, mut cur): (Vec<Vec<Step>>, Option<Vec<Step>>) = (Vec::new(), None);
    let mut ids: HashMap<i64, usize> = HashMap::new();
    let mut seen: Vec<Vec<i64>> = Vec::new();
    for (sql, expanded) in log {
        let head = sql.split_whitespace().next().unwrap_or("").to_uppercase();
        match head.as_str() {
            "BEGIN" => {
                ids.clear();
                cur = Some(vec![Step::Control(sql.clone())]);
            }
            "COMMIT" | "END" => {
                if let Some(mut c) = cur.take() {
                    c.push(Step::Control(sql.clone()));
                    out.push(c);
                    let mut by_slot: Vec<(usize, i64)> =
                        ids.iter().map(|(&id, &s)| (s, id)).collect();
                    by_slot.sort();
                    seen.push(by_slot.into_iter().map(|(_, id)| id).collect());
                }
            }
            "ROLLBACK" => cur = None,
            "SAVEPOINT" | "RELEASE" => {
                if let Some(c) = cur.as_mut() {
                    c.push(Step::Control(sql.clone()));
                }
            }
            _ => {
                let Some(c) = cur.as_mut() else { continue };
                let values = bound_values(sql, expanded);
                let (param, what) = write_kind(sql, &values);
                let endpoint = match values.iter().find(|(i, _)| *i == param) {
                    Some((_, Value::Integer(id))) => {
                        let next = ids.len();
                        Some((param, *ids.entry(*id).or_insert(next)))
                    }
                    _ => None,
                };
                c.push(Step::Write {
                    sql: sql.clone(),
                    values,
                    endpoint,
                    what,
                });
            }
        }
    }
    (out, seen)
}

/// What a commit writes: savepoints, rows by kind, endpoints touched.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Composition {
    savepoints: usize,
    writes: BTreeMap<String, usize>,
    endpoints: usize,
}

impl Composition {
    fn of(steps: &[Step]) -> Composition {
        let mut c = Composition {
            savepoints: 0,
            writes: BTreeMap::new(),
            endpoints: 0,
        };
        for s in steps {
            match s {
                Step::Control(sql) if sql.to_uppercase().starts_with("SAVEPOINT") => {
                    c.savepoints += 1;
                }
                Step::Control(_) => {}
                Step::Write { what, endpoint, .. } => {
                    *c.writes.entry(what.clone()).or_default() += 1;
                    c.endpoints = c.endpoints.max(endpoint.map_or(0, |(_, e)| e + 1));
                }
            }
        }
        c
    }

    fn reports(&self) -> usize {
        self.writes.get("event report").copied().unwrap_or(0)
    }

    pub fn text(&self) -> String {
        let rows: usize = self.writes.values().sum();
        let each: Vec<String> = self
            .writes
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        format!(
            "{rows} rows written ({}), {} savepoints, {} distinct endpoints",
            each.join(", "),
            self.savepoints,
            self.endpoints
        )
    }
}

/// A daemon commit that answered `pairs` reports, to replay.
pub struct Commit {
    steps: Vec<Step>,
    endpoints: usize,
    pub composition: Composition,
    /// Traced commits, and those that answered `pairs` reports.
    pub traced: usize,
    pub full: usize,
    /// How many of the full ones wrote exactly this.
    pub alike: usize,
    /// Over the full ones: rows written and endpoints touched per commit.
    pub mean_rows: f64,
    pub mean_endpoints: f64,
    /// The endpoints this one touched, in the order it first wrote them.
    pub ids: Vec<i64>,
    /// The reports each of the commits of this kind answered.
    pub pairs: usize,
    /// Every traced commit that answered `pairs` reports, in order, as run.
    stream: Vec<Vec<Step>>,
}

/// A typical traced commit with `pairs` reports: of the compositions nearest the mean
/// rows and endpoints of those commits, the most common. (How the rides fall makes the
/// most common composition alone untypical: a commit without cooldown ends, say.)
pub fn pick(log: &[(String, String)], pairs: usize) -> Commit {
    let (all, ids) = commits(log);
    let full: Vec<(Composition, &Vec<Step>, &Vec<i64>)> = all
        .iter()
        .zip(&ids)
        .map(|(c, ids)| (Composition::of(c), c, ids))
        .filter(|(k, _, _)| k.reports() == pairs)
        .collect();
    let mut counts: BTreeMap<&Composition, usize> = BTreeMap::new();
    for (k, _, _) in &full {
        *counts.entry(k).or_default() += 1;
    }
    let n = full.len().max(1) as f64;
    let rows = |k: &Composition| k.writes.values().sum::<usize>() as f64;
    let mean_rows = full.iter().map(|(k, _, _)| rows(k)).sum::<f64>() / n;
    let mean_endpoints = full.iter().map(|(k, _, _)| k.endpoints as f64).sum::<f64>() / n;
    let off_mean = |k: &Composition| {
        (rows(k) - mean_rows.round()).abs() + (k.endpoints as f64 - mean_endpoints.round()).abs()
    };
    let (&best, &alike) = counts
        .iter()
        .min_by(|a, b| off_mean(a.0).total_cmp(&off_mean(b.0)).then(b.1.cmp(a.1)))
        .unwrap_or_else(|| panic!("no traced commit answered {pairs} reports"));
    let (_, steps, ids) = full.iter().find(|(k, _, _)| k == best).unwrap();
    Commit {
        mean_rows,
        mean_endpoints,
        ids: (*ids).clone(),
        pairs,
        steps: (*steps).clone(),
        stream: full.iter().map(|(_, c, _)| (*c).clone()).collect(),
        endpoints: best.endpoints,
        composition: best.clone(),
        traced: all.len(),
        full: full.len(),
        alike,
    }
}

impl Commit {
    /// The rows of every traced commit of this kind, in order, cut into one share per
    /// pair it answered (the transaction's own statements left out): what each caller of
    /// such a commit brought, near enough (the rows that rode along spread over them).
    pub fn shares(&self) -> Vec<Vec<Step>> {
        let mut out = Vec::new();
        for c in &self.stream {
            let rows: Vec<Step> = c
                .iter()
                .filter(|s| matches!(s, Step::Write { .. }))
                .cloned()
                .collect();
            // Exactly `pairs` shares, so that a group of `pairs` reports writes one
            // traced commit's rows.
            let parts = self.pairs.max(1);
            out.extend(
                (0..parts)
                    .map(|i| rows[i * rows.len() / parts..(i + 1) * rows.len() / parts].to_vec()),
            );
        }
        out
    }
}

/// A database made by the project's store with `n` endpoints, and a plain connection on it
/// with the store's pragmas.
pub struct Bare {
    conn: Connection,
    ids: Vec<i64>,
    rng: fastrand::Rng,
    /// How long each transaction replayed on random endpoints took.
    took_random: Vec<Duration>,
    /// How long each transaction replayed as traced took.
    took_traced: Vec<Duration>,
}

/// A spread of transaction times.
pub struct Spread {
    pub count: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
    pub mean: Duration,
}

impl Spread {
    fn of(mut v: Vec<Duration>) -> Spread {
        v.sort();
        let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize];
        Spread {
            count: v.len(),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: q(1.0),
            mean: v.iter().sum::<Duration>() / v.len() as u32,
        }
    }

    pub fn text(&self) -> String {
        let us = |d: Duration| d.as_micros();
        format!(
            "p50 {} µs, p90 {} µs, p99 {} µs, p99.9 {} µs, max {} µs, mean {} µs ({} transactions)",
            us(self.p50),
            us(self.p90),
            us(self.p99),
            us(self.p999),
            us(self.max),
            us(self.mean),
            self.count
        )
    }
}

impl Bare {
    /// A store made at `dir`/`file` (a name not used before), filled with `n` endpoints.
    pub fn open(dir: &Path, file: &str, n: usize) -> Bare {
        let path = dir.join(file);
        let ids = {
            let mut store = Store::open_with(&path, Durability::Full).unwrap();
            let eps = super::support::endpoints(n, "socks5h", 1080);
            store.add_endpoints(&eps).unwrap()
        };
        let conn = Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        conn.set_prepared_statement_cache_capacity(64);
        Bare {
            conn,
            ids,
            rng: fastrand::Rng::with_seed(25),
            took_random: Vec::new(),
            took_traced: Vec::new(),
        }
    }

    /// The times of the transactions replayed since the last call (or `forget_times`),
    /// on random endpoints and as traced. Both rows must have run.
    pub fn spreads(&mut self) -> [Spread; 2] {
        [&mut self.took_random, &mut self.took_traced].map(|v| Spread::of(std::mem::take(v)))
    }

    pub fn forget_times(&mut self) {
        self.took_random.clear();
        self.took_traced.clear();
    }

    /// One transaction writing what `c` wrote, on random endpoints of the pool.
    fn commit(&mut self, c: &Commit) {
        let mut picked: Vec<i64> = Vec::with_capacity(c.endpoints);
        while picked.len() < c.endpoints {
            let id = self.ids[self.rng.usize(..self.ids.len())];
            if !picked.contains(&id) {
                picked.push(id);
            }
        }
        let t = Instant::now();
        self.replay(&c.steps, Some(&picked));
        self.took_random.push(t.elapsed());
    }

    /// Runs `steps`, each endpoint id replaced by the one of `ids` in its slot, or as they
    /// were.
    fn replay(&self, steps: &[Step], ids: Option<&[i64]>) {
        for s in steps {
            match s {
                Step::Control(sql) => self.control(sql),
                Step::Write {
                    sql,
                    values,
                    endpoint,
                    ..
                } => {
                    let mut st = self.conn.prepare_cached(sql).unwrap();
                    for (i, v) in values {
                        let v = match (endpoint, ids) {
                            (Some((p, e)), Some(ids)) if p == i => Value::Integer(ids[*e]),
                            _ => v.clone(),
                        };
                        st.raw_bind_parameter(*i, v).unwrap();
                    }
                    assert_eq!(st.raw_execute().unwrap(), 1, "one row written: {sql}");
                }
            }
        }
    }

    /// A write transaction left open for [`Bare::write`]s to come (the replay's own
    /// transactions are in the traced steps).
    pub fn begin(&self) {
        self.control("BEGIN IMMEDIATE");
    }

    /// Writes `rows` (a share of a traced commit) in the open transaction.
    pub fn write(&self, rows: &[Step]) {
        self.replay(rows, None);
    }

    pub fn commit_open(&self) {
        self.control("COMMIT");
    }

    /// A statement of the transaction's own (BEGIN, COMMIT, SAVEPOINT ...).
    fn control(&self, sql: &str) {
        self.conn.prepare_cached(sql).unwrap().execute([]).unwrap();
    }

    /// What one replayed transaction writes, traced as the daemon's were.
    pub fn check(&mut self, c: &Commit) -> Composition {
        // SAFETY: the connection is open; the trace is removed again below.
        unsafe { trace(self.conn.handle()) };
        let log = record(|| self.commit(c));
        // SAFETY: as above; no callback removes the trace.
        unsafe { ffi::sqlite3_trace_v2(self.conn.handle(), 0, None, std::ptr::null_mut()) };
        Composition::of(&commits(&log).0[0])
    }

    /// Replays `c` for `run`; pairs/s (`pairs` per transaction).
    pub fn run(&mut self, c: &Commit, pairs: usize, run: Duration) -> f64 {
        let (start, mut n) = (Instant::now(), 0u64);
        while start.elapsed() < run {
            self.commit(c);
            n += 1;
        }
        (n * pairs as u64) as f64 / start.elapsed().as_secs_f64()
    }

    /// Replays the traced commits of `c`'s kind in order, endpoints as they were, for
    /// `run` (from the start again when they run out); pairs/s.
    pub fn run_as_traced(&mut self, c: &Commit, pairs: usize, run: Duration) -> f64 {
        let (start, mut n) = (Instant::now(), 0u64);
        for steps in c.stream.iter().cycle() {
            if start.elapsed() >= run {
                break;
            }
            let t = Instant::now();
            self.replay(steps, None);
            self.took_traced.push(t.elapsed());
            n += 1;
        }
        (n * pairs as u64) as f64 / start.elapsed().as_secs_f64()
    }
}
