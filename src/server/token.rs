//! The TCP listener's secrets and the role each one grants: the only access control a TCP
//! peer meets (docs/operators.md, "Tokens and roles").

use std::fmt;

/// Shortest token accepted for `--listen-tcp`.
pub const MIN_LEN: usize = 16;

/// The environment variable of the admin token.
pub const ADMIN_ENV: &str = "PROXYPOOL_TOKEN";
/// The environment variable of the lease token.
pub const LEASE_ENV: &str = "PROXYPOOL_LEASE_TOKEN";

/// What a request may do. A Unix-socket client is an `Admin` (the socket is the user's
/// own, mode 0600); a TCP client has the role of the token it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// `ping`, `lease`, `report`, `release`, `status`: what a scraper needs.
    Lease,
    /// Every op.
    Admin,
}

impl Role {
    /// The name in docs and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Lease => "lease",
            Role::Admin => "admin",
        }
    }

    /// Whether this role may send an op that needs `needed`.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a token is refused; names where it came from, never its value.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Only white space.
    #[error("{0} is blank: --listen-tcp needs a real secret of at least {MIN_LEN} characters")]
    Blank(String),
    /// Too short to resist guessing.
    #[error("{0} is {1} characters long: --listen-tcp needs at least {MIN_LEN}")]
    TooShort(String, usize),
    /// The admin and the lease token are the same: the lease role would be the admin's.
    #[error("the admin token ({0}) and the lease token ({1}) are the same: give each role its own secret")]
    Same(String, String),
}

/// Refuse a token a peer could guess; `from` names where it came from.
pub fn validate(token: &str, from: &str) -> Result<(), TokenError> {
    if token.trim().is_empty() {
        return Err(TokenError::Blank(from.to_string()));
    }
    // White space around a token (an editor's, a shell's) adds nothing a guesser needs.
    let n = token.trim().chars().count();
    if n < MIN_LEN {
        return Err(TokenError::TooShort(from.to_string(), n));
    }
    Ok(())
}

/// A secret and where it came from (an environment variable or a config key), for errors.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    pub value: String,
    pub from: String,
}

// A secret never reaches a log line through `{:?}`.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({}: ***)", self.from)
    }
}

/// The TCP listener's tokens: one per role, either may be absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    admin: Option<Secret>,
    lease: Option<Secret>,
}

impl Tokens {
    /// Both tokens checked (each long enough, and not the same).
    pub fn new(admin: Option<Secret>, lease: Option<Secret>) -> Result<Tokens, TokenError> {
        for s in admin.iter().chain(lease.iter()) {
            validate(&s.value, &s.from)?;
        }
        if let (Some(a), Some(l)) = (&admin, &lease) {
            if a.value == l.value {
                return Err(TokenError::Same(a.from.clone(), l.from.clone()));
            }
        }
        Ok(Tokens { admin, lease })
    }

    /// Whether any token is set (a TCP listener needs one).
    pub fn any(&self) -> bool {
        self.admin.is_some() || self.lease.is_some()
    }

    /// The role a token grants; `None` for a token that is neither. Both are compared in
    /// constant time, so the answer's timing does not tell which one was close.
    pub fn role_of(&self, given: &str) -> Option<Role> {
        let is = |s: &Option<Secret>| {
            s.as_ref()
                .is_some_and(|s| constant_time_eq(s.value.as_bytes(), given.as_bytes()))
        };
        let (admin, lease) = (is(&self.admin), is(&self.lease));
        if admin {
            Some(Role::Admin)
        } else if lease {
            Some(Role::Lease)
        } else {
            None
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(v: &str, from: &str) -> Secret {
        Secret {
            value: v.into(),
            from: from.into(),
        }
    }

    #[test]
    fn token_strength() {
        let blank = |s: &str| Err(TokenError::Blank(s.into()));
        let short = |n| Err(TokenError::TooShort("T".into(), n));
        let cases: &[(&str, Result<(), TokenError>)] = &[
            (" ", blank("T")),
            ("", blank("T")),
            ("                    ", blank("T")),
            ("short", short(5)),
            ("0123456789abcde", short(15)),
            ("0123456789abcdef", Ok(())),
            ("ééééééééééééééé", short(15)),
            ("a-very-long-and-random-token-here", Ok(())),
            ("      hunter2-x      ", short(9)),
            ("\t0123456789abcdef\n", Ok(())),
        ];
        for (t, want) in cases {
            assert_eq!(&validate(t, "T"), want, "{t:?}");
        }
    }

    #[test]
    fn each_token_grants_its_role() {
        let admin = "admin-0123456789abcdef";
        let lease = "lease-0123456789abcdef";
        let both = Tokens::new(
            Some(secret(admin, ADMIN_ENV)),
            Some(secret(lease, LEASE_ENV)),
        )
        .unwrap();
        let only_lease = Tokens::new(None, Some(secret(lease, LEASE_ENV))).unwrap();
        let cases = [
            (&both, admin, Some(Role::Admin)),
            (&both, lease, Some(Role::Lease)),
            (&both, "lease-0123456789abcde", None),
            (&both, "", None),
            (&only_lease, lease, Some(Role::Lease)),
            (&only_lease, admin, None),
            (&Tokens::default(), "", None),
        ];
        for (tokens, given, want) in cases {
            assert_eq!(tokens.role_of(given), want, "{given:?}");
        }
        assert!(both.any() && only_lease.any() && !Tokens::default().any());
    }

    #[test]
    fn tokens_are_checked_together_and_never_shown() {
        let same = Tokens::new(
            Some(secret("same-0123456789abcdef", ADMIN_ENV)),
            Some(secret("same-0123456789abcdef", "server.lease_token_file")),
        )
        .unwrap_err();
        assert_eq!(
            same,
            TokenError::Same(ADMIN_ENV.into(), "server.lease_token_file".into())
        );
        let weak = Tokens::new(None, Some(secret("weak", LEASE_ENV))).unwrap_err();
        assert!(weak.to_string().contains(LEASE_ENV), "{weak}");
        for e in [same, weak] {
            assert!(!e.to_string().contains("0123456789"), "{e}");
        }
        let shown = format!("{:?}", secret("hidden-0123456789", ADMIN_ENV));
        assert!(!shown.contains("hidden"), "{shown}");
    }

    #[test]
    fn roles_order() {
        let cases = [
            (Role::Admin, Role::Admin, true),
            (Role::Admin, Role::Lease, true),
            (Role::Lease, Role::Lease, true),
            (Role::Lease, Role::Admin, false),
        ];
        for (has, needs, ok) in cases {
            assert_eq!(has.allows(needs), ok, "{has} for {needs}");
        }
    }
}
