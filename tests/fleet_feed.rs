//! The change feed a daemon of a fleet follows the others by (docs/fleet.md,
//! "Propagation"), against a server that will not do all it asks: the store's feed itself,
//! on a private PostgreSQL cluster.

mod common;

use std::time::Duration;

use proxypool::store::postgres::Postgres;
use proxypool::store::{EndpointRow, EventCursor, EventFilter, Feed, Location, OpenOptions, Store};

use common::eventually;
use common::fleet::{home, LONG_COOLDOWN};
use common::postgres::{self, Session};

fn target(url: &str) -> proxypool::store::PgTarget {
    match Location::parse(std::path::Path::new(url)).unwrap() {
        Location::Postgres(t) => *t,
        Location::File(f) => panic!("not a PostgreSQL URL: {f:?}"),
    }
}

/// A hot standby refuses `LISTEN`. The feed then reads on its poll: the first refusal costs
/// one session, and it asks again only after a back-off (1 s, doubling), not with a new
/// connection for every read, which a refusal used to cost. Changes committed on the
/// primary still arrive through its reads, also one whose transaction stayed open while a
/// later one committed (a standby's snapshots do not list the transactions in progress).
#[test]
fn a_feed_on_a_standby_reads_on_its_poll_backs_off_listening_and_misses_nothing() {
    let Some(primary) = postgres::Cluster::start() else {
        return;
    };
    let url = primary.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    let h = home(&url, LONG_COOLDOWN);
    h.add(&["http://10.90.0.1:3128", "http://10.90.0.2:3128"]);
    let standby = primary.start_standby();
    let pg = Postgres::connect(&target(&standby.url(&db)), Duration::from_secs(15)).unwrap();
    let mut feed = Feed::new(pg.for_feed().unwrap(), pg.feed_start().unwrap());
    let refusals = || {
        standby
            .log()
            .matches("cannot execute LISTEN during recovery")
            .count()
    };
    let reads = 40;
    for _ in 0..reads {
        feed.next(Duration::from_millis(25)).unwrap();
    }
    let refused = refusals();
    // 40 polls of 25 ms take a second or more; with back-offs of 1, 2, 4 ... s, a few
    // sessions at most (8 would take over two minutes).
    assert!(
        (1..8).contains(&refused),
        "{refused} refused sessions in {reads} reads"
    );
    // On the primary a writer takes its change number and writes endpoint 1, then stays
    // open while a later change commits: the standby's feed reads the later one on its
    // poll, and the held one once it commits, though a standby's snapshots do not list the
    // transactions in progress.
    let held = Session::begin(
        &url,
        "BEGIN; INSERT INTO fleet_changes (seq) VALUES (nextval('fleet_change_seq')); \
         UPDATE endpoints SET detail = 'held', rev = currval('fleet_change_seq') WHERE id = 1",
    );
    // (Not through the CLI: an operator's command locks the endpoints table, and waits.)
    primary.sql(
        &db,
        "BEGIN; INSERT INTO fleet_changes (seq) VALUES (nextval('fleet_change_seq')); \
         UPDATE endpoints SET detail = 'later', rev = currval('fleet_change_seq') WHERE id = 2; \
         COMMIT",
    );
    read_until(&mut feed, "the later change read", &|e| {
        e.detail.as_deref() == Some("later")
    });
    held.run("COMMIT");
    read_until(&mut feed, "the held change read once it commits", &|e| {
        e.detail.as_deref() == Some("held")
    });
}

/// Read until a row `found` is among what the feed applies.
fn read_until(feed: &mut Feed, what: &str, found: &dyn Fn(&EndpointRow) -> bool) {
    eventually(Duration::from_secs(30), what, || {
        let ch = feed.next(Duration::from_millis(25)).unwrap();
        match ch.endpoints.iter().any(found) {
            true => Ok(()),
            false => Err(format!("{} changes", ch.seqs.len())),
        }
    })
}

