//! Proxy endpoint URLs: parsing, identity and password-redacting display.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

/// Database id of an endpoint.
pub type EndpointId = i64;

/// Characters that must be escaped in the userinfo part of a URL.
const USERINFO: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b':')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'@')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The proxy protocol of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Plain HTTP proxy (absolute-form requests, CONNECT).
    Http,
    /// HTTP proxy reached over TLS.
    Https,
    /// SOCKS4, the client resolves names.
    Socks4,
    /// SOCKS4a, the proxy resolves names.
    Socks4a,
    /// SOCKS5, the client resolves names.
    Socks5,
    /// SOCKS5, the proxy resolves names.
    Socks5h,
}

impl Scheme {
    /// All schemes, in display order.
    pub const ALL: [Scheme; 6] = [
        Scheme::Http,
        Scheme::Https,
        Scheme::Socks4,
        Scheme::Socks4a,
        Scheme::Socks5,
        Scheme::Socks5h,
    ];

    /// The URL scheme string.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Socks4 => "socks4",
            Scheme::Socks4a => "socks4a",
            Scheme::Socks5 => "socks5",
            Scheme::Socks5h => "socks5h",
        }
    }

    /// True for the SOCKS family.
    pub fn is_socks(self) -> bool {
        !matches!(self, Scheme::Http | Scheme::Https)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scheme {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheme::ALL
            .into_iter()
            .find(|sc| sc.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| EndpointError::UnknownScheme(s.to_string()))
    }
}

/// Why a proxy URL was rejected. Messages never contain a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The input was empty.
    #[error("empty proxy URL")]
    Empty,
    /// No `scheme://` prefix.
    #[error("missing scheme in {0:?}: expected scheme://[user[:password]@]host:port with scheme one of http, https, socks4, socks4a, socks5, socks5h")]
    MissingScheme(String),
    /// The scheme is not a proxy protocol we speak.
    #[error("unknown scheme {0:?}: expected one of http, https, socks4, socks4a, socks5, socks5h")]
    UnknownScheme(String),
    /// No host after the scheme / userinfo.
    #[error("missing host in {0:?}")]
    MissingHost(String),
    /// The host is not a valid hostname or IP literal.
    #[error("invalid host {host:?} in {url:?}")]
    InvalidHost {
        /// The offending host text.
        host: String,
        /// The redacted URL.
        url: String,
    },
    /// No `:port`.
    #[error("missing port in {0:?}: proxies have no default port, write host:port")]
    MissingPort(String),
    /// The port is not 1..=65535.
    #[error("invalid port {port:?} in {url:?}: expected 1-65535")]
    InvalidPort {
        /// The offending port text.
        port: String,
        /// The redacted URL.
        url: String,
    },
    /// A path, query or fragment follows the authority.
    #[error("unexpected path, query or fragment in {0:?}: a proxy URL is scheme://[user[:password]@]host:port")]
    UnexpectedPath(String),
    /// Percent-encoding in the user or password is not valid UTF-8.
    #[error("invalid percent-encoding in the user or password of {0:?}")]
    BadEncoding(String),
    /// An empty user name before `@`.
    #[error("empty user name in {0:?}")]
    EmptyUser(String),
    /// A control character, raw or percent-encoded, in any part: PostgreSQL cannot store
    /// a NUL, and no proxy takes a line break in a password.
    #[error("a control character in {0:?}: no part of a proxy URL may hold one, raw or percent-encoded (%00, %0A, ...)")]
    ControlCharacter(String),
    /// White space inside the text: two URLs on a line, or a trailing comment.
    #[error("white space in {0:?}: write one URL a line, a comment on a line of its own (# ...), and a space in a user name or password as %20")]
    Whitespace(String),
    /// A second `scheme://` after the first.
    #[error(
        "two URLs in {0:?}: write one URL a line (a \"://\" in a password is written %3A%2F%2F)"
    )]
    TwoUrls(String),
    /// A raw `/`, `?` or `#` in the user name: a mistyped `://` (`socks5h//user:pw@h`) or
    /// a character that must be percent-encoded.
    #[error("a raw {ch:?} in the user name of {url:?}: check the \"://\" after the scheme, or write it as {encoded}")]
    UserCharacter {
        /// The character.
        ch: char,
        /// Its percent-encoding.
        encoded: &'static str,
        /// The redacted URL.
        url: String,
    },
}

