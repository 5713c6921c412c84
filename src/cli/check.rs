//! `config check`: validate a config file without a daemon (docs/reference.md, "Command
//! line"): what `serve` would refuse is refused here, naming the key and its line.

use std::path::PathBuf;

use super::secrets::ServeSecrets;
use super::{CliError, Global};
use crate::config::{self, Config};
use crate::store::Location;

/// Check the file of `--config` (or `PROXYPOOL_CONFIG`, else the default path); prints a
/// one-line summary.
pub(super) fn config_check(g: &Global) -> Result<(), CliError> {
    let path: PathBuf = match &g.config {
        Some(p) => p.clone(),
        None => {
            let p = config::default_config_path();
            if !p.exists() {
                return Err(CliError::usage(format!(
                    "no config file to check: {} does not exist (give --config FILE or PROXYPOOL_CONFIG)",
                    p.display()
                )));
            }
            p
        }
    };
    let cfg = Config::load(&path)?;
    // The store as `serve` reads it: a URL's options and TLS files, a path's shape.
    let store = match (&cfg.store_url, &cfg.store_path) {
        (Some(url), _) => Some(("store.url", PathBuf::from(url))),
        (None, Some(p)) => Some(("store.path", p.clone())),
        (None, None) => None,
    };
    let at = match store {
        Some((key, v)) => Location::parse(&v).map_err(|e| {
            CliError::usage(format!("invalid config {}: {key}: {e}", path.display()))
        })?,
        None => Location::File(config::default_db_path()),
    };
    // What `serve` builds from the file before it listens: probe targets, gateway CA files,
    // the secrets' files.
    crate::probe::run::probers(&cfg).map_err(|e| CliError::usage(e.to_string()))?;
    for (i, g) in cfg.gateways.iter().enumerate() {
        crate::dial::connector(g.ca_file.as_deref())
            .map_err(|e| CliError::usage(format!("gateway[{i}].ca_file: {e}")))?;
    }
    let secrets = ServeSecrets::read(&cfg.token_files, true)?;
    if let Some(addr) = cfg.http {
        crate::web::check_bind(addr, secrets.http.as_deref()).map_err(|e| {
            CliError::usage(format!(
                "invalid config {}: server.http: {e}",
                path.display()
            ))
        })?;
    }
    // What `serve` would load as the CA: refused when a gateway intercepts without one.
    let ca = super::ca::for_serve(&cfg, &database(g, &cfg))?;
    let mut line = summary(&path, &cfg, &at);
    if let Some(ca) = ca {
        line.push_str(&format!(", CA {}", ca.files().cert.display()));
    }
    outln!("{line}");
    Ok(())
}

/// The SQLite file `serve` would use (as `Context::resolve` finds it), or the default
/// path for a PostgreSQL store: where the CA's files are by default.
fn database(g: &Global, cfg: &Config) -> PathBuf {
    let named = g.db.clone().or_else(|| {
        cfg.store_url
            .clone()
            .map(PathBuf::from)
            .or_else(|| cfg.store_path.clone())
    });
    match named.map(|n| crate::store::Location::parse(&n)) {
        Some(Ok(crate::store::Location::File(p))) => p,
        _ => config::default_db_path(),
    }
}

/// `config F: ok: 2 pools (default, eu), 3 endpoints, 1 gateway, database D, http A`.
fn summary(path: &std::path::Path, cfg: &Config, at: &Location) -> String {
    let pools: Vec<&str> = cfg.pools.keys().map(String::as_str).collect();
    let mut s = format!(
        "config {}: ok: {} pool{} ({}), {} endpoint{}, {} gateway{}",
        path.display(),
        pools.len(),
        plural(pools.len()),
        pools.join(", "),
        cfg.endpoints.len(),
        plural(cfg.endpoints.len()),
        cfg.gateways.len(),
        plural(cfg.gateways.len()),
    );
    let rules = cfg.bans.names().count();
    if rules > 0 {
        s.push_str(&format!(", {rules} ban rule{}", plural(rules)));
    }
    s.push_str(&format!(", database {}", at.describe()));
    if let Some(a) = cfg.http {
        s.push_str(&format!(", http {a}"));
    }
    s
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
