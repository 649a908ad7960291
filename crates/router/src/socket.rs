//! Where control sockets live, and opening one safely.
//!
//! The default socket of router NAME is `/run/vmpls/NAME.sock`. A router started inside a
//! named network namespace (`ip netns add X`, as the lab makes them) defaults to
//! `/run/vmpls/netns/X/NAME.sock` instead: routers in different namespaces are different
//! routers even when they share a name, and the CLI run in the same namespace
//! (`ip netns exec X vmpls -r NAME ...`) finds the same path.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Where default sockets live.
pub const RUN_DIR: &str = "/run/vmpls";

/// The named network namespace this thread is in, if it is one and not the initial one.
fn netns_name() -> Option<String> {
    let me = std::fs::metadata("/proc/thread-self/ns/net").ok()?;
    let same = |m: &std::fs::Metadata| m.dev() == me.dev() && m.ino() == me.ino();
    if std::fs::metadata("/proc/1/ns/net").is_ok_and(|m| same(&m)) {
        return None;
    }
    // Where `ip netns` mounts named namespaces (the OS layer will hold this once).
    std::fs::read_dir("/run/netns")
        .ok()?
        .flatten()
        .find(|e| std::fs::metadata(e.path()).is_ok_and(|m| same(&m)))
        .and_then(|e| e.file_name().into_string().ok())
}

/// The directory of default sockets for this network namespace.
pub fn default_dir() -> PathBuf {
    match netns_name() {
        Some(ns) => Path::new(RUN_DIR).join("netns").join(ns),
        None => PathBuf::from(RUN_DIR),
    }
}

/// The default socket of router `name`.
pub fn default_path(name: &str) -> PathBuf {
    default_dir().join(format!("{name}.sock"))
}

/// The socket the CLI talks to: `--socket`, else `-r ROUTER`'s default, else the only
/// router running here.
///
/// # Errors
/// No router or several routers in the default directory and none chosen.
pub fn client_path(router: Option<&str>, socket: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(s) = socket {
        return Ok(s.to_path_buf());
    }
    if let Some(r) = router {
        return router_path(r, &default_dir(), Path::new(RUN_DIR));
    }
    let dir = default_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".sock").map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    match names.as_slice() {
        [one] => Ok(default_path(one)),
        [] => Err(format!(
            "no router is running here (no socket in {}); give -r ROUTER or --socket PATH",
            dir.display()
        )),
        many => Err(format!("several routers run here ({}); choose one with -r ROUTER", many.join(", "))),
    }
}