/// A role whose connection limit the feed's reads use up: the listening connection is
/// refused, and the feed backs off as it does when `LISTEN` is refused (a connection a read
/// otherwise, each one a login the server does and refuses).
#[test]
fn a_feed_whose_listening_connection_is_refused_backs_off() {
    let Some(pg) = postgres::shared() else { return };
    let (role, url) = pg.role_database("capped", "Capped-pw-1");
    let h = home(&url, LONG_COOLDOWN);
    h.add(&["http://10.91.0.1:3128"]);
    // Two connections: the store's, then the feed's for reading; none left to listen on.
    pg.sql("postgres", &format!("ALTER ROLE {role} CONNECTION LIMIT 2"));
    let store = Postgres::connect(&target(&url), Duration::from_secs(15)).unwrap();
    let mut feed = Feed::new(store.for_feed().unwrap(), store.feed_start().unwrap());
    feed.rows_now(&[1], &[]).unwrap();
    let said = format!("too many connections for role \"{role}\"");
    for _ in 0..40 {
        feed.next(Duration::from_millis(25)).unwrap();
    }
    let refused = pg.log().matches(&said).count();
    assert!(
        (1..8).contains(&refused),
        "{refused} refused logins in 40 reads"
    );
    // What is committed meanwhile still arrives, on the poll.
    pg.sql("postgres", &format!("ALTER ROLE {role} CONNECTION LIMIT 8"));
    h.add(&["http://10.91.0.2:3128"]);
    eventually(Duration::from_secs(30), "the new endpoint read", || {
        let ch = feed.next(Duration::from_millis(25)).unwrap();
        match ch.endpoints.iter().any(|e| e.url.host == "10.91.0.2") {
            true => Ok(()),
            false => Err(format!("{} changes", ch.seqs.len())),
        }
    });
}

/// A transaction left open elsewhere on the server (an idle `psql` in a transaction)
/// holds back every snapshot's horizon. Changes committed after it are read once each;
/// their pruning an hour later waits for it, so no follower is sent into a reload on every
/// read; once it ends they are pruned, at the cost of at most one reload. A sweep that
/// deletes no event (`events_retention = "0s"`) still prunes them.
#[test]
fn a_transaction_left_open_elsewhere_sends_no_follower_into_reloads() {
    // A cluster of its own: the horizon is the whole server's, and another test's open
    // transaction would hold it too.
    let Some(pg) = postgres::Cluster::start() else {
        return;
    };
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    let h = home(&url, LONG_COOLDOWN);
    h.add(&["http://10.92.0.1:3128"]);
    let open = Session::begin(&url, "BEGIN; SELECT txid_current()");

    let mut store = Postgres::connect(&target(&url), Duration::from_secs(15)).unwrap();
    let mut feed = Feed::new(store.for_feed().unwrap(), store.feed_start().unwrap());
    let hosts: Vec<String> = (2..7).map(|i| format!("http://10.92.0.{i}:3128")).collect();
    for u in &hosts {
        h.add(&[u.as_str()]);
    }
    let mut read = 0;
    eventually(Duration::from_secs(30), "the 5 endpoints read", || {
        let ch = feed.next(Duration::from_millis(25)).unwrap();
        read += ch
            .endpoints
            .iter()
            .filter(|e| e.url.host != "10.92.0.1")
            .count();
        match read >= 5 {
            true => Ok(()),
            false => Err(format!("{read} read")),
        }
    });
    // Each once: reads after them list nothing again.
    for _ in 0..3 {
        read += feed
            .next(Duration::from_millis(25))
            .unwrap()
            .endpoints
            .len();
    }
    assert_eq!(read, 5);
    let changes = || pg.sql(&db, "SELECT count(*) FROM fleet_changes");
    // An hour and more later (the clock of their rows moved back), a sweep: the change
    // from before the open transaction goes, the 5 after it stay, and no read reloads or
    // reads them again.
    pg.sql(
        &db,
        "UPDATE fleet_changes SET at = now() - interval '2 hours'",
    );
    assert_eq!(store.prune_events(std::time::UNIX_EPOCH, 1000).unwrap(), 0);
    assert_eq!(changes(), "5");
    for _ in 0..3 {
        let ch = feed.next(Duration::from_millis(25)).unwrap();
        assert!(!ch.reload && ch.seqs.is_empty(), "{ch:?}");
    }
    // It ends: the next sweep prunes them (and no event), and a read reloads once at most.
    open.run("ROLLBACK");
    let events = pg.sql(&db, "SELECT count(*) FROM events");
    assert_eq!(store.prune_events(std::time::UNIX_EPOCH, 1000).unwrap(), 0);
    assert_eq!(changes(), "0");
    assert_eq!(pg.sql(&db, "SELECT count(*) FROM events"), events);
    let reloads = (0..3)
        .filter(|_| feed.next(Duration::from_millis(25)).unwrap().reload)
        .count();
    assert!(reloads <= 1, "{reloads} reloads in 3 reads");
}

