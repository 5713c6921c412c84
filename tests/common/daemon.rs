//! Harness for end-to-end tests through the real `proxypool` binary: a temporary home
//! (database, socket, XDG dirs), a daemon spawned with `proxypool serve` and killed on
//! drop, CLI runs with the same environment, and a tiny JSON-lines socket client.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_proxypool");

/// How long one CLI run may take (generous: the test machine is shared).
pub const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A config whose default pool cools for exactly one second (no jitter, no growth).
pub const ONE_SECOND_COOLDOWN: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "1s"
factor = 1.0
max = "1s"
jitter = 0.0
"#;

/// A temporary proxypool home: database, socket, XDG dirs, optional config file.
pub struct Home {
    pub dir: TempDir,
    pub db: PathBuf,
    pub socket: PathBuf,
    pub config: Option<PathBuf>,
}

impl Home {
    /// A fresh home; `config` is written to a file and passed as `PROXYPOOL_CONFIG`.
    pub fn new(config: Option<&str>) -> Home {
        let dir = tempfile::Builder::new()
            .prefix("pp-e2e")
            .tempdir()
            .expect("tempdir");
        for sub in ["home", "data", "config", "run"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let config = config.map(|text| {
            let p = dir.path().join("proxies.toml");
            std::fs::write(&p, text).unwrap();
            p
        });
        Home {
            db: dir.path().join("data/proxypool.db"),
            socket: dir.path().join("run/pp.sock"),
            config,
            dir,
        }
    }

    /// The environment every process of this home gets (besides removed variables).
    pub fn envs(&self) -> Vec<(String, PathBuf)> {
        let d = self.dir.path();
        let mut v = vec![
            ("HOME".to_string(), d.join("home")),
            ("XDG_DATA_HOME".to_string(), d.join("data")),
            ("XDG_CONFIG_HOME".to_string(), d.join("config")),
            ("XDG_RUNTIME_DIR".to_string(), d.join("run")),
            ("PROXYPOOL_DB".to_string(), self.db.clone()),
            ("PROXYPOOL_SOCKET".to_string(), self.socket.clone()),
        ];
        if let Some(cfg) = &self.config {
            v.push(("PROXYPOOL_CONFIG".to_string(), cfg.clone()));
        }
        v
    }

    /// `program` with this home's environment (and no proxypool settings of the caller's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env_remove("PROXYPOOL_TOKEN")
            .env_remove("PROXYPOOL_LEASE_TOKEN")
            .env_remove("PROXYPOOL_HTTP_TOKEN")
            .env_remove("PROXYPOOL_GATEWAY_TOKEN")
            .env_remove("PROXYPOOL_CONNECT")
            .env_remove("PROXYPOOL_HTTP")
            .env_remove("PROXYPOOL_CONFIG")
            .env_remove("RUST_LOG")
            .envs(self.envs())
            .stdin(Stdio::null());
        c
    }

    /// `proxypool` with this home's environment.
    pub fn cmd(&self) -> Command {
        self.command(BIN)
    }

