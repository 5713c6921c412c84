//! HTTPS interception's certificates (docs/intercept.md): the install's own CA
//! (`CertAuthority`, its files and checks), leaf certificates minted per host and cached
//! in memory (`Leaves`), the TLS server config shown to intercepted clients (`FrontTls`)
//! and the TLS client config for origins (`origin_config`, `OriginTlsFailure`).

mod authority;
mod certificate;
mod error;
mod files;
mod front;
mod leaf_name;
mod leaves;
mod origin;

pub use authority::{CertAuthority, Minted, LEAF_BACKDATE, LEAF_LIFETIME};
pub use certificate::CaCertificate;
pub use error::{CaError, LeafError, RootsError};
pub use front::FrontTls;
pub use leaf_name::LeafName;
pub use leaves::{Clock, Leaves, DEFAULT_CAPACITY};
pub use origin::{origin_config, OriginTlsCause, OriginTlsFailure};

#[cfg(test)]
mod tests;
