//! The cooldown policy: how long an endpoint cools after a failure, per reason, and when
//! repeated failures disable it. Pure logic, validated once when the config loads.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Failure, Reason};

/// Cooldown settings for one reason (or the pool default).
#[derive(Debug, Clone, PartialEq)]
pub struct Cooldown {
    /// First cooldown.
    pub base: Duration,
    /// Growth per consecutive failure (≥ 1).
    pub factor: f64,
    /// Upper bound.
    pub max: Duration,
    /// Relative jitter in [0, 1).
    pub jitter: f64,
}

impl Default for Cooldown {
    fn default() -> Self {
        Cooldown {
            base: Duration::from_secs(60),
            factor: 2.0,
            max: Duration::from_secs(30 * 60),
            jitter: 0.1,
        }
    }
}

/// Per-reason override of the pool cooldown.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReasonPolicy {
    /// Overrides `base`.
    pub base: Option<Duration>,
    /// Overrides `factor`.
    pub factor: Option<f64>,
    /// Overrides `max`.
    pub max: Option<Duration>,
    /// Overrides `jitter`.
    pub jitter: Option<f64>,
    /// N consecutive failures of this reason disable the endpoint.
    pub disable_after: Option<u32>,
    /// Overrides the pool's `fall` when the failure has this reason.
    pub fall: Option<u32>,
}

/// Per-pool health policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Pool-wide cooldown.
    pub cooldown: Cooldown,
    /// Per-reason overrides.
    pub reasons: BTreeMap<Reason, ReasonPolicy>,
    /// An available endpoint (or pair) cools on its `fall`-th consecutive failure (≥ 1).
    pub fall: u32,
}

impl Default for Policy {
    fn default() -> Self {
        let mut reasons = BTreeMap::new();
        reasons.insert(
            Reason::ProxyAuthRejected,
            ReasonPolicy {
                disable_after: Some(3),
                ..Default::default()
            },
        );
        Policy {
            cooldown: Cooldown::default(),
            reasons,
            fall: 1,
        }
    }
}

/// A policy value that does not make sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// factor < 1 or not finite.
    #[error("{key}: factor must be >= 1, got {value}")]
    Factor {
        /// Config key.
        key: String,
        /// Value given.
        value: f64,
    },
    /// jitter outside [0, 1).
    #[error("{key}: jitter must be >= 0 and < 1, got {value}")]
    Jitter {
        /// Config key.
        key: String,
        /// Value given.
        value: f64,
    },
    /// base > max.
    #[error("{key}: base ({base}) must not exceed max ({max})")]
    BaseAboveMax {
        /// Config key.
        key: String,
        /// base, humantime.
        base: String,
        /// max, humantime.
        max: String,
    },
    /// base of zero.
    #[error("{key}: base must be greater than 0")]
    ZeroBase {
        /// Config key.
        key: String,
    },
    /// disable_after of zero.
    #[error("{key}: disable_after must be >= 1")]
    ZeroDisableAfter {
        /// Config key.
        key: String,
    },
    /// fall of zero.
    #[error("{key}: fall must be >= 1")]
    ZeroFall {
        /// Config key.
        key: String,
    },
}

impl PolicyError {
    /// The config key the value was given at.
    pub fn key(&self) -> &str {
        match self {
            PolicyError::Factor { key, .. }
            | PolicyError::Jitter { key, .. }
            | PolicyError::BaseAboveMax { key, .. }
            | PolicyError::ZeroBase { key }
            | PolicyError::ZeroDisableAfter { key }
            | PolicyError::ZeroFall { key } => key,
        }
    }

    /// What is wrong, without the key (for an error that names the key itself).
    pub fn problem(&self) -> String {
        let all = self.to_string();
        match all
            .strip_prefix(self.key())
            .and_then(|r| r.strip_prefix(": "))
        {
            Some(rest) => rest.to_string(),
            None => all,
        }
    }
}

