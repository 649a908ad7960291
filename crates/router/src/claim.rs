//! One router per interface: a router claims each interface it attaches to (its
//! `af-packet` and `tap` ports) before opening it, so that a second `vmpls run` naming
//! the same interface in the same network namespace stops with the name of the router
//! that holds it, instead of starting and forwarding every frame a second time.
//!
//! A claim is an exclusive `flock(2)` on
//! `/run/vmpls/interfaces/NSDEV-NSINO/IFNAME.lock`, keyed by the network namespace's
//! identity (the device and inode of `/proc/thread-self/ns/net`) and the interface name.
//! The kernel releases the lock when the process dies, however it dies, so the file of a
//! router that crashed never blocks the next one. The file holds the holder's name, pid
//! and control socket for the message.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Interfaces a running router holds; released on drop (and by the kernel at exit).
#[derive(Debug, Default)]
pub struct Claims {
    held: Vec<(PathBuf, File)>,
}

impl Drop for Claims {
    fn drop(&mut self) {
        // Unlinked while still locked: a router waiting to claim the name sees that the
        // file it locked is no longer the one at the path, and takes the new one.
        for (path, _file) in self.held.drain(..) {
            let _ = std::fs::remove_file(&path);
            if let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// The directory of claims for this thread's network namespace, under `root`.
fn namespace_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let ns = std::fs::metadata("/proc/thread-self/ns/net").context("reading this network namespace")?;
    Ok(root.join(format!("{}-{}", ns.dev(), ns.ino())))
}

impl Claims {
    /// Claims `interfaces` for router `router` (whose control socket is `socket`), in
    /// this thread's network namespace, under the default directory.
    ///
    /// # Errors
    /// Another live router holds one of them (the message names it), or the claim
    /// files cannot be written.
    pub fn take(router: &str, socket: &Path, interfaces: &[&str]) -> anyhow::Result<Claims> {
        Self::take_in(
            Path::new(crate::socket::RUN_DIR).join("interfaces").as_path(),
            router,
            socket,
            interfaces,
        )
    }

    fn take_in(root: &Path, router: &str, socket: &Path, interfaces: &[&str]) -> anyhow::Result<Claims> {
        let dir = namespace_dir(root)?;
        let mut claims = Claims::default();
        for ifname in interfaces {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&dir)
                .with_context(|| format!("cannot create {} to claim the interfaces", dir.display()))?;
            let path = dir.join(format!("{ifname}.lock"));
            let file = loop {
                let mut file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o644)
                    .open(&path)
                    .with_context(|| format!("opening {}", path.display()))?;
                if !vmpls_sys::process::try_lock_exclusive(&file)
                    .with_context(|| format!("locking {}", path.display()))?
                {
                    let mut holder = String::new();
                    let _ = file.read_to_string(&mut holder);
                    let holder = holder.trim();
                    let holder = if holder.is_empty() { "another router" } else { holder };
                    bail!(
                        "interface {ifname} is already served by {holder} in this network namespace; \
                         two routers on one interface would forward every frame twice: stop that \
                         router first, or give this one another interface"
                    );
                }
                // The holder may have unlinked the file between our open and our lock:
                // then the lock is on a file nobody else will look at; start again.
                let same = std::fs::metadata(&path)
                    .is_ok_and(|m| file.metadata().is_ok_and(|f| (f.dev(), f.ino()) == (m.dev(), m.ino())));
                if same {
                    break file;
                }
            };
            let mut file = file;
            file.set_len(0)?;
            file.rewind()?;
            write!(
                file,
                "router \"{router}\" (pid {}, control socket {})",
                std::process::id(),
                socket.display()
            )
            .with_context(|| format!("writing {}", path.display()))?;
            claims.held.push((path, file));
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_names_the_holder_and_a_released_one_is_free() {
        let root = std::env::temp_dir().join(format!("vmpls-claims-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let a = Claims::take_in(&root, "pe1", Path::new("/run/vmpls/pe1.sock"), &["eth0", "eth1"]).unwrap();
        // A claim is per open file: a second one (as from another process) is refused.
        let e =
            Claims::take_in(&root, "pe1b", Path::new("/x.sock"), &["eth9", "eth1"]).unwrap_err().to_string();
        assert!(e.contains("interface eth1 is already served by router \"pe1\""), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(e.contains("/run/vmpls/pe1.sock"), "{e}");
        // The refused router kept nothing: eth9 is free.
        drop(Claims::take_in(&root, "c", Path::new("/c.sock"), &["eth9"]).unwrap());
        drop(a);
        // A lock file left behind by a router that died (nobody holds its lock) is taken.
        let dir = namespace_dir(&root).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("eth0.lock"), "router \"dead\" (pid 1, control socket /x)").unwrap();
        let b = Claims::take_in(&root, "pe1", Path::new("/y.sock"), &["eth0", "eth1"]).unwrap();
        let text = std::fs::read_to_string(dir.join("eth0.lock")).unwrap();
        assert!(text.starts_with("router \"pe1\""), "{text}");
        drop(b);
        assert!(!dir.exists(), "the namespace's directory goes with its last claim");
        let _ = std::fs::remove_dir_all(&root);
    }
}
