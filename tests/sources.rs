//! Sniffing pools on the engine level: an `Engine` over a temp SQLite store, sources that
//! are real files, real commands and a real local HTTP server, `sources::sniff` /
//! `sources::reconcile` called directly, and the exact event trail read back from the store.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use proxypool::config::{Config, PoolConfig};
use proxypool::endpoint::{EndpointId, ProxyUrl};
use proxypool::health::{Input, Reason, State};
use proxypool::pool::engine::Engine;
use proxypool::pool::{Outcome, PoolError};
use proxypool::sources::{self, Trigger, EXHAUSTION_BACKOFF};
use proxypool::store::{EndpointRow, EventRow, Store};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use common::fakes::{dest, Answer, DestCfg, Fake};

const POOL: &str = "sn";
const TTL: Duration = Duration::from_secs(60);

/// A sniffing pool `sn` (1 h cooldowns, no jitter) with the given `[[pool.source]]` tables.
fn config_text(sources: &str) -> String {
    format!(
        r#"
[[pool]]
name = "{POOL}"
mode = "sniffing"

[pool.probe]
url = "http://127.0.0.1:9/"
interval = "0s"

[pool.cooldown]
base = "1h"
factor = 1.0
max = "1h"
jitter = 0.0
{sources}
"#
    )
}

struct Fx {
    dir: TempDir,
    engine: Arc<Engine>,
    pool: PoolConfig,
    audited: i64,
}

impl Fx {
    /// A fresh store and engine; `sources` may use `{dir}` for the temp folder.
    fn new(sources: &str) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let sources = sources.replace("{dir}", &dir.path().display().to_string());
        let cfg = Config::parse(&config_text(&sources), "test.toml", Some(dir.path()))
            .unwrap_or_else(|e| panic!("config: {e}"));
        let pool = cfg.pool(POOL).unwrap().clone();
        let store = Store::open(&dir.path().join("pp.db")).unwrap();
        let engine = Engine::open(store, cfg.pools.values().cloned()).unwrap();
        Fx {
            dir,
            engine,
            pool,
            audited: 0,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    async fn sniff(&self, trigger: Trigger) -> Option<sources::Sniffed> {
        sources::sniff(&self.engine, &self.pool, trigger)
            .await
            .unwrap()
    }

    /// Every event row written since the last call.
    async fn new_events(&mut self) -> Vec<EventRow> {
        let after = self.audited;
        let rows = self.engine.events(None, after, 100_000).await.unwrap();
        if let Some(l) = rows.last() {
            self.audited = l.id;
        }
        rows
    }

    /// The kinds of the events written since the last audit.
    async fn kinds(&mut self) -> Vec<String> {
        self.new_events()
            .await
            .into_iter()
            .map(|e| e.kind)
            .collect()
    }

    async fn all_events(&self) -> Vec<EventRow> {
        self.engine.events(None, 0, 100_000).await.unwrap()
    }

    /// Every stored endpoint row, in id order.
    /// The stored rows, less what is left of a cooldown (it runs on between two reads;
    /// the stored deadline stays).
    async fn rows(&self) -> Vec<EndpointRow> {
        let mut rows = self.engine.rows(None, None).await.unwrap();
        for r in &mut rows {
            r.cooldown_left = None;
        }
        rows
    }

    async fn id_of(&self, url: &str) -> EndpointId {
        let u = ProxyUrl::parse(url).unwrap();
        self.rows()
            .await
            .into_iter()
            .find(|r| r.url == u)
            .unwrap_or_else(|| panic!("{url} not stored"))
            .id
    }

    async fn row(&self, id: EndpointId) -> EndpointRow {
        self.engine.row(id).await.unwrap().unwrap()
    }

    fn state(&self, id: EndpointId) -> State {
        self.engine.health(id).unwrap().state
    }

    /// One successful recovery probe, as the prober makes it.
    async fn probe_ok(&self, id: EndpointId) {
        assert!(self.engine.try_claim(id).await.unwrap(), "claim {id}");
        let st = self
            .engine
            .probe_result(id, Outcome::Success, true, None)
            .await
            .unwrap();
        assert_eq!(st, State::Available, "endpoint {id}");
    }

    /// Operator disable.
    async fn disable(&self, id: EndpointId) {
        self.engine
            .input(id, Input::Disable { detail: None }, None, Some("op".into()))
            .await
            .unwrap();
    }

    /// Probe every `probe_allowed` endpoint successfully.
    async fn probe_all(&self) {
        let all = self.engine.ids(Some(POOL));
        let ids: Vec<EndpointId> = all
            .into_iter()
            .filter(|id| self.state(*id) == State::ProbeAllowed)
            .collect();
        for id in ids {
            self.probe_ok(id).await;
        }
    }

    /// Hold `n` leases at once (spreads over the least-leased endpoints), then release
    /// them; returns the endpoints leased.
    async fn leased(&self, n: usize) -> BTreeSet<EndpointId> {
        let mut grants = Vec::new();
        for _ in 0..n {
            let g = self
                .engine
                .lease(POOL, TTL, None, Duration::ZERO)
                .await
                .unwrap();
            assert!(!g.trial, "sniffing pools never hand out trials: {g:?}");
            grants.push(g);
        }
        for g in &grants {
            self.engine.release(&g.lease).await.unwrap();
        }
        grants.iter().map(|g| g.endpoint).collect()
    }

    async fn sniff_kinds(&self) -> Vec<String> {
        self.all_events()
            .await
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| k.starts_with("sniff_"))
            .collect()
    }
}