impl Policy {
    /// The effective cooldown for a reason (pool default with overrides applied).
    pub fn cooldown_for(&self, reason: Option<Reason>) -> Cooldown {
        let mut c = self.cooldown.clone();
        if let Some(o) = reason.and_then(|r| self.reasons.get(&r)) {
            c.base = o.base.unwrap_or(c.base);
            c.factor = o.factor.unwrap_or(c.factor);
            c.max = o.max.unwrap_or(c.max);
            c.jitter = o.jitter.unwrap_or(c.jitter);
        }
        c
    }

    /// `disable_after` for a reason.
    pub fn disable_after(&self, reason: Option<Reason>) -> Option<u32> {
        reason
            .and_then(|r| self.reasons.get(&r))
            .and_then(|o| o.disable_after)
    }

    /// How many consecutive failures cool an available endpoint when the latest has
    /// `reason`: the reason's own `fall`, else the pool's.
    pub fn fall_for(&self, reason: Option<Reason>) -> u32 {
        reason
            .and_then(|r| self.reasons.get(&r))
            .and_then(|o| o.fall)
            .unwrap_or(self.fall)
    }

    /// Check every value; `prefix` names the config table in errors.
    pub fn validate(&self, prefix: &str) -> Result<(), PolicyError> {
        validate_cooldown(&self.cooldown, prefix)?;
        if self.fall == 0 {
            return Err(PolicyError::ZeroFall {
                key: format!("{prefix}.fall"),
            });
        }
        for (reason, o) in &self.reasons {
            let key = format!("{prefix}.reasons.{reason}");
            validate_cooldown(&self.cooldown_for(Some(*reason)), &key)?;
            if o.disable_after == Some(0) {
                return Err(PolicyError::ZeroDisableAfter {
                    key: format!("{key}.disable_after"),
                });
            }
            if o.fall == Some(0) {
                return Err(PolicyError::ZeroFall {
                    key: format!("{key}.fall"),
                });
            }
        }
        Ok(())
    }

    /// Cooldown for the `streak`-th consecutive failure (streak ≥ 1).
    ///
    /// `jitter_sample` is in [-1, 1]; the result never exceeds `max` and, for 429/503
    /// with `Retry-After`, is at least `min(retry_after, max)`.
    pub fn cooldown(&self, failure: &Failure, streak: u32, jitter_sample: f64) -> Duration {
        let c = self.cooldown_for(failure.reason);
        let exp = streak.saturating_sub(1).min(1024) as i32;
        let raw = c.base.as_secs_f64() * c.factor.powi(exp);
        let bounded = raw.min(c.max.as_secs_f64());
        let jittered = bounded * (1.0 + c.jitter * jitter_sample.clamp(-1.0, 1.0));
        let mut d = Duration::from_secs_f64(jittered.clamp(0.0, c.max.as_secs_f64()));
        if matches!(failure.status, Some(429) | Some(503)) {
            if let Some(ra) = failure.retry_after {
                d = d.max(ra.min(c.max));
            }
        }
        // Millisecond resolution: what is stored is what is enforced after a restart.
        Duration::from_millis(d.as_millis() as u64)
    }
}

fn validate_cooldown(c: &Cooldown, key: &str) -> Result<(), PolicyError> {
    if !(c.factor.is_finite() && c.factor >= 1.0) {
        return Err(PolicyError::Factor {
            key: format!("{key}.factor"),
            value: c.factor,
        });
    }
    if !(c.jitter.is_finite() && (0.0..1.0).contains(&c.jitter)) {
        return Err(PolicyError::Jitter {
            key: format!("{key}.jitter"),
            value: c.jitter,
        });
    }
    if c.base.is_zero() {
        return Err(PolicyError::ZeroBase {
            key: format!("{key}.base"),
        });
    }
    if c.base > c.max {
        return Err(PolicyError::BaseAboveMax {
            key: format!("{key}.base"),
            base: humantime::format_duration(c.base).to_string(),
            max: humantime::format_duration(c.max).to_string(),
        });
    }
    Ok(())
}
