//! Regressions of the third adversarial run (issue 44) through the real binary: the
//! PostgreSQL password in no message whatever form carries it (URL userinfo, `password=`
//! in the query, a libpq key=value string) and through whichever way it came (`--db`,
//! `PROXYPOOL_DB`, `[store] url`, `migrate --to/--from`); no file made from a string that
//! is not a path; a bad `sslrootcert` refused (exit 2) instead of a panic; import and sniff
//! lines refused naming their line (control characters, two URLs, a comment, a scheme
//! without its colon), alike on SQLite and PostgreSQL; `config check` refusing what `serve`
//! refuses and naming the store it would use; blank and padded tokens.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::daemon::*;
use common::postgres;
use serde_json::{json, Value};

/// Every password the database strings below carry, and the pieces a wrong split of them
/// would show.
const SECRETS: &[&str] = &[
    "QuerySecret1",
    "Fl33tP",
    "ss:w/rd",
    "rd#1",
    "CfgP",
    "ss3word",
    "KvSecret5",
    "pa/ss9",
    "FromPw9",
    "ToPw7",
    "AmpPw&x",
];

fn no_secret(what: &str, text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "{what}: {s:?} shown:\n{text}");
    }
}

/// Every path under `dir`, as text.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A CLI run with `PROXYPOOL_DB` set to `db` (or removed), the home as working directory;
/// a command still running after 20 s (a `serve` that should have been refused) is killed
/// and reported with no exit code.
fn run_with(h: &Home, db: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = h.cmd();
    match db {
        Some(v) => c.env("PROXYPOOL_DB", v),
        None => c.env_remove("PROXYPOOL_DB"),
    };
    c.envs(env.iter().copied())
        .args(args)
        .current_dir(h.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match wait_output(c.spawn().unwrap(), Duration::from_secs(20)) {
        Some(out) => Out::from(out, args),
        None => Out {
            code: None,
            stdout: String::new(),
            stderr: format!("`proxypool {}` still running after 20 s", args.join(" ")),
        },
    }
}

/// Exit 2, no password, no panic, and (when given) `says` in the message.
fn refused(what: &str, o: &Out, says: Option<&str>) {
    assert_eq!(o.code, Some(2), "{what}: {o:?}");
    assert!(!o.stderr.contains("panicked"), "{what}: {}", o.stderr);
    if let Some(s) = says {
        assert!(o.stderr.contains(s), "{what}: wanted {s:?} in {}", o.stderr);
    }
    no_secret(what, &o.stdout);
    no_secret(what, &o.stderr);
}

#[test]
fn no_form_of_a_postgres_password_reaches_a_message_or_a_file_name() {
    let h = Home::new(None);
    let port = common::ports::reserve();
    let lite = h.path("lite.db");
    h.run(&["--db", lite.to_str().unwrap(), "migrate"]);
    let at = format!("127.0.0.1:{port}");
    // (the string, what the refusal says); every one is refused before any connection.
    let refused_forms: Vec<(String, &str)> = vec![
        (
            format!("postgresql://pp@{at}/ppdb?password=QuerySecret1&sslmode=bogus"),
            "sslmode",
        ),
        (format!("postgresql://pp:Fl33tP@ss:w/rd#1@{at}/ppdb"), "%40"),
        (format!("postgresql://pp:CfgP@ss3word@{at}/ppdb"), "%40"),
        (format!("postgresql://pp:pa/ss9@{at}/ppdb"), "%2F"),
        (format!("postgres://pp@{at}/ppdb?password=AmpPw&x"), "%26"),
        (
            format!("postgresql://pp:QuerySecret1 @{at}/ppdb"),
            "white space",
        ),
        (
            format!("host=127.0.0.1 port={port} password=KvSecret5 dbname=ppdb"),
            "postgresql://",
        ),
        (
            "dbname = ppdb password = KvSecret5".to_string(),
            "postgresql://",
        ),
        ("mysql://u:ToPw7@db.invalid/x".to_string(), "postgresql://"),
        (format!("pp:ToPw7@{at}/ppdb"), "postgresql://"),
    ];
    let before = tree(h.dir.path());
    for (value, says) in &refused_forms {
        let v = value.as_str();
        for args in [
            vec!["status"],
            vec!["list"],
            vec!["add", "http://10.44.0.1:3128"],
            vec!["migrate"],
            vec!["serve"],
        ] {
            let mut flag = vec!["--db", v];
            flag.extend(&args);
            refused(&format!("--db {v} {args:?}"), &h.run(&flag), Some(says));
            let o = run_with(&h, Some(v), &args, &[]);
            refused(&format!("PROXYPOOL_DB={v} {args:?}"), &o, Some(says));
        }
        // The config's [store]: a URL as `url`, anything else as `path`.
        let key = if v.contains("://") { "url" } else { "path" };
        let cfg = h.path("store.toml");
        std::fs::write(&cfg, format!("[store]\n{key} = {:?}\n", v)).unwrap();
        let c = cfg.to_str().unwrap();
        for args in [vec!["status"], vec!["serve"], vec!["config", "check"]] {
            let mut all = vec!["--config", c];
            all.extend(&args);
            let o = run_with(&h, None, &all, &[]);
            refused(&format!("[store] {key} = {v} {args:?}"), &o, None);
        }
        std::fs::remove_file(&cfg).unwrap();
        let o = h.run(&["migrate", "--from", lite.to_str().unwrap(), "--to", v]);
        refused(&format!("migrate --to {v}"), &o, None);
        let o = h.run(&[
            "migrate",
            "--from",
            v,
            "--to",
            &format!("postgresql://pp@{at}/ppdb"),
        ]);
        refused(&format!("migrate --from {v}"), &o, None);
    }
    let o = h.run(&[
        "migrate",
        "--from",
        &format!("postgresql://pp:FromPw9@{at}/ppdb"),
        "--to",
        &format!("postgresql://pp@{at}/ppdb"),
    ]);
    refused("migrate --from a URL", &o, Some("SQLite"));
    // Accepted forms to a database that is not there: a failure naming the database,
    // never its password.
    for v in [
        format!("postgresql://pp@{at}/ppdb?password=QuerySecret1"),
        format!("postgresql://pp:pa%2Fss9@{at}/ppdb"),
        format!("postgresql://pp:Fl33tP%40ss%3Aw%2Frd%231@{at}/ppdb"),
    ] {
        for args in [vec!["status"], vec!["migrate"]] {
            let mut flag = vec!["--db", v.as_str()];
            flag.extend(&args);
            let o = h.run(&flag);
            assert_eq!(o.code, Some(1), "{v} {args:?}: {o:?}");
            assert!(o.stderr.contains(&format!("pp@{at}/ppdb")), "{}", o.stderr);
            no_secret(&v, &o.stderr);
            no_secret(&v, &o.stdout);
        }
    }
    // Nothing was made from any of these strings: no file, no folder, no lock.
    let after = tree(h.dir.path());
    assert_eq!(before, after, "files appeared");
    for p in after {
        no_secret("a file name", &p);
    }
}

#[test]
fn a_bad_sslrootcert_is_refused_naming_it_without_a_panic() {
    let h = Home::new(None);
    let port = common::ports::reserve();
    let not_pem = h.path("not.pem");
    std::fs::write(&not_pem, "this is no certificate\n").unwrap();
    let lite = h.path("lite.db");
    h.run(&["--db", lite.to_str().unwrap(), "migrate"]);
    for root in ["/nonexist".to_string(), not_pem.display().to_string()] {
        let url = format!(
            "postgresql://pp:QuerySecret1@127.0.0.1:{port}/ppdb?sslrootcert={root}&sslmode=verify-full"
        );
        for args in [vec!["status"], vec!["serve"], vec!["migrate"], vec!["list"]] {
            let mut all = vec!["--db", url.as_str()];
            all.extend(&args);
            refused(
                &format!("{root} {args:?}"),
                &h.run(&all),
                Some("sslrootcert"),
            );
        }
        let o = h.run(&["migrate", "--from", lite.to_str().unwrap(), "--to", &url]);
        refused(&format!("{root} migrate --to"), &o, Some("sslrootcert"));
        let cfg = h.path("tls.toml");
        std::fs::write(&cfg, format!("[store]\nurl = {url:?}\n")).unwrap();
        let o = run_with(
            &h,
            None,
            &["--config", cfg.to_str().unwrap(), "config", "check"],
            &[],
        );
        refused(&format!("{root} config check"), &o, Some("sslrootcert"));
    }
}

#[test]
fn an_import_error_never_echoes_a_password() {
    let h = Home::new(None);
    let file = h.path("leak.txt");
    for line in [
        "10.0.0.1:alice:LeakPw1",
        "10.0.0.1:3128:alice",
        "alice:LeakPw1:10.0.0.1",
        "10.0.0.1,3128,alice,LeakPw1",
    ] {
        std::fs::write(&file, format!("http://10.44.1.1:3128\n{line}\n")).unwrap();
        let (_, err) = h.fails(2, &["import", file.to_str().unwrap()]);
        assert!(err.contains("line 2"), "{line}: {err}");
        assert!(!err.contains("LeakPw1"), "{line}: {err}");
    }
    assert!(h.list().is_empty());
}

#[test]
fn import_refuses_garbage_naming_the_line() {
    let h = Home::new(None);
    let file = h.path("garbage.txt");
    for (line, says) in [
        (
            "http://alice:SecretA@10.0.0.1:80 http://bob:SecretB@10.0.0.2:80",
            "white space",
        ),
        (
            "http://alice:SecretA@10.0.0.1:80http://bob:SecretB@10.0.0.2:80",
            "two URLs",
        ),
        ("10.0.0.3:8080:alice:SecretA # provider B", "white space"),
        ("http://alice:SecretA@10.0.0.3:8080 # a@b", "white space"),
        ("socks5h//alice:SecretA@h.example:1080", "socks5h://"),
        ("http:/alice:SecretA@h.example:1080", "http://"),
        ("http://ali/ce:SecretA@h.example:1080", "user name"),
    ] {
        std::fs::write(&file, format!("http://10.44.2.1:3128\n{line}\n")).unwrap();
        let (_, err) = h.fails(2, &["import", file.to_str().unwrap()]);
        assert!(err.contains("line 2"), "{line}: {err}");
        assert!(err.contains(says), "{line}: wanted {says:?} in {err}");
        assert!(
            !err.contains("SecretA") && !err.contains("SecretB"),
            "{line}: {err}"
        );
        // The same URL through `add` is refused the same way.
        if line.contains("://") {
            let (_, err) = h.fails(2, &["add", line]);
            assert!(err.contains(says), "add {line}: {err}");
        }
    }
    assert!(h.list().is_empty(), "{:?}", h.list());
}

/// What a home on each backend says to the same bad input: SQLite, and PostgreSQL when
/// the harness has it.
fn homes(config: Option<&str>) -> Vec<(&'static str, Home)> {
    let mut v = vec![("sqlite", Home::new(config))];
    if let Some(pg) = postgres::shared() {
        let mut h = Home::new(config);
        h.db = PathBuf::from(pg.database());
        v.push(("postgres", h));
    }
    v
}

#[test]
fn control_characters_in_any_url_part_are_refused_alike_on_both_backends() {
    let bad = [
        "http://us%00er:pw@10.0.0.1:80",
        "http://user:p%00w@10.0.0.1:80",
        "http://user:p%0Aw@10.0.0.1:80",
        "http://us%1Ber@10.0.0.1:80",
        "http://user:p\u{7f}w@10.0.0.1:80",
        "http://user:p\u{85}w@10.0.0.1:80",
        "http://user:pw@10.0.0.1:80%00",
    ];
    let mut said: Vec<Vec<String>> = Vec::new();
    for (backend, h) in homes(None) {
        let id = h.add(&["http://u:good@10.45.0.1:3128"])[0].to_string();
        let file = h.path("nul.txt");
        let mut msgs = Vec::new();
        for url in bad {
            let (_, err) = h.fails(2, &["add", url]);
            assert!(
                err.contains("control character"),
                "{backend} add {url:?}: {err}"
            );
            msgs.push(err);
            let (_, err) = h.fails(2, &["edit", &id, "--url", url]);
            assert!(
                err.contains("control character"),
                "{backend} edit {url:?}: {err}"
            );
            msgs.push(err);
            std::fs::write(&file, format!("http://10.45.0.2:3128\n{url}\n")).unwrap();
            let (_, err) = h.fails(2, &["import", file.to_str().unwrap()]);
            assert!(err.contains("line 2"), "{backend} import {url:?}: {err}");
            assert!(
                err.contains("control character"),
                "{backend} import {url:?}: {err}"
            );
            msgs.push(err);
        }
        // A raw NUL byte in an import line.
        std::fs::write(&file, b"http://10.45.0.2:3128\nhttp://u:p\0w@10.0.0.1:80\n").unwrap();
        let (_, err) = h.fails(2, &["import", file.to_str().unwrap()]);
        assert!(
            err.contains("line 2") && err.contains("control character"),
            "{err}"
        );
        msgs.push(err);
        let list = h.list();
        assert_eq!(list.len(), 1, "{backend}: {list:?}");
        assert_eq!(list[0]["url"], "http://u:***@10.45.0.1:3128", "{backend}");
        said.push(msgs);
    }
    // Both backends answer every input in the same words.
    if let [a, b] = &said[..] {
        assert_eq!(a, b);
    }
}

#[test]
fn a_sniffed_line_with_a_control_character_is_refused_alike_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let nul = dir.path().join("nul.txt");
    let leak = dir.path().join("leak.txt");
    let good = dir.path().join("good.txt");
    std::fs::write(
        &nul,
        "http://10.46.0.1:3128\nhttp://us%00er:pw@10.46.0.2:3128\n",
    )
    .unwrap();
    std::fs::write(&leak, "http://10.46.0.1:3128\n10.46.0.3:alice:LeakPw1\n").unwrap();
    std::fs::write(&good, "http://10.46.0.1:3128\nhttp://10.46.0.4:3128\n").unwrap();
    let port = common::ports::reserve();
    let config = format!(
        r#"
[[pool]]
name = "default"
mode = "sniffing"

[pool.probe]
url = "http://127.0.0.1:{port}/"
interval = "0s"

[[pool.source]]
kind = "file"
path = "{}/no\u0000such.txt"
preferred = true

[[pool.source]]
kind = "file"
path = "{}"
preferred = true

[[pool.source]]
kind = "file"
path = "{}"

[[pool.source]]
kind = "file"
path = "{}"
"#,
        dir.path().display(),
        nul.display(),
        leak.display(),
        good.display()
    );
    for (backend, h) in homes(Some(&config)) {
        let d = h.serve();
        let events = common::eventually(Duration::from_secs(10), "the sniff's events", || {
            let ev: Vec<Value> = h
                .events()
                .into_iter()
                .filter(|e| e["kind"].as_str().unwrap_or("").starts_with("sniff_"))
                .collect();
            if ev.iter().any(|e| e["kind"] == "sniff_success") {
                Ok(ev)
            } else {
                Err(format!("{ev:?}\n{}", d.log_text()))
            }
        });
        // The first sniff, up to the source that won (later ones may follow: the
        // endpoints listed are not there, and the pool sniffs again when they fail).
        let failures: Vec<&str> = events
            .iter()
            .take_while(|e| e["kind"] != "sniff_success")
            .filter(|e| e["kind"] == "sniff_failure")
            .map(|e| e["detail"].as_str().unwrap())
            .collect();
        assert_eq!(failures.len(), 3, "{backend}: {events:?}");
        // A source whose name holds a NUL (its path) fails like any other, its name
        // escaped, and the next one is asked.
        assert!(
            failures[0].contains("no\\u{0}such.txt") && failures[0].contains("cannot read"),
            "{backend}: {}",
            failures[0]
        );
        assert!(
            failures[1].contains("line 2") && failures[1].contains("control character"),
            "{backend}: {}",
            failures[1]
        );
        assert!(failures[2].contains("line 2"), "{backend}: {}", failures[2]);
        let sources = h.ok(&["sources"]);
        assert!(sources.contains("no\\u{0}such.txt"), "{backend}: {sources}");
        for f in &failures {
            assert!(
                !f.contains("internal") && !f.contains("LeakPw1"),
                "{backend}: {f}"
            );
        }
        assert!(!d.log_text().contains("LeakPw1"), "{backend}");
        let urls: Vec<Value> = h.list().iter().map(|e| e["url"].clone()).collect();
        assert_eq!(
            urls,
            vec![
                json!("http://10.46.0.1:3128"),
                json!("http://10.46.0.4:3128")
            ],
            "{backend}: the third source's list, nothing of the others"
        );
    }
}

