//! Which PostgreSQL database, and how to reach it: a libpq-style URL
//! (`postgresql://user@host1:5432,host2:5432/db?sslmode=verify-full&target_session_attrs=read-write`),
//! the password from the URL, `PGPASSWORD` or the password file (`PGPASSFILE`, else
//! `~/.pgpass`), and TLS through rustls by `sslmode` and `sslrootcert`
//! (docs/fleet.md, "Connecting"). The password is never shown: `describe` and `Debug`
//! leave it out.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::Host;

use super::url;
use crate::store::StoreError;

/// Whether `s` names a PostgreSQL database rather than a SQLite file.
pub fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// How the TLS of a connection is checked, as libpq's `sslmode` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// `disable`: plain TCP.
    Disable,
    /// `allow`, `prefer` (the default): TLS when the server offers it, certificate not
    /// checked.
    Prefer,
    /// `require`: TLS or nothing, certificate not checked (checked as `verify-ca` when
    /// `sslrootcert` is given, as libpq does).
    Require,
    /// `verify-ca`: the certificate chains to a trusted root; the name is not checked.
    VerifyCa,
    /// `verify-full`: the chain and the host name.
    VerifyFull,
}

impl Tls {
    fn parse(v: &str) -> Result<Tls, StoreError> {
        Ok(match v {
            "disable" => Tls::Disable,
            "allow" | "prefer" => Tls::Prefer,
            "require" => Tls::Require,
            "verify-ca" => Tls::VerifyCa,
            "verify-full" => Tls::VerifyFull,
            other => {
                return Err(StoreError::Config(format!(
                    "sslmode {other:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                )))
            }
        })
    }
}

/// The query options proxypool reads itself; the rest (`kept`) go to tokio-postgres.
struct Options<'a> {
    tls: Tls,
    root_cert: Option<PathBuf>,
    passfile: Option<PathBuf>,
    /// `tcp_user_timeout` in libpq's unit, milliseconds (tokio-postgres reads seconds);
    /// 0 leaves the system's default.
    tcp_user_timeout: Option<u64>,
    kept: Vec<&'a str>,
}

impl<'a> Options<'a> {
    fn read(query: &'a str, bad: &dyn Fn(String) -> StoreError) -> Result<Self, StoreError> {
        let mut o = Options {
            tls: Tls::Prefer,
            root_cert: None,
            passfile: None,
            tcp_user_timeout: None,
            kept: Vec::new(),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_encoding::percent_decode_str(v)
                .decode_utf8()
                .map_err(|_| bad(format!("the value of {k} is not UTF-8")))?
                .into_owned();
            match k {
                "sslmode" => o.tls = Tls::parse(&value).map_err(|e| bad(e.to_string()))?,
                "sslrootcert" => o.root_cert = Some(PathBuf::from(value)),
                "passfile" => o.passfile = Some(PathBuf::from(value)),
                "tcp_user_timeout" => {
                    let ms: u64 = value.parse().map_err(|_| {
                        bad(format!("tcp_user_timeout must be milliseconds, not {value:?}"))
                    })?;
                    // Below a second it is surely meant as seconds (which some drivers
                    // read), and would drop connections under load.
                    if (1..1000).contains(&ms) {
                        return Err(bad(format!(
                            "tcp_user_timeout is in milliseconds (libpq's unit): {ms} would be {ms} ms; write {}000 for {ms} s",
                            ms
                        )));
                    }
                    o.tcp_user_timeout = Some(ms);
                }
                "sslcert" | "sslkey" | "sslpassword" => {
                    return Err(bad(format!(
                        "{k}: client certificates are not supported; authenticate with a password (scram-sha-256)"
                    )))
                }
                _ => o.kept.push(pair),
            }
        }
        Ok(o)
    }
}

/// A PostgreSQL database to connect to.
#[derive(Clone, PartialEq)]
pub struct PgTarget {
    config: tokio_postgres::Config,
    tls: Tls,
    root_cert: Option<PathBuf>,
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgTarget({})", self.describe())
    }
}

/// How long one attempt to reach a host may take before the next host is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long data sent may go unacknowledged before the connection counts as dead, unless
/// the URL says (`tcp_user_timeout`); it also ends the keepalive probes of an idle one.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection is idle before the first keepalive probe, unless the URL says
/// (`keepalives_idle`).
const KEEPALIVES_IDLE: Duration = Duration::from_secs(30);

impl PgTarget {
    /// Parse a `postgres://` or `postgresql://` URL; the password comes from the URL, else
    /// `PGPASSWORD`, else the password file.
    pub fn parse(url: &str) -> Result<PgTarget, StoreError> {
        let bad = |why: String| StoreError::Config(format!("{}: {why}", url::redact(url)));
        if !is_url(url) {
            return Err(bad("not a postgres:// or postgresql:// URL".into()));
        }
        if let Some(why) = url::problem(url) {
            return Err(bad(why));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let Options {
            mut tls,
            root_cert,
            passfile,
            tcp_user_timeout,
            mut kept,
        } = Options::read(query, &bad)?;
        // The TLS decision is ours (rustls); tokio-postgres only needs to know whether to ask.
        let mode = match tls {
            Tls::Disable => "disable",
            Tls::Prefer => "prefer",
            Tls::Require | Tls::VerifyCa | Tls::VerifyFull => "require",
        };
        kept.push(match mode {
            "disable" => "sslmode=disable",
            "prefer" => "sslmode=prefer",
            _ => "sslmode=require",
        });
        let rebuilt = format!("{base}?{}", kept.join("&"));
        let mut config =
            tokio_postgres::Config::from_str(&rebuilt).map_err(|e| bad(e.to_string()))?;
        if config.get_hosts().is_empty() {
            return Err(bad("no host".into()));
        }
        if config.get_user().is_none() {
            config.user(
                os_user().ok_or_else(|| {
                    bad("no user in the URL and none known for this process".into())
                })?,
            );
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // A server that stops answering (a frozen host, packets dropped in a failover) is
        // given up on within a minute, where the kernel's defaults wait about 15 minutes
        // for a request and over two hours on an idle connection (the feed's listener).
        match tcp_user_timeout {
            None => config.tcp_user_timeout(TCP_USER_TIMEOUT),
            Some(0) => &mut config,
            Some(ms) => config.tcp_user_timeout(Duration::from_millis(ms)),
        };
        if !kept.iter().any(|p| p.starts_with("keepalives_idle=")) {
            config.keepalives_idle(KEEPALIVES_IDLE);
        }
        if config.get_application_name().is_none() {
            config.application_name("proxypool");
        }
        if config.get_password().is_none() {
            if let Some(pw) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
                config.password(pw.into_encoded_bytes());
            } else if let Some(pw) = password_from_file(&config, passfile)? {
                config.password(pw);
            }
        }
        if tls == Tls::Require && root_cert.is_some() {
            tls = Tls::VerifyCa;
        }
        let target = PgTarget {
            config,
            tls,
            root_cert,
        };
        // A root certificate that cannot be read is bad input, found here (exit 2, `config
        // check`) rather than when the first connection is made.
        target.connector().map_err(|e| bad(e.to_string()))?;
        Ok(target)
    }

    /// `postgresql://user@host:port,host2:port/db`: what to call the database in logs,
    /// errors and `status`. Never the password.
    pub fn describe(&self) -> String {
        let c = &self.config;
        let ports = c.get_ports();
        let hosts: Vec<String> = c
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match h {
                    Host::Tcp(name) if name.contains(':') => format!("[{name}]:{port}"),
                    Host::Tcp(name) => format!("{name}:{port}"),
                    Host::Unix(dir) => format!("{}:{port}", dir.display()),
                }
            })
            .collect();
        format!(
            "postgresql://{}@{}/{}",
            c.get_user().unwrap_or_default(),
            hosts.join(","),
            c.get_dbname().or(c.get_user()).unwrap_or_default()
        )
    }

