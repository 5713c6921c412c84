//! A real PostgreSQL (Debian's `postgresql`) as a PRIVATE cluster: `initdb` in a temp dir,
//! the server on a free port of 127.0.0.1 with scram-sha-256 password auth, run as an
//! unprivileged user when the tests run as root (PostgreSQL refuses root; CI runs as
//! root). One shared cluster per test binary ([`shared`]), a fresh database per test
//! ([`Cluster::database`]); a test that stops and starts the server takes a cluster of its
//! own ([`Cluster::start`]).
//!
//! Missing PostgreSQL: the test prints a note and returns, or FAILS when env `CI` is set
//! (`tools::skip_unless_ci`).
//!
//! The server is stopped and its folder removed when the cluster is dropped; the shared one
//! at the exit of the test binary (statics are never dropped: an `atexit` hook), and should
//! the binary die without exiting, the server gets SIGQUIT from the kernel (parent-death
//! signal) and shuts down at once.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::tools::{free_port, is_root, skip_unless_ci};

/// Debian keeps each major version's server binaries in `/usr/lib/postgresql/N/bin`.
const VERSIONS: &str = "/usr/lib/postgresql";

/// The database superuser the harness creates (never `postgres`: nothing is shared).
pub const USER: &str = "proxypool";

/// Its password (scram-sha-256): the tests check that it never leaks.
pub const PASSWORD: &str = "pg-Secret-4711";

/// The folder of PostgreSQL's server binaries, or `None` after a note (a failure under CI).
pub fn bin_dir() -> Option<PathBuf> {
    // The newest installed major version, unless PROXYPOOL_PG_BIN names one.
    let newest = || {
        let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(VERSIONS)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
            .collect();
        v.sort();
        v.pop().map_or_else(|| PathBuf::from(VERSIONS), |(_, p)| p)
    };
    let dir = std::env::var_os("PROXYPOOL_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(newest);
    if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
        Some(dir)
    } else {
        skip_unless_ci(
            &format!("PostgreSQL server binaries are not in {}", dir.display()),
            "apt-get install -y postgresql",
        )
    }
}

/// A private PostgreSQL cluster.
pub struct Cluster {
    bin: PathBuf,
    /// Holds `data/` and the socket; owned by the user the server runs as.
    root: PathBuf,
    port: u16,
    /// The user id and group id the server runs as (`nobody` when the tests are root).
    ids: Option<(u32, u32)>,
    server: Mutex<Option<Child>>,
    next_db: AtomicUsize,
    /// fsync on (benchmarks): tests turn it off, they do not test the server's own
    /// crash safety.
    durable: bool,
    /// More `-c name=value` settings of the server (TLS).
    settings: Vec<String>,
}

impl Cluster {
    /// A new cluster of its own (initdb + start), or `None` when PostgreSQL is missing
    /// outside CI.
    pub fn start() -> Option<Cluster> {
        Cluster::start_with(false)
    }

    fn start_with(durable: bool) -> Option<Cluster> {
        Cluster::start_durable_with(durable, Vec::new())
    }

    /// A cluster whose commits are fsynced, as in production, when `durable` (benchmarks),
    /// started with more `-c name=value` settings (a benchmark's profile).
    pub fn start_durable_with(durable: bool, settings: Vec<String>) -> Option<Cluster> {
        let mut c = Cluster::init(durable)?;
        c.settings = settings;
        c.start_server();
        Some(c)
    }

