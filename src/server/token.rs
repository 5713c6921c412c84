//! The TCP listener's shared secret: the only access control a TCP peer meets.

/// Shortest token accepted for `--listen-tcp`.
pub const MIN_LEN: usize = 16;

/// Why a `PROXYPOOL_TOKEN` is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Only white space.
    #[error("PROXYPOOL_TOKEN is blank: --listen-tcp needs a real secret of at least {MIN_LEN} characters")]
    Blank,
    /// Too short to resist guessing.
    #[error("PROXYPOOL_TOKEN is {0} characters long: --listen-tcp needs at least {MIN_LEN}")]
    TooShort(usize),
}

/// Refuse a token a peer could guess.
pub fn validate(token: &str) -> Result<(), TokenError> {
    if token.trim().is_empty() {
        return Err(TokenError::Blank);
    }
    let n = token.chars().count();
    if n < MIN_LEN {
        return Err(TokenError::TooShort(n));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, Result<(), TokenError>)] = &[
            (" ", Err(TokenError::Blank)),
            ("", Err(TokenError::Blank)),
            ("                    ", Err(TokenError::Blank)),
            ("short", Err(TokenError::TooShort(5))),
            ("0123456789abcde", Err(TokenError::TooShort(15))),
            ("0123456789abcdef", Ok(())),
            ("ééééééééééééééé", Err(TokenError::TooShort(15))),
            ("a-very-long-and-random-token-here", Ok(())),
        ];
        for (t, want) in cases {
            assert_eq!(&validate(t), want, "{t:?}");
        }
    }
}