/// Write a list atomically (a reader never sees half a file).
fn write_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn write_list(path: &Path, urls: &[&str]) {
    let mut s = String::from("# provider list\n");
    for u in urls {
        s.push_str(u);
        s.push('\n');
    }
    write_file(path, &s);
}

/// (kind, endpoint, to, reason) of one event.
type Trail<'a> = (&'a str, Option<i64>, Option<&'a str>, Option<&'a str>);

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn file_source(path: &Path, extra: &str) -> String {
    format!(
        "\n[[pool.source]]\nkind = \"file\"\npath = \"{}\"\n{extra}\n",
        path.display()
    )
}

fn command_source(argv: &[&str], extra: &str) -> String {
    let a: Vec<String> = argv.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "\n[[pool.source]]\nkind = \"command\"\ncommand = [{}]\n{extra}\n",
        a.join(", ")
    )
}

/// A list server (a destination fake) whose answer can be changed; counts requests.
struct ListServer {
    fake: Fake,
    answer: Answer,
}

impl ListServer {
    async fn start(status: u16, body: &str) -> ListServer {
        let answer = Answer::new(status, body);
        let fake = dest(DestCfg {
            answer: Some(answer.clone()),
            headers: vec![("Content-Type".into(), "text/plain".into())],
            ..DestCfg::default()
        })
        .await;
        ListServer { fake, answer }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/proxies.txt", self.fake.port())
    }

    fn set(&self, status: u16, body: &str) {
        self.answer.set(status, body);
    }

    fn hits(&self) -> usize {
        self.fake.seen().len()
    }
}

// ---------------------------------------------------------------------------------------
// Startup: fallback in order, first success wins, once.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn startup_sniff_falls_back_across_failing_sources_and_the_first_success_wins() {
    let dir_probe = tempfile::tempdir().unwrap();
    let good = dir_probe.path().join("good.txt");
    write_list(
        &good,
        &["http://10.7.0.1:3128", "socks5://u:pw@10.7.0.2:1080"],
    );
    let missing = dir_probe.path().join("missing.txt");
    let srcs = format!(
        "{}{}{}",
        command_source(&["false"], "refresh = \"0s\""),
        file_source(&missing, "refresh = \"0s\""),
        file_source(&good, "refresh = \"0s\""),
    );
    let mut fx = Fx::new(&srcs);
    let names: Vec<String> = fx.pool.sources.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        vec![
            "command:false".to_string(),
            format!("file:{}", missing.display()),
            format!("file:{}", good.display()),
        ]
    );

    let s = fx.sniff(Trigger::Startup).await.expect("source 3 works");
    assert_eq!((s.listed, s.added, s.removed, s.returned), (2, 2, 0, 0));
    assert_eq!(s.source, names[2]);

    let ev = fx.new_events().await;
    let kinds: Vec<&str> = ev.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec![
            "sniff_on_startup",
            "sniff_failure",
            "sniff_failure",
            "added",
            "added",
            "sniff_success"
        ]
    );
    let detail = |i: usize| ev[i].detail.clone().unwrap_or_default();
    assert!(detail(1).contains("command:false"), "{}", detail(1));
    assert!(detail(2).contains(&names[1]), "{}", detail(2));
    assert!(detail(5).contains(&names[2]), "{}", detail(5));
    assert!(detail(5).contains("2 endpoints"), "{}", detail(5));
    // Pool-level events name no endpoint; the added rows are probe_allowed.
    for i in [0, 1, 2, 5] {
        assert_eq!(ev[i].endpoint, None, "{:?}", ev[i]);
    }
    for e in &ev[3..5] {
        assert_eq!(e.to.as_deref(), Some("probe_allowed"), "{e:?}");
    }
    // The password never shows in events.
    assert!(ev.iter().all(|e| !format!("{e:?}").contains("pw@")));
    // The rows are tagged with the source that added them.
    let rows = fx.rows().await;
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(
            r.source.as_deref(),
            Some(format!("source:{}", names[2]).as_str())
        );
        assert_eq!(r.state, State::ProbeAllowed);
    }
    // `proxypool sources` data: each source's last result.
    let src_rows = fx.engine.sources(Some(POOL.into())).await.unwrap();
    let by_name = |n: &str| src_rows.iter().find(|r| r.name == n).unwrap().clone();
    assert_eq!(by_name(&names[0]).last_ok, Some(false));
    assert_eq!(by_name(&names[1]).last_ok, Some(false));
    assert_eq!(by_name(&names[2]).last_ok, Some(true));
    assert_eq!(by_name(&names[2]).last_count, Some(2));

    // Before a probe nothing is leasable (sniffing pools never lease a trial)...
    assert!(matches!(
        fx.engine.lease(POOL, TTL, None, Duration::ZERO).await,
        Err(proxypool::pool::engine::EngineError::Pool(
            PoolError::Exhausted { .. }
        ))
    ));
    // ...after one probe each, the first lease succeeds from the sniffed list.
    fx.probe_all().await;
    let ids: BTreeSet<_> = rows.iter().map(|r| r.id).collect();
    assert_eq!(fx.leased(4).await, ids);

    // Sniff happens once: the refresh/exhaustion loop never sniffs because of leases.
    let stop = CancellationToken::new();
    let task = tokio::spawn(sources::run_after_startup(
        fx.engine.clone(),
        fx.pool.clone(),
        stop.clone(),
    ));
    let startup = fx.sniff_kinds().await;
    let fx = &fx;
    common::holds_for_async(
        Duration::from_millis(1350),
        "no sniff while leasing",
        || {
            let startup = startup.clone();
            async move {
                fx.leased(2).await;
                let now = fx.sniff_kinds().await;
                if now == startup {
                    Ok(())
                } else {
                    Err(format!("{now:?}"))
                }
            }
        },
    )
    .await;
    stop.cancel();
    task.await.unwrap();
    assert_eq!(
        fx.sniff_kinds().await,
        strs(&[
            "sniff_on_startup",
            "sniff_failure",
            "sniff_failure",
            "sniff_success"
        ])
    );
}

