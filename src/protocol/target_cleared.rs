//! What `enable --target` answers for each pool that knew the target.

use serde::{Deserialize, Serialize};

/// What `enable --target` did in one pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetCleared {
    pub pool: String,
    pub target: String,
    /// The target was down (it is up now).
    pub was_down: bool,
}