/// A parsed proxy URL. `Display` and `Debug` redact the password as `***`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProxyUrl {
    /// Proxy protocol.
    pub scheme: Scheme,
    /// Host name (lower-cased) or IP literal (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Decoded user name, if any.
    pub user: Option<String>,
    /// Decoded password, if any.
    pub password: Option<String>,
}

/// Redact the password of a URL-looking string for error messages, without parsing it fully.
pub fn redact_raw(input: &str) -> String {
    match input.find("://") {
        Some(i) => {
            let (head, rest) = input.split_at(i + 3);
            format!("{head}{}", redact_rest(rest))
        }
        None => redact_rest(input),
    }
}

/// What follows a scheme (or a whole line without one), with anything that may be a
/// credential masked. `user:password@host:port` keeps its user; the provider forms keep
/// only their `host:port`: `host:port:user:password` (a password may hold ':' or '@') and
/// `user:password:host:port`. A line that fits none of them keeps its first field at most.
fn redact_rest(rest: &str) -> String {
    if let Some((userinfo, tail)) = rest.rsplit_once('@') {
        if is_host_port(tail) {
            return match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***@{tail}"),
                None => rest.to_string(),
            };
        }
    }
    if let Some(hp) = leading_host_port(rest) {
        return match rest.len() > hp.len() {
            true => format!("{hp}:***"),
            false => rest.to_string(),
        };
    }
    if let Some(hp) = trailing_host_port(rest) {
        return format!("***:{hp}");
    }
    match rest.find([':', ',', ' ', '\t', '@', ';', '|']) {
        Some(i) => format!("{}***", &rest[..=i]),
        None => rest.to_string(),
    }
}

/// `host:port` (or `[v6]:port`) at the start of `s`, ending at its end or at a ':'.
fn leading_host_port(s: &str) -> Option<&str> {
    let host_end = match s.strip_prefix('[') {
        Some(v6) => v6.find(']')? + 2,
        None => s.find(':')?,
    };
    let after = s[host_end..].strip_prefix(':')?;
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    let end = host_end + 1 + digits;
    let ok = (1..=5).contains(&digits)
        && host_end > 0
        && !s[..host_end].contains(['@', '/'])
        && matches!(s.as_bytes().get(end), None | Some(b':'));
    ok.then(|| &s[..end])
}

/// Whether `s` is exactly `host:port` (or `[v6]:port`).
fn is_host_port(s: &str) -> bool {
    leading_host_port(s).is_some_and(|hp| hp.len() == s.len())
}

/// `host:port` at the end of `s`, after a ':' (the provider order `user:pass:host:port`).
fn trailing_host_port(s: &str) -> Option<&str> {
    let (before, port) = s.rsplit_once(':')?;
    let (_, host) = before.rsplit_once(':')?;
    let hp = &s[s.len() - port.len() - host.len() - 1..];
    is_host_port(hp).then_some(hp)
}

/// Refuse a text that cannot be one proxy URL whatever its shape: a control character
/// (raw, or percent-encoded anywhere) or white space inside it. Checked on a whole line
/// before it is read as a URL or a provider format, so that the same line is refused in
/// the same words everywhere (`add`, `import`, sources, the config) and on either backend.
pub fn check_characters(input: &str) -> Result<(), EndpointError> {
    match bad_characters(input) {
        Some(error) => Err(error(redact_raw(input))),
        None => Ok(()),
    }
}

