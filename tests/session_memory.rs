//! Memory of sticky sessions, measured with a counting global allocator (live bytes before
//! and after): the pools remember at most 65,536 keys (of at most 128 bytes), so however
//! many distinct keys clients mint, the table's worst case stays under 4 MiB (issue 20: 4,000
//! keys of 40 KB once took the daemon from 14 to 171 MB). One test in this binary, so no
//! other test allocates while it measures.

mod common;

use std::time::Duration;

use proxypool::config::PoolConfig;
use proxypool::endpoint::ProxyUrl;
use proxypool::health::State;
use proxypool::limits::{check_session_key, MAX_SESSION_KEY};
use proxypool::pool::Pools;
use proxypool::store::{NewEndpoint, Store};
use tokio::time::Instant;

use common::counting::{live, Counting};

#[global_allocator]
static A: Counting = Counting;

const MIB: f64 = 1024.0 * 1024.0;

#[test]
fn the_session_table_stays_a_few_mib_whatever_keys_clients_send() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("s.db")).unwrap();
    store
        .add_endpoints(&[NewEndpoint {
            url: ProxyUrl::parse("http://10.9.0.1:3128").unwrap(),
            pool: "default".into(),
            label: None,
            source: None,
            state: State::Available,
            tags: Default::default(),
        }])
        .unwrap();
    let now = Instant::now();
    let mut pools = Pools::new([PoolConfig::builtin("default")]);
    for r in store.list(None, None).unwrap() {
        pools.insert_row(&r, now);
    }
    let ttl = Duration::from_secs(60);
    // A key past the bound never reaches the pools: the fronts refuse it.
    assert!(check_session_key(&"k".repeat(40_000)).is_err());
    let key = |i: usize| {
        let n = format!("{i:08}");
        let k = format!("{n}{}", "k".repeat(MAX_SESSION_KEY - n.len()));
        assert_eq!(check_session_key(&k), Ok(()));
        k
    };
    let lease = |pools: &mut Pools, k: &str| {
        let (g, _) = pools.lease("default", ttl, Some(k), now);
        let (r, _) = pools.release(&g.unwrap().lease, now);
        r.unwrap();
    };
    // Warm up what a lease allocates besides its session: lease maps at their size, and
    // the memory of how leases ended at its cap (65,536), with leases without a session.
    for _ in 0..70_000 {
        let (g, _) = pools.lease("default", ttl, None, now);
        let (r, _) = pools.release(&g.unwrap().lease, now);
        r.unwrap();
    }
    for i in 0..1_000 {
        lease(&mut pools, &key(i));
    }
    let before = live();
    // Four times the cap of distinct keys of the longest length: the table fills, is
    // forgotten and fills again; it never holds more than the cap.
    let mut peak = 0isize;
    for i in 1_000..4 * 65_536 {
        lease(&mut pools, &key(i));
        if i % 4096 == 0 {
            peak = peak.max(live() - before);
        }
    }
    let peak = peak.max(live() - before) as f64 / MIB;
    println!("session table at its worst: {peak:.1} MiB");
    assert!(
        peak <= 4.0,
        "{peak:.1} MiB for 65,536 sessions of 128 bytes"
    );
    drop(pools);
}
