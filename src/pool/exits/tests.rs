use super::*;

fn cfg() -> ExitConfig {
    ExitConfig {
        url: Some("http://echo.test/".into()),
        every: Duration::from_secs(600),
        ..Default::default()
    }
}

fn ip(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

#[tokio::test(start_paused = true)]
async fn addresses_are_shared_counted_and_moved() {
    let now = Instant::now();
    let mut x = Exits::default();
    x.configure(Some(cfg()), std::iter::empty(), now);
    for id in 1..=4 {
        x.load(id, None, None, now);
    }
    // (endpoint, learned, the move it reports, sharing after: (endpoints, addresses))
    let table = [
        (1, ip("10.0.0.1"), Some((None, ip("10.0.0.1"))), (0, 0)),
        (2, ip("10.0.0.1"), Some((None, ip("10.0.0.1"))), (2, 1)),
        (3, ip("10.0.0.1"), Some((None, ip("10.0.0.1"))), (3, 1)),
        (3, ip("10.0.0.1"), None, (3, 1)),
        (4, ip("10.0.0.2"), Some((None, ip("10.0.0.2"))), (3, 1)),
        (
            1,
            ip("10.0.0.2"),
            Some((ip("10.0.0.1"), ip("10.0.0.2"))),
            (4, 2),
        ),
        (2, None, Some((ip("10.0.0.1"), None)), (2, 1)),
        (4, None, Some((ip("10.0.0.2"), None)), (0, 0)),
        (9, ip("10.0.0.9"), None, (0, 0)),
    ];
    for (id, learned, moved, sharing) in table {
        let got = x.learned(id, learned).map(|m| (m.from, m.to));
        assert_eq!(got, moved, "endpoint {id} learned {learned:?}");
        assert_eq!(x.sharing(), sharing, "endpoint {id} learned {learned:?}");
    }
    assert_eq!((x.ip_of(1), x.ip_of(2)), (ip("10.0.0.2"), None));
    assert_eq!(x.addresses(), 2);
    x.forget(1);
    x.forget(3);
    assert_eq!((x.addresses(), x.sharing()), (0, (0, 0)));
    // A freed slot is reused.
    x.load(5, ip("10.0.0.5"), Some(SystemTime::now()), now);
    assert_eq!(x.slots.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn checks_come_due_every_and_after_a_cooldown() {
    let t0 = Instant::now();
    let mut x = Exits::default();
    x.configure(Some(cfg()), [1, 2].into_iter(), t0);
    assert_eq!(x.take_due(t0, 1), vec![1], "at most max at a time");
    assert_eq!(x.take_due(t0, 10), vec![2]);
    assert!(x.take_due(t0 + Duration::from_secs(599), 10).is_empty());
    // Learned 5 minutes ago: due in 5 more.
    let five = SystemTime::now() - Duration::from_secs(300);
    x.load(3, ip("10.0.0.3"), Some(five), t0);
    assert!(x.take_due(t0 + Duration::from_secs(299), 10).is_empty());
    assert_eq!(x.take_due(t0 + Duration::from_secs(300), 10), vec![3]);
    // Back from a cooldown: due at once, and only once.
    let t1 = t0 + Duration::from_secs(301);
    x.check_soon(1, t1);
    assert_eq!(x.take_due(t1, 10), vec![1]);
    let t2 = t0 + Duration::from_secs(600);
    assert_eq!(x.take_due(t2, 10), vec![2]);
    // 3 was checked at t0 + 300 s, 1 at t0 + 301 s.
    assert_eq!(x.take_due(t1 + Duration::from_secs(600), 10), vec![3, 1]);
    // Forgotten: never due; an unknown endpoint is not scheduled by check_soon.
    x.forget(2);
    x.check_soon(7, t2);
    assert!(x
        .take_due(t2 + Duration::from_secs(3600), 10)
        .iter()
        .all(|&id| id != 2 && id != 7));
    // Early checks again and again keep the heap bounded.
    for i in 0..10_000 {
        x.check_soon(3, t2 + Duration::from_millis(i));
    }
    assert!(x.due.len() <= 2 * x.due_at.len() + 65, "{}", x.due.len());
}

#[tokio::test(start_paused = true)]
async fn switched_off_it_forgets_and_shares_nothing() {
    let now = Instant::now();
    let mut x = Exits::default();
    x.load(1, ip("10.0.0.1"), None, now);
    assert_eq!(x.ip_of(1), None, "off: nothing is learned");
    x.configure(Some(cfg()), [1, 2].into_iter(), now);
    x.learned(1, ip("10.0.0.1"));
    x.learned(2, ip("10.0.0.1"));
    assert_eq!(x.sharing(), (2, 1));
    x.configure(None, std::iter::empty(), now);
    assert_eq!(
        (x.sharing(), x.ip_of(1), x.next_due()),
        ((0, 0), None, None)
    );
    assert_eq!(x.learned(1, ip("10.0.0.1")), None);
}
