//! A lease as granted: the answer to `lease`, and what the gateway dials through.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::endpoint::EndpointId;

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// Lease id.
    pub lease: String,
    /// Full proxy URL with credentials.
    pub proxy: Arc<str>,
    /// Endpoint id.
    pub endpoint: EndpointId,
    /// This lease is the single recovery attempt.
    pub trial: bool,
    /// Time to live.
    pub expires_in_ms: u64,
    /// `"destination"` when the trial is a pair's, `"target"` when it is a down target's;
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The pool the endpoint came from: the one asked for, or its `fallback`.
    #[serde(default)]
    pub pool: String,
}