/// What [`check_characters`] refuses, as the error to name the text with.
fn bad_characters(input: &str) -> Option<fn(String) -> EndpointError> {
    // Bytes first (every URL of an import passes here); characters only past ASCII.
    let (mut control, mut space, mut percent, mut wide) = (false, false, false, false);
    for &b in input.as_bytes() {
        control |= b < 0x20 || b == 0x7f;
        space |= b == b' ';
        percent |= b == b'%';
        wide |= b >= 0x80;
    }
    if wide {
        for c in input.chars() {
            control |= c.is_control();
            space |= c.is_whitespace();
        }
    }
    if !control && percent {
        control = percent_decode_str(input)
            .decode_utf8_lossy()
            .chars()
            .any(char::is_control);
    }
    if control {
        Some(EndpointError::ControlCharacter)
    } else if space {
        Some(EndpointError::Whitespace)
    } else {
        None
    }
}

/// `user[:password]` of a URL, percent-decoded. The user ends at the first ':' and may
/// hold no raw '/', '?' or '#' (the password may: it ends at the last '@').
fn credentials(ui: &str, red: &str) -> Result<(Option<String>, Option<String>), EndpointError> {
    let (u, p) = match ui.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (ui, None),
    };
    if let Some(ch) = u.chars().find(|c| matches!(c, '/' | '?' | '#')) {
        return Err(EndpointError::UserCharacter {
            ch,
            encoded: match ch {
                '/' => "%2F",
                '?' => "%3F",
                _ => "%23",
            },
            url: red.to_string(),
        });
    }
    let u = percent_decoded(u, red)?;
    if u.is_empty() {
        return Err(EndpointError::EmptyUser(red.to_string()));
    }
    let p = p.map(|p| percent_decoded(p, red)).transpose()?;
    Ok((Some(u), p))
}

fn percent_decoded(s: &str, red: &str) -> Result<String, EndpointError> {
    // percent_decode_str passes a '%' without two hex digits through unchanged; a URL
    // with one is malformed (RFC 3986), and guessing what the operator meant would
    // silently store a different password.
    let b = s.as_bytes();
    let well_formed = b.iter().enumerate().all(|(i, &c)| {
        c != b'%'
            || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return Err(EndpointError::BadEncoding(red.to_string()));
    }
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| EndpointError::BadEncoding(red.to_string()))
}

/// `host:port` or `[v6]:port`; the port 1-65535 in digits only.
fn host_and_port(hostport: &str, red: String) -> Result<(String, u16), EndpointError> {
    if hostport.is_empty() {
        return Err(EndpointError::MissingHost(red));
    }
    let (host, port) = if let Some(after) = hostport.strip_prefix('[') {
        let close = after.find(']').ok_or_else(|| EndpointError::InvalidHost {
            host: redact_rest(hostport),
            url: red.clone(),
        })?;
        let lit = &after[..close];
        let v6: Ipv6Addr = lit.parse().map_err(|_| EndpointError::InvalidHost {
            host: lit.to_string(),
            url: red.clone(),
        })?;
        let tail = &after[close + 1..];
        let port = tail
            .strip_prefix(':')
            .ok_or_else(|| EndpointError::MissingPort(red.clone()))?;
        (v6.to_string(), port)
    } else {
        let (h, p) = hostport
            .rsplit_once(':')
            .ok_or_else(|| EndpointError::MissingPort(red.clone()))?;
        if h.contains(':') {
            // Bare IPv6 without brackets is ambiguous with the port separator. Anything
            // else with colons may be a provider line: shown masked.
            let host = match h.parse::<Ipv6Addr>() {
                Ok(_) => h.to_string(),
                Err(_) => redact_rest(h),
            };
            return Err(EndpointError::InvalidHost {
                host,
                url: red.clone(),
            });
        }
        if h.is_empty() {
            return Err(EndpointError::MissingHost(red.clone()));
        }
        (validate_host(h, &red)?, p)
    };
    if port.is_empty() {
        return Err(EndpointError::MissingPort(red));
    }
    match port.parse() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok((host, p)),
        // Letters where a port belongs may be a password (`http://user:secret`).
        _ => Err(EndpointError::InvalidPort {
            port: match port.bytes().any(|b| b.is_ascii_alphabetic()) {
                true => "***".to_string(),
                false => port.to_string(),
            },
            url: red,
        }),
    }
}

