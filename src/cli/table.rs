//! Tables and text rendering of endpoints and events.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use serde_json::Value;

use crate::health::State;
use crate::protocol::EndpointView;
use crate::redact::printable;
use crate::stats::EndpointStats;
use crate::store::{EndpointRow, EventRow};

/// A table in the CLI's style with this header.
pub(super) fn table<const N: usize>(header: [&str; N]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(header);
    t
}

pub(super) fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    }
}

pub(super) fn fmt_event(e: &EventRow) -> String {
    let mut s = format!("{} #{} {}", e.at, e.id, e.kind);
    if let Some(id) = e.endpoint {
        s.push_str(&format!(" endpoint={id}"));
    }
    if e.from.is_some() || e.to.is_some() {
        s.push_str(&format!(
            " {}->{}",
            e.from.as_deref().unwrap_or("-"),
            e.to.as_deref().unwrap_or("-")
        ));
    }
    if let Some(d) = &e.destination {
        s.push_str(&format!(" destination={d}"));
    }
    if let Some(st) = e.status {
        s.push_str(&format!(" status={st}"));
    }
    for (k, v) in [
        ("reason", &e.reason),
        ("phase", &e.phase),
        ("blame", &e.blame),
        ("lease", &e.lease),
        ("detail", &e.detail),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(" {k}={v}"));
        }
    }
    // One event, one line: whatever a row holds (stored before its text was made
    // printable, or by an older version) cannot forge another or drive the terminal.
    printable(&s).into_owned()
}

/// When a cooling row's cooldown ends as the daemon counts it: a stored end beyond its
/// cooldown's length from now (a clock that jumped, an old database) is clamped to that
/// length, as the daemon does when it loads the row (docs/reference.md, "Storage").
fn cooldown_left(
    state: State,
    until: Option<SystemTime>,
    cooldown_ms: Option<u64>,
    now: SystemTime,
) -> Option<Duration> {
    match (state, until) {
        (State::Cooling, Some(t)) => {
            let len = Duration::from_millis(cooldown_ms.unwrap_or(0));
            Some(crate::health::restored_remaining(t, now, len))
        }
        _ => None,
    }
}

fn left_text(left: Option<Duration>) -> String {
    match left {
        Some(d) if d.as_secs() > 0 => format!(
            "in {}",
            humantime::format_duration(Duration::from_secs(d.as_secs()))
        ),
        Some(_) => "due".into(),
        None => "-".into(),
    }
}

fn cooldown_text(state: State, until: Option<SystemTime>, cooldown_ms: Option<u64>) -> String {
    left_text(cooldown_left(state, until, cooldown_ms, SystemTime::now()))
}

/// `show`'s `cooldown_until`: the end the daemon keeps, and the stored one when it was
/// clamped.
fn until_line(row: &EndpointRow, now: SystemTime) -> String {
    let Some(stored) = row.cooldown_until else {
        return "-".into();
    };
    let left = cooldown_left(row.state, row.cooldown_until, row.cooldown_ms, now);
    match left {
        Some(d) if stored > now + d + Duration::from_secs(1) => format!(
            "{} ({}; stored {}, beyond its cooldown: clamped)",
            crate::store::fmt_time(now + d),
            left_text(left),
            crate::store::fmt_time(stored)
        ),
        _ => format!("{} ({})", crate::store::fmt_time(stored), left_text(left)),
    }
}

/// The endpoints table, then a footer counting them by state and naming where they were
/// read (`source`: the database, and the daemon when one answered).
pub(super) fn print_table(rows: &[EndpointView], source: &str) {
    let mut t = table([
        "ID", "URL", "POOL", "STATE", "REASON", "PHASE", "STREAK", "COOLDOWN", "LABEL", "TAGS",
        "EXIT",
    ]);
    for r in rows {
        let until = r
            .cooldown_until
            .as_deref()
            .and_then(crate::wall_time::parse_time);
        t.add_row([
            r.id.to_string(),
            r.url.clone(),
            r.pool.clone(),
            r.state.to_string(),
            r.reason.map(|x| x.to_string()).unwrap_or("-".into()),
            r.phase.map(|x| x.to_string()).unwrap_or("-".into()),
            r.streak.to_string(),
            cooldown_text(r.state, until, r.cooldown_ms),
            printable(r.label.as_deref().unwrap_or("-")).into_owned(),
            tags_text(&r.tags),
            r.exit_ip.clone().unwrap_or("-".into()),
        ]);
    }
    outln!("{t}");
    let mut counts: HashMap<State, usize> = HashMap::new();
    for r in rows {
        *counts.entry(r.state).or_default() += 1;
    }
    let summary: Vec<String> = State::ALL
        .iter()
        .filter_map(|s| counts.get(s).map(|n| format!("{n} {s}")))
        .collect();
    outln!(
        "{} endpoints{}{} ({source})",
        rows.len(),
        if summary.is_empty() { "" } else { ": " },
        summary.join(", ")
    );
}

/// A duration in ms as an operator reads it: `42s`, `3m 5s` (whole seconds above 1 s).
pub(super) fn fmt_ms(ms: u64) -> String {
    let d = if ms >= 1000 {
        Duration::from_secs(ms / 1000)
    } else {
        Duration::from_millis(ms)
    };
    humantime::format_duration(d).to_string()
}

