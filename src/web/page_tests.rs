use std::time::{Duration, SystemTime};

use super::*;
use crate::endpoint::EndpointId;
use crate::health::{Phase, Reason};
use crate::protocol::{EndpointView, PoolStatus};
use crate::stats::EndpointStats;
use crate::web::view::minute_buckets;

/// Endpoint `id` of the sample page, in `state`.
fn sample_view(id: EndpointId, state: State, label: Option<&str>, now: SystemTime) -> EndpointView {
    EndpointView {
        id,
        url: format!("http://user:***@10.0.0.{id}:3128"),
        pool: "default".into(),
        label: label.map(Into::into),
        source: None,
        state,
        reason: (state == State::Cooling).then_some(Reason::ConnectTimeout),
        phase: (state == State::Cooling).then_some(Phase::Connect),
        detail: None,
        streak: 0,
        cooldown_until: None,
        cooldown_ms: None,
        state_changed_at: fmt_time(now),
        created_at: fmt_time(now),
        stats: None,
        destination_state: None,
        slowed: None,
        tags: crate::tags::Tags::parse_args(&["country=us"]).unwrap(),
        exit_ip: (id == 1).then(|| "198.51.100.7".into()),
        exit_seen_at: (id == 1).then(|| fmt_time(now)),
    }
}

/// The sample page's one event: its detail tries to break out of its attribute.
fn sample_event(now: SystemTime) -> EventRow {
    EventRow {
        id: 9,
        at: fmt_time(now),
        kind: "state_changed".into(),
        endpoint: Some(2),
        from: Some("available".into()),
        to: Some("cooling".into()),
        reason: Some("connect_timeout".into()),
        phase: Some("connect".into()),
        detail: Some("\"><img src=x onerror=alert(2)>".into()),
        lease: None,
        destination: None,
        status: None,
        blame: None,
    }
}

pub(crate) fn model() -> PageModel {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let view = |id, state, label| sample_view(id, state, label, now);
    let mut stats = EndpointStats::default();
    stats.record_lease();
    stats.record_success(now, Some(Duration::from_millis(120)));
    stats.record_failure();
    stats.record_bytes(2048, 16 << 20);
    PageModel {
        generated_at: now,
        version: "0.1.0".into(),
        pools: vec![PoolPage {
            status: PoolStatus {
                pool: "default".into(),
                mode: "static".into(),
                available: 1,
                cooling: 1,
                probe_allowed: 0,
                disabled: 0,
                leases: 1,
                next_deadline_ms: Some(90_500),
                ..PoolStatus::default()
            },
            transitions: minute_buckets(now, [now - Duration::from_secs(30); 3]),
            endpoints: vec![
                EndpointLine {
                    view: view(1, State::Available, Some("<script>alert(1)</script>")),
                    stats,
                    live_leases: 1,
                    cooldown_left: None,
                    banned_on: Vec::new(),
                },
                EndpointLine {
                    view: view(2, State::Cooling, Some("eu & co")),
                    stats: EndpointStats::default(),
                    live_leases: 0,
                    cooldown_left: Some(Duration::from_millis(90_500)),
                    banned_on: vec!["shop.example".into(), "+2 more".into()],
                },
            ],
            endpoints_total: 2,
            banned_pairs: 4,
            most_banned: vec![("shop.example".into(), 3), ("news.example".into(), 1)],
        }],
        events: vec![sample_event(now)],
        store_down: false,
        daemons: None,
    }
}

fn daemon(host: &str, live: bool) -> crate::protocol::DaemonRow {
    crate::protocol::DaemonRow {
        id: format!("{host}-0123456789"),
        host: host.into(),
        pid: 4242,
        version: "0.1.0".into(),
        addresses: vec!["socket /run/p.sock".into(), "gateway 127.0.0.1:8080".into()],
        leases: 7,
        pool_leases: [("default".to_string(), 7)].into(),
        started_at: "2026-01-01T00:00:00.000Z".into(),
        heartbeat_ms_ago: if live { 1500 } else { 60_000 },
        live,
    }
}

#[test]
fn a_fleet_page_lists_its_daemons_and_says_when_its_database_is_away() {
    let html = render_page(&model());
    assert!(!html.contains("Daemons of the fleet") && !html.contains("database is unavailable"));
    let mut m = model();
    m.store_down = true;
    m.daemons = Some(vec![daemon("<b>host-a</b>", true), daemon("host-b", false)]);
    let html = render_page(&m);
    assert!(html.contains("The database is unavailable."), "{html}");
    assert!(html.contains("Daemons of the fleet"));
    assert!(html.contains("1 live, 1 gone"), "{html}");
    assert!(html.contains("&lt;b&gt;host-a&lt;/b&gt;"), "{html}");
    assert!(html.contains("socket /run/p.sock, gateway 127.0.0.1:8080"));
    assert!(
        html.contains("1.5 s ago") && html.contains("60.0 s ago"),
        "{html}"
    );
}

#[test]
fn user_text_is_escaped() {
    let html = render_page(&model());
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!html.contains("<img"));
    assert!(html.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"));
    assert!(html.contains("eu &amp; co"));
}

