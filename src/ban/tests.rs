use std::io::Write;

use hyper::header::{HeaderName, HeaderValue};

use super::*;

fn rule(name: &str) -> BanEntry {
    BanEntry {
        name: Some(name.into()),
        ..BanEntry::default()
    }
}

fn headers(list: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in list {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn br(data: &[u8], quality: u32, lgwin: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = brotli::CompressorWriter::new(&mut out, 4096, quality, lgwin);
    w.write_all(data).unwrap();
    drop(w);
    out
}

/// A response's headers as a table writes them.
type Headers<'a> = &'a [(&'a str, &'a str)];

/// What a screen came to, in a form a table can hold.
#[derive(Debug, PartialEq)]
enum Seen {
    Clean,
    Banned(&'static str, BanKind),
    NeedsBody(usize),
}

fn seen(s: &Screen<'_>) -> Seen {
    match s {
        Screen::Clean => Seen::Clean,
        Screen::Banned(b) => Seen::Banned(b.rule.to_string().leak(), b.kind),
        Screen::NeedsBody(b) => Seen::NeedsBody(b.hold()),
    }
}

#[test]
fn entries_that_cannot_be_used_name_their_key() {
    let long = "x".repeat(5000);
    let cases: Vec<(BanEntry, &str, &str)> = vec![
        (BanEntry::default(), "name", "needs a name"),
        (
            BanEntry {
                status: Some(vec![403]),
                ..rule("Bad Name")
            },
            "name",
            "not a rule name",
        ),
        (rule("empty"), "", "at least one condition"),
        (
            BanEntry {
                status: Some(vec![]),
                ..rule("s")
            },
            "status",
            "empty list",
        ),
        (
            BanEntry {
                status: Some(vec![99]),
                ..rule("s")
            },
            "status",
            "not an HTTP status",
        ),
        (
            BanEntry {
                header: Some("no colon".into()),
                ..rule("h")
            },
            "header",
            "Name: regex",
        ),
        (
            BanEntry {
                header: Some("bad name: x".into()),
                ..rule("h")
            },
            "header",
            "not a header name",
        ),
        (
            BanEntry {
                header: Some("x-a: (".into()),
                ..rule("h")
            },
            "header",
            "not a usable regex",
        ),
        (
            BanEntry {
                body: Some("a*".into()),
                ..rule("b")
            },
            "body",
            "matches an empty body",
        ),
        (
            BanEntry {
                // Compiles to far more than the size limit.
                body: Some("(\\w{50}){50}x".into()),
                ..rule("b")
            },
            "body",
            "size limit",
        ),
        (
            BanEntry {
                body: Some(long),
                ..rule("b")
            },
            "body",
            "at most 4096",
        ),
        (
            BanEntry {
                body: Some("x".into()),
                body_bytes: Some(0),
                ..rule("b")
            },
            "body_bytes",
            "out of range",
        ),
        (
            BanEntry {
                body: Some("x".into()),
                body_bytes: Some(MAX_BODY_BYTES + 1),
                ..rule("b")
            },
            "body_bytes",
            "out of range",
        ),
        (
            BanEntry {
                status: Some(vec![403]),
                body_bytes: Some(10),
                ..rule("b")
            },
            "body_bytes",
            "has none",
        ),
        (
            BanEntry {
                status: Some(vec![403]),
                host: vec!["https://shop.example/".into()],
                ..rule("h")
            },
            "host",
            "not a host",
        ),
        (
            BanEntry {
                status: Some(vec![403]),
                host: vec!["shop.example:443".into()],
                ..rule("h")
            },
            "host",
            "no port",
        ),
        (
            BanEntry {
                status: Some(vec![403]),
                host: vec!["*".into()],
                ..rule("h")
            },
            "host",
            "leave host out",
        ),
        (
            BanEntry {
                builtin: Some("akamai".into()),
                ..BanEntry::default()
            },
            "builtin",
            "known: cloudflare",
        ),
        (
            BanEntry {
                builtin: Some("cloudflare".into()),
                status: Some(vec![403]),
                ..BanEntry::default()
            },
            "status",
            "only host",
        ),
    ];
    for (entry, key, message) in cases {
        let e = BanRules::compile(vec![entry.clone()]).unwrap_err();
        assert_eq!((e.index, e.key), (0, key), "{entry:?}: {e}");
        assert!(e.to_string().contains(message), "{entry:?}: {e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}

#[test]
fn names_are_unique_across_rules_and_sets() {
    let a = BanEntry {
        status: Some(vec![403]),
        ..rule("a")
    };
    let e = BanRules::compile(vec![a.clone(), a.clone()]).unwrap_err();
    assert_eq!((e.index, e.key, e.rule.as_deref()), (1, "name", Some("a")));
    assert!(e.to_string().starts_with("rule \"a\": "), "{e}");
    let cf = BanEntry {
        builtin: Some("cloudflare".into()),
        ..BanEntry::default()
    };
    let e = BanRules::compile(vec![
        BanEntry {
            status: Some(vec![403]),
            ..rule("cloudflare-challenge")
        },
        cf.clone(),
    ])
    .unwrap_err();
    assert_eq!((e.index, e.key), (1, "builtin"));
    let rules = BanRules::compile(vec![cf, a]).unwrap();
    assert_eq!(
        rules.names().collect::<Vec<_>>(),
        ["cloudflare-challenge", "a"]
    );
}

#[test]
fn the_head_decides_what_it_can() {
    let rules = BanRules::compile(vec![
        BanEntry {
            status: Some(vec![429]),
            ..rule("busy")
        },
        BanEntry {
            header: Some("CF-Mitigated: ^challenge$".into()),
            ..rule("cf")
        },
        BanEntry {
            status: Some(vec![200]),
            body: Some("(?i)captcha".into()),
            host: vec!["shop.example".into(), "*.shop.example".into()],
            body_bytes: Some(100),
            ..rule("shop-captcha")
        },
        BanEntry {
            status: Some(vec![403]),
            host: vec!["*.shop.example".into()],
            ..rule("shop-403")
        },
        BanEntry {
            header: Some("x-blocked:".into()),
            body: Some("denied".into()),
            ..rule("blocked")
        },
    ])
    .unwrap();
    let none: &[(&str, &str)] = &[];
    use BanKind::*;
    let cases: &[(&str, u16, Headers, Seen)] = &[
        ("a.example", 200, none, Seen::Clean),
        ("a.example", 429, none, Seen::Banned("busy", Status)),
        (
            "a.example",
            200,
            &[("cf-mitigated", "challenge")],
            Seen::Banned("cf", Content),
        ),
        // The value is matched as the regex says: unanchored unless anchored.
        (
            "a.example",
            200,
            &[("cf-mitigated", "challenged")],
            Seen::Clean,
        ),
        // Any of several values of the header.
        (
            "a.example",
            200,
            &[("cf-mitigated", "no"), ("cf-mitigated", "challenge")],
            Seen::Banned("cf", Content),
        ),
        // A body rule for the host: the body decides.
        ("shop.example", 200, none, Seen::NeedsBody(100)),
        ("www.shop.example", 200, none, Seen::NeedsBody(100)),
        ("shop.example.com", 200, none, Seen::Clean),
        ("notshop.example", 200, none, Seen::Clean),
        // `*.` is below the name, not the name itself.
        ("shop.example", 403, none, Seen::Clean),
        (
            "a.b.shop.example",
            403,
            none,
            Seen::Banned("shop-403", Status),
        ),
        // A header condition that fails leaves its body unread.
        ("a.example", 200, &[("x-other", "1")], Seen::Clean),
        (
            "a.example",
            200,
            &[("x-blocked", "")],
            Seen::NeedsBody(32768),
        ),
        // Two body rules open: the larger hold.
        (
            "shop.example",
            200,
            &[("x-blocked", "1")],
            Seen::NeedsBody(32768),
        ),
        // An encoding the matcher cannot undo: body rules cannot hold.
        (
            "shop.example",
            200,
            &[("content-encoding", "zstd")],
            Seen::Clean,
        ),
        (
            "shop.example",
            200,
            &[("content-encoding", "gzip, br")],
            Seen::Clean,
        ),
        (
            "shop.example",
            200,
            &[("content-encoding", "gzip")],
            Seen::NeedsBody(100),
        ),
    ];
    for (host, status, h, want) in cases {
        let got = rules.screen(host, *status, &headers(h));
        assert_eq!(seen(&got), *want, "{host} {status} {h:?}");
    }
}

#[test]
fn the_first_rule_that_holds_wins_body_or_not() {
    let rules = BanRules::compile(vec![
        BanEntry {
            body: Some("captcha".into()),
            ..rule("captcha")
        },
        BanEntry {
            status: Some(vec![403]),
            ..rule("forbidden")
        },
        BanEntry {
            body: Some("later".into()),
            ..rule("later")
        },
    ])
    .unwrap();
    let judge = |status, body: &[u8]| match rules.screen("a.example", status, &HeaderMap::new()) {
        Screen::NeedsBody(b) => b
            .judge(body)
            .map(|b| (b.rule.to_string(), b.kind, b.by_body)),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        judge(403, b"a captcha page"),
        Some(("captcha".into(), BanKind::Content, true))
    );
    // The head rule after the open body rule answers when the body rule does not hold,
    // and the rules after it are not looked at.
    assert_eq!(
        judge(403, b"later"),
        Some(("forbidden".into(), BanKind::Status, false))
    );
    assert_eq!(
        judge(200, b"later"),
        Some(("later".into(), BanKind::Content, true))
    );
    assert_eq!(judge(200, b"fine"), None);
    assert_eq!(judge(200, b""), None);
}

#[test]
fn bodies_are_decoded_before_matching() {
    // Text that compresses a little, so that two thirds of the encoded body hold the title.
    let text: String = (0..4000u32)
        .map(|i| char::from(b'a' + (i * i % 26) as u8))
        .collect();
    let page =
        format!("<html><head><title>Attention Required</title></head><body>{text}</body></html>");
    let page = page.as_bytes();
    let rules = BanRules::compile(vec![BanEntry {
        body: Some("(?i)<title>attention required".into()),
        ..rule("title")
    }])
    .unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("identity", page.to_vec()),
        ("gzip", gzip(page)),
        ("x-gzip", gzip(page)),
        ("deflate", zlib(page)),
        ("deflate", raw_deflate(page)),
        ("br", br(page, 5, 22)),
        ("BR", br(page, 11, 24)),
    ];
    for (coding, body) in cases {
        let h = headers(&[("content-encoding", coding)]);
        let Screen::NeedsBody(b) = rules.screen("a.example", 200, &h) else {
            panic!("{coding}");
        };
        assert_eq!(b.judge(&body).map(|b| b.rule), Some("title"), "{coding}");
        // The head of the body alone (as held when it is long) decodes as far as it goes.
        let cut = &body[..body.len() * 2 / 3];
        assert_eq!(b.judge(cut).map(|b| b.rule), Some("title"), "{coding} cut");
        // Not that coding at all: nothing decodes, nothing matches.
        if coding != "identity" {
            assert_eq!(b.judge(page).map(|b| b.rule), None, "{coding} garbage");
        }
    }
}

#[test]
fn only_the_first_body_bytes_are_looked_at() {
    let rules = BanRules::compile(vec![BanEntry {
        body: Some("needle".into()),
        body_bytes: Some(64),
        ..rule("n")
    }])
    .unwrap();
    let early = format!("{}needle", "a".repeat(58));
    let late = format!("{}needle", "a".repeat(59));
    for coding in ["identity", "gzip"] {
        let h = headers(&[("content-encoding", coding)]);
        let enc = |b: &[u8]| match coding {
            "gzip" => gzip(b),
            _ => b.to_vec(),
        };
        let Screen::NeedsBody(b) = rules.screen("a.example", 200, &h) else {
            panic!();
        };
        assert!(b.judge(&enc(early.as_bytes())).is_some(), "{coding}");
        assert!(b.judge(&enc(late.as_bytes())).is_none(), "{coding}");
    }
}

#[test]
fn bombs_decode_no_further_than_asked() {
    let zeros = vec![0u8; 8 << 20];
    for (coding, body) in [
        (Coding::Gzip, gzip(&zeros)),
        (Coding::Deflate, zlib(&zeros)),
        (Coding::Deflate, raw_deflate(&zeros)),
        // Blocks of at most 128 KiB (a 64 KiB window).
        (Coding::Brotli, br(&zeros, 5, 16)),
    ] {
        let out = decode(coding, &body, 1000);
        assert_eq!(out.len(), 1000, "{coding:?}");
        assert!(out.iter().all(|&b| b == 0));
    }
    // A br stream whose first block announces more than the ring buffer may take (a 16 MiB window
    // here: one block of 8 MiB) is not decoded at all: the decoder asks for the room before it writes a byte.
    let big_blocks = br(&zeros, 5, 24);
    assert!(decode(Coding::Brotli, &big_blocks, 1000).is_empty());
}

#[test]
fn codings_are_read_from_content_encoding() {
    let cases: &[(&[&str], Option<Coding>)] = &[
        (&[], Some(Coding::Identity)),
        (&["identity"], Some(Coding::Identity)),
        (&["GZip"], Some(Coding::Gzip)),
        (&["x-gzip"], Some(Coding::Gzip)),
        (&["deflate"], Some(Coding::Deflate)),
        (&["br"], Some(Coding::Brotli)),
        (&["identity, br"], Some(Coding::Brotli)),
        (&["gzip", "br"], None),
        (&["gzip, gzip"], None),
        (&["zstd"], None),
        (&["compress"], None),
    ];
    for (values, want) in cases {
        let h = headers(
            &values
                .iter()
                .map(|v| ("content-encoding", *v))
                .collect::<Vec<_>>(),
        );
        assert_eq!(Coding::of(&h), *want, "{values:?}");
    }
}

#[test]
fn the_rule_is_read_back_from_a_detail() {
    let rules = BanRules::compile(vec![BanEntry {
        status: Some(vec![403]),
        ..rule("shop_403-x")
    }])
    .unwrap();
    let Screen::Banned(b) = rules.screen("a", 403, &HeaderMap::new()) else {
        panic!();
    };
    let d = format!(
        "gateway, destination a: {}",
        b.detail("destination answered 403")
    );
    assert_eq!(
        d,
        "gateway, destination a: ban rule shop_403-x: destination answered 403"
    );
    for (detail, want) in [
        (d.as_str(), Some("shop_403-x")),
        ("destination answered 403", None),
        ("ban rule : x", None),
        ("ban rule Not Valid: x", None),
        ("ban rule cut", None),
    ] {
        assert_eq!(rule_in_detail(detail), want, "{detail}");
    }
}

#[test]
fn a_pattern_that_backtracks_elsewhere_is_linear_here() {
    let rules = BanRules::compile(vec![BanEntry {
        body: Some("(a+)+$".into()),
        body_bytes: Some(MAX_BODY_BYTES),
        ..rule("evil")
    }])
    .unwrap();
    let mut body = vec![b'a'; MAX_BODY_BYTES - 1];
    body.push(b'b');
    let Screen::NeedsBody(b) = rules.screen("a", 200, &HeaderMap::new()) else {
        panic!();
    };
    // A backtracking engine would take longer than the universe's age here.
    assert!(b.judge(&body).is_none());
    body.pop();
    assert!(b.judge(&body).is_some());
}
