//! Where the daemon is: a unix socket by default, or a TCP base URL.

use std::path::{Path, PathBuf};

/// The daemon directory used when `$PEBBLE` is unset, as in Pebble.
pub const DEFAULT_PEBBLE_DIR: &str = "/var/lib/pebble/default";

/// The socket file name inside the daemon directory.
pub const SOCKET_FILE_NAME: &str = ".pebble.socket";

/// The daemon directory and socket path that Pebble's environment variables select.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvPaths {
    /// `$PEBBLE`, or [`DEFAULT_PEBBLE_DIR`] when unset or empty.
    pub pebble_dir: PathBuf,
    /// `$PEBBLE_SOCKET`, or `$PEBBLE/.pebble.socket` when unset or empty.
    pub socket: PathBuf,
}

impl EnvPaths {
    /// Reads `PEBBLE` and `PEBBLE_SOCKET` from the process environment.
    pub fn from_env() -> Self {
        Self::from_vars(
            std::env::var_os("PEBBLE").map(PathBuf::from),
            std::env::var_os("PEBBLE_SOCKET").map(PathBuf::from),
        )
    }

    /// Resolves the paths from the two variables' values; empty counts as unset, like Go's
    /// `os.Getenv(..) == ""`.
    pub fn from_vars(pebble: Option<PathBuf>, socket: Option<PathBuf>) -> Self {
        let pebble_dir = non_empty(pebble).unwrap_or_else(|| PathBuf::from(DEFAULT_PEBBLE_DIR));
        let socket = non_empty(socket).unwrap_or_else(|| default_socket(&pebble_dir));
        EnvPaths { pebble_dir, socket }
    }
}

fn non_empty(path: Option<PathBuf>) -> Option<PathBuf> {
    path.filter(|p| !p.as_os_str().is_empty())
}

fn default_socket(pebble_dir: &Path) -> PathBuf {
    pebble_dir.join(SOCKET_FILE_NAME)
}

/// How to reach the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The unix socket to connect to when `base_url` is `None`.
    pub socket: PathBuf,
    /// A plain-HTTP base URL such as `http://127.0.0.1:4000`; when set, the socket is not used.
    pub base_url: Option<String>,
}

impl ClientConfig {
    /// A configuration for the given unix socket.
    pub fn socket(path: impl Into<PathBuf>) -> Self {
        ClientConfig {
            socket: path.into(),
            base_url: None,
        }
    }

    /// The configuration Pebble's CLI uses: the socket from `PEBBLE_SOCKET` or
    /// `$PEBBLE/.pebble.socket`, and `PEBBLE_BASEURL` when it is set and not empty.
    pub fn from_env() -> Self {
        let base_url = std::env::var("PEBBLE_BASEURL")
            .ok()
            .filter(|url| !url.is_empty());
        ClientConfig {
            socket: EnvPaths::from_env().socket,
            base_url,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_pebble() {
        let paths = EnvPaths::from_vars(None, None);
        assert_eq!(paths.pebble_dir, Path::new("/var/lib/pebble/default"));
        assert_eq!(
            paths.socket,
            Path::new("/var/lib/pebble/default/.pebble.socket")
        );
    }

    #[test]
    fn socket_defaults_inside_pebble_dir_and_empty_means_unset() {
        let paths = EnvPaths::from_vars(Some("/p".into()), Some("".into()));
        assert_eq!(paths.socket, Path::new("/p/.pebble.socket"));
        let paths = EnvPaths::from_vars(Some("/p".into()), Some("/run/x.sock".into()));
        assert_eq!(paths.socket, Path::new("/run/x.sock"));
    }
}