#[test]
fn page_shows_what_an_operator_needs() {
    let html = render_page(&model());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains(r#"<meta http-equiv="refresh" content="5">"#));
    // No external asset: nothing is loaded from anywhere.
    for needle in ["src=\"", "href=\"", "<link", "<script"] {
        assert!(!html.contains(needle), "{needle}");
    }
    assert!(html.contains("Pool default"));
    assert!(html.contains("next cooldown ends in 1m 30s"));
    // Bar: one rect per non-empty state, half the width each.
    assert!(html.contains(r##"<rect x="0.0" y="0" width="500.0" height="22" fill="#2e9e44"><title>available: 1</title></rect>"##), "{html}");
    assert!(html.contains("<title>cooling: 1</title>"));
    assert!(!html.contains("<title>disabled"));
    // Chart: three transitions in the last minute, the tallest bar.
    assert!(html.contains("3 transitions in the last hour"));
    assert!(html.contains("<title>3 transitions, 1 min ago</title>"));
    // Table: state, reason, phase, cooldown left, success rate, latency, leases.
    assert!(html.contains("http://user:***@10.0.0.1:3128"));
    assert!(html.contains("connect_timeout"));
    assert!(html.contains(">1m 30s<"));
    assert!(html.contains(">50.0%<"));
    assert!(html.contains(">120 ms<"));
    assert!(html.contains(">1 / 1<"));
    // Tags and the bytes the gateway relayed.
    assert!(
        html.contains(r#"<td class="tags">country=us</td>"#),
        "{html}"
    );
    assert!(html.contains(">2.0 KiB / 16.0 MiB<"), "{html}");
    assert!(html.contains("available → cooling"));
}

#[test]
fn a_cut_list_says_so() {
    let mut m = model();
    m.pools[0].endpoints_total = 5000;
    assert!(render_page(&m).contains("showing 2 of 5000"));
    m.pools.clear();
    m.events.clear();
    let html = render_page(&m);
    assert!(html.contains("No pools configured."));
    assert!(html.contains("No events yet."));
}

#[test]
fn down_targets_are_listed_with_their_next_trial_and_no_endpoint_blamed() {
    let mut m = model();
    assert!(
        !render_page(&m).contains("Targets down"),
        "nothing down: no section"
    );
    let s = &mut m.pools[0].status;
    s.targets_down = 2;
    s.down_targets = vec![crate::protocol::DownTargetView {
        target: "no-such-host.invalid:443".into(),
        retry_after_ms: 4_000,
        streak: 2,
        reason: Some(crate::health::Reason::DnsFailed),
        down_for_ms: 62_000,
    }];
    let html = render_page(&m);
    assert!(html.contains("Targets down: 2"), "{html}");
    assert!(html.contains("no endpoint is blamed"));
    assert!(
        html.contains("<td>no-such-host.invalid:443</td><td>4s</td><td>1m 2s</td>"),
        "{html}"
    );
    assert!(html.contains("dns_failed"));
    assert!(html.contains("showing 1 of 2"));
}

#[test]
fn the_summary_leads_with_the_worst_pool_and_names_bans() {
    let mut m = model();
    let mut dead = m.pools[0].clone();
    dead.status.pool = "dead".into();
    dead.status.available = 0;
    dead.status.cooling = 5000;
    dead.banned_pairs = 0;
    dead.most_banned.clear();
    m.pools.push(dead);
    let html = render_page(&m);
    let summary = html.find("Pools, worst first").expect("a summary");
    let first_section = html.find("<section class=\"pool\"").unwrap();
    assert!(summary < first_section, "the summary comes first");
    // The dead pool leads, in the summary and in the sections, marked down in red.
    let row_dead = html.find("data-pool=\"dead\"").unwrap();
    let row_default = html.find("data-pool=\"default\"").unwrap();
    assert!(row_dead < row_default, "{html}");
    assert!(
        html.contains("<tr class=\"down\" data-pool=\"dead\">"),
        "{html}"
    );
    assert!(html.contains("no endpoint available"));
    assert!(html.contains("<span class=\"t t-down\">down</span>"));
    assert!(html.contains("1 cooling of 2, 4 banned pairs"), "{html}");
    assert!(
        html.contains("no endpoint available (5000 cooling)"),
        "{html}"
    );
    // Counts that are there get their state's colour; a zero none.
    assert!(
        html.contains(r#"<td class="num s-cooling">5000</td>"#),
        "{html}"
    );
    assert!(html.contains(r#"<td class="num">0</td>"#), "{html}");
    // Banned destinations per pool and per endpoint.
    assert!(
        html.contains("shop.example (3), news.example (1)"),
        "{html}"
    );
    assert!(html.contains("shop.example, +2 more"), "{html}");
    // Cooling is red, not the amber of waiting.
    assert!(
        html.contains("fill=\"#d64541\"><title>cooling: 1</title>"),
        "{html}"
    );
}

#[test]
fn events_show_destination_blame_and_detail_and_endpoints_their_detail() {
    let mut m = model();
    m.events[0].destination = Some("shop.example".into());
    m.events[0].blame = Some("pair".into());
    m.pools[0].endpoints[1].view.detail = Some("maintenance until Friday".into());
    let html = render_page(&m);
    assert!(html.contains("<th>destination</th>") && html.contains("<th>blame</th>"));
    assert!(html.contains("<td>shop.example</td>"), "{html}");
    assert!(html.contains("<td>pair</td>"), "{html}");
    assert!(html.contains("<td>maintenance until Friday</td>"), "{html}");
}

#[test]
fn a_pacing_pool_shows_what_its_pacing_holds() {
    let mut m = model();
    assert!(
        !render_page(&m).contains("Pacing:"),
        "a pool that does not pace"
    );
    m.pools[0].status.pace = Some(crate::protocol::PaceStatus {
        hosts: 3,
        pairs: 41,
        hosts_dropped: 2,
        paced: 7,
    });
    let html = render_page(&m);
    assert!(
        html.contains("Pacing: 3 hosts, 41 pairs held · 2 hosts dropped · 7 leases answered paced"),
        "{html}"
    );
}