/// `events --follow` on PostgreSQL pages through what it has not printed: a read that
/// fills its limit goes on past its last id, and once the pages are done nothing printed
/// is printed again (a last page that came back empty used to leave the follow where it
/// started, and every read after it printed the first page once more).
#[test]
fn a_paged_follow_prints_each_event_once() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let h = home(&url, LONG_COOLDOWN);
    h.add(&[
        "http://10.93.0.1:3128",
        "http://10.93.0.2:3128",
        "http://10.93.0.3:3128",
    ]);
    let at = Location::parse(std::path::Path::new(&url)).unwrap();
    let store = Store::open_at(&at, OpenOptions::default()).unwrap();
    let mut cursor = EventCursor::after(0);
    let filter = EventFilter::default();
    let mut printed = Vec::new();
    for _ in 0..6 {
        let (batch, _) = store.follow_events(&filter, &mut cursor, 3).unwrap();
        printed.extend(batch.iter().map(|e| e.id));
    }
    let all: Vec<i64> = store
        .events_matching(&filter, 0, 100)
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(printed, all);
}

/// A poke ends the follower's wait for the next read, with nothing notified (each test
/// has a database of its own, and notifications stay in theirs); a poke while it is not
/// waiting ends the next wait. Without one, a minute's wait would be waited out.
#[test]
fn a_poke_ends_the_feeds_wait() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let store = Postgres::open(&target(&url), Duration::from_secs(15)).unwrap();
    let mut feed = Feed::new(store.for_feed().unwrap(), store.feed_start().unwrap());
    // Until a wait runs its whole length: the session listens, and no wake-up is left
    // (its `LISTEN` taking effect ends a wait).
    eventually(Duration::from_secs(30), "a quiet wait", || {
        let t = std::time::Instant::now();
        feed.next(Duration::from_millis(100)).unwrap();
        match t.elapsed() >= Duration::from_millis(100) {
            true => Ok(()),
            false => Err(format!("ended after {:?}", t.elapsed())),
        }
    });
    let poke = feed.poke();
    let (done_tx, done) = std::sync::mpsc::channel();
    let waiting = std::thread::spawn(move || {
        for _ in 0..2 {
            feed.next(Duration::from_secs(60)).unwrap();
            done_tx.send(()).unwrap();
        }
    });
    // Poked while it waits, or just before (the wait then ends as it begins).
    poke.notify_one();
    let ended = done.recv_timeout(Duration::from_secs(30));
    assert!(
        !waiting.is_finished() || ended.is_ok(),
        "the follower failed"
    );
    ended.expect("the poked wait ended");
    // Poked before the next wait.
    poke.notify_one();
    done.recv_timeout(Duration::from_secs(30))
        .expect("the next wait ended");
    waiting.join().unwrap();
}
