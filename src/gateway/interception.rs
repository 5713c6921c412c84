//! What interception needs besides a gateway's config (docs/intercept.md): the leaves
//! intercepted clients are shown, and the TLS client for origins with the HTTP/2
//! connections it keeps.

use std::sync::Arc;

use super::origin::Origins;
use crate::tls::FrontTls;

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

    /// Kept origin connections within `fds` (the gateways' budget).
    pub(super) fn with_descriptors(self, fds: super::descriptors::Descriptors) -> Interception {
        Interception {
            origins: self.origins.with_descriptors(fds),
            ..self
        }
    }

    pub(super) fn origins(&self) -> &Origins {
        &self.origins
    }
}
