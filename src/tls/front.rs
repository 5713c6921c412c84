//! The TLS server the gateway shows a client whose CONNECT it intercepts: a leaf for the
//! name the client asks for (SNI), else for the CONNECT host (a client connecting to an
//! IP address sends no SNI), ALPN `h2` and `http/1.1`.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use super::{LeafName, Leaves};

/// Sessions remembered for resumption, shared by every intercepted connection.
const SESSIONS: usize = 4096;

/// Builds the per-connection server configs of intercepted connections.
#[derive(Debug, Clone)]
pub struct FrontTls {
    leaves: Arc<Leaves>,
    /// Everything but the resolver, shared (session cache and tickets included); each
    /// connection's config is a copy with its own resolver.
    base: Arc<ServerConfig>,
}

impl FrontTls {
    /// Over the leaves of one CA.
    pub fn new(leaves: Arc<Leaves>) -> Result<FrontTls, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let resolver = Arc::new(LeafResolver {
            leaves: leaves.clone(),
            fallback: None,
        });
        let mut base = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        base.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        base.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSIONS);
        base.ticketer = rustls::crypto::ring::Ticketer::new()?;
        Ok(FrontTls {
            leaves,
            base: Arc::new(base),
        })
    }

    /// The config for a connection the client opened with `CONNECT connect_host:port`:
    /// the SNI name's leaf, or `connect_host`'s when the client sends none. Costs a copy
    /// of the config and no signing; the leaf is minted (once) during the handshake only
    /// when it is not cached. A `connect_host` no certificate can be for leaves a client
    /// without SNI refused by an alert.
    pub fn config_for(&self, connect_host: &str) -> Arc<ServerConfig> {
        let mut cfg = (*self.base).clone();
        cfg.cert_resolver = Arc::new(LeafResolver {
            leaves: self.leaves.clone(),
            fallback: LeafName::parse(connect_host).ok(),
        });
        Arc::new(cfg)
    }

    /// The config that answers by SNI only (a client without SNI is refused): shared,
    /// for a caller that has no CONNECT host.
    pub fn sni_only(&self) -> Arc<ServerConfig> {
        self.base.clone()
    }

    /// For a caller that reads the ClientHello first (`tokio_rustls::LazyConfigAcceptor`):
    /// the shared config when the client sent SNI (no copy at all), else
    /// [`FrontTls::config_for`] the CONNECT host.
    pub fn config_for_hello(&self, sni: Option<&str>, connect_host: &str) -> Arc<ServerConfig> {
        match sni {
            Some(_) => self.base.clone(),
            None => self.config_for(connect_host),
        }
    }

    /// The leaf cache behind it.
    pub fn leaves(&self) -> &Arc<Leaves> {
        &self.leaves
    }
}

/// A leaf chosen by SNI, else the connection's fallback name. A name that is no DNS
/// name (rustls hands over only well-formed ones; this refuses what a certificate cannot
/// be for) or that fails to mint aborts the handshake with an alert.
#[derive(Debug)]
struct LeafResolver {
    leaves: Arc<Leaves>,
    fallback: Option<LeafName>,
}

impl ResolvesServerCert for LeafResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = match hello.server_name() {
            Some(sni) => match LeafName::parse(sni) {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(error = %e, "TLS client hello refused");
                    return None;
                }
            },
            None => self.fallback.clone()?,
        };
        match self.leaves.get(&name) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(error = %e, "no leaf certificate");
                None
            }
        }
    }
}