// ---------------------------------------------------------------------------------------
// The sniffed list is what is used.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_refresh_with_a_different_list_replaces_the_startup_set() {
    let mut fx = Fx::new(&file_source(Path::new("{dir}/list.txt"), ""));
    let list = fx.path("list.txt");
    write_list(&list, &["http://10.8.0.1:80", "http://10.8.0.2:80"]);
    fx.sniff(Trigger::Startup).await.unwrap();
    fx.probe_all().await;
    let (a, b) = (
        fx.id_of("http://10.8.0.1:80").await,
        fx.id_of("http://10.8.0.2:80").await,
    );
    assert_eq!(fx.leased(4).await, BTreeSet::from([a, b]));
    fx.new_events().await;

    write_list(&list, &["http://10.8.0.3:80", "http://10.8.0.4:80"]);
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!((s.listed, s.added, s.removed, s.returned), (2, 2, 2, 0));
    let (c, d) = (
        fx.id_of("http://10.8.0.3:80").await,
        fx.id_of("http://10.8.0.4:80").await,
    );
    let ev = fx.new_events().await;
    let trail: Vec<Trail> = ev
        .iter()
        .map(|e| {
            (
                e.kind.as_str(),
                e.endpoint,
                e.to.as_deref(),
                e.reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        trail,
        vec![
            ("sniff_refresh", None, None, None),
            ("added", Some(c), Some("probe_allowed"), None),
            ("added", Some(d), Some("probe_allowed"), None),
            (
                "state_changed",
                Some(a),
                Some("disabled"),
                Some("source_removed")
            ),
            (
                "state_changed",
                Some(b),
                Some("disabled"),
                Some("source_removed")
            ),
            ("sniff_success", None, None, None),
        ]
    );
    // The old rows are kept, disabled with reason source_removed.
    let rows = fx.rows().await;
    assert_eq!(rows.len(), 4);
    for id in [a, b] {
        let r = fx.row(id).await;
        assert_eq!(
            (r.state, r.reason),
            (State::Disabled, Some(Reason::SourceRemoved))
        );
    }
    // The new ones are probe_allowed: nothing is leasable until they are probed...
    assert!(fx
        .engine
        .lease(POOL, TTL, None, Duration::ZERO)
        .await
        .is_err());
    // ...and after their probe they are the only ones leased.
    fx.probe_all().await;
    assert_eq!(fx.leased(8).await, BTreeSet::from([c, d]));
}

// ---------------------------------------------------------------------------------------
// Preferred first.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_working_preferred_source_is_the_only_one_asked_and_on_failure_config_order_follows() {
    // Two ordinary command sources that leave a mark when run, and the preferred file
    // source placed last in config order.
    let cmd = |n: u8| {
        command_source(
            &[
                "sh",
                "-c",
                &format!("echo run >> {{dir}}/ran{n}; echo http://10.9.{n}.1:8080"),
            ],
            "",
        )
    };
    let srcs = format!(
        "{}{}{}",
        cmd(1),
        cmd(2),
        file_source(Path::new("{dir}/preferred.txt"), "preferred = true")
    );
    let mut fx = Fx::new(&srcs);
    assert!(fx.pool.sources[0].preferred);
    assert!(fx.pool.sources[1].name().contains("ran1"));
    assert!(fx.pool.sources[2].name().contains("ran2"));
    let pref = fx.path("preferred.txt");
    write_list(&pref, &["http://10.9.0.1:8080", "http://10.9.0.2:8080"]);

    let s = fx.sniff(Trigger::Startup).await.unwrap();
    assert_eq!(s.source, fx.pool.sources[0].name());
    assert_eq!(
        fx.kinds().await,
        strs(&["sniff_on_startup", "added", "added", "sniff_success"])
    );
    assert!(!fx.path("ran1").exists(), "source 1 was run");
    assert!(!fx.path("ran2").exists(), "source 2 was run");
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!((s.listed, s.added), (2, 0));
    assert!(!fx.path("ran1").exists() && !fx.path("ran2").exists());
    assert_eq!(fx.kinds().await, strs(&["sniff_refresh", "sniff_success"]));

    // The preferred source fails: the next one in config order is asked, and only it.
    std::fs::remove_file(&pref).unwrap();
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!(s.source, fx.pool.sources[1].name());
    assert_eq!(std::fs::read_to_string(fx.path("ran1")).unwrap(), "run\n");
    assert!(!fx.path("ran2").exists(), "source 2 was run");
    let ev = fx.new_events().await;
    let kinds: Vec<&str> = ev.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec!["sniff_refresh", "sniff_failure", "added", "sniff_success"]
    );
    assert!(ev[1]
        .detail
        .as_deref()
        .unwrap()
        .contains(&fx.pool.sources[0].name()));
    // The preferred source's endpoints are not its fallback's business: they stay.
    for u in ["http://10.9.0.1:8080", "http://10.9.0.2:8080"] {
        let id = fx.id_of(u).await;
        assert_eq!(fx.state(id), State::ProbeAllowed);
    }
}

