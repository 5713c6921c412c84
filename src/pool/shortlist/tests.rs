//! The shortlist on its own (a pass, when one is built, kept, dropped), and through the
//! pools: every lease for a host, with shortlists, is what a pass over the whole pool
//! would choose (least leased among what the host may have) while bans come and go.

use super::*;

fn queue(items: &[u32]) -> VecDeque<Item> {
    items.iter().map(|&s| (s, u64::from(s))).collect()
}

fn slots(q: &VecDeque<Item>) -> Vec<u32> {
    q.iter().map(|i| i.0).collect()
}

/// (items, stale, dropped, passed, taken, left): what a pass takes and leaves.
#[test]
fn a_pass_drops_the_stale_the_excluded_and_the_taken_and_rotates_the_rest() {
    #[allow(clippy::type_complexity)]
    let table: [(&[u32], &[u32], &[u32], &[u32], Option<u32>, &[u32]); 6] = [
        // Everything fits: the front is taken, and leaves with its lease.
        (&[1, 2, 3], &[], &[], &[], Some(1), &[2, 3]),
        // Stale and excluded items before the taken one leave.
        (&[1, 2, 3, 4], &[1], &[2], &[], Some(3), &[4]),
        // A passed item goes behind its equals; the excluded stay out.
        (&[1, 2, 3], &[], &[2], &[1], Some(3), &[1]),
        // Nothing fits: one pass, the passed items kept in their order.
        (&[1, 2, 3, 4], &[3], &[4], &[1, 2], None, &[1, 2]),
        // Everything excluded: the shortlist empties.
        (&[1, 2], &[], &[1, 2], &[], None, &[]),
        (&[], &[], &[], &[], None, &[]),
    ];
    for (items, stale, dropped, passed, taken, left) in table {
        let mut q = queue(items);
        let mut judged = 0;
        let got = round(
            &mut q,
            |slot, _| !stale.contains(&slot),
            |slot| {
                judged += 1;
                match slot {
                    s if dropped.contains(&s) => Verdict::Drop,
                    s if passed.contains(&s) => Verdict::Pass,
                    _ => Verdict::Take,
                }
            },
        );
        assert_eq!(got, taken, "{items:?}");
        assert_eq!(slots(&q), left, "{items:?}");
        assert!(judged <= items.len(), "{items:?}: one pass");
    }
}

fn first(n: u32) -> VecDeque<Item> {
    queue(&(0..n).collect::<Vec<_>>())
}

/// (skipped by a walk, shortlist made): ten items in the first queue.
#[test]
fn a_host_gets_a_shortlist_once_its_skips_cost_a_copy_and_are_frequent() {
    let main = first(10);
    let table: [(&[usize], bool); 5] = [
        // 10 skipped in three walks: as many as a copy holds.
        (&[4, 5, 1], true),
        (&[4, 5], false),
        // Walks that skip nothing do not start a count.
        (&[0, 0, 0, 10], true),
        // 10 skipped, but over 41 walks: fewer than one in four.
        (
            &[
                5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5,
            ],
            false,
        ),
        (
            &[5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5],
            true,
        ),
    ];
    for (walks, made) in table {
        let mut s = Shortlists::default();
        let got = walks.iter().any(|&k| s.owe(7, k, 1, &main));
        assert_eq!(got, made, "{walks:?}");
        assert_eq!(s.get(7, 0, 1, &main).is_some(), made, "{walks:?}");
        if made {
            assert!(!s.owe(7, 100, 1, &main), "one per host");
        }
    }
}

#[test]
fn a_shortlist_takes_what_is_pushed_and_is_copied_again_after_a_lift() {
    let main = first(10);
    let mut s = Shortlists::default();
    assert!(s.owe(7, 10, 1, &main));
    s.push((10, 10));
    let l = s.get(7, 1, 1, &main).unwrap().queue;
    assert_eq!(slots(l), (0..=10).collect::<Vec<_>>());
    // A drop stays dropped while nothing is lifted.
    l.pop_front();
    assert_eq!(s.get(7, 1, 2, &main).unwrap().queue.len(), 10);
    // A lift after the build: copied again from the pool's first queue.
    let l = s.get(7, 2, 3, &main).unwrap().queue;
    assert_eq!(slots(l), (0..10).collect::<Vec<_>>());
    l.clear();
    assert!(
        s.get(7, 3, 3, &main).unwrap().queue.is_empty(),
        "built at 3"
    );
}

