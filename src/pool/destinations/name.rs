//! Destination names as pairs are keyed (docs/destinations.md, "Destination names": the
//! host, lower-cased, no port).

use std::net::Ipv6Addr;

use super::DestinationError;

/// The host a request goes to, as pairs are keyed: lower-cased, without port, brackets or
/// a trailing dot; an IPv6 address in its canonical form.
pub fn normalize(dest: &str) -> Result<String, DestinationError> {
    let s = dest.trim();
    if s.is_empty() {
        return Err(DestinationError::Empty);
    }
    let bad = |why| DestinationError::Invalid {
        value: dest.to_string(),
        why,
    };
    if s.contains("://") || s.contains('/') {
        return Err(bad("give the host, not a URL"));
    }
    let host = if let Some(rest) = s.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or(bad("unclosed '['"))?;
        check_port(after, &bad)?;
        let ip: Ipv6Addr = inner.parse().map_err(|_| bad("not an IPv6 address"))?;
        return Ok(ip.to_string());
    } else if s.matches(':').count() > 1 {
        // A bare IPv6 address (no port can be told apart without brackets).
        let ip: Ipv6Addr = s.parse().map_err(|_| bad("not an IPv6 address"))?;
        return Ok(ip.to_string());
    } else if let Some((h, port)) = s.split_once(':') {
        check_port(&format!(":{port}"), &bad)?;
        h
    } else {
        s
    };
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() {
        return Err(bad("no host before the port"));
    }
    if host.len() > 253 {
        return Err(bad("longer than 253 characters"));
    }
    for label in host.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(bad("empty or over-long label"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad("only letters, digits, '-', '_' and '.' are allowed"));
        }
    }
    Ok(host)
}

fn check_port(
    after: &str,
    bad: &impl Fn(&'static str) -> DestinationError,
) -> Result<(), DestinationError> {
    match after.strip_prefix(':') {
        None if after.is_empty() => Ok(()),
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => Ok(()),
                _ => Err(bad("port out of range")),
            }
        }
        _ => Err(bad("what follows the host is not a port")),
    }
}
