//! `proxypool_ban_rule_matches_total{rule}`: answers each `[[ban]]` rule matched, its
//! series resolved once when a gateway starts.

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;

/// The label set: a rule's name, from the config (never from a request).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RuleLabels {
    pub(super) rule: String,
}

/// One counter per rule, in the rules' order.
#[derive(Clone, Default)]
pub struct BanRuleMetrics {
    pub(super) counters: Arc<[Counter]>,
}

impl fmt::Debug for BanRuleMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BanRuleMetrics")
            .field("rules", &self.counters.len())
            .finish()
    }
}

impl BanRuleMetrics {
    /// The rule at `index` (of the names given to `Metrics::ban_rules`) matched an answer.
    pub fn matched(&self, index: usize) {
        if let Some(c) = self.counters.get(index) {
            c.inc();
        }
    }
}
