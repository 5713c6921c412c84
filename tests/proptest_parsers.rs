//! Property tests of every parser that reads outside input: the socket line parser,
//! `ProxyUrl::parse`, the config loader, source lists, and the credential redaction that
//! runs over report details. Arbitrary input never panics; valid input round-trips.
//!
//! CI runs a small budget (64 cases a property); `PROPTEST_CASES` overrides it, and
//! `scripts/proptest-long.sh` runs a million a property (see docs/testing.md).

use proptest::prelude::*;
use proptest::test_runner::Config as PtConfig;
use proxypool::config::Config;
use proxypool::config::{Everything, HostPatterns};
use proxypool::endpoint::{ProxyUrl, Scheme};
use proxypool::protocol::parse_line;
use proxypool::redact::{redact_argv, redact_text};
use proxypool::sources::parse_list;
use proxypool::tls::LeafName;
use serde_json::{json, Value};

fn cfg() -> PtConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    PtConfig {
        cases,
        // Failures are reported with their minimal input; no files left in the tree.
        failure_persistence: None,
        ..PtConfig::default()
    }
}

fn scheme() -> impl Strategy<Value = Scheme> {
    prop::sample::select(vec![
        "http", "https", "socks4", "socks4a", "socks5", "socks5h",
    ])
    .prop_map(|s| s.parse::<Scheme>().unwrap())
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| std::net::Ipv4Addr::from(o).to_string()),
        any::<[u16; 8]>().prop_map(|s| std::net::Ipv6Addr::from(s).to_string()),
        // Lower-case names whose last label is not all digits.
        ("[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", "[a-z][a-z0-9]{0,8}")
            .prop_map(|(a, b)| format!("{a}.{b}")),
    ]
}

fn credential() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._~-]{1,12}",
        // Anything at all but a control character (refused in every part of a URL),
        // percent-encoded when rendered.
        any::<String>().prop_filter("non-empty, no control character", |s| {
            !s.is_empty() && !s.chars().any(char::is_control)
        }),
    ]
}

fn valid_url() -> impl Strategy<Value = ProxyUrl> {
    (
        scheme(),
        host(),
        1u16..=u16::MAX,
        prop::option::of((credential(), prop::option::of(credential()))),
    )
        .prop_map(|(scheme, host, port, auth)| {
            let (user, password) = match auth {
                Some((u, p)) => (Some(u), p),
                None => (None, None),
            };
            ProxyUrl {
                scheme,
                host,
                port,
                user,
                password,
            }
        })
}

/// Text that looks like what the parsers meet: URL pieces, JSON and TOML punctuation.
fn url_ish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("http://".to_string()),
            Just("socks5h://".to_string()),
            Just("@".to_string()),
            Just(":".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just("%".to_string()),
            Just("/".to_string()),
            Just("\n".to_string()),
            Just("#".to_string()),
            "[0-9]{1,6}",
            "[a-z.]{1,8}",
            any::<char>().prop_map(String::from),
        ],
        0..24,
    )
    .prop_map(|v| v.concat())
}

fn toml_ish() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "name",
        "mode",
        "url",
        "interval",
        "timeout",
        "base",
        "factor",
        "max",
        "jitter",
        "socket",
        "path",
        "kind",
        "command",
        "refresh",
        "concurrency",
        "max_body",
        "expect_status",
        "synchronous",
        "disable_after",
        "preferred",
        "headers",
        "label",
        "builtin",
        "status",
        "header",
        "body",
        "host",
        "body_bytes",
    ]);
    let value = prop_oneof![
        "\"[a-z0-9:/. -]{0,12}\"".prop_map(|s| s.to_string()),
        "-?[0-9]{1,12}(\\.[0-9]{1,3})?",
        Just("true".to_string()),
        Just("\"0s\"".to_string()),
        Just("\"1ns\"".to_string()),
        Just("\"static\"".to_string()),
        Just("\"sniffing\"".to_string()),
        Just("[\"a\", \"b\"]".to_string()),
        Just("{ x = 1 }".to_string()),
        Just("\"cloudflare\"".to_string()),
        Just("\"x-a: (a+)+$\"".to_string()),
        Just("[403, 429]".to_string()),
        Just("[\"*.a.example\", \"b\"]".to_string()),
        any::<String>().prop_map(|s| format!("{s:?}")),
    ];
    let header = prop::sample::select(vec![
        "[[pool]]",
        "[pool.probe]",
        "[pool.cooldown]",
        "[pool.cooldown.reasons.timeout]",
        "[[pool.source]]",
        "[[endpoint]]",
        "[server]",
        "[store]",
        "[gateway]",
        "[[ban]]",
        "[",
    ]);
    let line = prop_oneof![
        header.prop_map(String::from),
        (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        any::<String>(),
    ];
    prop::collection::vec(line, 0..16).prop_map(|v| v.join("\n"))
}

