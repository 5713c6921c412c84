//! Credentials and control characters out of free text before it is stored or printed.
//!
//! Scrapers put exception texts into a report's `detail`, and those often hold the proxy
//! URL they used; command sources carry tokens in their argv. Both end up in `events`,
//! `show`, `list --json` and tables, so they are redacted on the way in. Any text a client
//! sends may also hold control characters (a CR/LF that forges a line of `proxypool
//! events`, an ESC that drives the terminal, a NUL): [`printable`] writes them as escapes,
//! where text is stored and again where it is printed.

use std::borrow::Cow;

/// What replaces a secret.
pub const MASK: &str = "***";

/// Shown instead of a text that could not be redacted safely (a password overlapping the
/// mask itself, such as `*`).
const WITHHELD: &str = "[detail withheld: it held a credential]";

/// Flag and variable names whose value is a secret (matched case-insensitively as a part
/// of the name).
const SECRET_WORDS: &[&str] = &[
    "pass", "pwd", "token", "secret", "key", "auth", "cred", "cookie",
];

/// `text` with every character that is not printable text written as an escape: `\n`,
/// `\r`, `\t`, else `\u{..}` (C0 and C1 controls, DEL, and the Unicode line separators
/// and direction overrides that reorder or break a line on a terminal).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unprintable(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`printable`] of an optional text.
pub fn printable_opt(text: Option<&str>) -> Option<Cow<'_, str>> {
    text.map(printable)
}

fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `text` with every `scheme://user:pass@` shown as `scheme://user:***@` and every
/// non-empty password in `passwords` (raw or percent-encoded) replaced by `***`. The
/// result never contains one of `passwords`.
pub fn redact_text(text: &str, passwords: &[&str]) -> String {
    let mut out = redact_urls(text);
    let mut secrets: Vec<String> = Vec::new();
    for p in passwords.iter().filter(|p| !p.is_empty()) {
        secrets.push((*p).to_string());
        let enc = percent_encoding::utf8_percent_encode(p, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
        if enc != *p {
            secrets.push(enc);
        }
    }
    // Longest first, so a password that contains another is masked whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    if !secrets.is_empty() {
        out = mask_all(&out, &secrets);
    }
    // Masking can join pieces into a new occurrence ("a" + "***" for password "a*"); then
    // nothing of the text is safe to keep.
    if passwords.iter().any(|p| !p.is_empty() && out.contains(*p)) {
        return if passwords
            .iter()
            .any(|p| !p.is_empty() && WITHHELD.contains(*p))
        {
            String::new()
        } else {
            WITHHELD.to_string()
        };
    }
    out
}