    /// Run a CLI command to completion (`RUN_LIMIT` at most), in the home.
    pub fn run(&self, args: &[&str]) -> Out {
        let mut c = self.cmd();
        c.args(args)
            .current_dir(self.dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = c.spawn().expect("spawn proxypool");
        let out = wait_output(child, RUN_LIMIT).unwrap_or_else(|| {
            panic!(
                "`proxypool {}` did not finish in {RUN_LIMIT:?}",
                args.join(" ")
            )
        });
        Out::from(out, args)
    }

    /// Run a CLI command that must succeed; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(
            o.code,
            Some(0),
            "`proxypool {}` failed: {}\n{}",
            args.join(" "),
            o.stdout,
            o.stderr
        );
        o.stdout
    }

    /// `list --json` as an array.
    pub fn list(&self) -> Vec<Value> {
        self.list_with(&[])
    }

    /// `list --json EXTRA...` as an array.
    pub fn list_with(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["list", "--json"];
        args.extend_from_slice(extra);
        let out = self.ok(&args);
        serde_json::from_str::<Value>(&out)
            .unwrap_or_else(|e| panic!("list --json is not JSON ({e}): {out}"))
            .as_array()
            .expect("list --json prints an array")
            .clone()
    }

    /// One endpoint of `list --json`.
    pub fn listed(&self, id: i64) -> Value {
        self.list()
            .into_iter()
            .find(|e| e["id"] == json!(id))
            .unwrap_or_else(|| panic!("endpoint {id} not in list --json"))
    }

    /// `events --json`, one object a line.
    pub fn events(&self) -> Vec<Value> {
        self.events_with(&[])
    }

    /// `events --json EXTRA...`, one object a line.
    pub fn events_with(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["events", "--json"];
        args.extend_from_slice(extra);
        json_lines(&self.ok(&args))
    }

    /// `add URL...` (daemon running or not); returns the new ids.
    pub fn add(&self, urls: &[&str]) -> Vec<i64> {
        let mut args = vec!["add"];
        args.extend_from_slice(urls);
        let out = self.ok(&args);
        let ids = ids(&out);
        assert_eq!(ids.len(), urls.len(), "add printed {out:?}");
        ids
    }

    /// A path inside the home.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The binary for `assert_cmd` assertions, on this home's database, run in the home.
    pub fn cli(&self) -> assert_cmd::Command {
        let mut c = self.bare();
        c.env("PROXYPOOL_DB", &self.db);
        c
    }

    /// `cli()` without `PROXYPOOL_DB`, for tests of how the database is found.
    pub fn bare(&self) -> assert_cmd::Command {
        let mut c = self.command(BIN);
        c.env_remove("PROXYPOOL_DB").current_dir(self.dir.path());
        let mut c = assert_cmd::Command::from_std(c);
        c.timeout(RUN_LIMIT);
        c
    }

    /// Run a CLI command that must exit with `code`; returns (stdout, stderr).
    pub fn fails(&self, code: i32, args: &[&str]) -> (String, String) {
        let o = self.run(args);
        assert_eq!(
            o.code,
            Some(code),
            "`proxypool {}`: wanted exit {code}\nstdout: {}\nstderr: {}",
            args.join(" "),
            o.stdout,
            o.stderr
        );
        (o.stdout, o.stderr)
    }

    /// The home's database, opened directly.
    pub fn sqlite(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.db).expect("open db")
    }

    /// Rows in `table` of the home's database (0 when there is no database).
    pub fn count(&self, table: &str) -> i64 {
        count_rows(&self.db, table)
    }

    /// Start `proxypool serve` here and wait until it answers a ping.
    pub fn serve(&self) -> Daemon {
        self.serve_with(&[], &[])
    }

    /// `serve` with extra arguments and environment.
    pub fn serve_with(&self, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let log = self.dir.path().join(format!(
            "daemon-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut c = self.cmd();
        c.arg("serve").args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = c.spawn().expect("spawn proxypool serve");
        let mut d = Daemon {
            child: Some(child),
            socket: self.socket.clone(),
            log,
        };
        d.wait_ready();
        d
    }
}

/// A finished CLI run.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn from(o: Output, args: &[&str]) -> Out {
        let out = Out {
            code: o.status.code(),
            stdout: text(&o.stdout),
            stderr: text(&o.stderr),
        };
        for text in [&out.stdout, &out.stderr] {
            assert!(
                !text.contains("database is locked"),
                "`proxypool {}` printed \"database is locked\": {text}",
                args.join(" ")
            );
        }
        out
    }
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The ids `add`/`import` print, one a line.
pub fn ids(stdout: &str) -> Vec<i64> {
    stdout
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not an id: {l:?}"))
        })
        .collect()
}