/// The socket of router `name`: its default in `here` (this namespace's directory) if
/// there is one, else the one router of that name in another namespace's directory under
/// `run` (`run/NAME.sock`, `run/netns/NS/NAME.sock`), as `-r NAME` from the host's
/// namespace finds a lab router; several: an error naming their sockets.
fn router_path(name: &str, here: &Path, run: &Path) -> Result<PathBuf, String> {
    let mine = here.join(format!("{name}.sock"));
    if mine.exists() {
        return Ok(mine);
    }
    let file = format!("{name}.sock");
    let mut found: Vec<PathBuf> = std::iter::once(run.join(&file))
        .chain(
            std::fs::read_dir(run.join("netns"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join(&file)),
        )
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(mine),
        1 => Ok(found.remove(0)),
        _ => Err(format!(
            "router {name} runs in several network namespaces ({}); choose with --socket PATH, or run the CLI in its namespace (ip netns exec NS vmpls -r {name} ...)",
            found.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// A listening control socket; the file is removed on drop if it is still ours.
#[derive(Debug)]
pub struct ControlSocket {
    /// The listener.
    pub listener: UnixListener,
    path: PathBuf,
    id: (u64, u64),
}

impl ControlSocket {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        // Only remove the file if it is still the socket we made.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
        // A namespace's default directory goes with its last router (the namespace
        // itself is usually gone soon after); remove_dir fails harmlessly if not empty.
        if let Some(dir) = self.path.parent()
            && dir.parent() == Some(Path::new(RUN_DIR).join("netns").as_path())
        {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn bind_private(path: &Path) -> io::Result<UnixListener> {
    // The socket file is created with mode 0600 from the start: with a umask of 0177
    // around bind(2) nobody else can connect even for an instant. umask is process-wide;
    // this runs at start-up before the router starts any thread.
    let old = vmpls_sys::process::umask(0o177);
    let r = UnixListener::bind(path);
    vmpls_sys::process::umask(old);
    r
}

/// Creates the control socket at `path` (mode 0600, owned by the user running the
/// router), with its directory if needed. A socket file left by a router that is gone
/// (connecting to it fails) is replaced.
///
/// # Errors
/// Another router listens on `path`; the path exists and is not a socket; the directory
/// cannot be created.
pub fn bind(path: &Path) -> anyhow::Result<ControlSocket> {
    if path.as_os_str().len() > vmpls_control::MAX_SOCKET_PATH {
        bail!(
            "control socket path {} is too long (at most {} bytes)",
            path.display(),
            vmpls_control::MAX_SOCKET_PATH
        );
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .with_context(|| {
                format!(
                    "cannot create {} for the control socket; set [router] control-socket to a path you can write",
                    dir.display()
                )
            })?;
    }
    let listener = match bind_private(path) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            let meta =
                std::fs::symlink_metadata(path).with_context(|| format!("inspecting {}", path.display()))?;
            if !meta.file_type().is_socket() {
                bail!(
                    "{} exists and is not a socket; remove it or choose another control-socket",
                    path.display()
                );
            }
            if UnixStream::connect(path).is_ok() {
                bail!(
                    "another router is using {}: stop it first, or give this router its own socket ([router] control-socket = \"...\")",
                    path.display()
                );
            }
            tracing::info!(socket = %path.display(), "replacing the stale socket of a router that is gone");
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale socket {}", path.display()))?;
            bind_private(path).with_context(|| format!("creating {}", path.display()))?
        }
        Err(e) => {
            return Err(e).with_context(|| format!("creating the control socket {}", path.display()));
        }
    };
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("inspecting {}", path.display()))?;
    Ok(ControlSocket { listener, path: path.to_path_buf(), id: (meta.dev(), meta.ino()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vmpls-sock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn socket_is_private_exclusive_and_replaces_stale_ones() {
        let dir = tmp("bind");
        let path = dir.join("sub/r1.sock");
        let s = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let e = bind(&path).unwrap_err().to_string();
        assert!(e.contains("another router is using"), "{e}");
        // A socket file nobody listens on any more: replaced.
        let stale = dir.join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        let s2 = bind(&stale).unwrap();
        assert!(UnixStream::connect(&stale).is_ok());
        drop(s2);
        assert!(!stale.exists(), "removed on drop");
        // Not a socket: refused, untouched.
        let file = dir.join("file.sock");
        std::fs::write(&file, b"x").unwrap();
        assert!(bind(&file).unwrap_err().to_string().contains("not a socket"));
        assert!(file.exists());
        drop(s);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn client_path_prefers_explicit_choices() {
        assert_eq!(
            client_path(Some("pe1"), Some(Path::new("/tmp/x.sock"))).unwrap(),
            PathBuf::from("/tmp/x.sock")
        );
        assert!(client_path(Some("pe1"), None).unwrap().ends_with("pe1.sock"));
    }

    #[test]
    fn a_router_in_another_namespace_is_found_by_name() {
        let run = tmp("netns");
        let here = run.clone();
        let ns1 = run.join("netns/lab1");
        std::fs::create_dir_all(&ns1).unwrap();
        // Not running anywhere: this namespace's default (the connect error says so).
        assert_eq!(router_path("pe1", &here, &run).unwrap(), here.join("pe1.sock"));
        let _a = UnixListener::bind(ns1.join("pe1.sock")).unwrap();
        assert_eq!(router_path("pe1", &here, &run).unwrap(), ns1.join("pe1.sock"));
        let ns2 = run.join("netns/lab2");
        std::fs::create_dir_all(&ns2).unwrap();
        let _b = UnixListener::bind(ns2.join("pe1.sock")).unwrap();
        let e = router_path("pe1", &here, &run).unwrap_err();
        assert!(
            e.contains("several network namespaces")
                && e.contains("lab1/pe1.sock")
                && e.contains("lab2/pe1.sock"),
            "{e}"
        );
        // One here wins.
        let _c = UnixListener::bind(here.join("pe1.sock")).unwrap();
        assert_eq!(router_path("pe1", &here, &run).unwrap(), here.join("pe1.sock"));
        std::fs::remove_dir_all(&run).unwrap();
    }
}