    /// The connection settings (with the password: never print them).
    pub(super) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The TLS connector `sslmode` and `sslrootcert` ask for.
    pub(super) fn connector(&self) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Config(format!("TLS setup: {e}")))?;
        let roots = || -> Result<Arc<rustls::RootCertStore>, StoreError> {
            let mut roots = rustls::RootCertStore::empty();
            match &self.root_cert {
                Some(path) => add_pem(&mut roots, path)?,
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            Ok(Arc::new(roots))
        };
        let cfg = match self.tls {
            Tls::Disable | Tls::Prefer | Tls::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
                .with_no_client_auth(),
            Tls::VerifyFull => builder
                .with_root_certificates(roots()?)
                .with_no_client_auth(),
            Tls::VerifyCa => {
                let inner =
                    rustls::client::WebPkiServerVerifier::builder_with_provider(roots()?, provider)
                        .build()
                        .map_err(|e| StoreError::Config(format!("TLS setup: {e}")))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
                    .with_no_client_auth()
            }
        };
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(cfg))
    }
}

fn add_pem(roots: &mut rustls::RootCertStore, path: &Path) -> Result<(), StoreError> {
    let bad = |m: String| StoreError::Config(format!("sslrootcert {}: {m}", path.display()));
    let data = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut found = 0;
    for cert in rustls_pemfile::certs(&mut data.as_slice()) {
        let cert = cert.map_err(|e| bad(format!("bad PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("bad certificate: {e}")))?;
        found += 1;
    }
    if found == 0 {
        return Err(bad("no PEM certificate found".into()));
    }
    Ok(())
}

/// `prefer` and `require`: encrypted, the certificate taken as it comes (libpq's meaning).
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked, the name on the certificate is not.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The name of the user this process runs as (libpq's default user).
fn os_user() -> Option<String> {
    if let Some(u) = std::env::var("USER").ok().filter(|u| !u.is_empty()) {
        return Some(u);
    }
    // SAFETY: getpwuid returns a pointer into static storage or null; the name is copied
    // out at once.
    unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        if pw.is_null() || (*pw).pw_name.is_null() {
            return None;
        }
        Some(
            std::ffi::CStr::from_ptr((*pw).pw_name)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// The password for the first of the target's hosts that the password file has a line
/// for (`hostname:port:database:username:password`, `*` matching anything, `\` escaping
/// `:` and `\`). A file readable by others is ignored with a warning, as libpq does.
fn password_from_file(
    c: &tokio_postgres::Config,
    passfile: Option<PathBuf>,
) -> Result<Option<Vec<u8>>, StoreError> {
    let path = match passfile.or_else(|| std::env::var_os("PGPASSFILE").map(PathBuf::from)) {
        Some(p) => p,
        None => match std::env::var_os("HOME") {
            Some(h) => Path::new(&h).join(".pgpass"),
            None => return Ok(None),
        },
    };
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(None);
    };
    use std::os::unix::fs::PermissionsExt;
    if !meta.is_file() {
        return Ok(None);
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            file = %path.display(),
            "password file has group or world access; ignored (chmod 0600 it)"
        );
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| StoreError::Config(format!("password file {}: {e}", path.display())))?;
    let user = c.get_user().unwrap_or_default();
    let db = c.get_dbname().unwrap_or(user);
    let ports = c.get_ports();
    for (i, h) in c.get_hosts().iter().enumerate() {
        let host = match h {
            Host::Tcp(name) => name.clone(),
            // libpq matches a socket directory as "localhost".
            Host::Unix(_) => "localhost".to_string(),
        };
        let port = ports
            .get(i)
            .or(ports.first())
            .copied()
            .unwrap_or(5432)
            .to_string();
        if let Some(pw) = pgpass_lookup(&text, &host, &port, db, user) {
            return Ok(Some(pw.into_bytes()));
        }
    }
    Ok(None)
}

/// The password of the first line of a password file matching the four fields.
pub(super) fn pgpass_lookup(
    text: &str,
    host: &str,
    port: &str,
    db: &str,
    user: &str,
) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_pgpass(line);
        if fields.len() < 5 {
            continue;
        }
        let want = [host, port, db, user];
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4..].join(":"));
        }
    }
    None
}