/// JSON objects, one a line (`events --json`, `probe --json`).
pub fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Rows in `table` of the database at `db` (0 when there is none).
pub fn count_rows(db: &Path, table: &str) -> i64 {
    if !db.exists() {
        return 0;
    }
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// Wait for a child with a deadline; kills it and returns None on timeout. Output is
/// drained while waiting, so a child writing more than a pipe holds cannot block.
pub fn wait_output(child: Child, limit: Duration) -> Option<Output> {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => Some(out.expect("output")),
        Err(_) => {
            // SAFETY: signalling a child we spawned; at worst it has already exited.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
            None
        }
    }
}

/// Wait (10 s at most) until the daemon `child` answers a ping on `socket`; panics with
/// its `log` when it exits or stays silent.
pub fn wait_ping(child: &mut Child, socket: &Path, log: &Path) {
    let log_text = || std::fs::read_to_string(log).unwrap_or_default();
    super::eventually(Duration::from_secs(10), "the daemon answers a ping", || {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("daemon exited early ({st}): {}", log_text());
        }
        let answer = Conn::try_connect(socket).and_then(|mut c| c.try_req(&json!({"op": "ping"})));
        match answer {
            Ok(v) if v["ok"] == json!(true) => Ok(()),
            other => Err(format!("{other:?}\n{}", log_text())),
        }
    });
}

/// A running daemon, killed on drop.
pub struct Daemon {
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    fn wait_ready(&mut self) {
        wait_ping(self.child.as_mut().unwrap(), &self.socket, &self.log);
    }

    /// The daemon's stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of its stderr, for a failure's message.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log_text();
        let start = log.lines().count().saturating_sub(n);
        log.lines().skip(start).collect::<Vec<_>>().join("\n")
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// A new connection.
    pub fn conn(&self) -> Conn {
        Conn::connect(&self.socket)
    }

