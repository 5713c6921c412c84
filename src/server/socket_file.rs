//! The path the daemon binds its socket at: what may be replaced there, and its folder.
//!
//! A `--socket` typo must never cost data: only a Unix socket that no live daemon answers
//! (left by a crashed one) is removed. A regular file, a folder, a symlink, a FIFO (the
//! database itself, say) is an error naming the path.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the socket path cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketFileError {
    /// Something other than a socket is there.
    #[error("refusing to use {path} as the socket: it exists and is not a socket ({kind}); remove it or choose another --socket")]
    NotASocket {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A live daemon answers there: of another database (one of the same SQLite database
    /// is refused earlier, by its lock), or another daemon of a fleet.
    #[error("another proxypool daemon is already serving on {0}: give this one a socket of its own ([server] socket, --socket or PROXYPOOL_SOCKET)")]
    Live(PathBuf),
    /// Looking at, removing or creating the path failed.
    #[error("cannot prepare socket {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
}

fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a socket"
    }
}

/// Without touching anything: is `path` free, or a socket (stale or live)? Anything else
/// is `NotASocket`. Cheap enough to run before taking any lock, so the CLI can refuse a
/// bad `--socket` before it starts.
pub fn check(path: &Path) -> Result<(), SocketFileError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => Ok(()),
        Ok(m) => Err(SocketFileError::NotASocket {
            path: path.to_path_buf(),
            kind: kind(m.file_type()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SocketFileError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Make `path` ready to bind: remove a socket nobody answers on, refuse anything else,
/// and create a missing folder as 0700 (sockets and the database are for the owner only).
pub async fn prepare(path: &Path) -> Result<(), SocketFileError> {
    let io = |source| SocketFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    check(path)?;
    if std::fs::symlink_metadata(path).is_ok() {
        let answered = matches!(
            tokio::time::timeout(
                Duration::from_secs(1),
                tokio::net::UnixStream::connect(path)
            )
            .await,
            Ok(Ok(_))
        );
        if answered {
            return Err(SocketFileError::Live(path.to_path_buf()));
        }
        // Checked again right before removing: the window is what it is, but a file put
        // there by mistake in between is still not deleted by name alone.
        check(path)?;
        tracing::info!(socket = %path.display(), "removing stale socket file");
        std::fs::remove_file(path).map_err(io)?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir).map_err(io)?;
    }
    Ok(())
}

/// Remove our socket on shutdown, unless something else has replaced it meanwhile.
pub fn remove_own(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// `mkdir -p` with 0700 for every folder it creates (existing ones are left alone).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn only_a_dead_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "keep me").unwrap();
        let err = prepare(&text).await.unwrap_err();
        assert!(
            matches!(err, SocketFileError::NotASocket { .. })
                && err.to_string().contains("notes.txt"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&text).unwrap(), "keep me");

        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(matches!(
            prepare(&sub).await,
            Err(SocketFileError::NotASocket { .. })
        ));
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&text, &link).unwrap();
        assert!(matches!(
            prepare(&link).await,
            Err(SocketFileError::NotASocket { .. })
        ));
        assert!(text.exists());

        let sock = dir.path().join("live.sock");
        let live = tokio::net::UnixListener::bind(&sock).unwrap();
        assert!(matches!(
            prepare(&sock).await,
            Err(SocketFileError::Live(_))
        ));
        drop(live);
        // The file stays after the listener is gone: now it is stale and replaced.
        assert!(sock.exists());
        prepare(&sock).await.unwrap();
        assert!(!sock.exists());

        let deep = dir.path().join("a/b/c.sock");
        prepare(&deep).await.unwrap();
        for d in [dir.path().join("a"), dir.path().join("a/b")] {
            let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
    }
}
