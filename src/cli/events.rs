//! `events`.

use std::time::{Duration, SystemTime};

use super::table::fmt_event;
use super::{CliError, Context, EventsArgs};
use crate::event_kind::EventKind;
use crate::store::EventFilter;

/// What `--follow` prints before it waits for new events.
const FOLLOW_BACKLOG: usize = 10;

/// `--kind` values are event kind names; anything else is a usage error naming them.
fn check_kinds(kinds: &[String]) -> Result<(), CliError> {
    for k in kinds {
        if !EventKind::ALL.iter().any(|e| e.as_str() == k) {
            let known: Vec<&str> = EventKind::ALL.iter().map(|e| e.as_str()).collect();
            return Err(CliError::usage(format!(
                "unknown event kind {k:?} for --kind; known: {}",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// `--since`: a duration back from `now` (`90m`, `2d`) or an RFC 3339 time.
pub(super) fn parse_since(s: &str, now: SystemTime) -> Result<SystemTime, CliError> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now.checked_sub(d).unwrap_or(SystemTime::UNIX_EPOCH));
    }
    humantime::parse_rfc3339_weak(s)
        .or_else(|_| humantime::parse_rfc3339(s))
        .map_err(|_| {
            CliError::usage(format!(
                "invalid --since {s:?}: write a duration back from now (e.g. \"90m\", \"2d\") \
                 or an RFC 3339 time (e.g. \"2025-01-31T12:00:00Z\")"
            ))
        })
}

pub(super) async fn events(ctx: &Context, a: EventsArgs) -> Result<(), CliError> {
    ctx.local("events")?;
    check_kinds(&a.kind)?;
    let since = a
        .since
        .as_deref()
        .map(|s| parse_since(s, SystemTime::now()))
        .transpose()?;
    let filter = EventFilter {
        endpoint: a.endpoint,
        kinds: a.kind,
        since,
    };
    let store = ctx.store_to_read()?;
    let print = |e: &crate::store::EventRow| {
        let line = if a.json {
            serde_json::to_string(e).unwrap_or_default()
        } else {
            fmt_event(e)
        };
        outln!("{line}");
        super::output::open()
    };
    // What comes first: the last N (--limit, or the follow backlog), else everything.
    let mut after = 0;
    let backlog = a.limit.or(a.follow.then_some(FOLLOW_BACKLOG));
    if let Some(n) = backlog {
        // Following starts after the newest event, matching or not. Read before the
        // backlog is printed: a database that goes away once a reader has seen lines is
        // waited out (`follow_on`), never an exit.
        let newest = match a.follow {
            true => store.recent_events(None, 1)?.first().map_or(0, |e| e.id),
            false => 0,
        };
        for e in store.last_events_matching(&filter, n)? {
            if !print(&e) {
                return Ok(());
            }
            after = e.id;
        }
        if !a.follow {
            return Ok(());
        }
        after = after.max(newest);
    }
    if !a.follow {
        // One endpoint's events are read by walking its chain from the newest down to
        // `after` (docs/reference.md, "Storage"): large pages keep the walks few.
        let page = if filter.endpoint.is_some() {
            50_000
        } else {
            1000
        };
        loop {
            let batch = store.events_matching(&filter, after, page)?;
            for e in &batch {
                if !print(e) {
                    return Ok(());
                }
                after = e.id;
            }
            if batch.len() < page {
                return Ok(());
            }
        }
    }
    follow_on(&store, &filter, after, print).await
}

/// `--follow` past event `after`: every new event as it is committed, until `print` says
/// the reader is gone.
async fn follow_on(
    store: &crate::store::Store,
    filter: &EventFilter,
    after: i64,
    print: impl Fn(&crate::store::EventRow) -> bool,
) -> Result<(), CliError> {
    let mut cursor = crate::store::EventCursor::after(after);
    let mut away = Backoff::default();
    loop {
        let (batch, more) = match store.follow_events(filter, &mut cursor, 1000) {
            Ok(read) => read,
            // A fleet's database restarting or failing over: a log shipper built on
            // `--follow` must not stop for good. Where it stood is kept.
            Err(e) if e.is_unavailable() => {
                tokio::time::sleep(away.failed(&e)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        away.back();
        for e in &batch {
            if !print(e) {
                return Ok(());
            }
        }
        if more {
            continue;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `--follow` while the database is away: waits growing from 200 ms to 5 s, one line on
/// stderr when it goes away and one when it is back.
#[derive(Default)]
struct Backoff {
    wait: Option<Duration>,
}

impl Backoff {
    fn failed(&mut self, e: &crate::store::StoreError) -> Duration {
        let wait = match self.wait {
            None => {
                eprintln!("proxypool: {e}; following on once it is back");
                Duration::from_millis(200)
            }
            Some(w) => (w * 2).min(Duration::from_secs(5)),
        };
        self.wait = Some(wait);
        wait
    }

    fn back(&mut self) {
        if self.wait.take().is_some() {
            eprintln!("proxypool: the database is back; following on");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // (input, seconds before now or absolute epoch seconds, ok)
        let ok = [
            ("90m", now - Duration::from_secs(5400)),
            ("0s", now),
            (
                "2023-11-14T22:13:20Z",
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            ),
        ];
        for (s, want) in ok {
            assert_eq!(parse_since(s, now).unwrap(), want, "{s}");
        }
        for bad in ["yesterday", "", "12:00"] {
            let e = parse_since(bad, now).unwrap_err();
            assert!(e.to_string().contains("--since"), "{bad}: {e}");
        }
    }

    #[test]
    fn kinds_are_checked() {
        assert!(check_kinds(&["report".into(), "state_changed".into()]).is_ok());
        let e = check_kinds(&["reports".into()]).unwrap_err();
        assert!(e.to_string().contains("\"reports\""), "{e}");
        assert!(e.to_string().contains("state_changed"), "{e}");
    }
}