    /// A cluster of its own that speaks TLS with this certificate and key (PEM files) and
    /// refuses logins without it (pg_hba `hostssl`).
    pub fn start_tls(cert: &Path, key: &Path) -> Option<Cluster> {
        let mut c = Cluster::init(false)?;
        let (crt, k) = (c.root.join("server.crt"), c.root.join("server.key"));
        std::fs::copy(cert, &crt).unwrap();
        std::fs::copy(key, &k).unwrap();
        // The server refuses a key others can read.
        std::fs::set_permissions(&k, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = c.ids {
            chown(&crt, uid, gid);
            chown(&k, uid, gid);
        }
        c.settings = vec![
            "ssl=on".into(),
            format!("ssl_cert_file={}", crt.display()),
            format!("ssl_key_file={}", k.display()),
        ];
        let hba = c.root.join("data/pg_hba.conf");
        let text = std::fs::read_to_string(&hba).unwrap();
        let ssl_only: String = text
            .lines()
            .map(|l| match l.strip_prefix("host ") {
                Some(rest) => format!("hostssl {rest}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&hba, ssl_only).unwrap();
        c.start_server();
        Some(c)
    }

    /// initdb, not started.
    fn init(durable: bool) -> Option<Cluster> {
        let bin = bin_dir()?;
        let ids = is_root().then_some((65534u32, 65534u32));
        let root = Cluster::new_root(ids);
        let pwfile = root.join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        if let Some((uid, gid)) = ids {
            chown(&pwfile, uid, gid);
        }
        let data = root.join("data");
        let out = as_server(Command::new(bin.join("initdb")), ids)
            .args(["-D", data.to_str().unwrap(), "-U", USER])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args([
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
                // 1 MiB WAL segments: a cluster is 28 MB on disk, not 39.
                "--wal-segsize=1",
            ])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Cluster {
            bin,
            root,
            port: free_port(),
            ids,
            server: Mutex::new(None),
            next_db: AtomicUsize::new(0),
            durable,
            settings: Vec::new(),
        })
    }

    /// A temp folder the server user owns.
    fn new_root(ids: Option<(u32, u32)>) -> PathBuf {
        let root = tempfile::Builder::new()
            .prefix("proxypool-pg-")
            .tempdir()
            .expect("temp dir")
            .keep();
        if let Some((uid, gid)) = ids {
            chown(&root, uid, gid);
        }
        root
    }

    /// A streaming standby of this cluster (`pg_basebackup -R`, WAL streamed), started on
    /// a port of its own; it follows until promoted.
    pub fn start_standby(&self) -> Cluster {
        let root = Cluster::new_root(self.ids);
        let data = root.join("data");
        let out = as_server(Command::new(self.bin.join("pg_basebackup")), self.ids)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            .args([
                "-D",
                data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
                // Not a spread checkpoint first: that waits up to minutes on an idle server.
                "--checkpoint=fast",
            ])
            .env("PGPASSWORD", PASSWORD)
            .output()
            .expect("run pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = Cluster {
            bin: self.bin.clone(),
            root,
            port: free_port(),
            ids: self.ids,
            server: Mutex::new(None),
            next_db: AtomicUsize::new(0),
            durable: self.durable,
            settings: self.settings.clone(),
        };
        c.start_server();
        c
    }

    /// Commit only once a standby has the commit too (`synchronous_standby_names`), and
    /// wait until one streams as synchronous.
    pub fn make_synchronous(&self) {
        self.sql(
            "postgres",
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
        );
        self.sql("postgres", "SELECT pg_reload_conf()");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.sql(
            "postgres",
            "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
        ) != "1"
        {
            assert!(
                Instant::now() < deadline,
                "no synchronous standby within 60 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Promote a standby to primary, and wait until it takes writes.
    pub fn promote(&self) {
        assert_eq!(self.sql("postgres", "SELECT pg_promote(true, 60)"), "t");
    }

    /// The server's process id (its backends are its children).
    pub fn server_pid(&self) -> Option<u32> {
        self.server.lock().unwrap().as_ref().map(Child::id)
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` with the password in it.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql://{USER}:{PASSWORD}@127.0.0.1:{}/{db}",
            self.port
        )
    }

    /// A fresh empty database for one test; returns its URL.
    pub fn database(&self) -> String {
        let n = self.next_db.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        self.sql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// A login role `name` of its own (password `password`) owning a new database of the
    /// same name, as a fleet's role would: (the database, its URL as that role).
    pub fn role_database(&self, name: &str, password: &str) -> (String, String) {
        let name = format!("{name}{}", std::process::id());
        self.sql(
            "postgres",
            &format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'"),
        );
        self.sql("postgres", &format!("CREATE DATABASE {name} OWNER {name}"));
        let url = format!(
            "postgresql://{name}:{password}@127.0.0.1:{}/{name}",
            self.port
        );
        (name, url)
    }

    /// Run SQL through psql on `db`; returns its unaligned output (panics on failure).
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let out = self.psql(db, sql);
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Run SQL through psql, whatever happens.
    pub fn psql(&self, db: &str, sql: &str) -> std::process::Output {
        Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.url(db))
            .args(["-c", sql])
            .env_remove("PGPASSFILE")
            .stdin(Stdio::null())
            .output()
            .expect("run psql (postgresql-client)")
    }

    /// Start the server (again) and wait until it accepts logins.
    pub fn start_server(&self) {
        let mut server = self.server.lock().unwrap();
        assert!(server.is_none(), "server already running");
        let data = self.root.join("data");
        let log_path = self.root.join(format!("server-{}.log", self.port));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let mut cmd = as_server(Command::new(self.bin.join("postgres")), self.ids);
        cmd.args(["-D", data.to_str().unwrap()])
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.root.display()))
            .args(["-c", "max_connections=200"])
            .args(self.settings.iter().flat_map(|v| ["-c", v.as_str()]))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if !self.durable {
            // Test speed: the server's own crash safety is not what the tests check.
            cmd.args(["-c", "fsync=off", "-c", "full_page_writes=off"]);
            // Bounded WAL (the default keeps up to 1 GB between checkpoints): the suite
            // runs on machines with little disk to spare.
            cmd.args(["-c", "min_wal_size=4MB", "-c", "max_wal_size=64MB"]);
        }
        // SAFETY: prctl is async-signal-safe; it runs in the child between fork and exec,
        // after the uid change (which would clear it).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
                Ok(())
            });
        }
        let child = spawn_from_keeper(cmd).expect("start postgres");
        *server = Some(child);
        drop(server);
        self.wait_ready();
    }

    /// Stop the server at once (`immediate`: like a crash of PostgreSQL, no checkpoint).
    pub fn stop_server(&self) {
        if let Some(mut child) = self.server.lock().unwrap().take() {
            unsafe {
                libc::kill(child.id() as i32, libc::SIGQUIT);
            }
            let _ = child.wait();
        }
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.psql("postgres", "SELECT 1");
            if out.status.success() {
                return;
            }
            if let Some(child) = self.server.lock().unwrap().as_mut() {
                if let Ok(Some(st)) = child.try_wait() {
                    panic!("postgres exited ({st}): {}", self.log());
                }
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept logins within 60 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join(format!("server-{}.log", self.port)))
            .unwrap_or_default()
    }

    /// A folder the tests may write in (owned by root when the tests are root).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_server();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn as_server(mut cmd: Command, ids: Option<(u32, u32)>) -> Command {
    if let Some((uid, gid)) = ids {
        // std drops root's supplementary groups when it changes the uid.
        cmd.uid(uid).gid(gid);
    }
    cmd.env_remove("PGPASSFILE").env("LC_ALL", "C");
    cmd
}

fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
}

type Spawn = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Servers are spawned by one thread that lives as long as the binary: the parent-death
/// signal fires when the spawning THREAD ends, and test threads end early.
fn spawn_from_keeper(cmd: Command) -> std::io::Result<Child> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Spawn>>> = OnceLock::new();
    let tx = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Spawn>();
        std::thread::spawn(move || {
            for (mut cmd, back) in rx {
                let _ = back.send(cmd.spawn());
            }
            // The binary is ending: keep this thread (and its children) to the end.
            loop {
                std::thread::park();
            }
        });
        Mutex::new(tx)
    });
    let (back, answer) = mpsc::channel();
    tx.lock().unwrap().send((cmd, back)).expect("keeper thread");
    answer.recv().expect("keeper thread")
}

static SHARED: OnceLock<Option<Cluster>> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(Some(c)) = SHARED.get() {
        c.stop_server();
        let _ = std::fs::remove_dir_all(&c.root);
    }
}

/// The cluster this test binary shares (started on first use), or `None` when PostgreSQL
/// is missing outside CI.
pub fn shared() -> Option<&'static Cluster> {
    SHARED
        .get_or_init(|| {
            let c = Cluster::start()?;
            // SAFETY: registering a plain extern "C" function.
            unsafe {
                libc::atexit(stop_shared);
            }
            Some(c)
        })
        .as_ref()
}

/// A session of its own on a database, as another program's (a `psql` left open, another
/// writer's transaction held): what it opened stays open between calls.
pub struct Session {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Session {
    /// Connect to `url` and run `sql`, leaving what it opened open.
    pub fn begin(url: &str, sql: &str) -> Session {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (client, conn) = rt
            .block_on(tokio_postgres::connect(url, tokio_postgres::NoTls))
            .unwrap();
        rt.spawn(conn);
        let s = Session { rt, client };
        s.run(sql);
        s
    }

    pub fn run(&self, sql: &str) {
        self.rt.block_on(self.client.batch_execute(sql)).unwrap();
    }

    /// The one number `sql` selects.
    pub fn number(&self, sql: &str) -> i64 {
        self.rt
            .block_on(self.client.query_one(sql, &[]))
            .unwrap()
            .get(0)
    }
}