#[test]
fn what_was_verified_holds_only_for_its_endpoint_and_its_count() {
    let mut v = Verified::default();
    assert!(!v.holds(3, 42, 0));
    v.record(3, 42, 9);
    assert!(v.holds(3, 42, 9));
    assert!(!v.holds(3, 42, 10), "something changed since");
    assert!(!v.holds(3, 43, 9), "another endpoint in the slot");
    assert!(!v.holds(2, 42, 9));
}

#[test]
fn at_most_max_shortlists_the_least_recently_used_giving_way() {
    let main = first(4);
    let mut s = Shortlists::default();
    for view in 0..MAX as u32 {
        assert!(s.owe(view, 4, 0, &main));
    }
    // View 0 used last: view 1 is the least recently used.
    assert!(s.get(0, 0, 0, &main).is_some());
    assert!(s.owe(99, 4, 0, &main));
    assert_eq!(s.len(), MAX);
    assert!(s.get(1, 0, 0, &main).is_none());
    assert!(s.get(0, 0, 0, &main).is_some());
    assert!(s.get(99, 0, 0, &main).is_some());
}

#[test]
fn watched_hosts_are_bounded_and_the_least_owing_gives_way() {
    let main = first(1_000);
    let mut s = Shortlists::default();
    for view in 0..WATCHED as u32 {
        s.owe(view, 10 + view as usize, 0, &main);
    }
    s.owe(500, 1, 0, &main);
    assert_eq!(s.debts.len(), WATCHED);
    assert!(s.debts.iter().all(|d| d.view != 0), "{:?}", s.debts);
    assert!(s.debts.iter().any(|d| d.view == 500));
}

#[test]
fn a_shortlist_its_host_stopped_using_is_dropped_at_its_next_compaction() {
    let main = first(4);
    let mut s = Shortlists::default();
    assert!(s.owe(1, 4, 0, &main));
    assert!(s.owe(2, 4, 0, &main));
    for i in 0..200 {
        s.push((100 + i, 0));
    }
    // Both were busy (built): compacted, kept, and no longer busy.
    s.compact(4, |i| i.0 < 4);
    assert_eq!(s.len(), 2);
    assert_eq!(s.get(1, 0, 0, &main).unwrap().queue.len(), 4);
    for i in 0..200 {
        s.push((100 + i, 0));
    }
    // Host 1 used it since; host 2 did not.
    s.compact(4, |i| i.0 < 4);
    assert_eq!(s.len(), 1);
    assert!(s.get(2, 0, 0, &main).is_none());
    assert!(s.get(1, 0, 0, &main).is_some());
    // A short queue is left alone.
    s.compact(4, |_| false);
    assert_eq!(s.len(), 1);
}

mod through_the_pools {
    use std::collections::HashSet;
    use std::time::{Duration, SystemTime};

    use tokio::time::Instant;

    use crate::config::{ExitConfig, PoolConfig};
    use crate::endpoint::EndpointId;
    use crate::health::{Failure, Phase, Reason, State};
    use crate::pool::{Outcome, Pools, Want};
    use crate::protocol::Grant;
    use crate::store::EndpointRow;

    const HOSTS: [&str; 2] = ["shop.example", "news.example"];
    const ENDPOINTS: i64 = 16;

    fn pools() -> Pools {
        let cfg = PoolConfig {
            exit: Some(ExitConfig {
                url: Some("http://echo.test/".into()),
                subnet_after: 2,
                ..ExitConfig::default()
            }),
            ..PoolConfig::builtin("p")
        };
        let mut p = Pools::new([cfg]);
        for id in 1..=ENDPOINTS {
            let url = format!("http://10.0.0.{id}:3128");
            p.insert_row(&EndpointRow::fixture(id, &url, "p"), Instant::now());
        }
        p
    }

    /// The address endpoints move between: 12 addresses, three to a /24.
    fn address(rng: &mut fastrand::Rng) -> Result<std::net::IpAddr, String> {
        let k = rng.u8(0..12);
        Ok(std::net::Ipv4Addr::new(198, 51, k / 3, k % 3 + 1).into())
    }