    /// One request on a fresh connection.
    pub fn req(&self, v: Value) -> Value {
        self.conn().req(&v)
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("kill -9");
            c.wait().unwrap();
        }
    }

    /// Send a signal and wait (up to `limit`) for the exit status.
    pub fn signal_and_wait(&mut self, sig: i32, limit: Duration) -> ExitStatus {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill failed");
        // A daemon that does not exit in time is killed by `drop` as the panic unwinds.
        let child = self.child.as_mut().unwrap();
        let st = super::eventually(
            limit,
            &format!("the daemon exits after signal {sig}"),
            || {
                child
                    .try_wait()
                    .unwrap()
                    .ok_or_else(|| "still running".to_string())
            },
        );
        self.child = None;
        st
    }

    /// The socket's `status` of pool `default`.
    pub fn status(&self) -> Value {
        let r = self.req(json!({"op": "status", "pool": "default"}));
        assert_eq!(r["ok"], json!(true), "status: {r}");
        r["pools"][0].clone()
    }

    /// Wait until pool `default` has `n` endpoints in `state` (`available`, `cooling`,
    /// `probe_allowed`, `disabled`) and `leases` live leases.
    pub fn wait_for_counts(&self, state: &str, n: u64, leases: u64) {
        let what = format!("{n} {state} and {leases} leases in pool default");
        super::eventually(Duration::from_secs(10), &what, || {
            let s = self.status();
            if s[state] == json!(n) && s["leases"] == json!(leases) {
                Ok(())
            } else {
                Err(s.to_string())
            }
        });
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A JSON-lines connection to the lease socket.
pub struct Conn {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Conn {
    /// Connect or panic.
    pub fn connect(path: &Path) -> Conn {
        Conn::try_connect(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()))
    }

    /// Connect.
    pub fn try_connect(path: &Path) -> std::io::Result<Conn> {
        let s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(Conn {
            writer: s.try_clone()?,
            reader: BufReader::new(s),
        })
    }

    /// Bytes written on this connection that the daemon has not read yet (Linux
    /// `SIOCOUTQ`): 0 once it has taken in everything sent, e.g. a request it is now
    /// working on.
    pub fn unread_by_peer(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut n: libc::c_int = 0;
        // SAFETY: ioctl(SIOCOUTQ) writes one int into `n`; the fd is ours and open.
        let rc = unsafe { libc::ioctl(self.writer.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        assert_eq!(
            rc,
            0,
            "ioctl(SIOCOUTQ): {}",
            std::io::Error::last_os_error()
        );
        usize::try_from(n).unwrap()
    }

    /// Wait until the daemon has read everything sent on this connection.
    pub fn wait_read_by_peer(&self) {
        super::eventually(
            Duration::from_secs(10),
            "the daemon reads what was sent",
            || match self.unread_by_peer() {
                0 => Ok(()),
                n => Err(format!("{n} bytes unread")),
            },
        );
    }

    /// Write raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }

    /// Shut down the sending side (the daemon reads end of stream; answers still arrive).
    pub fn shutdown_write(&self) {
        self.writer.shutdown(std::net::Shutdown::Write).unwrap();
    }

    /// Read one line; `Ok(None)` on end of stream.
    pub fn read_line(&mut self) -> std::io::Result<Option<String>> {
        let mut s = String::new();
        let n = self.reader.read_line(&mut s)?;
        Ok((n > 0).then_some(s))
    }

    /// Read one response.
    pub fn read_json(&mut self) -> Value {
        let line = self
            .read_line()
            .expect("read response")
            .expect("connection closed before a response");
        assert!(
            line.ends_with('\n'),
            "response not newline-terminated: {line:?}"
        );
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("response {line:?}: {e}"))
    }

    /// Send a request and read its response.
    pub fn try_req(&mut self, v: &Value) -> std::io::Result<Value> {
        let mut line = serde_json::to_string(v).unwrap();
        line.push('\n');
        self.send_raw(line.as_bytes())?;
        let l = self
            .read_line()?
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"))?;
        serde_json::from_str(&l)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Send a request and read its response, or panic.
    pub fn req(&mut self, v: &Value) -> Value {
        self.try_req(v)
            .unwrap_or_else(|e| panic!("request {v}: {e}"))
    }

    /// Read until the peer closes; returns whether it closed (EOF or reset) in time.
    pub fn closed_by_peer(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match self.reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// The error code of a failed response, asserting its shape.
pub fn err_code(v: &Value) -> String {
    assert_eq!(v["ok"], json!(false), "expected an error response: {v}");
    let e = &v["error"];
    assert!(e["message"].is_string(), "error without a message: {v}");
    e["code"]
        .as_str()
        .unwrap_or_else(|| panic!("error without a code: {v}"))
        .to_string()
}

/// Assert a success response and return it.
pub fn ok(v: Value) -> Value {
    assert_eq!(v["ok"], json!(true), "expected success: {v}");
    v
}

/// Lease id of a grant.
pub fn lease_id(v: &Value) -> String {
    v["lease"]
        .as_str()
        .unwrap_or_else(|| panic!("no lease id in {v}"))
        .to_string()
}

/// Raise the soft fd limit to at least `want` (bounded by the hard limit); returns it.
// `rlim_t` is u64 on Linux but not everywhere.
#[allow(clippy::unnecessary_cast)]
pub fn raise_nofile(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if (r.rlim_cur as u64) < want {
            let new = std::cmp::min(want as libc::rlim_t, r.rlim_max);
            let nr = libc::rlimit {
                rlim_cur: new,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &nr) == 0 {
                r.rlim_cur = new;
            }
        }
    }
    r.rlim_cur as u64
}

/// One request on a fresh TCP connection to a daemon's `--listen-tcp` address.
pub fn tcp_req(addr: &str, v: &Value) -> Value {
    let s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    writeln!(w, "{v}").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// `GET path` on a plain HTTP listener with extra header lines; (status, head, body).
pub fn http_get(addr: &str, path: &str, headers: &str) -> (u16, String, String) {
    let mut s =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}
