//! Which process owns a database.
//!
//! A running daemon holds an exclusive `flock` on `<db>.lock` and writes its socket path
//! into it. CLI commands look there, not at a socket path of their own, so an operator
//! action always reaches the daemon that serves *this* database (whatever its socket
//! setting), never a daemon of another database. A CLI command that writes without a
//! daemon holds a shared lock meanwhile, so a daemon cannot start in the middle and miss
//! the write. The kernel drops the locks when a process dies, `kill -9` included.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Errors taking or reading the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file could not be opened or written.
    #[error("lock file {path}: {source}")]
    Io {
        /// Lock file.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
    /// Another daemon serves this database.
    #[error("another proxypool daemon is already serving {db} (socket: {socket})")]
    Busy {
        /// Database.
        db: PathBuf,
        /// Its socket, as written in the lock file.
        socket: String,
    },
}

/// A held lock, released when dropped.
#[derive(Debug)]
pub struct Held {
    _file: File,
}

/// Who owns a database right now.
#[derive(Debug)]
pub enum Owner {
    /// A daemon serves it on this socket.
    Daemon(PathBuf),
    /// No daemon: the caller now holds a shared lock and may write directly.
    Free(Held),
}

/// `<db>.lock`, where `<db>` is the file the path leads to: a symlink or a path through
/// a symlinked folder finds the same lock as the real path, so one database never gets two
/// daemons. (A second hard link would not; `store` refuses those.)
pub fn lock_path(db: &Path) -> PathBuf {
    let mut s = real_path(db).into_os_string();
    s.push(".lock");
    PathBuf::from(s)
}

/// The path of the file `db` leads to, also when it does not exist yet: symlinks are
/// followed (SQLite follows them too and would create the target), the folder is
/// canonicalized when it exists.
pub fn real_path(db: &Path) -> PathBuf {
    let mut p = std::path::absolute(db).unwrap_or_else(|_| db.to_path_buf());
    // A bounded walk: a symlink loop ends here and SQLite reports the error itself.
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(target) => {
                p = match p.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                };
            }
            Err(_) => break,
        }
    }
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => match std::fs::canonicalize(dir) {
            Ok(dir) => dir.join(name),
            Err(_) => p,
        },
        _ => p,
    }
}

/// Hold `<db>.migrate` exclusively while the schema is brought up to date.
pub fn migration(db: &Path) -> Result<Held, LockError> {
    let mut s = real_path(db).into_os_string();
    s.push(".migrate");
    let path = PathBuf::from(s);
    let f = open_file(&path)?;
    // SAFETY: flock on a descriptor we own; blocks until other openers are done.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(LockError::Io {
            path,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(Held { _file: f })
}

fn open(db: &Path) -> Result<(File, PathBuf), LockError> {
    let path = lock_path(db);
    let f = open_file(&path)?;
    Ok((f, path))
}

fn open_file(path: &Path) -> Result<File, LockError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| LockError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    // A lock file left by an older version or another umask: it names our socket and is
    // documented as the owner's only.
    use std::os::unix::fs::PermissionsExt;
    if f.metadata().map_err(io)?.permissions().mode() & 0o077 != 0 {
        // Best effort: a file of another user's cannot be changed, and still locks.
        let _ = f.set_permissions(std::fs::Permissions::from_mode(0o600));
    }
    Ok(f)
}

