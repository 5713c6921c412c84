//! Field types several messages share: durations, `retry_after`, endpoint references, a
//! report's outcome.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::endpoint::EndpointId;
use crate::limits::MAX_DURATION;

/// A duration given as a humantime string (`"90s"`) or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dur(pub Duration);

// Sent as seconds, which every reader of the protocol accepts.
impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let d = match Value::deserialize(d)? {
            // Also what a `Retry-After` header holds: "120" or an HTTP date, passed on as is.
            Value::String(s) => humantime::parse_duration(&s)
                .ok()
                .or_else(|| crate::retry_after::parse_retry_after(&s, std::time::SystemTime::now()))
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "invalid duration {s:?}: write e.g. \"90s\", a number of seconds, or an HTTP date"
                    ))
                })?,
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 && f <= MAX_DURATION.as_secs_f64() => {
                    Duration::from_secs_f64(f)
                }
                _ => {
                    return Err(serde::de::Error::custom(format!(
                        "invalid duration {n}: expected seconds >= 0"
                    )))
                }
            },
            other => {
                return Err(serde::de::Error::custom(format!(
                    "invalid duration {other}: expected a string like \"60s\" or a number of seconds"
                )))
            }
        };
        if d > MAX_DURATION {
            return Err(serde::de::Error::custom(format!(
                "duration {} is too long (at most 365 days)",
                humantime::format_duration(d)
            )));
        }
        Ok(Dur(d))
    }
}

/// `duration_ms`: a finite number of milliseconds, at least 0 and at most MAX_DURATION.
pub(super) fn duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<f64>::deserialize(d)? {
        Some(v) if !(v.is_finite() && v >= 0.0 && v <= MAX_DURATION.as_millis() as f64) => {
            Err(serde::de::Error::custom(format!(
                "invalid duration_ms {v}: expected milliseconds >= 0"
            )))
        }
        v => Ok(v),
    }
}

/// A report's `retry_after`. It comes from a header a remote server chose, so a bad value
/// must not cost the report: far values are clamped (the policy's max bounds them again)
/// and an unparsable one is kept only to be noted in the event's detail.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryAfter {
    /// A usable delay, at most `MAX_DURATION`.
    After(Duration),
    /// What was sent, shortened; ignored by the policy.
    Unparsable(String),
}

impl RetryAfter {
    /// The delay, if there is one.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            RetryAfter::After(d) => Some(*d),
            RetryAfter::Unparsable(_) => None,
        }
    }

    fn from_value(v: Value) -> Self {
        let clamp = |d: Duration| RetryAfter::After(d.min(MAX_DURATION));
        match v {
            Value::String(s) => humantime::parse_duration(s.trim())
                .ok()
                .or_else(|| crate::retry_after::parse_retry_after(&s, std::time::SystemTime::now()))
                .map(clamp)
                .unwrap_or_else(|| RetryAfter::Unparsable(shorten(&s))),
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 => {
                    clamp(Duration::from_secs_f64(f.min(MAX_DURATION.as_secs_f64())))
                }
                _ => RetryAfter::Unparsable(n.to_string()),
            },
            other => RetryAfter::Unparsable(shorten(&other.to_string())),
        }
    }
}

fn shorten(s: &str) -> String {
    s.chars().take(64).collect()
}

impl Serialize for RetryAfter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RetryAfter::After(d) => s.serialize_f64(d.as_secs_f64()),
            RetryAfter::Unparsable(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for RetryAfter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(RetryAfter::from_value(Value::deserialize(d)?))
    }
}

/// An endpoint named by id or URL.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum EndpointRef {
    /// Database id.
    Id(EndpointId),
    /// Proxy URL (credentials optional; identity includes the user).
    Url(String),
}

impl EndpointRef {
    /// As an operator would type it.
    pub fn as_arg(&self) -> String {
        match self {
            EndpointRef::Id(i) => i.to_string(),
            EndpointRef::Url(u) => u.clone(),
        }
    }
}

/// Outcome of a leased use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    /// It worked.
    Success,
    /// It failed.
    Failure,
}
