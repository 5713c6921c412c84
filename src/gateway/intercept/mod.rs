//! HTTPS seen from inside (docs/intercept.md). A CONNECT, or a SOCKS5 CONNECT, to a host
//! and port the gateway intercepts is answered at once; the client's TLS ends here under a
//! leaf of this install's CA, and every request inside goes out as an absolute-form one
//! does: through an upstream, then TLS to the origin, verified, its answer judged by
//! `ban_status`, `retry_status` and the `[[ban]]` rules. Files: `rewound` (bytes read
//! ahead of the handshake, put back), `client` (the client's side), `upgrade` (a WebSocket relayed once the origin agrees); the origin's side is
//! the gateway's `origin` and `secure`.

mod client;
mod rewound;
mod upgrade;

use std::sync::Arc;

pub(super) use client::serve;

use super::origin::Origins;
use crate::tls::FrontTls;

/// What interception needs besides the gateway's config: the leaves clients are shown,
/// and the TLS client for origins.
pub struct Interception {
    pub(super) front: FrontTls,
    origins: Origins,
}

impl Interception {
    /// Leaves from `front`, origins verified by `origin` (its roots and `insecure_origins`).
    pub fn new(front: FrontTls, origin: Arc<rustls::ClientConfig>) -> Interception {
        Interception {
            front,
            origins: Origins::new(origin),
        }
    }

    pub(in crate::gateway) fn origins(&self) -> &Origins {
        &self.origins
    }
}
