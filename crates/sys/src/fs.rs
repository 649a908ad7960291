//! Files the router and the CLI write that others must not read or redirect: the stats
//! file and capture files. Neither is ever opened through a symbolic link, and both get
//! the mode asked for (0600 by default), whatever the umask.

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Attempts at a fresh temporary name before giving up (another file holding a name
/// nobody can guess is already an anomaly; a few tries rule out chance).
const TEMP_ATTEMPTS: usize = 4;

/// A name in `path`'s directory nobody can guess: `.NAME.<64 random bits>.tmp`. The bits
/// come from a `RandomState`, whose keys the standard library draws from the OS's random
/// source.
fn temp_name(path: &Path) -> PathBuf {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    let name = path.file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy());
    path.with_file_name(format!(".{name}.{:016x}.tmp", h.finish()))
}

/// Writes `bytes` to `path` whole: a reader of `path` sees the old content or the new,
/// never part of it. The bytes go to a temporary file in the same directory, created
/// exclusively (`O_EXCL|O_NOFOLLOW`) under a name nobody can guess and given `mode`, then
/// renamed over `path`; `rename(2)` replaces a symbolic link at `path`, it never writes
/// where the link points.
///
/// # Errors
/// The temporary cannot be created or written, or the rename failed (the temporary is
/// removed then).
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let tmp = temp_name(path);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt + 1 < TEMP_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let written = file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Opens `path` for writing from its start, as `tcpdump -w` does, but only where no one
/// else can read or redirect what is written: it is created with `mode` if it does not
/// exist; an existing file is overwritten only if it is a regular file with one link,
/// owned by the effective user, and its mode becomes `mode`. A symbolic link at `path`
/// is refused (`O_NOFOLLOW`), and so is a FIFO or device (opened without blocking, then
/// refused), so the caller neither writes elsewhere nor hangs.
///
/// # Errors
/// The file cannot be opened, or is one of the refused kinds (`InvalidInput`, with the
/// reason).
pub fn create_private(path: &Path, mode: u32) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // O_NOFOLLOW on a link.
            Some(libc::ELOOP) => refused("is a symbolic link"),
            // O_NONBLOCK on a FIFO nobody reads.
            Some(libc::ENXIO) => refused("is not a regular file"),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(refused("is not a regular file"));
    }
    if meta.nlink() > 1 {
        return Err(refused("has other hard links"));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refused(&format!("belongs to user {} (not {me})", meta.uid())));
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.set_len(0)?;
    // Blocking writes from here on (O_NONBLOCK changes nothing for a regular file, but
    // the caller gets an ordinary descriptor).
    rustix::fs::fcntl_setfl(&file, rustix::fs::fcntl_getfl(&file)? - rustix::fs::OFlags::NONBLOCK)?;
    Ok(file)
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("it {why}; not writing through it"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vmpls-sys-fs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn replace_file_is_private_and_never_writes_through_a_link() {
        let d = dir("replace");
        let target = d.join("target");
        std::fs::write(&target, b"keep").unwrap();
        let path = d.join("stats.json");
        // A link where the file goes is replaced, not followed.
        std::os::unix::fs::symlink(&target, &path).unwrap();
        replace_file(&path, b"{}", 0o600).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_file());
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        assert_eq!(mode(&path), 0o600);
        replace_file(&path, b"[]", 0o640).unwrap();
        assert_eq!(mode(&path), 0o640);
        // Nothing left beside it.
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // Two temporaries never share a name.
        assert_ne!(temp_name(&path), temp_name(&path));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn create_private_overwrites_only_the_callers_own_plain_files() {
        let d = dir("create");
        let path = d.join("cap.pcap");
        drop(create_private(&path, 0o600).unwrap());
        assert_eq!(mode(&path), 0o600);
        // An existing file of ours: truncated, made private.
        std::fs::write(&path, b"old contents").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut f = create_private(&path, 0o600).unwrap();
        f.write_all(b"new").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(mode(&path), 0o600);
        // A symbolic link: refused, its target untouched.
        let target = d.join("target");
        std::fs::write(&target, b"keep").unwrap();
        let link = d.join("link.pcap");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_private(&link, 0o600).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // A second name of another file: refused.
        let hard = d.join("hard.pcap");
        std::fs::hard_link(&target, &hard).unwrap();
        assert!(create_private(&hard, 0o600).unwrap_err().to_string().contains("hard links"));
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // A FIFO nobody reads: refused at once, no hang.
        let fifo = d.join("fifo.pcap");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(create_private(&fifo, 0o600).unwrap_err().to_string().contains("not a regular file"));
        // Someone else's file (a trap laid in a shared directory): refused.
        if rustix::process::geteuid().is_root() {
            let theirs = d.join("theirs.pcap");
            std::fs::write(&theirs, b"").unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            assert!(
                create_private(&theirs, 0o600).unwrap_err().to_string().contains("belongs to user 65534")
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