    /// What a pass over every endpoint of the pool says a lease for `host` may have: the
    /// least leased of those the host allows (those outside suspect subnets first), each
    /// with its live leases. Empty when nothing may serve it.
    fn oracle(p: &Pools, host: &str) -> HashSet<EndpointId> {
        let ps = &p.pools[0];
        let want = Want::parse(Some(host), None).unwrap();
        let views = ps.views(&want);
        let spare = views.host.filter(|&d| ps.dests.has_suspects(d));
        let fit = |spare| {
            let mut v: Vec<(EndpointId, u32)> = p
                .entries
                .iter()
                .filter(|(&id, e)| {
                    e.health.state == State::Available
                        && ps
                            .dests
                            .leasable([views.host, views.target], spare, id, e.exit)
                })
                .map(|(&id, e)| (id, e.leases))
                .collect();
            let least = v.iter().map(|x| x.1).min();
            v.retain(|x| Some(x.1) == least);
            v.into_iter().map(|x| x.0).collect::<HashSet<_>>()
        };
        let first = fit(spare);
        match first.is_empty() {
            true => fit(None),
            false => first,
        }
    }

    fn ban() -> Outcome {
        Outcome::Failure(Failure {
            status: Some(403),
            ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
        })
    }

    /// Leases, releases, bans, recoveries, moves between addresses and subnets that fall
    /// under suspicion, at random: every ordinary lease for a host is one the whole pool's
    /// pass allows, and is refused only when that finds none.
    #[tokio::test(start_paused = true)]
    async fn every_lease_is_the_least_leased_the_host_allows() {
        let (mut checked, mut refused) = (0, 0);
        for seed in 46..54 {
            let (c, r) = random_walk(seed).await;
            checked += c;
            refused += r;
        }
        assert!(
            checked > 20_000 && refused > 0,
            "{checked} checked, {refused} refused"
        );
    }

    /// One walk: how many leases were checked, and how many refused (rightly).
    async fn random_walk(seed: u64) -> (usize, usize) {
        let mut p = pools();
        let mut rng = fastrand::Rng::with_seed(seed);
        let now = Instant::now;
        for id in 1..=ENDPOINTS {
            p.exit_learned(id, address(&mut rng), now());
        }
        let ttl = Duration::from_secs(600);
        let mut out: Vec<(Grant, Option<&str>)> = Vec::new();
        let (mut checked, mut refused, mut built) = (0, 0, 0);
        for step in 0..20_000 {
            match rng.u8(0..100) {
                0..=44 => {
                    let host = HOSTS[rng.usize(0..HOSTS.len())];
                    let want = Want::parse(Some(host), None).unwrap();
                    p.advance(now());
                    let allowed = oracle(&p, host);
                    let (g, _) = p.lease_with("p", ttl, None, &want, now());
                    match g {
                        Ok(g) if g.trial => out.push((g, Some(host))),
                        Ok(g) => {
                            assert!(
                                allowed.contains(&g.endpoint),
                                "seed {seed} step {step}: {host} got {} of {allowed:?}",
                                g.endpoint
                            );
                            checked += 1;
                            out.push((g, Some(host)));
                        }
                        Err(e) => {
                            assert!(
                                allowed.is_empty(),
                                "seed {seed} step {step}: {host} refused ({e}) with {allowed:?}"
                            );
                            refused += 1;
                        }
                    }
                }
                45..=49 => {
                    if let Ok(g) = p.lease("p", ttl, None, now()).0 {
                        out.push((g, None));
                    }
                }
                50..=74 if !out.is_empty() => {
                    let (g, _) = out.swap_remove(rng.usize(0..out.len()));
                    // Leases live 10 minutes: some expired.
                    let _ = p.release(&g.lease, now());
                }
                75..=84 if !out.is_empty() => {
                    let (g, host) = out.swap_remove(rng.usize(0..out.len()));
                    let outcome = match (host, rng.bool()) {
                        (Some(_), true) => ban(),
                        _ => Outcome::Success,
                    };
                    let _ = p.report(&g.lease, outcome, now(), SystemTime::now());
                }
                85..=89 => {
                    let id = rng.i64(1..=ENDPOINTS);
                    let learned = match rng.u8(0..8) {
                        0 => Err("the echo page did not answer".into()),
                        _ => address(&mut rng),
                    };
                    p.exit_learned(id, learned, now());
                }
                90..=92 => {
                    let id = rng.i64(1..=ENDPOINTS);
                    let _ = p.enable_pair(id, HOSTS[rng.usize(0..HOSTS.len())], now());
                }
                _ => tokio::time::advance(Duration::from_millis(rng.u64(0..4_000))).await,
            }
            built = built.max(p.pools[0].index.ready().shortlists());
        }
        assert!(built > 0, "seed {seed}: no host got a shortlist");
        (checked, refused)
    }
}
