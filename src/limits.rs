//! Bounds shared by several layers (config, engine, socket protocol).

use std::time::Duration;

/// Longest accepted request line on the lease socket, newline excluded.
pub const MAX_LINE: usize = 64 * 1024;

/// Longest duration accepted anywhere (ttl, wait, retry_after; config durations too).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Longest sticky session key, in bytes, on the socket and at the gateway alike. The pools
/// remember at most 65,536 keys: bounded in length too, their table stays a few MiB
/// whatever clients send (docs/leases.md, "Sticky sessions").
pub const MAX_SESSION_KEY: usize = 128;

/// A session key that is refused (a client error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionKeyError {
    /// Longer than [`MAX_SESSION_KEY`].
    #[error("a session key is at most {MAX_SESSION_KEY} bytes; this one has {0}")]
    TooLong(usize),
    /// A control character (it would reach logs and pages as is).
    #[error("a session key may not hold control characters")]
    Control,
}

/// Check a sticky session key against [`MAX_SESSION_KEY`] and for control characters.
pub fn check_session_key(key: &str) -> Result<(), SessionKeyError> {
    if key.len() > MAX_SESSION_KEY {
        return Err(SessionKeyError::TooLong(key.len()));
    }
    if key.chars().any(char::is_control) {
        return Err(SessionKeyError::Control);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys() {
        let at_limit = "k".repeat(MAX_SESSION_KEY);
        assert_eq!(check_session_key(&at_limit), Ok(()));
        assert_eq!(check_session_key("cart-1"), Ok(()));
        assert_eq!(
            check_session_key(&format!("{at_limit}k")),
            Err(SessionKeyError::TooLong(129))
        );
        // Bytes, not characters: 43 three-byte characters are 129 bytes.
        assert_eq!(
            check_session_key(&"€".repeat(43)),
            Err(SessionKeyError::TooLong(129))
        );
        for bad in ["a\nb", "a\rb", "\u{1b}[31m", "a\0"] {
            assert_eq!(
                check_session_key(bad),
                Err(SessionKeyError::Control),
                "{bad:?}"
            );
        }
        assert!(SessionKeyError::TooLong(200).to_string().contains("128"));
    }
}
