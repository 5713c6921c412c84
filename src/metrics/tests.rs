use super::*;
use std::time::Duration;

use crate::health::{Reason, State};

fn sample(lines: &str, name_and_labels: &str) -> Option<String> {
    lines
        .lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .map(|l| l[name_and_labels.len() + 1..].to_string())
}

fn metrics_with_gauges() -> Metrics {
    let m = Metrics::new();
    let names = vec!["default".to_string(), "eu".to_string()];
    assert!(m.set_gauge_source(Box::new(move || {
        let mut s = GaugeSnapshot::count_states(
            &names,
            [
                (0, State::Available),
                (0, State::Available),
                (0, State::Cooling),
                (1, State::Disabled),
                (7, State::Available),
            ],
        );
        s.pools[1].destination_bans = 3;
        s
    })));
    m
}

#[test]
fn every_family_of_the_spec_with_its_labels() {
    let m = metrics_with_gauges();
    let p = m.pool("default");
    p.lease(LeaseResult::Granted, Duration::from_micros(50));
    p.lease(LeaseResult::Trial, Duration::from_millis(2));
    p.lease(LeaseResult::Exhausted, Duration::from_secs(2));
    p.report_success();
    p.report_failure(Reason::ProxyAuthRejected);
    p.report_failure(Reason::ProxyAuthRejected);
    p.transition(
        State::Available,
        State::Cooling,
        Some(Reason::ConnectRefused),
    );
    p.transition(State::Cooling, State::ProbeAllowed, None);
    p.probe(true, Duration::from_millis(30));
    p.probe(false, Duration::from_secs(12));
    p.upstream_attempt(false);
    let g = m.gateway();
    g.request(GatewayProtocol::Socks5, GatewayOutcome::Ok);
    p.gateway_bytes(Direction::ToClient, 1500);
    m.store_commit()
        .observe_duration(Duration::from_micros(300));
    let text = m.encode();

    let expect = [
        (
            r#"proxypool_endpoints{pool="default",state="available"}"#,
            "2",
        ),
        (
            r#"proxypool_endpoints{pool="default",state="cooling"}"#,
            "1",
        ),
        (
            r#"proxypool_endpoints{pool="default",state="disabled"}"#,
            "0",
        ),
        (r#"proxypool_endpoints{pool="eu",state="disabled"}"#, "1"),
        (r#"proxypool_destination_bans{pool="eu"}"#, "3"),
        (
            r#"proxypool_leases_total{pool="default",result="granted"}"#,
            "1",
        ),
        (
            r#"proxypool_leases_total{pool="default",result="exhausted"}"#,
            "1",
        ),
        (
            r#"proxypool_reports_total{pool="default",outcome="success",reason="none"}"#,
            "1",
        ),
        (
            r#"proxypool_reports_total{pool="default",outcome="failure",reason="proxy_auth_rejected"}"#,
            "2",
        ),
        (
            r#"proxypool_transitions_total{pool="default",from="available",to="cooling",reason="connect_refused"}"#,
            "1",
        ),
        (
            r#"proxypool_transitions_total{pool="default",from="cooling",to="probe_allowed",reason="none"}"#,
            "1",
        ),
        (
            r#"proxypool_probe_duration_seconds_bucket{pool="default",outcome="success",le="0.05"}"#,
            "1",
        ),
        (
            r#"proxypool_probe_duration_seconds_bucket{pool="default",outcome="failure",le="10"}"#,
            "0",
        ),
        (
            r#"proxypool_probe_duration_seconds_bucket{pool="default",outcome="failure",le="20"}"#,
            "1",
        ),
        (
            r#"proxypool_probe_duration_seconds_count{pool="default",outcome="failure"}"#,
            "1",
        ),
        (
            r#"proxypool_lease_wait_seconds_bucket{pool="default",le="0.0001"}"#,
            "1",
        ),
        (
            r#"proxypool_lease_wait_seconds_bucket{pool="default",le="+Inf"}"#,
            "3",
        ),
        (
            r#"proxypool_gateway_requests_total{protocol="socks5",outcome="ok"}"#,
            "1",
        ),
        (
            r#"proxypool_gateway_requests_total{protocol="http_connect",outcome="exhausted"}"#,
            "0",
        ),
        (
            r#"proxypool_gateway_upstream_attempts_total{pool="default",outcome="failure"}"#,
            "1",
        ),
        (
            r#"proxypool_gateway_bytes_total{pool="default",direction="to_client"}"#,
            "1500",
        ),
        (r#"proxypool_store_commit_seconds_bucket{le="0.0005"}"#, "1"),
        (r#"proxypool_store_commit_seconds_count"#, "1"),
    ];
    for (series, value) in expect {
        assert_eq!(
            sample(&text, series).as_deref(),
            Some(value),
            "{series} in\n{text}"
        );
    }
    for (name, ty) in [
        ("proxypool_endpoints", "gauge"),
        ("proxypool_destination_bans", "gauge"),
        ("proxypool_leases_total", "counter"),
        ("proxypool_reports_total", "counter"),
        ("proxypool_transitions_total", "counter"),
        ("proxypool_probe_duration_seconds", "histogram"),
        ("proxypool_lease_wait_seconds", "histogram"),
        ("proxypool_gateway_requests_total", "counter"),
        ("proxypool_gateway_upstream_attempts_total", "counter"),
        ("proxypool_gateway_bytes_total", "counter"),
        ("proxypool_gateway_upstream_connections_total", "counter"),
        ("proxypool_gateway_idle_upstream_connections", "gauge"),
        ("proxypool_store_commit_seconds", "histogram"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {ty}\n")),
            "{name} {ty} in\n{text}"
        );
    }
    // Prometheus text format, not OpenMetrics.
    assert!(!text.contains("# EOF"));
    // An out-of-range pool index in the snapshot never becomes a series.
    assert!(!text.contains("pool=\"7\""));
}

#[test]
fn series_resolved_once_share_the_registry_value() {
    let m = Metrics::new();
    let a = m.pool("default");
    let b = a.clone();
    for _ in 0..5 {
        a.transition(
            State::Available,
            State::Cooling,
            Some(Reason::ConnectTimeout),
        );
        b.transition(
            State::Available,
            State::Cooling,
            Some(Reason::ConnectTimeout),
        );
    }
    let text = m.encode();
    assert_eq!(
        sample(
            &text,
            r#"proxypool_transitions_total{pool="default",from="available",to="cooling",reason="connect_timeout"}"#
        )
        .as_deref(),
        Some("10")
    );
    // Without a gauge source the gauges are absent rather than wrong.
    assert!(!text.contains("proxypool_endpoints"));
    // Lazily created series appear only once used.
    assert!(!text.contains("reason=\"dns_failed\""));
}

#[test]
fn histogram_buckets_are_cumulative_and_count_matches() {
    let h = AtomicHistogram::new(&[1.0, 2.0]);
    for v in [0.5, 1.0, 1.5, 3.0, 100.0] {
        h.observe(v);
    }
    assert_eq!(h.count(), 5);
    let m = Metrics::new();
    // Through the registry: le is inclusive, +Inf equals _count, the sum adds up.
    let s = m.store_commit();
    for v in [0.0001, 0.0001, 2.0, 10.0] {
        s.observe(v);
    }
    let text = m.encode();
    assert_eq!(
        sample(
            &text,
            r#"proxypool_store_commit_seconds_bucket{le="0.0001"}"#
        )
        .as_deref(),
        Some("2")
    );
    assert_eq!(
        sample(&text, r#"proxypool_store_commit_seconds_bucket{le="1"}"#).as_deref(),
        Some("2")
    );
    assert_eq!(
        sample(&text, r#"proxypool_store_commit_seconds_bucket{le="5"}"#).as_deref(),
        Some("3")
    );
    assert_eq!(
        sample(&text, r#"proxypool_store_commit_seconds_bucket{le="+Inf"}"#).as_deref(),
        Some("4")
    );
    let sum: f64 = sample(&text, "proxypool_store_commit_seconds_sum")
        .unwrap()
        .parse()
        .unwrap();
    assert!((sum - 12.0002).abs() < 1e-9, "{sum}");
}

#[test]
fn pool_names_are_escaped_label_values() {
    let m = Metrics::new();
    m.pool("we\"ird\\pool").report_success();
    let text = m.encode();
    assert!(
        text.contains(
            r#"proxypool_reports_total{pool="we\"ird\\pool",outcome="success",reason="none"} 1"#
        ),
        "{text}"
    );
}

#[test]
fn concurrent_observations_are_all_counted() {
    let h = AtomicHistogram::new(PROBE_BUCKETS);
    std::thread::scope(|s| {
        for _ in 0..8 {
            let h = h.clone();
            s.spawn(move || {
                for _ in 0..10_000 {
                    h.observe(0.5);
                }
            });
        }
    });
    assert_eq!(h.count(), 80_000);
    let m = Metrics::new();
    let p = m.pool("default");
    std::thread::scope(|s| {
        for _ in 0..8 {
            let p = p.clone();
            s.spawn(move || {
                for _ in 0..10_000 {
                    p.lease(LeaseResult::Granted, Duration::from_millis(500));
                }
            });
        }
    });
    let text = m.encode();
    assert_eq!(
        sample(
            &text,
            r#"proxypool_leases_total{pool="default",result="granted"}"#
        )
        .as_deref(),
        Some("80000")
    );
    // 0.5 is exact in binary, so the CAS-accumulated sum is exact too.
    assert_eq!(
        sample(&text, r#"proxypool_lease_wait_seconds_sum{pool="default"}"#).as_deref(),
        Some("40000.0")
    );
}

#[test]
fn ban_rule_series_start_at_zero_and_count_by_rule() {
    let m = Metrics::new();
    let b = m.ban_rules(["cf", "shop-403"].into_iter());
    b.matched(1);
    b.matched(1);
    // An index past the rules (none such is handed out) counts nothing.
    b.matched(2);
    let text = m.encode();
    assert_eq!(
        sample(&text, "proxypool_ban_rule_matches_total{rule=\"cf\"}").as_deref(),
        Some("0")
    );
    assert_eq!(
        sample(&text, "proxypool_ban_rule_matches_total{rule=\"shop-403\"}").as_deref(),
        Some("2")
    );
    assert!(
        text.contains("# TYPE proxypool_ban_rule_matches_total counter"),
        "{text}"
    );
}
