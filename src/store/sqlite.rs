//! SQLite: one daemon's store (the default). WAL, `busy_timeout`, the schema from the
//! `up.sql` of each numbered folder in `migrations/`. Opening the file is here; each table's
//! reads and writes are in `sqlite/`.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use include_dir::{include_dir, Dir};
use rusqlite::Connection;
use rusqlite_migration::Migrations;

use super::StoreError;
use crate::config::Durability;

mod edit_endpoint;
mod endpoints;
mod events;
mod history;
mod insert;
pub(super) mod pairs;
mod sources;
mod write;
pub use write::Groups;

pub(super) static MIGRATIONS_DIR: Dir = include_dir!("$CARGO_MANIFEST_DIR/migrations");
pub(super) static MIGRATIONS: LazyLock<Migrations<'static>> =
    LazyLock::new(|| Migrations::from_directory(&MIGRATIONS_DIR).expect("migrations/ is valid"));

/// A database at `path` as migrations 01 up to `version` left it, for tests of what
/// opening it with this version's `Sqlite` does.
#[cfg(test)]
pub(crate) fn built_to(path: &Path, version: usize) -> Connection {
    let mut conn = Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    MIGRATIONS.to_version(&mut conn, version).unwrap();
    conn
}

/// The SQLite store.
pub struct Sqlite {
    conn: Connection,
    path: PathBuf,
    /// (device, inode) of the file opened: the name must keep meaning this file.
    file: Option<(u64, u64)>,
    /// The schema versions (before, after) when opening migrated an existing database.
    migrated: Option<(i64, i64)>,
    /// Commits still to fail, as a full disk would (engine tests).
    #[cfg(test)]
    fail_commits: u32,
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Sqlite {
    /// Open (creating and migrating) the database at `path` with default durability.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        Sqlite::open_with(path, Durability::default())
    }

    /// Open (creating and migrating) the database at `path`.
    pub fn open_with(path: &Path, durability: Durability) -> Result<Sqlite, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The database holds proxy passwords: a folder we create is ours alone.
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| StoreError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        check_single_link(path)?;
        // Two processes opening a new database at once must not both run the migrations.
        let _migrating = super::lock::migration(path).map_err(|e| StoreError::Migration {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut conn = Connection::open(path)?;
        // Another process (CLI vs daemon) may hold the write lock briefly.
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(
            None,
            "synchronous",
            match durability {
                Durability::Normal => "NORMAL",
                Durability::Full => "FULL",
            },
        )?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let before: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        MIGRATIONS
            .to_latest(&mut conn)
            .map_err(|e| StoreError::Migration {
                path: path.to_path_buf(),
                // The first line says what failed; the rest would be the SQL text.
                message: e.to_string().lines().next().unwrap_or_default().to_string(),
            })?;
        restrict(path);
        let after: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        // A new database (version 0) is created, not migrated.
        let migrated = (before > 0 && after != before).then_some((before, after));
        Ok(Sqlite {
            migrated,
            conn,
            file: file_id(path),
            path: path.to_path_buf(),
            #[cfg(test)]
            fail_commits: 0,
        })
    }

    /// Whether the database's name still refers to the file opened (not deleted, not
    /// replaced). One `stat`, cheap enough before every commit.
    pub fn check_file(&self) -> Result<(), StoreError> {
        if self.file.is_some() && file_id(&self.path) != self.file {
            return Err(StoreError::FileGone {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema versions (before, after) when opening migrated an older database.
    pub fn migrated(&self) -> Option<(i64, i64)> {
        self.migrated
    }

    /// The schema version (number of applied migrations).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }
}
/// Make the database files readable by their owner only: they hold proxy passwords.
/// Refuse a database file with more than one hard link. A missing file is fine (it is
/// about to be created); `stat` follows symlinks, so a symlink to a single-link file is too.
fn check_single_link(db: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(db) {
        Ok(m) if m.is_file() && m.nlink() > 1 => Err(StoreError::HardLinked {
            path: db.to_path_buf(),
            links: m.nlink(),
        }),
        _ => Ok(()),
    }
}

fn restrict(db: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        if let Ok(m) = std::fs::metadata(&p) {
            if m.permissions().mode() & 0o077 != 0 {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600));
            }
        }
    }
}

/// A free-text column as stored: control characters (a client's CR/LF, ESC, NUL) written
/// as escapes (`redact::printable`), so no stored text can forge a line or drive a
/// terminal wherever it is printed later.
pub(crate) fn text(v: &Option<String>) -> Option<std::borrow::Cow<'_, str>> {
    crate::redact::printable_opt(v.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{fmt_time, parse_time};
    use std::time::SystemTime;

    #[test]
    fn times_round_trip() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_790_000_000_123);
        assert_eq!(parse_time(&fmt_time(t)), Some(t));
    }

    #[test]
    fn concurrent_first_opens_migrate_once_and_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join(format!("sub/new{round}.db"));
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let db = db.clone();
                    std::thread::spawn(move || Sqlite::open(&db).map(|_| ()))
                })
                .collect();
            for h in handles {
                h.join().unwrap().unwrap();
            }
            let mode = std::fs::metadata(&db).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "database readable by others: {mode:o}");
            let dmode = std::fs::metadata(db.parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(dmode & 0o077, 0, "folder open to others: {dmode:o}");
        }
    }
}
