//! The status page: one server-rendered HTML document, no script, no external asset.
//! maud escapes every interpolated value, so labels, details and pool names (user text)
//! always show as text; control characters in them (a NUL, an ESC) show as escapes.

use std::time::Duration;

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::view::{by_trouble, EndpointLine, PageModel, PoolPage, Trouble, CHART_MINUTES};
use crate::health::State;
use crate::redact::printable;
use crate::store::{fmt_time, EventRow};

const CSS: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.2em;margin:1.5em 0 .3em}
.muted{color:#666}section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.8em 1em;margin-bottom:1em}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:2px 8px;border-bottom:1px solid #eee;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.legend span{display:inline-block;margin-right:1em}.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
.s-available{color:#1d7a32}.s-cooling{color:#b3261e;font-weight:600}.s-probe_allowed{color:#8a5a00}.s-disabled{color:#666}
svg{display:block}.url{font-family:ui-monospace,monospace}
.t{display:inline-block;padding:0 .5em;border-radius:3px;color:#fff;font-weight:600}
.t-down{background:#b3261e}.t-degraded{background:#c77700}.t-ok{background:#2e7d32}
tr.down td{background:#fdecea}.bans{color:#b3261e}
.store-down{background:#fdecea;border-color:#b3261e}
";

/// Green is usable, red failed and cooling, amber waiting for its one trial, grey taken
/// out by an operator.
fn color(s: State) -> &'static str {
    match s {
        State::Available => "#2e9e44",
        State::Cooling => "#d64541",
        State::ProbeAllowed => "#e8a33a",
        State::Disabled => "#999999",
    }
}

fn counts(p: &PoolPage) -> [(State, usize); 4] {
    let s = &p.status;
    [
        (State::Available, s.available),
        (State::Cooling, s.cooling),
        (State::ProbeAllowed, s.probe_allowed),
        (State::Disabled, s.disabled),
    ]
}

/// The whole document.
pub fn render_page(m: &PageModel) -> String {
    let mut pools: Vec<&PoolPage> = m.pools.iter().collect();
    by_trouble(&mut pools);
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(super::REFRESH_SECS);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "proxypool status" }
                style { (PreEscaped(CSS)) }
            }
            body {
                h1 { "proxypool" }
                p.muted {
                    "version " (m.version) " · read at " (fmt_time(m.generated_at))
                    " · refreshes every " (super::REFRESH_SECS) " s"
                }
                @if m.store_down {
                    (super::daemons::store_down_banner())
                }
                @if m.pools.is_empty() {
                    p { "No pools configured." }
                } @else {
                    (summary(&pools))
                }
                @for p in &pools {
                    (pool_section(p))
                }
                @if let Some(d) = &m.daemons {
                    (super::daemons::daemons_section(d))
                }
                section id="events" {
                    h2 { "Recent events" }
                    (events_table(&m.events))
                }
            }
        }
    };
    doc.into_string()
}

/// One line per pool, worst first: what an operator must see without scrolling.
fn summary(pools: &[&PoolPage]) -> Markup {
    html! {
        section id="summary" {
            h2 { "Pools, worst first" }
            table.summary {
                thead { tr {
                    th { "pool" } th { "health" } th { "what is wrong" } th { "endpoints" }
                    th { "available" } th { "cooling" } th { "awaiting trial" } th { "disabled" }
                    th { "banned pairs" } th { "banned on" } th { "targets down" } th { "next cooldown ends" }
                } }
                tbody {
                    @for p in pools {
                        @let s = &p.status;
                        @let t = p.trouble();
                        tr class=[(t == Trouble::Down).then_some("down")] data-pool=(s.pool) {
                            td { (s.pool) }
                            td { span class={ "t t-" (t.as_str()) } { (t.as_str()) } }
                            td { (p.verdict()) }
                            td.num { (s.available + p.unavailable()) }
                            @for (st, n) in counts(p) {
                                // A zero is no news: only counts that are there get their colour.
                                td class={ "num" @if n > 0 { " s-" (st.as_str()) } } { (n) }
                            }
                            td.num { (p.banned_pairs) }
                            td.bans { (banned_list(&p.most_banned)) }
                            td.num { (s.targets_down) }
                            td.num { (s.next_deadline_ms.map(|ms| fmt_dur(Duration::from_millis(ms))).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    }
}

/// `site.example (12), other.example (3)`.
fn banned_list(b: &[(String, usize)]) -> String {
    b.iter()
        .map(|(d, n)| format!("{d} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pool_section(p: &PoolPage) -> Markup {
    let s = &p.status;
    let total: usize = counts(p).iter().map(|(_, n)| n).sum();
    html! {
        section.pool data-pool=(s.pool) id={ "pool-" (s.pool) } {
            h2 { "Pool " (s.pool) " " span class={ "t t-" (p.trouble().as_str()) } { (p.trouble().as_str()) } }
            p.muted {
                "mode " (s.mode) " · " (total) " endpoints · " (s.leases) " live leases"
                @if let Some(ms) = s.next_deadline_ms {
                    " · next cooldown ends in " (fmt_dur(Duration::from_millis(ms)))
                }
            }
            (state_bar(p, total))
            p.legend {
                @for (st, n) in counts(p) {
                    span class={ "s-" (st.as_str()) } {
                        span.sw style={ "background:" (color(st)) } {}
                        (st.as_str()) " " (n)
                    }
                }
            }
            @if !p.most_banned.is_empty() {
                p.bans { "Banned on: " (banned_list(&p.most_banned)) " · " (p.banned_pairs) " banned pairs" }
            }
            @if s.targets_down > 0 {
                (down_targets(s))
            }
            @if let Some(x) = &s.exit {
                p.exit {
                    "Exit addresses: " (x.addresses) " known for " (x.known) " endpoints · "
                    (x.shared_endpoints) " endpoints share " (x.shared_addresses) " addresses · "
                    (x.address_bans) " address bans"
                }
                @for sub in &x.suspect_subnets {
                    p.suspect {
                        "Subnet " (sub.subnet) " suspect for " (printable(&sub.host)) " ("
                        (sub.addresses) " addresses banned): leases prefer other subnets"
                    }
                }
            }
            @if let Some(pc) = &s.pace {
                p.pace {
                    "Pacing: " (pc.hosts) " hosts, " (pc.pairs) " pairs held · "
                    (pc.hosts_dropped) " hosts dropped · " (pc.paced) " leases answered paced"
                }
            }
            h3 { "Transitions, last hour (per minute)" }
            (transitions_chart(&p.transitions))
            h3 {
                "Endpoints"
                @if p.endpoints.len() < p.endpoints_total {
                    span.muted { " (showing " (p.endpoints.len()) " of " (p.endpoints_total) ", those needing attention first)" }
                }
            }
            (endpoints_table(&p.endpoints))
        }
    }
}

/// Targets every endpoint that tried failed to reach: nobody is blamed for them, and the
/// gateway answers them at once until their trial (docs/blame.md).
fn down_targets(s: &crate::protocol::PoolStatus) -> Markup {
    html! {
        h3.down {
            "Targets down: " (s.targets_down)
            span.muted { " (every endpoint that tried failed to reach them; no endpoint is blamed)" }
        }
        table.down-targets {
            thead { tr { th { "target" } th { "next trial in" } th { "down for" } th { "failed trials" } th { "reason" } } }
            tbody {
                @for t in &s.down_targets {
                    tr {
                        td { (printable(&t.target)) }
                        td { (fmt_dur(Duration::from_millis(t.retry_after_ms))) }
                        td { (fmt_dur(Duration::from_millis(t.down_for_ms))) }
                        td.num { (t.streak) }
                        td { (t.reason.map(|r| r.as_str()).unwrap_or("-")) }
                    }
                }
            }
        }
        @if s.down_targets.len() < s.targets_down {
            p.muted { "showing " (s.down_targets.len()) " of " (s.targets_down) }
        }
    }
}

fn state_bar(p: &PoolPage, total: usize) -> Markup {
    const W: f64 = 1000.0;
    let mut x = 0.0;
    let parts: Vec<(State, usize, f64, f64)> = counts(p)
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(st, n)| {
            let w = W * n as f64 / total.max(1) as f64;
            let part = (st, n, x, w);
            x += w;
            part
        })
        .collect();
    html! {
        svg.bar width="100%" height="22" viewBox="0 0 1000 22" preserveAspectRatio="none"
            role="img" aria-label="endpoints by state" {
            rect x="0" y="0" width="1000" height="22" fill="#eeeeee" {}
            @for (st, n, x, w) in parts {
                rect x=(format!("{x:.1}")) y="0" width=(format!("{w:.1}")) height="22" fill=(color(st)) {
                    title { (st.as_str()) ": " (n) }
                }
            }
        }
    }
}

fn transitions_chart(b: &[u32; CHART_MINUTES]) -> Markup {
    const H: f64 = 60.0;
    let max = b.iter().copied().max().unwrap_or(0);
    let sum: u32 = b.iter().sum();
    html! {
        svg.chart width="100%" height="84" viewBox="0 0 640 84" preserveAspectRatio="xMinYMid meet" role="img"
            aria-label={ (sum) " transitions in the last hour" } {
            line x1="30" y1="62" x2="630" y2="62" stroke="#bbbbbb" {}
            text x="0" y="12" font-size="10" fill="#666666" { (max) }
            text x="0" y="62" font-size="10" fill="#666666" { "0" }
            @for (i, n) in b.iter().enumerate() {
                @let h = if max == 0 { 0.0 } else { H * f64::from(*n) / f64::from(max) };
                rect x=(30 + i * 10) y=(format!("{:.1}", 62.0 - h)) width="8" height=(format!("{h:.1}")) fill="#3a7be8" {
                    title { (n) " transitions, " (CHART_MINUTES - i) " min ago" }
                }
            }
            text x="30" y="78" font-size="10" fill="#666666" { "60 min ago" }
            text x="630" y="78" font-size="10" fill="#666666" text-anchor="end" { "now" }
        }
    }
}

fn endpoints_table(rows: &[EndpointLine]) -> Markup {
    html! {
        table.endpoints {
            thead { tr {
                th { "id" } th { "url" } th { "label" } th { "tags" } th { "exit" } th { "state" } th { "reason" } th { "phase" }
                th { "detail" } th { "banned on" }
                th { "cooldown left" } th { "success rate" } th { "latency" } th { "leases (live / total)" }
                th { "bytes (sent / received)" }
            } }
            tbody {
                @for e in rows {
                    @let v = &e.view;
                    tr data-endpoint=(v.id) {
                        td.num { (v.id) }
                        td.url { (v.url) }
                        td { (printable(v.label.as_deref().unwrap_or(""))) }
                        td.tags { (v.tags) }
                        td.exit { (v.exit_ip.as_deref().unwrap_or("")) }
                        td class={ "s-" (v.state.as_str()) } { (v.state.as_str()) }
                        td { (v.reason.map(|r| r.as_str()).unwrap_or("")) }
                        td { (v.phase.map(|p| p.as_str()).unwrap_or("")) }
                        td { (v.detail.as_deref().unwrap_or("")) }
                        td.bans { (e.banned_on.join(", ")) }
                        td.num { (e.cooldown_left.map(fmt_dur).unwrap_or_default()) }
                        td.num { (e.stats.success_rate().map(|r| format!("{:.1}%", r * 100.0)).unwrap_or_else(|| "–".into())) }
                        td.num { (e.stats.latency_ms.map(|l| format!("{l:.0} ms")).unwrap_or_else(|| "–".into())) }
                        td.num { (e.live_leases) " / " (e.stats.leases) }
                        td.num { (fmt_bytes(e.stats.bytes_sent)) " / " (fmt_bytes(e.stats.bytes_received)) }
                    }
                }
            }
        }
    }
}

/// Bytes as an operator reads them: `512 B`, `16.0 MiB`.
fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn events_table(events: &[EventRow]) -> Markup {
    html! {
        @if events.is_empty() {
            p.muted { "No events yet." }
        } @else {
            table.events {
                thead { tr {
                    th { "at" } th { "kind" } th { "endpoint" } th { "destination" } th { "change" } th { "reason" } th { "phase" } th { "blame" } th { "detail" }
                } }
                tbody {
                    @for e in events {
                        tr {
                            td { (e.at) }
                            td { (e.kind) }
                            td.num { (e.endpoint.map(|i| i.to_string()).unwrap_or_default()) }
                            td { (e.destination.as_deref().unwrap_or("")) }
                            td {
                                @if e.from.is_some() || e.to.is_some() {
                                    (e.from.as_deref().unwrap_or("–")) " → " (e.to.as_deref().unwrap_or("–"))
                                }
                            }
                            td { (e.reason.as_deref().unwrap_or("")) }
                            td { (e.phase.as_deref().unwrap_or("")) }
                            td { (printable(e.blame.as_deref().unwrap_or(""))) }
                            td { (printable(e.detail.as_deref().unwrap_or(""))) }
                        }
                    }
                }
            }
        }
    }
}

/// Rounded to the second, humantime style ("4m 10s"); below a second, "<1s".
fn fmt_dur(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return "<1s".into();
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

#[cfg(test)]
#[path = "page_tests.rs"]
pub(super) mod tests;
