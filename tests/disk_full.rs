//! A full disk under a running daemon (its database on a small tmpfs, filled to the last
//! page): a ban whose commit fails is refused and leaves memory as the store has it — no
//! ban that exists only in memory — and once there is room again the same ban lands in
//! memory and on disk alike (docs/leases.md, "Durability").

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::daemon::*;
use common::tools::{is_root, skip_unless_ci};
use serde_json::{json, Value};

const MINUTE_COOLDOWN: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "60s"
factor = 1.0
max = "60s"
jitter = 0.0
"#;

/// A tmpfs of a few MiB mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        if !is_root() {
            return skip_unless_ci("mounting a tmpfs needs root", "run as root, as CI does");
        }
        let dir = tempfile::Builder::new()
            .prefix("pp-full")
            .tempdir()
            .unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        if !out.status.success() {
            return skip_unless_ci(
                &format!("mount -t tmpfs failed: {}", text(&out.stderr)),
                "a machine that lets root mount a tmpfs",
            );
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fill the file system holding `dir` to its last byte; returns the filler's path.
fn fill(dir: &Path) -> PathBuf {
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&[0u8]).is_ok() {}
    let _ = f.sync_all();
    p
}

fn lease_shop(c: &mut Conn) -> Value {
    c.req(&json!({"op": "lease", "destination": "shop.example"}))
}

fn ban(c: &mut Conn, lease: &str) -> Value {
    c.req(
        &json!({"op": "report", "lease": lease, "outcome": "failure",
        "reason": "destination_status", "phase": "response_head", "status": 403}),
    )
}

fn banned_in_store(h: &Home) -> Vec<Value> {
    h.list_with(&["--destination", "shop.example"])
        .into_iter()
        .filter(|e| e["destination_state"] != json!("available"))
        .collect()
}

#[test]
fn a_ban_whose_commit_fails_on_a_full_disk_is_refused_and_held_nowhere() {
    let Some(fs) = Tmpfs::mount("4m") else { return };
    let mut h = Home::new(Some(MINUTE_COOLDOWN));
    h.db = fs.path().join("pp.db");
    let d = h.serve();
    let id = h.add(&["http://10.7.0.1:3128"])[0];
    let mut c = d.conn();

    let g = ok(lease_shop(&mut c));
    assert_eq!(g["endpoint"], json!(id));
    let filler = fill(fs.path());

    // The ban cannot be written: it is refused, and memory does not hold it either.
    let r = ban(&mut c, &lease_id(&g));
    assert!(
        r.get("error").is_some(),
        "a ban on a full disk acknowledged: {r}"
    );
    let g = ok(lease_shop(&mut c));
    assert_eq!(
        g["endpoint"],
        json!(id),
        "memory holds a ban the store has not"
    );

    // Room again: the same ban lands, and memory and store agree.
    std::fs::remove_file(&filler).unwrap();
    let r = ok(ban(&mut c, &lease_id(&g)));
    assert_eq!(r["state"], json!("available"), "{r}");
    let r = lease_shop(&mut c);
    assert_eq!(r["error"]["code"], json!("pool_exhausted"), "{r}");
    let banned = banned_in_store(&h);
    assert_eq!(banned.len(), 1, "{banned:?}");
    assert_eq!(banned[0]["id"], json!(id), "{banned:?}");
    drop(d);
}