fn try_flock(f: &File, op: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let r = unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

fn unlock(f: &File) {
    // SAFETY: as in `try_flock`.
    unsafe {
        libc::flock(f.as_raw_fd(), libc::LOCK_UN);
    }
}

fn read_socket(f: &mut File) -> String {
    let mut s = String::new();
    let _ = f.rewind();
    let _ = f.read_to_string(&mut s);
    s.trim().to_string()
}

/// Take the daemon's exclusive lock. Waits up to `wait` for CLI commands that are writing
/// right now; refuses when another daemon holds it. The socket is recorded by `publish`
/// once it accepts connections; until then CLI commands wait for it.
pub fn daemon_lock(db: &Path, wait: Duration) -> Result<Held, LockError> {
    let (mut f, path) = open(db)?;
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    let give_up = Instant::now() + wait;
    loop {
        if try_flock(&f, libc::LOCK_EX).map_err(io)? {
            break;
        }
        // Held: by a daemon (exclusive) or by CLI commands writing (shared)?
        if try_flock(&f, libc::LOCK_SH).map_err(io)? {
            unlock(&f);
            if Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            return Err(LockError::Busy {
                db: db.to_path_buf(),
                socket: "none: CLI commands kept writing".into(),
            });
        }
        let holder = read_socket(&mut f);
        return Err(LockError::Busy {
            db: db.to_path_buf(),
            socket: if holder.is_empty() {
                "not written yet".into()
            } else {
                holder
            },
        });
    }
    // Stale content from a daemon that died: empty until this one can answer.
    f.set_len(0).map_err(io)?;
    Ok(Held { _file: f })
}

/// Record the socket of the daemon holding `held`: it now accepts connections.
pub fn publish(held: &Held, socket: &Path) -> std::io::Result<()> {
    let mut f = &held._file;
    f.set_len(0)?;
    f.rewind()?;
    f.write_all(socket.to_string_lossy().as_bytes())?;
    f.flush()
}

/// Clear the socket path on a clean shutdown (the lock itself goes with the `Held`).
pub fn clear(held: &Held) {
    let _ = held._file.set_len(0);
}

/// Find out who owns `db`: a daemon (with its socket), or nobody (then hold a shared lock).
pub fn owner(db: &Path) -> Result<Owner, LockError> {
    let (mut f, path) = open(db)?;
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    // A daemon loading a large pool publishes its socket only when it can answer.
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        if try_flock(&f, libc::LOCK_SH).map_err(io)? {
            return Ok(Owner::Free(Held { _file: f }));
        }
        let socket = read_socket(&mut f);
        if !socket.is_empty() {
            return Ok(Owner::Daemon(PathBuf::from(socket)));
        }
        // A daemon that has the lock but has not written its socket yet.
        if Instant::now() >= give_up {
            return Ok(Owner::Daemon(PathBuf::new()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_finds_the_lock_of_the_file_it_leads_to() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.db");
        let link = dir.path().join("link.db");
        // Dangling at first: SQLite would create the target, so the target's lock counts.
        std::os::unix::fs::symlink("real.db", &link).unwrap();
        assert_eq!(lock_path(&link), lock_path(&real));
        std::fs::write(&real, b"").unwrap();
        assert_eq!(lock_path(&link), lock_path(&real));
        // Through a symlinked folder and a relative path, too.
        let sub = dir.path().join("sub");
        std::os::unix::fs::symlink(dir.path(), &sub).unwrap();
        assert_eq!(lock_path(&sub.join("real.db")), lock_path(&real));
        let held = daemon_lock(&real, Duration::ZERO).unwrap();
        publish(&held, Path::new("/run/r.sock")).unwrap();
        assert!(matches!(
            daemon_lock(&link, Duration::ZERO),
            Err(LockError::Busy { .. })
        ));
        match owner(&sub.join("link.db")).unwrap() {
            Owner::Daemon(s) => assert_eq!(s, PathBuf::from("/run/r.sock")),
            Owner::Free(_) => panic!("daemon not found through the symlinks"),
        }
    }

    #[test]
    fn an_existing_lock_file_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        std::fs::write(lock_path(&db), b"").unwrap();
        std::fs::set_permissions(lock_path(&db), std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(owner(&db).unwrap());
        let mode = std::fs::metadata(lock_path(&db))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn daemon_excludes_daemon_and_cli_finds_its_socket() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let held = daemon_lock(&db, Duration::ZERO).unwrap();
        publish(&held, Path::new("/run/a.sock")).unwrap();
        match owner(&db).unwrap() {
            Owner::Daemon(s) => assert_eq!(s, PathBuf::from("/run/a.sock")),
            Owner::Free(_) => panic!("daemon not seen"),
        }
        let err = daemon_lock(&db, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("/run/a.sock"), "{err}");
        // Another database is independent.
        assert!(matches!(
            owner(&dir.path().join("b.db")).unwrap(),
            Owner::Free(_)
        ));
        clear(&held);
        drop(held);
        let cli = match owner(&db).unwrap() {
            Owner::Free(h) => h,
            Owner::Daemon(s) => panic!("stale daemon {s:?}"),
        };
        // A CLI write in progress makes a starting daemon wait, then give up.
        assert!(matches!(
            daemon_lock(&db, Duration::from_millis(60)),
            Err(LockError::Busy { .. })
        ));
        drop(cli);
        daemon_lock(&db, Duration::ZERO).unwrap();
    }
}