// ---------------------------------------------------------------------------------------
// Reconcile.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_vanished_endpoint_is_disabled_and_kept_and_comes_back_through_one_probe() {
    let mut fx = Fx::new(&file_source(Path::new("{dir}/list.txt"), ""));
    let list = fx.path("list.txt");
    let (ua, ub, uc) = (
        "http://10.10.0.1:80",
        "socks5h://u:p@10.10.0.2:1080",
        "http://10.10.0.3:80",
    );
    write_list(&list, &[ua, ub, uc]);
    fx.sniff(Trigger::Startup).await.unwrap();
    fx.probe_all().await;
    let (a, b, c) = (fx.id_of(ua).await, fx.id_of(ub).await, fx.id_of(uc).await);
    fx.new_events().await;

    // Vanish.
    write_list(&list, &[ua, uc]);
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!((s.listed, s.added, s.removed, s.returned), (2, 0, 1, 0));
    let ev = fx.new_events().await;
    let trail: Vec<_> = ev
        .iter()
        .map(|e| {
            (
                e.kind.clone(),
                e.endpoint,
                e.from.clone(),
                e.to.clone(),
                e.reason.clone(),
            )
        })
        .collect();
    let o = |s: &str| Some(s.to_string());
    assert_eq!(
        trail,
        vec![
            (o("sniff_refresh").unwrap(), None, None, None, None),
            (
                o("state_changed").unwrap(),
                Some(b),
                o("available"),
                o("disabled"),
                o("source_removed")
            ),
            (o("sniff_success").unwrap(), None, None, None, None),
        ]
    );
    let r = fx.row(b).await;
    assert_eq!(
        (r.state, r.reason),
        (State::Disabled, Some(Reason::SourceRemoved))
    );
    assert_eq!(fx.rows().await.len(), 3, "the row is kept");
    assert_eq!(fx.leased(6).await, BTreeSet::from([a, c]));
    // Vanished twice: nothing more happens to it.
    fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!(fx.kinds().await, strs(&["sniff_refresh", "sniff_success"]));

    // Return: probe_allowed (never leased as such), then available after one probe.
    write_list(&list, &[ua, ub, uc]);
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!((s.listed, s.added, s.removed, s.returned), (3, 0, 0, 1));
    let ev = fx.new_events().await;
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert_eq!(
        (
            ev[1].kind.as_str(),
            ev[1].endpoint,
            ev[1].from.as_deref(),
            ev[1].to.as_deref()
        ),
        (
            "state_changed",
            Some(b),
            Some("disabled"),
            Some("probe_allowed")
        )
    );
    assert_eq!(fx.row(b).await.reason, None);
    assert_eq!(fx.leased(6).await, BTreeSet::from([a, c]));
    fx.probe_ok(b).await;
    assert_eq!(fx.leased(6).await, BTreeSet::from([a, b, c]));
    // Same id: the row was kept, not re-added.
    assert_eq!(fx.id_of(ub).await, b);
    assert_eq!(fx.rows().await.len(), 3);
}