impl ProxyUrl {
    /// One line of a URL list (import files, plain-text sources): none for a blank line or
    /// a `#` comment, else the parsed URL.
    pub fn parse_line(line: &str) -> Option<Result<Self, EndpointError>> {
        let l = line.trim();
        (!l.is_empty() && !l.starts_with('#')).then(|| ProxyUrl::parse(l))
    }

    /// Parse `scheme://[user[:password]@]host:port`.
    pub fn parse(input: &str) -> Result<Self, EndpointError> {
        let input = input.trim();
        // An error names the input with its password hidden. That copy is made only when
        // there is an error to name: a valid URL (every line of an import, the gateway's
        // lease on every request) is parsed without it, and an invalid one parsed again.
        ProxyUrl::parse_naming(input, String::new())
            .or_else(|_| ProxyUrl::parse_naming(input, redact_raw(input)))
    }

    /// [`ProxyUrl::parse`] of a trimmed `input`, its errors naming it as `red`.
    fn parse_naming(input: &str, red: String) -> Result<Self, EndpointError> {
        if input.is_empty() {
            return Err(EndpointError::Empty);
        }
        if let Some(error) = bad_characters(input) {
            return Err(error(red));
        }
        let (scheme, rest) = input
            .split_once("://")
            .ok_or_else(|| EndpointError::MissingScheme(red.clone()))?;
        let scheme: Scheme = scheme.parse()?;
        if rest.contains("://") {
            return Err(EndpointError::TwoUrls(red));
        }
        // Userinfo ends at the last '@', so raw passwords may hold '/', '?' or '#'.
        let (userinfo, hostport) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        // A single trailing slash is what many lists carry; anything more is a mistake.
        let hostport = hostport.strip_suffix('/').unwrap_or(hostport);
        if hostport.contains(['/', '?', '#']) {
            return Err(EndpointError::UnexpectedPath(red));
        }
        let (user, password) = match userinfo {
            None => (None, None),
            Some(ui) => credentials(ui, &red)?,
        };
        let (host, port) = host_and_port(hostport, red)?;
        Ok(ProxyUrl {
            scheme,
            host,
            port,
            user,
            password,
        })
    }

    /// The full URL including the password (only for leases and `--show-secrets`).
    pub fn to_secret_string(&self) -> String {
        self.render(true)
    }

    /// The URL with the password shown as `***`.
    pub fn to_redacted_string(&self) -> String {
        self.render(false)
    }

    /// `host:port` with brackets around IPv6 literals.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The user as stored in the identity key (empty when none).
    pub fn user_key(&self) -> &str {
        self.user.as_deref().unwrap_or("")
    }

    fn render(&self, secret: bool) -> String {
        let mut s = format!("{}://", self.scheme);
        if let Some(u) = &self.user {
            s.push_str(&utf8_percent_encode(u, USERINFO).to_string());
            if let Some(p) = &self.password {
                s.push(':');
                if secret {
                    s.push_str(&utf8_percent_encode(p, USERINFO).to_string());
                } else {
                    s.push_str("***");
                }
            }
            s.push('@');
        }
        s.push_str(&self.authority());
        s
    }
}

fn validate_host(h: &str, red: &str) -> Result<String, EndpointError> {
    if h.parse::<Ipv4Addr>().is_ok() {
        return Ok(h.to_string());
    }
    let lower = h.to_ascii_lowercase();
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let trimmed = lower.strip_suffix('.').unwrap_or(&lower);
    if trimmed.len() <= 253 && trimmed.split('.').all(ok_label) {
        // All-numeric dotted names that are not valid IPv4 (e.g. 1.2.3.999) are typos.
        if trimmed
            .split('.')
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(EndpointError::InvalidHost {
                host: h.to_string(),
                url: red.to_string(),
            });
        }
        Ok(trimmed.to_string())
    } else {
        Err(EndpointError::InvalidHost {
            host: h.to_string(),
            url: red.to_string(),
        })
    }
}

impl FromStr for ProxyUrl {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProxyUrl::parse(s)
    }
}

impl fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_redacted_string())
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProxyUrl({})", self.to_redacted_string())
    }
}

#[cfg(test)]
mod tests;
