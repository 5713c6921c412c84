//! `[tls]`: where the install's CA lives (the certificate and its key) and the further
//! roots trusted for origins (docs/intercept.md).

use std::path::{Path, PathBuf};

/// File names of the CA when `[tls]` does not name them: beside the database.
pub const CA_CERT_FILE: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca.key";

/// `[tls]` as written, paths resolved against the config file's folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// `ca_cert`; `None`: beside the database.
    pub ca_cert: Option<PathBuf>,
    /// `ca_key`; `None`: beside the database.
    pub ca_key: Option<PathBuf>,
    /// `extra_roots`: a PEM file of roots trusted for origins besides the built-in set.
    pub extra_roots: Option<PathBuf>,
}

/// The two files of a CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaFiles {
    /// The certificate (PEM), public.
    pub cert: PathBuf,
    /// The private key (PKCS#8 PEM), mode 0600.
    pub key: PathBuf,
}

impl CaFiles {
    /// `ca.pem` and `ca.key` in `dir`.
    pub fn in_dir(dir: &Path) -> CaFiles {
        CaFiles {
            cert: dir.join(CA_CERT_FILE),
            key: dir.join(CA_KEY_FILE),
        }
    }
}

impl TlsConfig {
    /// `[tls]` as written, each path through `resolve` (relative to the config file's
    /// folder); an empty string is as if the key were left out.
    pub(super) fn written(
        raw: Option<super::raw::RawTls>,
        resolve: impl Fn(PathBuf) -> PathBuf,
    ) -> TlsConfig {
        let Some(t) = raw else {
            return TlsConfig::default();
        };
        let path = |p: Option<PathBuf>| p.filter(|p| !p.as_os_str().is_empty()).map(&resolve);
        TlsConfig {
            ca_cert: path(t.ca_cert),
            ca_key: path(t.ca_key),
            extra_roots: path(t.extra_roots),
        }
    }

    /// The CA's files: as `[tls]` names them, else in the folder of `db`, the SQLite
    /// file in use. (A PostgreSQL store has no file: the caller passes the default
    /// database path, so the CA sits in `$XDG_DATA_HOME/proxypool/`.)
    pub fn ca_files(&self, db: &Path) -> CaFiles {
        let dir = match db.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let beside = CaFiles::in_dir(dir);
        CaFiles {
            cert: self.ca_cert.clone().unwrap_or(beside.cert),
            key: self.ca_key.clone().unwrap_or(beside.key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_sit_beside_the_database() {
        let t = TlsConfig::default();
        let cases = [
            (
                "/var/lib/pp/pool.db",
                "/var/lib/pp/ca.pem",
                "/var/lib/pp/ca.key",
            ),
            ("pool.db", "./ca.pem", "./ca.key"),
        ];
        for (db, cert, key) in cases {
            let f = t.ca_files(Path::new(db));
            assert_eq!((f.cert, f.key), (cert.into(), key.into()), "{db}");
        }
        let named = TlsConfig {
            ca_cert: Some("/etc/pp/root.pem".into()),
            ..Default::default()
        };
        let f = named.ca_files(Path::new("/var/lib/pp/pool.db"));
        assert_eq!(f.cert, PathBuf::from("/etc/pp/root.pem"));
        assert_eq!(f.key, PathBuf::from("/var/lib/pp/ca.key"));
    }
}