const GOOD_SCRIPT: &str = "echo '# from a command'; echo http://10.11.1.1:80\n";

/// A pool with endpoints in every state, from a file, a command and a url source.
struct Mixed {
    fx: Fx,
    server: ListServer,
}

async fn mixed() -> Mixed {
    let server = ListServer::start(200, r#"["http://10.11.2.1:80", "http://10.11.2.2:80"]"#).await;
    // The command runs `script.sh`, which each case rewrites.
    let srcs = format!(
        "{}{}\n[[pool.source]]\nkind = \"url\"\nurl = \"{}\"\ntimeout = \"2s\"\nmax_bytes = 10000\n",
        file_source(Path::new("{dir}/list.txt"), "max_bytes = 200"),
        command_source(
            &["sh", "{dir}/script.sh"],
            "max_bytes = 200\ntimeout = \"2s\"",
        ),
        server.url()
    );
    let fx = Fx::new(&srcs);
    write_list(
        &fx.path("list.txt"),
        &[
            "http://10.11.0.1:80",
            "http://10.11.0.2:80",
            "http://10.11.0.3:80",
            "http://10.11.0.4:80",
            "http://10.11.0.5:80",
        ],
    );
    write_file(&fx.path("script.sh"), GOOD_SCRIPT);
    // Each source adds its endpoints (a pool with only one of them first, in turn).
    for i in 0..3 {
        let one = PoolConfig {
            sources: vec![fx.pool.sources[i].clone()],
            ..fx.pool.clone()
        };
        sources::sniff(&fx.engine, &one, Trigger::Startup)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(fx.rows().await.len(), 8);
    // 1 available, 2 cooling, 3 probe_allowed, 4 operator-disabled, 5 source_removed.
    let id = |n: u8| {
        let fx = &fx;
        async move { fx.id_of(&format!("http://10.11.0.{n}:80")).await }
    };
    fx.probe_ok(id(1).await).await;
    fx.probe_ok(id(2).await).await;
    let g = fx
        .engine
        .lease(POOL, TTL, None, Duration::ZERO)
        .await
        .unwrap();
    let g2 = fx
        .engine
        .lease(POOL, TTL, None, Duration::ZERO)
        .await
        .unwrap();
    let (fail, ok) = if g.endpoint == id(2).await {
        (g, g2)
    } else {
        (g2, g)
    };
    fx.engine
        .report(&fail.lease, Outcome::Failure(common::vpool::failure()))
        .await
        .unwrap();
    fx.engine.release(&ok.lease).await.unwrap();
    fx.engine
        .input(
            id(4).await,
            Input::Disable { detail: None },
            None,
            Some("operator".into()),
        )
        .await
        .unwrap();
    let five = id(5).await;
    write_list(
        &fx.path("list.txt"),
        &[
            "http://10.11.0.1:80",
            "http://10.11.0.2:80",
            "http://10.11.0.3:80",
            "http://10.11.0.4:80",
        ],
    );
    let only_file = PoolConfig {
        sources: vec![fx.pool.sources[0].clone()],
        ..fx.pool.clone()
    };
    sources::sniff(&fx.engine, &only_file, Trigger::Refresh)
        .await
        .unwrap()
        .unwrap();
    let mut states = Vec::new();
    for n in 1..=4 {
        states.push(fx.state(id(n).await));
    }
    assert_eq!(
        states,
        vec![
            State::Available,
            State::Cooling,
            State::ProbeAllowed,
            State::Disabled
        ]
    );
    assert_eq!(fx.row(five).await.reason, Some(Reason::SourceRemoved));
    Mixed { fx, server }
}

#[tokio::test]
async fn a_failing_empty_or_garbage_source_changes_nothing() {
    let Mixed { mut fx, server } = mixed().await;
    let (file, script) = (fx.path("list.txt"), fx.path("script.sh"));
    let good_file = std::fs::read_to_string(&file).unwrap();
    let big: String = (0..20)
        .map(|i| format!("http://10.11.0.{}:80\n", i % 4 + 1))
        .collect();
    assert!(big.len() > 200);

    // (what goes wrong, how the source answers, which source)
    enum Break {
        File(Option<String>),
        Script(String),
        Url(u16, String),
    }
    use Break::*;
    let some = |s: &str| Some(s.to_string());
    let cases: Vec<(&str, Break)> = vec![
        ("empty file", File(some(""))),
        (
            "comments only",
            File(some("# nothing today\n\n   \n# really\n")),
        ),
        (
            "HTML error page",
            File(some("<html><body><h1>502 Bad Gateway</h1></body></html>\n")),
        ),
        (
            "one bad line among good ones",
            File(some(
                "http://10.11.0.1:80\nnot a proxy\nhttp://10.11.0.2:80\n",
            )),
        ),
        ("file missing", File(None)),
        ("too large file", File(Some(big.clone()))),
        (
            "command exits non-zero after printing a valid list",
            Script("echo http://10.11.1.1:80; exit 3\n".into()),
        ),
        (
            "command prints too much",
            Script(format!("cat <<'EOF'\n{big}EOF\n")),
        ),
        ("command prints nothing", Script("true\n".into())),
        (
            "command killed by a signal",
            Script("echo http://10.11.1.1:80; kill -9 $$\n".into()),
        ),
        (
            "command hangs",
            Script("echo http://10.11.1.1:80; exec sleep 30\n".into()),
        ),
        (
            "command not found",
            Script("exec /nonexistent/provider\n".into()),
        ),
        ("url answers 500", Url(500, "http://10.11.9.9:80\n".into())),
        (
            "url answers an HTML page",
            Url(200, "<!doctype html><p>maintenance</p>".into()),
        ),
        ("url answers an empty JSON array", Url(200, "[]".into())),
        (
            "url answers broken JSON",
            Url(200, r#"["http://10.11.2.1:80", "#.into()),
        ),
        (
            "url answers a JSON object",
            Url(200, r#"{"proxies": []}"#.into()),
        ),
        ("url answers too much", Url(200, big.repeat(300))),
    ];
    for (name, brk) in cases {
        // Restore every source, then break one.
        write_file(&file, &good_file);
        write_file(&script, GOOD_SCRIPT);
        server.set(200, r#"["http://10.11.2.1:80", "http://10.11.2.2:80"]"#);
        let idx = match &brk {
            File(Some(t)) => {
                write_file(&file, t);
                0
            }
            File(None) => {
                std::fs::remove_file(&file).unwrap();
                0
            }
            Script(t) => {
                write_file(&script, t);
                1
            }
            Url(st, body) => {
                server.set(*st, body);
                2
            }
        };
        let before = fx.rows().await;
        fx.new_events().await;
        let hits = server.hits();
        let one = PoolConfig {
            sources: vec![fx.pool.sources[idx].clone()],
            ..fx.pool.clone()
        };
        let r = sources::sniff(&fx.engine, &one, Trigger::Refresh)
            .await
            .unwrap();
        assert!(r.is_none(), "{name}: {r:?}");
        let ev = fx.new_events().await;
        let kinds: Vec<&str> = ev.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, vec!["sniff_refresh", "sniff_failure"], "{name}");
        assert!(
            ev[1]
                .detail
                .as_deref()
                .unwrap()
                .contains(&one.sources[0].name()),
            "{name}: {:?}",
            ev[1].detail
        );
        if name == "command hangs" {
            // Its 2 s timeout ended it, not the end of its `sleep 30` (after which it
            // would have exited 0 with a list).
            let detail = ev[1].detail.as_deref().unwrap();
            assert!(detail.contains("timed out after 2s"), "{name}: {detail}");
        }
        assert_eq!(fx.rows().await, before, "{name}: something changed");
        if idx == 2 {
            assert_eq!(server.hits(), hits + 1, "{name}");
        }
        let last = fx
            .engine
            .sources(Some(POOL.into()))
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.name == one.sources[0].name())
            .unwrap();
        assert_eq!(last.last_ok, Some(false), "{name}");
    }
    // And a working answer after all that still reconciles normally.
    write_file(&file, &good_file);
    let only_file = PoolConfig {
        sources: vec![fx.pool.sources[0].clone()],
        ..fx.pool.clone()
    };
    let s = sources::sniff(&fx.engine, &only_file, Trigger::Refresh)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((s.listed, s.added, s.removed, s.returned), (4, 0, 0, 0));
}

#[tokio::test]
async fn operator_disabled_endpoints_stay_disabled_whatever_the_source_says() {
    let mut fx = Fx::new(&file_source(Path::new("{dir}/list.txt"), ""));
    let list = fx.path("list.txt");
    let (ua, ub, uc) = (
        "http://10.12.0.1:80",
        "http://10.12.0.2:80",
        "http://10.12.0.3:80",
    );
    write_list(&list, &[ua, ub, uc]);
    fx.sniff(Trigger::Startup).await.unwrap();
    fx.probe_all().await;
    let (a, b, c) = (fx.id_of(ua).await, fx.id_of(ub).await, fx.id_of(uc).await);
    fx.disable(a).await;
    fx.disable(b).await;
    let op_a = fx.row(a).await;
    let op_b = fx.row(b).await;
    assert_eq!(op_a.reason, Some(Reason::Operator));

    // a vanishes, b stays listed: both stay operator-disabled, untouched.
    write_list(&list, &[ub, uc]);
    fx.new_events().await;
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!((s.removed, s.returned), (0, 0));
    assert_eq!(fx.kinds().await, strs(&["sniff_refresh", "sniff_success"]));
    assert_eq!(fx.row(a).await, op_a);
    assert_eq!(fx.row(b).await, op_b);
    // a comes back: still operator-disabled.
    write_list(&list, &[ua, ub, uc]);
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!((s.removed, s.returned), (0, 0));
    assert_eq!(fx.kinds().await, strs(&["sniff_refresh", "sniff_success"]));
    assert_eq!(fx.row(a).await, op_a);
    assert_eq!(fx.leased(4).await, BTreeSet::from([c]));

    // An endpoint the source removed and the operator then disabled is the operator's.
    write_list(&list, &[ua, ub]);
    fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!(fx.row(c).await.reason, Some(Reason::SourceRemoved));
    fx.disable(c).await;
    assert_eq!(fx.row(c).await.reason, Some(Reason::Operator));
    write_list(&list, &[ua, ub, uc]);
    let s = fx.sniff(Trigger::Refresh).await.unwrap();
    assert_eq!(s.returned, 0);
    let r = fx.row(c).await;
    assert_eq!(
        (r.state, r.reason),
        (State::Disabled, Some(Reason::Operator))
    );
    // Only the operator brings them back.
    fx.engine
        .input(a, Input::Enable { now: true }, None, None)
        .await
        .unwrap();
    assert_eq!(fx.state(a), State::Available);
}

#[tokio::test]
async fn reconcile_dedupes_a_list_and_updates_credentials_in_place() {
    let fx = Fx::new(&file_source(Path::new("{dir}/list.txt"), ""));
    let name = fx.pool.sources[0].name();
    let urls = |v: &[&str]| {
        v.iter()
            .map(|u| ProxyUrl::parse(u).unwrap())
            .collect::<Vec<_>>()
    };
    let s = sources::reconcile(
        &fx.engine,
        &fx.pool,
        &name,
        urls(&[
            "http://u:old@10.13.0.1:80",
            "http://u:old@10.13.0.1:80",
            "http://u:other@10.13.0.1:80",
            "http://10.13.0.2:80",
        ]),
    )
    .await
    .unwrap();
    assert_eq!((s.listed, s.added), (2, 2));
    let s = sources::reconcile(
        &fx.engine,
        &fx.pool,
        &name,
        urls(&["http://u:new@10.13.0.1:80", "http://10.13.0.2:80"]),
    )
    .await
    .unwrap();
    assert_eq!((s.listed, s.added, s.removed), (2, 0, 0));
    let rows = fx.rows().await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].url.password.as_deref(), Some("new"));
    assert_eq!(
        fx.engine.url(rows[0].id).unwrap().password.as_deref(),
        Some("new")
    );
}

// ---------------------------------------------------------------------------------------
// Exhaustion.
// ---------------------------------------------------------------------------------------

/// Count of one event kind in the store.
async fn count(fx: &Fx, kind: &str) -> usize {
    fx.all_events()
        .await
        .iter()
        .filter(|e| e.kind == kind)
        .count()
}

/// Wait until `kind` was recorded `n` times (never more); returns the (paused) time it
/// was seen.
///
/// The paused clock jumps ahead whenever the runtime idles, e.g. while the store thread
/// commits, so only lower bounds on paused time are meaningful; the deadline is real time.
async fn wait_count(fx: &Fx, kind: &str, n: usize) -> tokio::time::Instant {
    common::eventually_paused(Duration::from_secs(30), kind, || async {
        let c = count(fx, kind).await;
        let now = tokio::time::Instant::now();
        if c >= n {
            assert_eq!(c, n, "{kind}");
            Ok(now)
        } else {
            Err(format!("{c} of {n}"))
        }
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn exhaustion_triggers_a_sniff_rate_limited_by_the_backoff() {
    let fx = Fx::new(&file_source(
        Path::new("{dir}/list.txt"),
        "refresh = \"0s\"",
    ));
    write_list(
        &fx.path("list.txt"),
        &["http://10.14.0.1:80", "http://10.14.0.2:80"],
    );
    fx.sniff(Trigger::Startup).await.unwrap();
    fx.probe_all().await;
    let (a, b) = (
        fx.id_of("http://10.14.0.1:80").await,
        fx.id_of("http://10.14.0.2:80").await,
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn(sources::run_after_startup(
        fx.engine.clone(),
        fx.pool.clone(),
        stop.clone(),
    ));
    // Not exhausted: no sniff however long we wait.
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(count(&fx, "sniff_on_exhaustion").await, 0);

    // One cooling, one operator-disabled: every endpoint is unusable.
    let t_before = tokio::time::Instant::now();
    let g = fx
        .engine
        .lease(POOL, TTL, None, Duration::ZERO)
        .await
        .unwrap();
    fx.engine
        .report(&g.lease, Outcome::Failure(common::vpool::failure()))
        .await
        .unwrap();
    let other = if g.endpoint == a { b } else { a };
    fx.engine
        .input(other, Input::Disable { detail: None }, None, None)
        .await
        .unwrap();
    assert!(fx.engine.exhausted(POOL));

    // The first exhaustion sniff comes promptly and its source answers (the same list:
    // nothing changes, the pool stays exhausted)...
    wait_count(&fx, "sniff_on_exhaustion", 1).await;
    wait_count(&fx, "sniff_success", 2).await;
    assert!(fx.engine.exhausted(POOL));
    // ...and no second one within EXHAUSTION_BACKOFF of the exhaustion (the loop keeps
    // waking meanwhile); after it, the next one comes.
    let second = wait_count(&fx, "sniff_on_exhaustion", 2).await;
    assert!(
        second - t_before >= EXHAUSTION_BACKOFF,
        "second exhaustion sniff after {:?}",
        second - t_before
    );
    // No refresh sniffs (refresh = 0s), and the endpoints are untouched.
    assert_eq!(count(&fx, "sniff_refresh").await, 0);
    assert_eq!(fx.state(g.endpoint), State::Cooling);
    assert_eq!(fx.state(other), State::Disabled);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_empty_pool_whose_startup_sniff_failed_is_exhausted_and_sniffs_again() {
    let fx = Fx::new(&file_source(
        Path::new("{dir}/list.txt"),
        "refresh = \"0s\"",
    ));
    // The provider is down at startup: nothing to lease.
    assert!(fx.sniff(Trigger::Startup).await.is_none());
    assert!(fx.rows().await.is_empty());
    let t_loop = tokio::time::Instant::now();
    let stop = CancellationToken::new();
    let task = tokio::spawn(sources::run_after_startup(
        fx.engine.clone(),
        fx.pool.clone(),
        stop.clone(),
    ));
    wait_count(&fx, "sniff_on_exhaustion", 1).await;
    wait_count(&fx, "sniff_failure", 2).await;
    // The provider comes back: the next exhaustion sniff (after the backoff) finds it.
    write_list(&fx.path("list.txt"), &["http://10.15.0.1:80"]);
    let second = wait_count(&fx, "sniff_on_exhaustion", 2).await;
    // The first one was not before the loop started; the second is a backoff later.
    assert!(second - t_loop >= EXHAUSTION_BACKOFF);
    wait_count(&fx, "sniff_success", 1).await;
    assert_eq!(fx.rows().await.len(), 1);
    // A probe_allowed endpoint is not exhaustion: no more sniffs.
    tokio::time::sleep(EXHAUSTION_BACKOFF * 3).await;
    assert_eq!(count(&fx, "sniff_on_exhaustion").await, 2);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_command_source_runs_in_the_config_folder() {
    // Like `path`, relative arguments mean the config file's folder, not the daemon's.
    let mut fx = Fx::new(&command_source(&["cat", "providers/list.txt"], ""));
    std::fs::create_dir(fx.path("providers")).unwrap();
    write_list(&fx.path("providers/list.txt"), &["http://10.16.0.1:80"]);
    assert_ne!(std::env::current_dir().unwrap(), fx.dir.path());
    let s = fx
        .sniff(Trigger::Startup)
        .await
        .expect("cat found its file");
    assert_eq!((s.listed, s.added), (1, 1));
    assert_eq!(
        fx.kinds().await,
        strs(&["sniff_on_startup", "added", "sniff_success"])
    );
}

#[tokio::test]
async fn a_url_source_sends_its_credentials_as_basic_auth_never_in_host() {
    let lister = dest(DestCfg {
        body: b"http://10.1.1.1:3128\n".to_vec(),
        ..DestCfg::default()
    })
    .await;
    let port = lister.port();
    let src = proxypool::config::SourceConfig {
        kind: proxypool::config::SourceKind::Url(format!(
            "http://lister:t%40k3n@127.0.0.1:{port}/list"
        )),
        preferred: false,
        refresh: Duration::ZERO,
        timeout: Duration::from_secs(5),
        max_bytes: 1 << 20,
        tags: Default::default(),
        dir: None,
    };
    let urls = sources::fetch(&src).await.unwrap();
    assert_eq!(urls.len(), 1);
    let raw = lister.seen()[0].clone();
    let head = raw.to_ascii_lowercase();
    assert!(
        head.contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{raw}"
    );
    // base64("lister:t@k3n"), percent-decoded first.
    assert!(raw.contains("Basic bGlzdGVyOnRAazNu\r\n"), "{raw}");
    assert!(!head.contains("k3n@"), "{head}");
}