/// `k=v,k=v`, or `-` for none.
fn tags_text(t: &crate::tags::Tags) -> String {
    if t.is_empty() {
        "-".into()
    } else {
        t.to_string()
    }
}

fn stats_lines(st: Option<&EndpointStats>) -> Vec<(&'static str, String)> {
    let Some(st) = st else {
        return vec![("stats", "- (kept in memory by a running daemon)".into())];
    };
    vec![
        ("leases", st.leases.to_string()),
        ("successes", st.successes.to_string()),
        ("failures", st.failures.to_string()),
        (
            "success_rate",
            st.success_rate()
                .map(|r| format!("{:.1}%", r * 100.0))
                .unwrap_or("-".into()),
        ),
        (
            "last_success",
            st.last_success
                .map(crate::store::fmt_time)
                .unwrap_or("-".into()),
        ),
        (
            "latency",
            st.latency_ms
                .map(|l| format!("{l:.0} ms"))
                .unwrap_or("-".into()),
        ),
        (
            "failure_rate",
            format!("{:.1}% (recent)", st.failure_rate * 100.0),
        ),
        ("bytes_sent", st.bytes_sent.to_string()),
        ("bytes_received", st.bytes_received.to_string()),
    ]
}

pub(super) fn print_show(r: &EndpointRow, evs: &[EventRow], stats: Option<&EndpointStats>) {
    let kv = [
        ("id", r.id.to_string()),
        ("url", r.url.to_redacted_string()),
        ("pool", r.pool.clone()),
        ("label", r.label.clone().unwrap_or("-".into())),
        ("tags", tags_text(&r.tags)),
        ("source", r.source.clone().unwrap_or("-".into())),
        ("exit_ip", r.exit_ip.map_or("-".into(), |ip| ip.to_string())),
        ("exit_seen_at", r.exit_seen_at.clone().unwrap_or("-".into())),
        ("state", r.state.to_string()),
        (
            "reason",
            r.reason.map(|x| x.to_string()).unwrap_or("-".into()),
        ),
        (
            "phase",
            r.phase.map(|x| x.to_string()).unwrap_or("-".into()),
        ),
        ("detail", r.detail.clone().unwrap_or("-".into())),
        ("streak", r.streak.to_string()),
        (
            "cooldown",
            r.cooldown_ms
                .map(|ms| humantime::format_duration(Duration::from_millis(ms)).to_string())
                .unwrap_or("-".into()),
        ),
        ("cooldown_until", until_line(r, SystemTime::now())),
        ("state_changed_at", r.state_changed_at.clone()),
        ("created_at", r.created_at.clone()),
    ];
    for (k, v) in kv.into_iter().chain(stats_lines(stats)) {
        outln!("{k:>16}: {}", printable(&v));
    }
    outln!("\nrecent events (newest first):");
    for e in evs {
        outln!("  {}", fmt_event(e));
    }
}

/// The endpoint's id as the daemon answered it, else as the operator named it (a URL's
/// password redacted).
pub(super) fn shown_id(
    answered: Option<crate::endpoint::EndpointId>,
    named: &crate::protocol::EndpointRef,
) -> String {
    answered.map_or_else(
        || crate::endpoint::redact_raw(&named.as_arg()),
        |id| id.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cooling(cooldown_ms: u64, until: SystemTime) -> EndpointRow {
        EndpointRow {
            state: State::Cooling,
            streak: 1,
            reason_streak: 1,
            cooldown_ms: Some(cooldown_ms),
            cooldown_until: Some(until),
            ..EndpointRow::fixture(1, "http://10.0.0.1:3128", "default")
        }
    }

    fn left_of(r: &EndpointRow, now: SystemTime) -> Option<Duration> {
        cooldown_left(r.state, r.cooldown_until, r.cooldown_ms, now)
    }

    #[test]
    fn a_stored_cooldown_is_shown_as_the_daemon_keeps_it() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let year = Duration::from_secs(365 * 86_400);
        for (len_ms, until, left, clamped) in [
            // Within its length: as stored.
            (60_000, now + Duration::from_secs(30), "in 30s", false),
            // 72 years away with a 1 min cooldown: the daemon waits 1 min.
            (60_000, now + year * 72, "in 1m", true),
            (60_000, now - Duration::from_secs(5), "due", false),
        ] {
            let row = cooling(len_ms, until);
            assert_eq!(left_text(left_of(&row, now)), left, "{until:?}");
            let line = until_line(&row, now);
            assert!(line.contains(left), "{line}");
            assert_eq!(line.contains("clamped"), clamped, "{line}");
        }
        let mut row = cooling(60_000, now);
        row.state = State::Available;
        assert_eq!(left_text(left_of(&row, now)), "-");
    }

    #[test]
    fn an_event_line_says_whom_a_failure_counted_against() {
        let e = EventRow {
            id: 7,
            at: "2026-12-01T00:00:00Z".into(),
            kind: "report".into(),
            endpoint: Some(3),
            from: None,
            to: None,
            reason: Some("connect_timeout".into()),
            phase: Some("connect".into()),
            detail: None,
            lease: Some("l-1".into()),
            destination: Some("shop.example".into()),
            status: None,
            blame: Some("pair".into()),
        };
        assert_eq!(
            fmt_event(&e),
            "2026-12-01T00:00:00Z #7 report endpoint=3 destination=shop.example reason=connect_timeout phase=connect blame=pair lease=l-1"
        );
    }
}