fn request_ish() -> impl Strategy<Value = Value> {
    let op = prop::sample::select(vec![
        "lease",
        "report",
        "release",
        "status",
        "endpoints",
        "disable",
        "enable",
        "ping",
        "add",
        "import",
        "remove",
        "probe",
        "nosuch",
        "",
    ]);
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z0-9_ ]{0,10}".prop_map(Value::from),
        Just(json!("10s")),
        Just(json!("failure")),
        Just(json!("timeout")),
        Just(json!([1, "x"])),
        Just(json!({"k": 1})),
    ];
    let field = prop::sample::select(vec![
        "pool",
        "ttl",
        "wait",
        "session",
        "lease",
        "outcome",
        "reason",
        "phase",
        "status",
        "retry_after",
        "detail",
        "endpoint",
        "now",
        "state",
        "urls",
        "path",
        "token",
        "id",
    ]);
    (op, prop::collection::vec((field, scalar), 0..6)).prop_map(|(op, fields)| {
        let mut m = serde_json::Map::new();
        m.insert("op".into(), json!(op));
        for (k, v) in fields {
            m.insert(k.to_string(), v);
        }
        Value::Object(m)
    })
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn parse_line_never_panics_on_any_text(s in any::<String>()) {
        let _ = parse_line(&s);
    }

    #[test]
    fn parse_line_never_panics_on_requests(v in request_ish()) {
        let _ = parse_line(&v.to_string());
    }

    #[test]
    fn parse_line_echoes_the_id(id in prop_oneof![
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,16}".prop_map(Value::from),
    ]) {
        let line = json!({"op": "ping", "id": id.clone()}).to_string();
        match parse_line(&line) {
            Ok((got, _, _)) => prop_assert_eq!(got, Some(id)),
            Err(r) => prop_assert!(false, "ping rejected: {}", r.to_json()),
        }
    }

    #[test]
    fn proxy_url_parse_never_panics_on_bytes(b in prop::collection::vec(any::<u8>(), 0..96)) {
        let _ = ProxyUrl::parse(&String::from_utf8_lossy(&b));
    }

    #[test]
    fn proxy_url_parse_never_panics_on_url_ish(s in url_ish()) {
        if let Ok(u) = ProxyUrl::parse(&s) {
            // Whatever parses renders to a URL that parses to the same endpoint.
            let again = ProxyUrl::parse(&u.to_secret_string());
            prop_assert_eq!(again.as_ref().ok(), Some(&u), "{:?}", s);
        }
    }

    #[test]
    fn valid_urls_round_trip(u in valid_url()) {
        let text = u.to_secret_string();
        let back = ProxyUrl::parse(&text);
        prop_assert_eq!(back.as_ref().ok(), Some(&u), "{}", text);
        // The redacted form shows `***` where the password was.
        if u.password.is_some() {
            let shown = u.to_string();
            prop_assert!(shown.contains(":***@"), "{}", shown);
            prop_assert_eq!(shown.replace(":***@", "@"), {
                let mut bare = u.clone();
                bare.password = None;
                bare.to_secret_string()
            });
        }
    }

    #[test]
    fn a_control_character_in_a_user_or_password_is_refused(
        u in valid_url(),
        // Every control character: C0, DEL and C1.
        c in prop_oneof![0u32..0x20, Just(0x7f), 0x80u32..0xa0]
            .prop_map(|c| char::from_u32(c).expect("a char")),
        in_password in any::<bool>(),
    ) {
        let mut bad = u;
        let text = format!("a{c}b");
        if in_password {
            bad.user.get_or_insert_with(|| "u".into());
            bad.password = Some(text);
        } else {
            bad.user = Some(text);
        }
        let url = bad.to_secret_string();
        let err = ProxyUrl::parse(&url).unwrap_err().to_string();
        prop_assert!(err.contains("control character"), "{}: {}", url, err);
    }

    #[test]
    fn config_parse_never_panics(s in toml_ish()) {
        let _ = Config::parse(&s, "prop.toml", None);
    }

    #[test]
    fn config_parse_never_panics_on_any_text(s in any::<String>()) {
        let _ = Config::parse(&s, "prop.toml", None);
    }

    #[test]
    fn parse_list_never_panics(s in prop_oneof![url_ish(), any::<String>()]) {
        let _ = parse_list(&s);
    }

    #[test]
    fn lists_round_trip(urls in prop::collection::vec(valid_url(), 1..8), json_form in any::<bool>()) {
        let lines: Vec<String> = urls.iter().map(|u| u.to_secret_string()).collect();
        let text = if json_form {
            serde_json::to_string(&lines).unwrap()
        } else {
            format!("# a list\n{}\n", lines.join("\n"))
        };
        let back = parse_list(&text).map(|l| l.into_iter().map(|l| l.url).collect::<Vec<_>>());
        prop_assert_eq!(back.as_ref().ok(), Some(&urls), "{}", text);
    }

    #[test]
    fn redaction_never_panics_and_hides_every_known_password(
        text in prop_oneof![url_ish(), any::<String>()],
        passwords in prop::collection::vec(prop_oneof![
            "[a-z*@:]{1,4}".prop_map(String::from),
            any::<String>(),
        ], 0..4),
        embed in any::<bool>(),
    ) {
        let text = if embed && !passwords.is_empty() {
            format!("{text} http://u:{}@h:1 {}", passwords[0], passwords[0])
        } else {
            text
        };
        let known: Vec<&str> = passwords.iter().map(String::as_str).collect();
        let out = redact_text(&text, &known);
        for p in known.iter().filter(|p| !p.is_empty()) {
            prop_assert!(!out.contains(p), "{:?} kept {:?} from {:?}", out, p, text);
        }
    }

    #[test]
    fn url_credentials_are_masked_in_free_text(
        prefix in "[a-zA-Z ]{0,10}",
        u in valid_url(),
    ) {
        let out = redact_text(&format!("{prefix} {} suffix", u.to_secret_string()), &[]);
        if let (Some(_), Some(p)) = (&u.user, &u.password) {
            let enc = u.to_secret_string();
            let enc_pw = enc.split("://").nth(1).and_then(|r| r.rsplit_once('@'))
                .and_then(|(ui, _)| ui.split_once(':')).map(|(_, p)| p.to_string()).unwrap_or_default();
            prop_assert!(!p.is_empty());
            prop_assert!(out.contains(":***@"), "{}", out);
            prop_assert!(enc_pw.is_empty() || !out.contains(&format!(":{enc_pw}@")), "{}", out);
        }
    }

    #[test]
    fn argv_redaction_never_panics(argv in prop::collection::vec(prop_oneof![
        Just("--password".to_string()),
        Just("--token=x".to_string()),
        url_ish(),
        any::<String>(),
    ], 0..6)) {
        let _ = redact_argv(&argv);
    }

    #[test]
    fn leaf_names_never_panic_and_parse_to_themselves(s in prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9._*-]{0,70}",
        "([a-z0-9-]{1,63}\\.){1,5}[a-z]{2,6}\\.?",
        "[0-9.:a-fA-F\\[\\]]{0,45}",
    ]) {
        if let Ok(n) = LeafName::parse(&s) {
            // Canonical: the key parses to the same name.
            let again = LeafName::parse(&n.key()).unwrap();
            prop_assert_eq!(&again, &n);
            prop_assert!(n.key().len() <= 253);
        }
    }

    #[test]
    fn host_patterns_never_panic_and_match_what_they_list(
        entries in prop::collection::vec(prop_oneof![
            any::<String>(),
            "\\*|\\*\\.[a-z.]{1,20}|[A-Za-z0-9.:\\[\\]-]{1,30}",
        ], 0..5),
        host in "[a-z0-9.-]{0,30}",
    ) {
        if let Ok(p) = HostPatterns::parse(&entries, Everything::Allowed) {
            let _ = p.matches(&host);
            for e in p.entries() {
                match e.strip_prefix("*.") {
                    Some(suffix) => {
                        let below = format!("x.{}", suffix);
                        prop_assert!(p.matches(&below));
                    }
                    None => prop_assert!(p.matches(e)),
                }
            }
        }
    }
}