#[test]
fn config_check_refuses_a_bad_store_url_and_names_the_store_it_would_use() {
    let h = Home::new(None);
    let cfg = h.path("check.toml");
    let c = cfg.to_str().unwrap();
    std::fs::write(
        &cfg,
        "[store]\nurl = \"postgresql://pp:CfgP4ss@127.0.0.1:5432/ppdb?sslmode=bogus\"\n",
    )
    .unwrap();
    let o = run_with(&h, None, &["--config", c, "config", "check"], &[]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("sslmode"), "{}", o.stderr);
    assert!(!o.stderr.contains("CfgP4ss"), "{}", o.stderr);
    std::fs::write(
        &cfg,
        "[store]\nurl = \"postgresql://pp:CfgP4ss@127.0.0.1:5432/ppdb?sslmode=disable\"\n",
    )
    .unwrap();
    let o = run_with(&h, None, &["--config", c, "config", "check"], &[]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout
            .contains("database postgresql://pp@127.0.0.1:5432/ppdb"),
        "{}",
        o.stdout
    );
    assert!(
        !o.stdout.contains("CfgP4ss") && !o.stdout.contains(".db"),
        "{}",
        o.stdout
    );

    // A relative [store] path is the file beside the config, and named so.
    std::fs::create_dir_all(h.path("etc")).unwrap();
    std::fs::write(
        h.path("etc/rel.toml"),
        "[store]\npath = \"state/pool.db\"\n",
    )
    .unwrap();
    let want = h.dir.path().join("etc/state/pool.db");
    let o = run_with(
        &h,
        None,
        &["--config", "etc/rel.toml", "config", "check"],
        &[],
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout.contains(&format!("database {}", want.display())),
        "{}",
        o.stdout
    );
    let o = run_with(
        &h,
        None,
        &["--config", "etc/rel.toml", "add", "http://10.47.0.1:3128"],
        &[],
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(want.exists());
    for args in [vec!["list"], vec!["status"]] {
        let mut all = vec!["--config", "etc/rel.toml"];
        all.extend(&args);
        let o = run_with(&h, None, &all, &[]);
        assert_eq!(o.code, Some(0), "{o:?}");
        assert!(
            o.stdout.contains(&format!("database {}", want.display())),
            "{args:?}: {}",
            o.stdout
        );
    }
}

#[test]
fn list_names_a_postgres_store_without_its_password() {
    let Some(pg) = postgres::shared() else { return };
    let mut h = Home::new(None);
    h.db = PathBuf::from(pg.database());
    h.add(&["http://10.48.0.1:3128"]);
    let out = h.ok(&["list"]);
    assert!(
        out.contains(&format!(
            "database postgresql://{}@127.0.0.1:{}/",
            postgres::USER,
            pg.port()
        )),
        "{out}"
    );
    assert!(
        !out.contains(postgres::PASSWORD) && !out.contains(".db"),
        "{out}"
    );
}

#[test]
fn blank_and_padded_tokens_are_refused() {
    let h = Home::new(None);
    // A gateway off loopback whose token is white space.
    let cfg = h.path("gw.toml");
    std::fs::write(
        &cfg,
        "[[gateway]]\nlisten = \"192.0.2.1:1\"\ntoken = \" \"\n",
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    for args in [vec!["config", "check"], vec!["serve"]] {
        let mut all = vec!["--config", c];
        all.extend(&args);
        let o = run_with(&h, Some(h.db.to_str().unwrap()), &all, &[]);
        assert_eq!(o.code, Some(2), "{args:?}: {o:?}");
        assert!(o.stderr.contains("gateway[0].token"), "{}", o.stderr);
        assert!(o.stderr.contains("blank"), "{}", o.stderr);
    }
    // The same on loopback: a token that is only white space protects nothing.
    std::fs::write(
        &cfg,
        "[[gateway]]\nlisten = \"127.0.0.1:1\"\ntoken = \"   \"\n",
    )
    .unwrap();
    let o = run_with(&h, None, &["--config", c, "config", "check"], &[]);
    assert_eq!(o.code, Some(2), "{o:?}");
    // `--gateway` with a blank PROXYPOOL_GATEWAY_TOKEN.
    let o = run_with(
        &h,
        Some(h.db.to_str().unwrap()),
        &["serve", "--gateway", "192.0.2.1:1"],
        &[("PROXYPOOL_GATEWAY_TOKEN", "  ")],
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("blank"), "{}", o.stderr);
    // The HTTP listener's: no reader could send it (a bearer token is trimmed).
    let o = run_with(
        &h,
        Some(h.db.to_str().unwrap()),
        &["serve", "--http", "192.0.2.1:1"],
        &[("PROXYPOOL_HTTP_TOKEN", "   ")],
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("blank"), "{}", o.stderr);
    // A TCP token counted without the spaces around it.
    let o = run_with(
        &h,
        Some(h.db.to_str().unwrap()),
        &["serve", "--listen-tcp", "127.0.0.1:0"],
        &[("PROXYPOOL_TOKEN", "      hunter2-x      ")],
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("9 characters"), "{}", o.stderr);
    assert!(!o.stderr.contains("hunter2"), "{}", o.stderr);
    assert!(!h.socket.exists());
}
