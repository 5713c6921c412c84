//! The gateways' descriptor budget (docs/gateway.md, "Limits"): every client connection
//! holds two descriptors of it for its life (its own and its upstream's), every idle
//! upstream connection kept for reuse one. The daemon sizes it so the gateways never take
//! what the lease socket, the HTTP listener and the daemon's own files need
//! (`server::fd_limit::gateway_budget`); beyond it a new client gets `503`.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors a client connection holds: the client's socket and its upstream's.
const PER_CLIENT: u32 = 2;

/// A budget of open descriptors, shared by every gateway of the daemon.
#[derive(Clone, Debug)]
pub struct Descriptors(Arc<Semaphore>);

impl Descriptors {
    /// A budget of `n` descriptors.
    pub fn new(n: usize) -> Descriptors {
        Descriptors(Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS))))
    }

    /// No budget beyond the process's own limit (a gateway outside a daemon).
    pub fn unlimited() -> Descriptors {
        Descriptors::new(Semaphore::MAX_PERMITS)
    }

    /// What a new client connection holds, if the budget has it.
    pub(super) fn client(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_many_owned(PER_CLIENT).ok()
    }

    /// What an idle upstream connection holds, if the budget has it.
    pub(super) fn idle(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }

    /// Descriptors left.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_take_two_idle_connections_one_and_give_them_back() {
        let d = Descriptors::new(5);
        let a = d.client().expect("two of five");
        let b = d.client().expect("two of three");
        assert!(d.client().is_none(), "one left: no client");
        let idle = d.idle().expect("one left: an idle connection");
        assert!(d.idle().is_none());
        drop(a);
        assert_eq!(d.available(), 2);
        drop((b, idle));
        assert_eq!(d.available(), 5);
        assert!(Descriptors::unlimited().client().is_some());
    }
}
