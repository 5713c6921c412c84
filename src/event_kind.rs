//! What an event row records; stored and shown as its snake_case name.

use std::fmt;

use serde::{Serialize, Serializer};

macro_rules! kinds {
    ($($variant:ident => $name:literal,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventKind {
            $($variant,)*
        }

        impl EventKind {
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventKind::$variant => $name,)*
                }
            }
        }
    };
}

kinds! {
    Added => "added",
    Removed => "removed",
    Edited => "edited",
    StateChanged => "state_changed",
    Report => "report",
    Operator => "operator",
    TrialAdmitted => "trial_admitted",
    TrialAbandoned => "trial_abandoned",
    ProbeSuccess => "probe_success",
    ProbeFailure => "probe_failure",
    SniffOnStartup => "sniff_on_startup",
    SniffRefresh => "sniff_refresh",
    SniffOnExhaustion => "sniff_on_exhaustion",
    SniffSuccess => "sniff_success",
    SniffFailure => "sniff_failure",
    TargetDown => "target_down",
    TargetUp => "target_up",
    ExitChanged => "exit_changed",
    SubnetSuspect => "subnet_suspect",
    SubnetCleared => "subnet_cleared",
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for k in EventKind::ALL {
            let n = k.as_str();
            assert!(seen.insert(n), "{n} twice");
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{n}");
            assert_eq!(serde_json::to_string(k).unwrap(), format!("\"{n}\""));
        }
    }
}
