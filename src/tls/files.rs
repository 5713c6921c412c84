//! The CA's two files on disk: written so that the key is never readable by anyone else,
//! not even for a moment (created 0600, then moved into place), and read only when that
//! still holds.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::CaError;
use crate::config::CaFiles;

/// The largest CA file read (a certificate or key is a few KiB).
const MAX_FILE: u64 = 1 << 20;

/// Write a new CA: the key (0600) and the certificate (0644). Without `force` an existing
/// file is never replaced, checked again at the moment each file is linked into place.
pub(super) fn write_ca(
    files: &CaFiles,
    cert_pem: &str,
    key_pem: &str,
    force: bool,
) -> Result<(), CaError> {
    if !force {
        for path in [&files.key, &files.cert] {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(CaError::Exists { path: path.clone() });
            }
        }
    }
    put(&files.key, "key", key_pem.as_bytes(), 0o600, force)?;
    put(
        &files.cert,
        "certificate",
        cert_pem.as_bytes(),
        0o644,
        force,
    )
}

/// `bytes` into `path` through a temporary file in the same folder, created with `mode`.
fn put(
    path: &Path,
    what: &'static str,
    bytes: &[u8],
    mode: u32,
    force: bool,
) -> Result<(), CaError> {
    let io = |source: std::io::Error| CaError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // A new folder for a key is nobody else's business either.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    let tmp = temp_beside(path);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    let placed = written.and_then(|()| match force {
        true => std::fs::rename(&tmp, path),
        // A link fails when the name exists: no window in which a file could be replaced.
        false => std::fs::hard_link(&tmp, path),
    });
    let _ = std::fs::remove_file(&tmp);
    match placed {
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(CaError::Exists {
            path: path.to_path_buf(),
        }),
        r => r.map_err(io),
    }
}

fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{name}.{}.{:08x}.tmp",
        std::process::id(),
        fastrand::u32(..)
    ))
}

/// The certificate file's bytes.
pub(super) fn read_cert(path: &Path) -> Result<Vec<u8>, CaError> {
    let (f, _) = open(path, "certificate")?;
    read_all(f, path, "certificate")
}

/// The key file's bytes, when no one but its owner (and root) may read it.
pub(super) fn read_key(path: &Path) -> Result<Vec<u8>, CaError> {
    let (f, mode) = open(path, "key")?;
    if mode & 0o077 != 0 {
        return Err(CaError::KeyReadable {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    read_all(f, path, "key")
}

/// Open a regular file and tell its mode (from the open file: what is checked is what is
/// read).
fn open(path: &Path, what: &'static str) -> Result<(File, u32), CaError> {
    let f = File::open(path).map_err(|source| match source.kind() {
        ErrorKind::NotFound => CaError::Missing {
            what,
            path: path.to_path_buf(),
        },
        _ => CaError::Io {
            what,
            path: path.to_path_buf(),
            source,
        },
    })?;
    let meta = f.metadata().map_err(|source| CaError::Io {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(CaError::Invalid {
            what,
            path: path.to_path_buf(),
            why: "is not a regular file".into(),
        });
    }
    Ok((f, meta.mode()))
}

fn read_all(f: File, path: &Path, what: &'static str) -> Result<Vec<u8>, CaError> {
    let mut out = Vec::new();
    f.take(MAX_FILE + 1)
        .read_to_end(&mut out)
        .map_err(|source| CaError::Io {
            what,
            path: path.to_path_buf(),
            source,
        })?;
    if out.len() as u64 > MAX_FILE {
        return Err(CaError::Invalid {
            what,
            path: path.to_path_buf(),
            why: "is larger than 1 MiB".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn written_with_their_modes_and_never_replaced_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let files = CaFiles::in_dir(&dir.path().join("new/sub"));
        write_ca(&files, "CERT", "KEY", false).unwrap();
        assert_eq!((mode(&files.key), mode(&files.cert)), (0o600, 0o644));
        assert_eq!(mode(files.key.parent().unwrap()), 0o700);
        let e = write_ca(&files, "CERT2", "KEY2", false).unwrap_err();
        assert!(matches!(e, CaError::Exists { .. }), "{e}");
        assert!(e.to_string().contains("--force"), "{e}");
        assert_eq!(std::fs::read_to_string(&files.key).unwrap(), "KEY");
        // Only the certificate left: still refused, the key is not written either.
        std::fs::remove_file(&files.key).unwrap();
        assert!(write_ca(&files, "CERT2", "KEY2", false).is_err());
        assert!(!files.key.exists());
        write_ca(&files, "CERT3", "KEY3", true).unwrap();
        assert_eq!(std::fs::read_to_string(&files.key).unwrap(), "KEY3");
        assert_eq!(mode(&files.key), 0o600);
        let left: Vec<_> = std::fs::read_dir(files.key.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
    }

    #[test]
    fn a_key_others_may_read_is_refused_naming_chmod() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("ca.key");
        std::fs::write(&key, "KEY").unwrap();
        for m in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(m)).unwrap();
            let e = read_key(&key).unwrap_err().to_string();
            assert!(
                e.contains(&format!("chmod 600 {}", key.display())),
                "{m:o}: {e}"
            );
            assert!(e.contains(&format!("{m:04o}")), "{e}");
        }
        for m in [0o600, 0o400] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(m)).unwrap();
            assert_eq!(read_key(&key).unwrap(), b"KEY");
        }
        let e = read_key(&dir.path().join("none.key"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("proxypool ca init"), "{e}");
        let e = read_cert(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
