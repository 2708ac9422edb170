//! The agent's Unix socket: made with the configured mode and group, refused when
//! another agent already listens on it, a stale file left by a killed agent replaced,
//! and removed at the stop only while it is still this agent's.
//!
//! The socket file's permissions are the credential of the Unix path: connecting
//! needs write permission on it. So the socket is never reachable with other
//! permissions than configured: it is bound inside a private directory (mode 0700)
//! beside its final path, given its group and mode there, and renamed into place. A
//! socket directory anyone else may write to is refused: another user could put a
//! socket of their own there first.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Why the socket could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Another process answers on the socket: two agents would split a host's calls
    /// and each would believe it owns the spool.
    #[error(
        "another process listens on {0}; stop it first (or give this agent another listen.socket)"
    )]
    InUse(String),
    /// The socket's directory may be written by others than its owner.
    #[error(
        "the socket's directory {0} may be written by its group or by anyone; give the socket a directory only its owner writes"
    )]
    OpenDirectory(String),
    /// The file system refused.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ListenError + use<> {
    let path = path.display().to_string();
    move |source| ListenError::Io { what, path, source }
}

/// A bound socket and the identity of its file.
#[derive(Debug)]
pub struct Bound {
    /// The listener.
    pub listener: UnixListener,
    /// Where it is.
    pub path: PathBuf,
    id: (u64, u64),
}

impl Bound {
    /// Removes the socket file if it is still this one (a newer agent may have
    /// replaced it while this one drained).
    pub fn remove_if_ours(path: &Path, id: (u64, u64)) {
        match std::fs::symlink_metadata(path) {
            Ok(m) if (m.dev(), m.ino()) == id => {
                if let Err(e) = std::fs::remove_file(path) {
                    tracing::warn!(error = %e, socket = %path.display(), "cannot remove the socket file");
                }
            }
            Ok(_) => {
                tracing::info!(socket = %path.display(), "the socket is another agent's now; left in place")
            }
            Err(_) => {}
        }
    }

    /// The socket file's identity (device, inode).
    pub fn id(&self) -> (u64, u64) {
        self.id
    }
}

/// Binds the Unix socket at `path` with `mode` and, when given, group `gid`; makes the
/// directory when missing and replaces a stale socket nobody answers on.
pub async fn unix(path: &Path, mode: u32, gid: Option<u32>) -> Result<Bound, ListenError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(io("cannot make the socket's directory", dir))?;
    let meta = std::fs::metadata(dir).map_err(io("cannot inspect", dir))?;
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(ListenError::OpenDirectory(dir.display().to_string()));
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt as _;
            if !meta.file_type().is_socket() {
                return Err(ListenError::Io {
                    what: "is not a socket; not replacing",
                    path: path.display().to_string(),
                    source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
                });
            }
            match tokio::net::UnixStream::connect(path).await {
                Ok(_) => return Err(ListenError::InUse(path.display().to_string())),
                // Nobody listens: a killed agent's file.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    tracing::info!(path = %path.display(), "replacing a stale agent socket");
                }
                // A full backlog or a refusal of permission is a live listener.
                Err(e) => return Err(io("cannot tell whether another agent listens on", path)(e)),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot inspect", path)(e)),
    }
    // Bound and set up out of reach, then put in place in one rename.
    let private = dir.join(format!(
        ".{}.{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("agent.sock"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(io("cannot make the private directory", &private))?;
    let staged = private.join("s");
    let placed = (|| {
        let listener = UnixListener::bind(&staged).map_err(io("cannot bind", &staged))?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(&staged, None, Some(gid))
                .map_err(io("cannot set the group of", &staged))?;
        }
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))
            .map_err(io("cannot set the mode of", &staged))?;
        std::fs::rename(&staged, path).map_err(io("cannot put the socket at", path))?;
        let m = std::fs::symlink_metadata(path).map_err(io("cannot inspect", path))?;
        Ok(Bound {
            listener,
            path: path.to_path_buf(),
            id: (m.dev(), m.ino()),
        })
    })();
    let _ = std::fs::remove_dir_all(&private);
    placed
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_live_socket_is_refused_and_a_stale_one_replaced() {
        let dir = std::env::temp_dir().join(format!("agent-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.join("a.sock");
        let first = unix(&path, 0o660, None).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // Accepting in the background: the second agent's probe connects.
        let accept = tokio::spawn(async move {
            let _ = first.listener.accept().await;
            first
        });
        assert!(matches!(
            unix(&path, 0o660, None).await,
            Err(ListenError::InUse(_))
        ));
        let first = accept.await.unwrap();
        let first_id = first.id();
        drop(first);
        // The first agent is gone, its file stays: the next one replaces it, and the
        // first one's removal leaves the new socket alone.
        assert!(path.exists());
        let second = unix(&path, 0o600, None).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        Bound::remove_if_ours(&path, first_id);
        assert!(path.exists());
        Bound::remove_if_ours(&path, second.id());
        assert!(!path.exists());
        // A file that is not a socket is never removed.
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        assert!(matches!(
            unix(&plain, 0o660, None).await,
            Err(ListenError::Io { .. })
        ));
        assert!(plain.exists());
        // A directory others may write is refused.
        let open = dir.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            unix(&open.join("a.sock"), 0o660, None).await,
            Err(ListenError::OpenDirectory(_))
        ));
        std::fs::remove_dir_all(&dir).ok();
    }
}
