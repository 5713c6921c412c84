//! `Retry-After` values (RFC 9110 §10.2.3): delay-seconds or an HTTP date.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parse `Retry-After`: delay-seconds or an HTTP date (relative to `now`).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long values saturate instead of failing: the policy caps them anyway.
        return Some(Duration::from_secs(v.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let at = parse_http_date(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// IMF-fixdate, RFC 850 and asctime dates (RFC 9110 §5.6.7).
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let month = |m: &str| -> Option<u32> {
        let names = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(m))
            .map(|i| i as u32 + 1)
    };
    let num = |x: &str| -> Option<u32> {
        if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        x.parse().ok()
    };
    let (year, mon, day, time) = if let Some((_, rest)) = s.split_once(',') {
        let parts: Vec<&str> = rest.split_whitespace().collect();
        match parts.as_slice() {
            // Sun, 06 Nov 1994 08:49:37 GMT
            [d, m, y, t, "GMT"] => (num(y)?, month(m)?, num(d)?, *t),
            // Sunday, 06-Nov-94 08:49:37 GMT
            [dmy, t, "GMT"] => {
                let mut it = dmy.split('-');
                let (d, m, y) = (it.next()?, it.next()?, it.next()?);
                let y = num(y)?;
                let y = if y < 100 {
                    if y < 70 {
                        2000 + y
                    } else {
                        1900 + y
                    }
                } else {
                    y
                };
                (y, month(m)?, num(d)?, *t)
            }
            _ => return None,
        }
    } else {
        // Sun Nov  6 08:49:37 1994
        let parts: Vec<&str> = s.split_whitespace().collect();
        match parts.as_slice() {
            [_, m, d, t, y] => (num(y)?, month(m)?, num(d)?, *t),
            _ => return None,
        }
    };
    let mut hms = time.split(':');
    let (h, mi, se) = (num(hms.next()?)?, num(hms.next()?)?, num(hms.next()?)?);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let days = days_from_civil(i64::from(year), mon, day);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + se);
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-94 08:50:37 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Sun Nov  6 08:49:47 1994", now),
            Some(Duration::from_secs(10))
        );
        // A date in the past means "now".
        assert_eq!(
            parse_retry_after("Sat, 05 Nov 1994 08:49:37 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in [
            "",
            "-5",
            "1.5",
            "soon",
            "Sun, 06 Nov 1994 25:00:00 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn http_date_epoch_math() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
    }
}
