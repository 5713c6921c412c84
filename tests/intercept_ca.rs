//! The install's CA through the real binary: `ca init` (the key 0600 from creation under
//! any umask, never printed, never replaced without `--force`), `ca show` (the PEM and a
//! fingerprint that `openssl` agrees with), `serve` and `config check` refusing a gateway
//! that intercepts without a usable CA (missing, a key others may read, a key of another
//! CA), and `/ca.pem` on the daemon's HTTP listener.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::daemon::Home;
use common::tools::{free_port, need};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

/// The `SHA-256 fingerprint: …` value of `ca show`'s output.
fn fingerprint(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("SHA-256 fingerprint: "))
        .unwrap_or_else(|| panic!("no fingerprint in {out}"))
        .to_string()
}

#[test]
fn ca_init_writes_a_private_key_beside_the_database_and_never_replaces_it_unasked() {
    let h = Home::new(None);
    let (cert, key) = (h.path("data/ca.pem"), h.path("data/ca.key"));
    let out = h.ok(&["ca", "init"]);
    assert!(
        !out.contains("PRIVATE KEY"),
        "the key is never printed: {out}"
    );
    assert!(
        out.contains(&cert.display().to_string()) && out.contains("SHA-256 fingerprint: "),
        "{out}"
    );
    assert_eq!((mode(&key), mode(&cert)), (0o600, 0o644));
    let key_text = std::fs::read_to_string(&key).unwrap();
    assert!(key_text.contains("BEGIN PRIVATE KEY"));

    let (_, err) = h.fails(2, &["ca", "init"]);
    assert!(
        err.contains("--force") && err.contains(&key.display().to_string()),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&key).unwrap(),
        key_text,
        "unchanged"
    );

    let first = fingerprint(&h.ok(&["ca", "show"]));
    let out = h.ok(&["ca", "init", "--force"]);
    assert!(out.contains("the old CA is replaced"), "{out}");
    assert_ne!(fingerprint(&h.ok(&["ca", "show"])), first, "a new CA");
    assert_ne!(std::fs::read_to_string(&key).unwrap(), key_text);
    assert_eq!(mode(&key), 0o600);
}

#[test]
fn the_key_is_private_from_creation_under_any_umask_and_paths_follow_the_config() {
    let h = Home::new(Some(
        "[tls]\nca_cert = \"pki/root.pem\"\nca_key = \"pki/private/root.key\"\n",
    ));
    // umask 000 would leave a file made 0644 and then chmod'ed readable for a moment.
    let mut c = h.command("sh");
    c.args([
        "-c",
        &format!("umask 000 && exec {} ca init", common::daemon::BIN),
    ]);
    let o = c.output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let (cert, key) = (h.path("pki/root.pem"), h.path("pki/private/root.key"));
    assert_eq!((mode(&key), mode(&cert)), (0o600, 0o644));
    assert_eq!(
        mode(&h.path("pki/private")),
        0o700,
        "a new folder for the key is private"
    );
    assert!(!h.path("data/ca.pem").exists());

    // --out puts both files in a folder of its own.
    let out = h.path("elsewhere");
    h.ok(&["ca", "init", "--out", out.to_str().unwrap()]);
    assert_eq!(mode(&out.join("ca.key")), 0o600);
    assert!(out.join("ca.pem").is_file());
}

