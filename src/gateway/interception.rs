//! What interception needs besides a gateway's config (docs/intercept.md): the leaves
//! intercepted clients are shown, and the TLS client for origins with the HTTP/2
//! connections it keeps.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::descriptors::Descriptors;
use super::origin::Origins;
use crate::tls::FrontTls;

pub struct Interception {
    pub(super) front: FrontTls,
    origins: Origins,
    /// The gateways' descriptor budget, for what a client connection's own two do not
    /// cover.
    fds: Descriptors,
}

impl Interception {
    /// Leaves from `front`, origins verified by `origin` (its roots and `insecure_origins`).
    pub fn new(front: FrontTls, origin: Arc<rustls::ClientConfig>) -> Interception {
        Interception {
            front,
            origins: Origins::new(origin),
            fds: Descriptors::unlimited(),
        }
    }

    /// Kept origin connections within `fds` (the gateways' budget).
    pub(super) fn with_descriptors(self, fds: Descriptors) -> Interception {
        Interception {
            origins: self.origins.with_descriptors(fds.clone()),
            fds,
            ..self
        }
    }

    /// A descriptor for an upstream connection beyond the one a client connection's own
    /// budget covers, if the budget has one.
    pub(super) fn extra_descriptor(&self) -> Option<OwnedSemaphorePermit> {
        self.fds.idle()
    }

    pub(super) fn origins(&self) -> &Origins {
        &self.origins
    }
}
