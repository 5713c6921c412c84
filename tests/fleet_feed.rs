//! The change feed a daemon of a fleet follows the others by (docs/fleet.md,
//! "Propagation"), against a server that will not do all it asks: the store's feed itself,
//! on a private PostgreSQL cluster.

mod common;

use std::time::Duration;

use proxypool::store::postgres::Postgres;
use proxypool::store::{Feed, Location};

use common::eventually;
use common::fleet::{home, LONG_COOLDOWN};
use common::postgres;

fn target(url: &str) -> proxypool::store::PgTarget {
    match Location::parse(std::path::Path::new(url)).unwrap() {
        Location::Postgres(t) => *t,
        Location::File(f) => panic!("not a PostgreSQL URL: {f:?}"),
    }
}

/// A hot standby refuses `LISTEN`. The feed then reads on its poll: the first refusal costs
/// one session, and it asks again only after a back-off (1 s, doubling), not with a new
/// connection for every read, which a refusal used to cost. Changes committed on the
/// primary still arrive through its reads.
#[test]
fn a_feed_the_server_will_not_let_listen_reads_on_its_poll_and_backs_off() {
    let Some(primary) = postgres::Cluster::start() else {
        return;
    };
    let url = primary.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    let h = home(&url, LONG_COOLDOWN);
    h.add(&["http://10.90.0.1:3128"]);
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
    // A change on the primary reaches the feed on its poll.
    h.add(&["http://10.90.0.2:3128"]);
    eventually(Duration::from_secs(30), "the new endpoint read", || {
        let ch = feed.next(Duration::from_millis(25)).unwrap();
        match ch.endpoints.iter().any(|e| e.url.host == "10.90.0.2") {
            true => Ok(()),
            false => Err(format!("{} changes", ch.seqs.len())),
        }
    });
}
