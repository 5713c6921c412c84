//! `ProxyUrl` parsing, redaction and the inputs it refuses, by table.

use super::*;

#[test]
fn parses_every_scheme_and_host_kind() {
    let cases = [
        (
            "http://1.2.3.4:8080",
            Scheme::Http,
            "1.2.3.4",
            8080,
            None,
            None,
        ),
        (
            "https://Proxy.Example.com:443/",
            Scheme::Https,
            "proxy.example.com",
            443,
            None,
            None,
        ),
        ("socks4://h:1080", Scheme::Socks4, "h", 1080, None, None),
        (
            "socks4a://u@h:1080",
            Scheme::Socks4a,
            "h",
            1080,
            Some("u"),
            None,
        ),
        (
            "socks5://u:p%40ss@[::1]:1080",
            Scheme::Socks5,
            "::1",
            1080,
            Some("u"),
            Some("p@ss"),
        ),
        (
            "SOCKS5H://us%3Aer:pa:ss@host-1.local:9",
            Scheme::Socks5h,
            "host-1.local",
            9,
            Some("us:er"),
            Some("pa:ss"),
        ),
    ];
    for (input, scheme, host, port, user, pass) in cases {
        let u = ProxyUrl::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(u.scheme, scheme, "{input}");
        assert_eq!(u.host, host, "{input}");
        assert_eq!(u.port, port, "{input}");
        assert_eq!(u.user.as_deref(), user, "{input}");
        assert_eq!(u.password.as_deref(), pass, "{input}");
        // Round trip through the secret form.
        assert_eq!(ProxyUrl::parse(&u.to_secret_string()).unwrap(), u);
    }
}

#[test]
fn raw_special_characters_in_passwords_parse_and_never_leak() {
    for (input, pass) in [
        ("http://bob:s3cr#t@1.2.3.4:8080", "s3cr#t"),
        ("http://bob:a/b?c@h:1/", "a/b?c"),
        ("socks5://bob:p@ss@h:1", "p@ss"),
    ] {
        let u = ProxyUrl::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(u.password.as_deref(), Some(pass));
        assert!(!u.to_string().contains(pass));
        assert_eq!(ProxyUrl::parse(&u.to_secret_string()).unwrap(), u);
    }
    for bad in [
        "http://bob:s3cr#t@1.2.3.4",
        "http://bob:s3cr#t@h:1/x",
        "ftp://bob:s3cr#t@h:1",
    ] {
        let err = ProxyUrl::parse(bad).unwrap_err().to_string();
        assert!(!err.contains("s3cr"), "{bad}: {err}");
    }
    assert_eq!(
        redact_raw("http://bob:s3cr#t@1.2.3.4:8080"),
        "http://bob:***@1.2.3.4:8080"
    );
}

#[test]
fn redacts_passwords_everywhere() {
    let u = ProxyUrl::parse("socks5://alice:s3cr%2Ft@h:1").unwrap();
    assert_eq!(u.to_string(), "socks5://alice:***@h:1");
    assert!(!format!("{u:?}").contains("s3cr"));
    assert_eq!(u.to_secret_string(), "socks5://alice:s3cr%2Ft@h:1");
    assert_eq!(
        ProxyUrl::parse("[::1]:80").unwrap_err(),
        EndpointError::MissingScheme("[::1]:80".into())
    );
}

#[test]
fn a_provider_line_without_a_scheme_keeps_only_host_and_port() {
    for (line, shown) in [
        ("10.0.0.1:8080:alice:pr0v1der", "10.0.0.1:8080:***"),
        ("proxy.example:3128:alice:pa:ss", "proxy.example:3128:***"),
        ("10.0.0.1:8080:alice:pa@ss", "10.0.0.1:8080:***"),
        (
            "[2001:db8::1]:8080:alice:pr0v1der",
            "[2001:db8::1]:8080:***",
        ),
        ("alice:pr0v1der:10.0.0.1:8080", "***:10.0.0.1:8080"),
        ("[2001:db8::1:8080:alice:pr0v1der", "[2001:***"),
        ("10.0.0.1,8080,alice,pr0v1der", "10.0.0.1,***"),
        (
            "socks5://10.0.0.1:8080:alice:pr0v1der",
            "socks5://10.0.0.1:8080:***",
        ),
        (
            "socks5://10.0.0.1:8080:alice:pa:ss",
            "socks5://10.0.0.1:8080:***",
        ),
        ("http://alice:pr0v1der", "http://alice:***"),
        ("http://alice:12345:pa:ss@h:0", "http://alice:***@h:0"),
        ("10.0.0.1:8080", "10.0.0.1:8080"),
        ("[::1]:80", "[::1]:80"),
        ("proxy.example", "proxy.example"),
        ("alice:pr0v1der@10.0.0.1:8080", "alice:***@10.0.0.1:8080"),
    ] {
        let e = ProxyUrl::parse(line).unwrap_err().to_string();
        assert!(e.contains(&format!("{shown:?}")), "{line}: {e}");
        for secret in ["pr0v1der", "pa:ss", "pa@ss", "alice:pa"] {
            assert!(!e.contains(secret), "{line}: {e}");
        }
    }
}