/// The colon-separated fields of a password file line, with `\:` and `\\` unescaped.
fn split_pgpass(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => {
                if let Some(n) = chars.next() {
                    out.last_mut().expect("one field").push(n);
                }
            }
            ':' if out.len() < 5 => out.push(String::new()),
            _ => out.last_mut().expect("one field").push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_file_lines_match_by_field_with_wildcards_and_escapes() {
        let text = "# comment\n\
                    db.example:5432:pool:app:first\n\
                    *:*:other:app:second\n\
                    h\\:x:6432:*:app:pa\\:ss\\\\word\n\
                    *:*:*:*:last:with:colons\n";
        let cases = [
            (("db.example", "5432", "pool", "app"), Some("first")),
            (
                ("db.example", "5433", "pool", "app"),
                Some("last:with:colons"),
            ),
            (("any", "1", "other", "app"), Some("second")),
            (("h:x", "6432", "zz", "app"), Some("pa:ss\\word")),
        ];
        for ((h, p, d, u), want) in cases {
            assert_eq!(
                pgpass_lookup(text, h, p, d, u).as_deref(),
                want,
                "{h}:{p}:{d}:{u}"
            );
        }
        assert_eq!(pgpass_lookup("a:1:b:c:pw\n", "x", "1", "b", "c"), None);
    }

    #[test]
    fn a_root_certificate_that_cannot_be_read_is_bad_input_and_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "no certificate here\n").unwrap();
        let url = |root: &Path| {
            format!(
                "postgresql://u:pw@127.0.0.1:1/d?sslmode=verify-full&sslrootcert={}",
                root.display()
            )
        };
        for (root, says) in [
            (
                Path::new("/nonexistent/ca.pem"),
                "sslrootcert /nonexistent/ca.pem",
            ),
            (not_pem.as_path(), "no PEM certificate"),
        ] {
            let e = PgTarget::parse(&url(root)).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains(":pw@"), "{e}");
        }
        // `prefer` does not check the server: the file is not read (libpq's meaning).
        assert!(PgTarget::parse(&url(&not_pem).replace("verify-full", "prefer")).is_ok());
        // A certificate gone between reading the URL and opening the store, inside a
        // runtime as every command opens it: refused, and the store's own runtime is
        // dropped without a panic.
        let ca = rcgen::generate_simple_self_signed(vec!["db.test".into()]).unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(&pem, ca.cert.pem()).unwrap();
        let target = PgTarget::parse(&url(&pem)).unwrap();
        std::fs::remove_file(&pem).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            super::super::Postgres::connect(&target, Duration::from_secs(15)).err()
        });
        let e = got.expect("refused").to_string();
        assert!(e.contains("sslrootcert"), "{e}");
    }

    /// A dead server is found out within half a minute unless the URL says otherwise;
    /// `tcp_user_timeout` is libpq's milliseconds, 0 the system's default.
    #[test]
    fn connections_give_up_on_a_silent_server_as_the_url_says() {
        let cases: [(&str, Option<Duration>, Duration); 4] = [
            ("", Some(TCP_USER_TIMEOUT), KEEPALIVES_IDLE),
            (
                "?tcp_user_timeout=1500",
                Some(Duration::from_millis(1500)),
                KEEPALIVES_IDLE,
            ),
            ("?tcp_user_timeout=0", None, KEEPALIVES_IDLE),
            (
                "?keepalives_idle=600",
                Some(TCP_USER_TIMEOUT),
                Duration::from_secs(600),
            ),
        ];
        for (query, user_timeout, idle) in cases {
            let t = PgTarget::parse(&format!("postgresql://u:pw@db1/pool{query}")).unwrap();
            assert_eq!(
                t.config.get_tcp_user_timeout().copied(),
                user_timeout,
                "{query}"
            );
            assert_eq!(t.config.get_keepalives_idle(), idle, "{query}");
        }
        for (bad, says) in [
            ("30s", "tcp_user_timeout must be milliseconds"),
            ("60", "would be 60 ms; write 60000 for 60 s"),
        ] {
            let e = PgTarget::parse(&format!(
                "postgresql://u:pw@db1/pool?tcp_user_timeout={bad}"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains(":pw@"), "{e}");
        }
    }

    #[test]
    fn urls_parse_with_libpq_options_and_never_show_the_password() {
        let t = PgTarget::parse(
            "postgresql://app:s3cret@db1:5432,db2:5433/pool?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(t.describe(), "postgresql://app@db1:5432,db2:5433/pool");
        assert_eq!(t.tls, Tls::Disable);
        assert_eq!(t.config.get_password(), Some(&b"s3cret"[..]));
        assert!(!format!("{t:?}").contains("s3cret"));
        assert_eq!(
            t.config.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        let cases = [
            ("postgres://u@h/d?sslmode=verify-full", Tls::VerifyFull),
            ("postgres://u@h/d?sslmode=require", Tls::Require),
            ("postgres://u@h/d?sslmode=allow", Tls::Prefer),
            ("postgres://u@h/d", Tls::Prefer),
        ];
        for (url, want) in cases {
            assert_eq!(PgTarget::parse(url).unwrap().tls, want, "{url}");
        }
        for (bad, says) in [
            ("postgresql://u:pw@h/d?sslmode=sometimes", "sslmode"),
            (
                "postgresql://u:pw@h/d?sslcert=/c.pem",
                "client certificates",
            ),
            ("postgresql://u:pw@h/d?nonsense_option=1", "nonsense_option"),
        ] {
            let e = PgTarget::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains(":pw@"), "{e}");
        }
    }
}