#[test]
fn ca_show_prints_the_pem_and_fingerprints_that_openssl_agrees_with() {
    let h = Home::new(None);
    let (_, err) = h.fails(2, &["ca", "show"]);
    assert!(err.contains("proxypool ca init"), "{err}");
    h.ok(&["ca", "init"]);
    let cert = h.path("data/ca.pem");
    let out = h.ok(&["ca", "show"]);
    let pem = std::fs::read_to_string(&cert).unwrap();
    assert!(
        out.starts_with(&pem),
        "the PEM first, as in the file:\n{out}"
    );
    assert!(out.contains("key: ") && out.contains("(usable)"), "{out}");
    assert!(!out.contains("PRIVATE"), "{out}");
    let fp = fingerprint(&out);
    assert_eq!(fp.len(), 95, "{fp}");
    if let Some(openssl) = need("openssl", "apt-get install -y openssl") {
        let o = Command::new(&openssl)
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(&cert)
            .output()
            .unwrap();
        let text = String::from_utf8(o.stdout).unwrap();
        let theirs = text.trim().rsplit('=').next().unwrap();
        assert_eq!(theirs, fp, "openssl says {text}");
        let o = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{o} x509 -in {c} -pubkey -noout | {o} pkey -pubin -outform der | {o} dgst -sha256 -binary | base64",
                o = openssl.display(),
                c = cert.display()
            ))
            .output()
            .unwrap();
        let spki = String::from_utf8(o.stdout).unwrap();
        assert!(
            out.contains(&format!("SPKI SHA-256 (base64): {}", spki.trim())),
            "{spki}\n{out}"
        );
        let o = Command::new(&openssl)
            .args(["x509", "-noout", "-text", "-in"])
            .arg(&cert)
            .output()
            .unwrap();
        let text = String::from_utf8(o.stdout).unwrap();
        for want in ["CA:TRUE", "prime256v1", "Certificate Sign", "proxypool CA"] {
            assert!(text.contains(want), "{want}: {text}");
        }
    }
    // A key others may read: still shown, and said.
    chmod(&h.path("data/ca.key"), 0o644);
    let o = h.run(&["ca", "show"]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stderr.contains("chmod 600"), "{}", o.stderr);
}

fn intercepting(port: u16, http: Option<u16>) -> String {
    let mut s = format!(
        "[[gateway]]\nlisten = \"127.0.0.1:{port}\"\nintercept = [\"shop.example\", \"*.example.org\"]\n\
         insecure_origins = [\"self-signed.test\"]\n"
    );
    if let Some(h) = http {
        s.push_str(&format!("[server]\nhttp = \"127.0.0.1:{h}\"\n"));
    }
    s
}

#[test]
fn serve_and_config_check_refuse_intercept_without_a_usable_ca() {
    let h = Home::new(Some(&intercepting(free_port(), None)));
    let refused = |want: &str| {
        for args in [&["serve"][..], &["config", "check"][..]] {
            let (_, err) = h.fails(2, args);
            assert!(
                err.contains("gateway[0].intercept needs the CA"),
                "{args:?}: {err}"
            );
            assert!(err.contains(want), "{args:?} wants {want:?}: {err}");
        }
        assert!(!h.db.exists(), "serve changed nothing");
    };
    refused("run `proxypool ca init`");

    h.ok(&["ca", "init"]);
    let key = h.path("data/ca.key");
    chmod(&key, 0o640);
    refused(&format!("chmod 600 {}", key.display()));
    chmod(&key, 0o600);

    // The key of another CA beside this certificate.
    let other = h.path("other");
    h.ok(&["ca", "init", "--out", other.to_str().unwrap()]);
    let own_key = std::fs::read(&key).unwrap();
    std::fs::copy(other.join("ca.key"), &key).unwrap();
    refused("does not match the certificate");
    std::fs::write(&key, own_key).unwrap();

    // Usable again: `config check` names the CA, `serve` starts and warns about the
    // origins it will not verify.
    let out = h.ok(&["config", "check"]);
    assert!(
        out.contains(&format!(", CA {}", h.path("data/ca.pem").display())),
        "{out}"
    );
    let d = h.serve();
    let log = d.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("NOT verified") && l.contains("self-signed.test")),
        "{log}"
    );
}

/// `GET path` on `addr`: status, content type and body.
fn get(addr: &str, path: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let ty = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (head[9..12].parse().unwrap(), ty, body.to_string())
}

#[test]
fn the_http_listener_serves_the_ca_certificate_never_the_key() {
    // No CA: a 404 that says what to do.
    let h = Home::new(None);
    let http = free_port();
    let d = h.serve_with(&["--http", &format!("127.0.0.1:{http}")], &[]);
    let (status, ty, body) = get(&format!("127.0.0.1:{http}"), "/ca.pem");
    assert_eq!((status, ty.as_str()), (404, "text/plain; charset=utf-8"));
    assert!(body.contains("proxypool ca init"), "{body}");
    drop(d);

    let (gw, http) = (free_port(), free_port());
    let h = Home::new(Some(&intercepting(gw, Some(http))));
    h.ok(&["ca", "init"]);
    let _d = h.serve();
    let (status, ty, body) = get(&format!("127.0.0.1:{http}"), "/ca.pem");
    assert_eq!((status, ty.as_str()), (200, "application/x-pem-file"));
    assert_eq!(
        body,
        std::fs::read_to_string(h.path("data/ca.pem")).unwrap()
    );
    assert!(!body.contains("PRIVATE"));
}
