//! `ca init` and `ca show` (docs/intercept.md, "The CA"), and the CA as `serve` and
//! `config check` need it: required when a gateway intercepts, else served at `/ca.pem`
//! when one is there.

use std::path::Path;
use std::sync::Arc;

use super::{CaAction, CliError, Context};
use crate::config::{CaFiles, Config};
use crate::tls::{CaCertificate, CaError, CertAuthority};

pub(super) fn ca(ctx: &Context, action: CaAction) -> Result<(), CliError> {
    match action {
        CaAction::Init { out, force } => {
            let files = match &out {
                Some(dir) => CaFiles::in_dir(dir),
                None => ctx.config.tls.ca_files(&ctx.db),
            };
            let replaced = force && (files.cert.exists() || files.key.exists());
            let ca = CertAuthority::create(&files, force).map_err(ca_error)?;
            print!("{}", created(&ca, replaced));
            Ok(())
        }
        CaAction::Show => show(&ctx.config.tls.ca_files(&ctx.db)),
    }
}

fn created(ca: &CertAuthority, replaced: bool) -> String {
    let (c, f) = (ca.certificate(), ca.files());
    let mut s = format!(
        "created the CA {}\ncertificate: {} (clients trust this file)\nkey: {} (mode 0600; \
         copy it only to the other daemons of a fleet)\nSHA-256 fingerprint: {}\n",
        c.subject(),
        f.cert.display(),
        f.key.display(),
        c.fingerprint()
    );
    if replaced {
        s.push_str(
            "the old CA is replaced: clients must trust the new certificate, and a running \
             daemon keeps the old one until it restarts\n",
        );
    }
    s.push_str(&format!(
        "next: trust it in each client (e.g. `curl --cacert {}`), then list hosts in \
         [[gateway]] intercept\n",
        f.cert.display()
    ));
    s
}

/// The certificate and its fingerprints on stdout; a key that `serve` would refuse is
/// named on stderr.
fn show(files: &CaFiles) -> Result<(), CliError> {
    let cert = CaCertificate::read(&files.cert).map_err(ca_error)?;
    let when = |t| humantime::format_rfc3339_seconds(t).to_string();
    print!(
        "{}subject: {}\nvalid: {} to {}\nSHA-256 fingerprint: {}\nSPKI SHA-256 (base64): {}\n\
         certificate: {}\n",
        cert.pem(),
        cert.subject(),
        when(cert.not_before()),
        when(cert.not_after()),
        cert.fingerprint(),
        cert.spki_sha256(),
        files.cert.display()
    );
    match CertAuthority::load(files) {
        Ok(_) => outln!("key: {} (usable)", files.key.display()),
        Err(e) => eprintln!("proxypool: warning: the CA cannot be used for interception: {e}"),
    }
    Ok(())
}

/// What `serve` and `config check` do about the CA, before anything changes: a gateway
/// that intercepts needs a usable one (else exit 2 naming the fix); without one, a CA that
/// is there is still loaded, for `/ca.pem`, and a problem with it is only a warning.
/// Origins a gateway will not verify are named in a warning.
pub(super) fn for_serve(cfg: &Config, db: &Path) -> Result<Option<Arc<CertAuthority>>, CliError> {
    for g in cfg
        .gateways
        .iter()
        .filter(|g| !g.insecure_origins.is_empty())
    {
        tracing::warn!(
            gateway = %g.listen,
            hosts = %g.insecure_origins.entries().join(","),
            "origin certificates are NOT verified for these hosts (insecure_origins)"
        );
    }
    let files = cfg.tls.ca_files(db);
    let needed = cfg.gateways.iter().position(|g| !g.intercept.is_empty());
    let loaded = CertAuthority::load(&files);
    let ca = match (loaded, needed) {
        (Ok(ca), _) => Arc::new(ca),
        (Err(e), Some(i)) => {
            return Err(CliError::usage(format!(
                "gateway[{i}].intercept needs the CA: {e}"
            )))
        }
        (Err(CaError::Missing { .. }), None) => return Ok(None),
        (Err(e), None) => {
            tracing::warn!(error = %e, "CA not loaded: /ca.pem answers 404");
            return Ok(None);
        }
    };
    for (i, g) in cfg.gateways.iter().enumerate() {
        if !g.intercept.is_empty() {
            crate::tls::origin_config(cfg.tls.extra_roots.as_deref(), &g.insecure_origins)
                .map_err(|e| CliError::usage(format!("gateway[{i}]: {e}")))?;
        }
    }
    Ok(Some(ca))
}

fn ca_error(e: CaError) -> CliError {
    match e {
        CaError::Io { .. } | CaError::Build(_) => CliError::failed(e.to_string()),
        _ => CliError::usage(e.to_string()),
    }
}