#[test]
fn rejects_every_bad_class_without_leaking() {
    let bad = [
        ("", "empty"),
        ("1.2.3.4:80", "missing scheme"),
        ("ftp://u:hunter2@h:21", "unknown scheme"),
        ("http://u:hunter2@:80", "missing host"),
        ("http://u:hunter2@h", "missing port"),
        ("http://u:hunter2@h:", "missing port"),
        ("http://u:hunter2@h:0", "invalid port"),
        ("http://u:hunter2@h:65536", "invalid port"),
        ("http://u:hunter2@h:+80", "invalid port"),
        ("http://u:hunter2@h:80/path", "unexpected path"),
        ("http://u:hunter2@h:80?x", "unexpected path"),
        ("http://u:hunter2@ho st:80", "white space"),
        ("http://u:hunter2@1.2.3.999:80", "invalid host"),
        ("http://u:hunter2@::1:80", "invalid host"),
        ("http://u:hunter2@[zz::1]:80", "invalid host"),
        ("http://u:hunter2@[::1]80", "missing port"),
        ("http://:hunter2@h:80", "empty user"),
        ("http://u:hunter2%ff@h:80", "invalid percent-encoding"),
        ("http://u:hunter2%zz@h:80", "invalid percent-encoding"),
        ("http://u:hunter2%4@h:80", "invalid percent-encoding"),
        ("http://u%:hunter2@h:80", "invalid percent-encoding"),
    ];
    for (input, want) in bad {
        let err = ProxyUrl::parse(input).expect_err(input).to_string();
        assert!(err.contains(want), "{input}: {err}");
        assert!(!err.contains("hunter2"), "{input} leaked: {err}");
    }
}

#[test]
fn refuses_control_characters_white_space_two_urls_and_a_mistyped_scheme() {
    let cases = [
        ("http://us%00er:hunter2@h:1", "control character"),
        ("http://u:hunter2%00@h:1", "control character"),
        ("http://u:hunter2%0a@h:1", "control character"),
        ("http://u:hun\0ter2@h:1", "control character"),
        ("http://u:hunter2@h:1%00", "control character"),
        ("http://u:hunter2\u{85}@h:1", "control character"),
        ("http://u:hunter2%C2%85@h:1", "control character"),
        ("http://u:hun\tter2@h:1", "control character"),
        ("http://u:hunter2@h:1 http://v:hunter2@g:2", "white space"),
        ("http://u:hun\u{a0}ter2@h:1", "white space"),
        ("http://u:hunter2@h:1 # comment", "white space"),
        ("http://u:hunter2@h:1http://v:hunter2@g:2", "two URLs"),
        ("http://socks5h//u:hunter2@h:1", "'/' in the user name"),
        ("http://u?x:hunter2@h:1", "'?' in the user name"),
        ("http://u#x:hunter2@h:1", "'#' in the user name"),
    ];
    for (input, want) in cases {
        let err = ProxyUrl::parse(input).expect_err(input).to_string();
        assert!(err.contains(want), "{input:?}: {err}");
        assert!(!err.contains("hunter2"), "{input:?} leaked: {err}");
        let checked = check_characters(input).err().map(|e| e.to_string());
        match want {
            "control character" | "white space" => {
                assert_eq!(checked.as_deref(), Some(err.as_str()), "{input:?}")
            }
            _ => assert_eq!(checked, None, "{input:?}"),
        }
    }
    // What is written percent-encoded (or raw in the password) is taken.
    for (input, pass) in [
        ("http://u:a%20b@h:1", "a b"),
        ("http://u:a/b?c#d@h:1", "a/b?c#d"),
        ("http://u%2Fx:p%25@h:1", "p%"),
    ] {
        let u = ProxyUrl::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(u.password.as_deref(), Some(pass), "{input}");
    }
}

#[test]
fn list_lines_skip_blanks_and_comments() {
    let cases: [(&str, Option<bool>); 6] = [
        ("", None),
        ("   \t", None),
        ("# a comment", None),
        ("  # indented comment", None),
        ("  http://h:80  ", Some(true)),
        ("h:80 # not a URL", Some(false)),
    ];
    for (line, want) in cases {
        let got = ProxyUrl::parse_line(line).map(|r| r.is_ok());
        assert_eq!(got, want, "{line:?}");
    }
    let url = ProxyUrl::parse_line(" socks5://u:p@h:1 ").unwrap().unwrap();
    assert_eq!(url, ProxyUrl::parse("socks5://u:p@h:1").unwrap());
}
