//! The secrets of each listener (docs/operators.md, "Tokens and roles"): each from its
//! environment variable, else from the file the config names; and the token a TCP client
//! sends. A secret is never printed: errors name where it came from.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::CliError;
use crate::config::TokenFiles;
use crate::server::token::{Secret, Tokens, ADMIN_ENV, LEASE_ENV};

/// The environment variable of the `--gateway` flag's token.
pub(super) const GATEWAY_ENV: &str = "PROXYPOOL_GATEWAY_TOKEN";

/// What `serve` protects its listeners with.
pub(super) struct ServeSecrets {
    /// The TCP listener's tokens, by role.
    pub(super) tcp: Tokens,
    /// The HTTP listener's bearer token.
    pub(super) http: Option<String>,
    /// The `--gateway` flag's token (config gateways have their own `token`).
    pub(super) gateway: Option<String>,
}

impl ServeSecrets {
    /// Read every secret `serve` needs (the TCP listener's only with `tcp`: without a
    /// listener they guard nothing); a file that cannot be read is bad input.
    pub(super) fn read(files: &TokenFiles, tcp: bool) -> Result<ServeSecrets, CliError> {
        let tcp = if tcp {
            let admin = secret(ADMIN_ENV, files.admin.as_deref(), "server.token_file")?;
            let lease = secret(LEASE_ENV, files.lease.as_deref(), "server.lease_token_file")?;
            Tokens::new(admin, lease).map_err(|e| CliError::usage(e.to_string()))?
        } else {
            Tokens::default()
        };
        let http = secret(
            crate::web::TOKEN_ENV,
            files.http.as_deref(),
            "server.http_token_file",
        )?;
        Ok(ServeSecrets {
            tcp,
            http: http.map(|s| s.value),
            gateway: env(GATEWAY_ENV),
        })
    }
}

/// The token a TCP client sends: `PROXYPOOL_LEASE_TOKEN` when set (the least a scraper
/// needs), else `PROXYPOOL_TOKEN`.
pub(super) fn client_token() -> Option<String> {
    env(LEASE_ENV).or_else(|| env(ADMIN_ENV))
}

/// An environment variable; empty counts as unset.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|t| !t.is_empty())
}

/// `var` when set, else the contents of `file` (config key `key`).
fn secret(var: &str, file: Option<&Path>, key: &str) -> Result<Option<Secret>, CliError> {
    if let Some(value) = env(var) {
        return Ok(Some(Secret {
            value,
            from: var.to_string(),
        }));
    }
    let Some(path) = file else {
        return Ok(None);
    };
    let from = format!("{key} ({})", path.display());
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("{key}: cannot read {}: {e}", path.display())))?;
    // One secret on the first line; the newline an editor adds is not part of it.
    let value = text.lines().next().unwrap_or("").trim().to_string();
    if value.is_empty() {
        return Err(CliError::usage(format!(
            "{key}: {} is empty: write the secret on its first line",
            path.display()
        )));
    }
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                key,
                file = %path.display(),
                mode = format!("{mode:o}"),
                "a token file is readable by other users; chmod 600 it"
            );
        }
    }
    Ok(Some(Secret { value, from }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let cases = [
            (write("a", "s3cret-value\n"), Ok("s3cret-value")),
            (
                write("b", "  s3cret-value  \r\nsecond line\n"),
                Ok("s3cret-value"),
            ),
            (write("c", "\n"), Err("is empty")),
            (dir.path().join("missing"), Err("cannot read")),
        ];
        for (path, want) in cases {
            let got = secret(
                "PROXYPOOL_TEST_UNSET_VARIABLE",
                Some(&path),
                "server.token_file",
            );
            match (got, want) {
                (Ok(Some(s)), Ok(v)) => {
                    assert_eq!(s.value, v);
                    assert!(s.from.starts_with("server.token_file ("), "{}", s.from);
                }
                (Err(e), Err(part)) => {
                    assert_eq!(e.code, 2);
                    assert!(
                        e.message.starts_with("server.token_file: "),
                        "{}",
                        e.message
                    );
                    assert!(e.message.contains(part), "{}", e.message);
                }
                (got, want) => panic!("{}: {got:?} vs {want:?}", path.display()),
            }
        }
        assert!(secret("PROXYPOOL_TEST_UNSET_VARIABLE", None, "k")
            .unwrap()
            .is_none());
    }
}