/// Replace every byte range covered by an occurrence of one of `secrets` with one mask.
fn mask_all(text: &str, secrets: &[String]) -> String {
    let mut covered = vec![false; text.len()];
    for s in secrets {
        for (i, _) in text.match_indices(s.as_str()) {
            covered[i..i + s.len()].iter_mut().for_each(|c| *c = true);
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut masking = false;
    for (i, ch) in text.char_indices() {
        if covered[i] {
            if !masking {
                out.push_str(MASK);
                masking = true;
            }
        } else {
            masking = false;
            out.push(ch);
        }
    }
    out
}

/// Every `://user:pass@` in `text` becomes `://user:***@`. A URL ends at white space
/// (not at a quote: user names may hold one); its userinfo ends at its last `@`, since raw
/// passwords may hold `@` or `/` (masking too much is the safe mistake).
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        out.push_str(head);
        let end = tail.find(char::is_whitespace).unwrap_or(tail.len());
        // Stop at the next URL, so one URL's userinfo never swallows the next one.
        let end = tail[..end].find("://").unwrap_or(end);
        let (url, after) = tail.split_at(end);
        out.push_str(&mask_userinfo(url));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// How the docs and error messages spell a URL's syntax: not a credential.
const SYNTAX_USERINFO: &str = "[user[:password]";

fn mask_userinfo(url: &str) -> String {
    match url.rfind('@') {
        Some(at) if &url[..at] == SYNTAX_USERINFO => url.to_string(),
        Some(at) => match url[..at].find(':') {
            Some(colon) => format!("{}:{MASK}{}", &url[..colon], &url[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

fn is_secret_name(name: &str) -> bool {
    let n = name.trim_start_matches('-').to_ascii_lowercase();
    !n.is_empty() && SECRET_WORDS.iter().any(|w| n.contains(w))
}

/// A URL for display (a source's location): its password masked, and the value of each
/// query parameter whose name says it is a secret (`token`, `api_key`, `password`...);
/// scheme, host, port and path as they are, so that two sources on one host tell apart.
pub fn redact_url(url: &str) -> String {
    let masked = redact_urls(url);
    let Some((head, rest)) = masked.split_once('?') else {
        return masked;
    };
    let (query, fragment) = match rest.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (rest, None),
    };
    let params: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !v.is_empty() && is_secret_name(k) => format!("{k}={MASK}"),
            _ => kv.to_string(),
        })
        .collect();
    let mut out = format!("{head}?{}", params.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// A command line for display: URL credentials masked, the value after a flag such as
/// `--password`/`--token` (or in `--token=v`, `API_KEY=v`) shown as `***`.
pub fn redact_argv(argv: &[String]) -> String {
    let mut out: Vec<String> = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for arg in argv {
        if hide_next {
            out.push(MASK.to_string());
            hide_next = false;
            continue;
        }
        if let Some((name, _)) = arg.split_once('=') {
            if is_secret_name(name) && !name.contains("://") {
                out.push(format!("{name}={MASK}"));
                continue;
            }
        }
        if arg.starts_with('-') && arg.len() > 1 && is_secret_name(arg) {
            hide_next = true;
        }
        out.push(redact_urls(arg));
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_escapes() {
        let table = [
            ("plain text, unicode é ✓", "plain text, unicode é ✓"),
            ("a\r\nx-injected: 1", "a\\r\\nx-injected: 1"),
            ("\u{1b}[31mred\u{1b}[0m", "\\u{1b}[31mred\\u{1b}[0m"),
            ("nul\0byte", "nul\\u{0}byte"),
            ("tab\there", "tab\\there"),
            ("del\u{7f} c1\u{85}", "del\\u{7f} c1\\u{85}"),
            ("rtl\u{202e}txt", "rtl\\u{202e}txt"),
            ("line\u{2028}sep", "line\\u{2028}sep"),
        ];
        for (raw, want) in table {
            let got = printable(raw);
            assert_eq!(got, want, "{raw:?}");
            assert!(!got.chars().any(unprintable), "{got:?}");
        }
        assert!(matches!(printable("clean"), Cow::Borrowed(_)));
        assert_eq!(printable_opt(None), None);
    }

    #[test]
    fn text_table() {
        let cases: &[(&str, &[&str], &str)] = &[
            ("plain text", &[], "plain text"),
            (
                "ProxyError('http://bob:hunter2@10.0.0.1:8080' refused)",
                &[],
                "ProxyError('http://bob:***@10.0.0.1:8080' refused)",
            ),
            (
                "via socks5h://u:p@ss@h:1/x and http://a:b@c:2",
                &[],
                "via socks5h://u:***@h:1/x and http://a:***@c:2",
            ),
            ("http://host:80/path", &[], "http://host:80/path"),
            ("http://user@host:80", &[], "http://user@host:80"),
            (
                "auth failed for hunter2",
                &["hunter2"],
                "auth failed for ***",
            ),
            ("p%40ss leaked", &["p@ss"], "*** leaked"),
            ("abcabc", &["abc", "bca"], "***"),
            ("no password here", &[""], "no password here"),
            ("a*", &["*"], WITHHELD),
            ("[*]", &["*", "["], ""),
            ("xa*", &["a*", "xa"], "***"),
            ("://", &[], "://"),
            ("http://a:b@c://d:e@f", &[], "http://a:***@c://d:***@f"),
            // The syntax in help and error text is left as written...
            (
                "expected scheme://[user[:password]@]host:port with scheme one of http",
                &[],
                "expected scheme://[user[:password]@]host:port with scheme one of http",
            ),
            // ...but nothing that merely resembles it.
            ("http://[user[:pass]@h:1", &[], "http://[user[:***@h:1"),
            ("http://[user[:password]x@h:1", &[], "http://[user[:***@h:1"),
        ];
        for (input, pw, want) in cases {
            assert_eq!(redact_text(input, pw), *want, "{input:?} {pw:?}");
        }
    }

    #[test]
    fn url_table() {
        for (url, shown) in [
            (
                "http://127.0.0.1:8080/list.txt",
                "http://127.0.0.1:8080/list.txt",
            ),
            (
                "https://u:s3cret@p.example:8443/a/b",
                "https://u:***@p.example:8443/a/b",
            ),
            (
                "https://p.example/l?token=abc&fmt=txt",
                "https://p.example/l?token=***&fmt=txt",
            ),
            (
                "https://p.example/l?API_KEY=abc#x",
                "https://p.example/l?API_KEY=***#x",
            ),
            (
                "https://p.example/l?page=2&key=",
                "https://p.example/l?page=2&key=",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn argv_table() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: &[(&[&str], &str)] = &[
            (&["fetch", "--pool", "a"], "fetch --pool a"),
            (
                &["fetch", "--password", "hunter2", "-v"],
                "fetch --password *** -v",
            ),
            (&["fetch", "--token=abc"], "fetch --token=***"),
            (&["env", "API_KEY=abc", "run"], "env API_KEY=*** run"),
            (
                &["curl", "https://u:pw@list.example/x"],
                "curl https://u:***@list.example/x",
            ),
            (&["curl", "-H", "x"], "curl -H x"),
        ];
        for (argv, want) in cases {
            assert_eq!(redact_argv(&v(argv)), *want, "{argv:?}");
        }
    }
}
