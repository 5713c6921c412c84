//! Per-endpoint usage statistics (docs/observability.md, "Per-endpoint statistics"):
//! leases, successes, failures, last success, a latency estimate, the recent failure rate
//! and the bytes the gateway relayed. Pure: the caller passes the time and the measured
//! durations in.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Weight of the newest sample in the latency EWMA. 0.3 follows a change within a handful
/// of uses (a proxy that got slow shows it after ~5 samples) without one outlier owning
/// the estimate.
pub const LATENCY_ALPHA: f64 = 0.3;

/// Weight of the newest outcome in the recent failure rate: about the last ten outcomes.
pub const FAILURE_ALPHA: f64 = 0.1;

/// What the daemon has seen an endpoint do since it started (or since the stats were
/// restored): counters only grow; the latency is an estimate, not an average.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointStats {
    /// Leases handed out.
    pub leases: u64,
    /// Successful outcomes (reports and probes).
    pub successes: u64,
    /// Failed outcomes (reports and probes).
    pub failures: u64,
    /// When the last success was recorded (RFC 3339 UTC in JSON).
    #[serde(serialize_with = "ser_time", deserialize_with = "de_time", default)]
    pub last_success: Option<SystemTime>,
    /// EWMA of probe and reported durations, in milliseconds.
    pub latency_ms: Option<f64>,
    /// EWMA of failures (1) and successes (0): the recent failure rate, 0 before the first
    /// outcome.
    #[serde(default)]
    pub failure_rate: f64,
    /// Bytes the gateway sent to the endpoint (the client's side of its uses).
    #[serde(default)]
    pub bytes_sent: u64,
    /// Bytes the gateway received from the endpoint.
    #[serde(default)]
    pub bytes_received: u64,
}

fn ser_time<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&crate::wall_time::fmt_time(*t)),
        None => s.serialize_none(),
    }
}

fn de_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => crate::wall_time::parse_time(&s)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid time {s:?}"))),
    }
}

impl EndpointStats {
    /// A lease was granted on the endpoint.
    pub fn record_lease(&mut self) {
        self.leases = self.leases.saturating_add(1);
    }

    /// A use or probe succeeded at `at`, taking `took` when the caller knows it.
    pub fn record_success(&mut self, at: SystemTime, took: Option<Duration>) {
        self.successes = self.successes.saturating_add(1);
        self.failure_rate += FAILURE_ALPHA * (0.0 - self.failure_rate);
        self.last_success = Some(self.last_success.map_or(at, |t| t.max(at)));
        if let Some(d) = took {
            self.observe_latency(d);
        }
    }

    /// A use or probe failed. A failure's duration is not fed to the latency estimate:
    /// a timeout would report the deadline, not how fast the proxy is.
    pub fn record_failure(&mut self) {
        self.failures = self.failures.saturating_add(1);
        self.failure_rate += FAILURE_ALPHA * (1.0 - self.failure_rate);
    }

    /// Bytes relayed through the endpoint by the gateway: `sent` to it, `received` from it.
    pub fn record_bytes(&mut self, sent: u64, received: u64) {
        self.bytes_sent = self.bytes_sent.saturating_add(sent);
        self.bytes_received = self.bytes_received.saturating_add(received);
    }

    /// Fold one measured duration into the estimate.
    pub fn observe_latency(&mut self, took: Duration) {
        self.latency_ms = Some(ewma(self.latency_ms, took.as_secs_f64() * 1000.0));
    }

    /// Successes over outcomes, or None before the first outcome.
    pub fn success_rate(&self) -> Option<f64> {
        let n = self.successes + self.failures;
        (n > 0).then(|| self.successes as f64 / n as f64)
    }
}

/// One EWMA step; the first sample is taken as is, so a new endpoint does not start at 0.
pub fn ewma(prev: Option<f64>, sample: f64) -> f64 {
    match prev {
        None => sample,
        Some(p) => p + LATENCY_ALPHA * (sample - p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_steps() {
        // (previous, sample, expected)
        let cases = [
            (None, 100.0, 100.0),
            (Some(100.0), 100.0, 100.0),
            (Some(100.0), 200.0, 130.0),
            (Some(130.0), 0.0, 91.0),
        ];
        for (prev, sample, want) in cases {
            let got = ewma(prev, sample);
            assert!((got - want).abs() < 1e-9, "{prev:?} {sample} -> {got}");
        }
    }

    #[test]
    fn estimate_converges_to_a_new_level() {
        let mut s = EndpointStats::default();
        s.observe_latency(Duration::from_millis(1000));
        for _ in 0..20 {
            s.observe_latency(Duration::from_millis(100));
        }
        let l = s.latency_ms.unwrap();
        assert!((100.0..101.0).contains(&l), "{l}");
    }

    #[test]
    fn counters_and_rate() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut s = EndpointStats::default();
        assert_eq!(s.success_rate(), None);
        s.record_lease();
        s.record_lease();
        s.record_success(t0, Some(Duration::from_millis(40)));
        s.record_failure();
        s.record_failure();
        s.record_success(t0 - Duration::from_secs(5), None);
        assert_eq!((s.leases, s.successes, s.failures), (2, 2, 2));
        assert_eq!(s.success_rate(), Some(0.5));
        // A late report with an older time does not move the last success back.
        assert_eq!(s.last_success, Some(t0));
        // Only the success with a duration fed the estimate.
        assert_eq!(s.latency_ms, Some(40.0));
        // 0.1 after the first success... success, failure, failure, success.
        let want = [0.0, 1.0, 1.0, 0.0]
            .iter()
            .fold(0.0, |r, x| r + FAILURE_ALPHA * (x - r));
        assert!((s.failure_rate - want).abs() < 1e-12, "{}", s.failure_rate);
        s.record_bytes(100, 16 << 20);
        s.record_bytes(1, 1);
        assert_eq!((s.bytes_sent, s.bytes_received), (101, (16 << 20) + 1));
        let j = serde_json::to_value(s).unwrap();
        assert_eq!(j["last_success"], "2023-11-14T22:13:20.000Z");
        assert_eq!(j["latency_ms"], 40.0);
        assert_eq!(j["leases"], 2);
        assert_eq!(j["bytes_received"], (16 << 20) + 1);
    }
}
