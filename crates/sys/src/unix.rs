//! Listening Unix sockets whose path carries the mode and group the caller asks for from
//! the moment anyone can connect.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

/// A Unix stream socket listening on `path`, its file given `mode` and, with `group`,
/// that group. The socket is bound, then its file is changed, and only then does it
/// listen: before `listen(2)` a connection is refused whatever the file's mode, so there
/// is no moment where someone the mode keeps out can connect, and no process-wide umask
/// is touched. The file is changed through a descriptor opened without following
/// symlinks, so a path swapped meanwhile is refused, never followed.
///
/// # Errors
/// Binding (the path exists, its directory cannot be written), changing the file, or
/// listening failed; the file is removed again when it was made.
pub fn listen_with_mode(path: &Path, mode: u32, group: Option<u32>) -> io::Result<UnixListener> {
    let sock = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    let addr = SocketAddrUnix::new(path)?;
    rustix::net::bind(&sock, &addr)?;
    let set_up = (|| -> io::Result<()> {
        let file = rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
        if FileType::from_raw_mode(rustix::fs::fstat(&file)?.st_mode) != FileType::Socket {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "the socket's path was replaced"));
        }
        if let Some(gid) = group {
            let gid = rustix::fs::Gid::from_raw(gid);
            rustix::fs::chownat(&file, "", None, Some(gid), AtFlags::EMPTY_PATH)?;
        }
        // fchmod does not take an O_PATH descriptor; its /proc link names the same inode.
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        std::fs::set_permissions(link, std::fs::Permissions::from_mode(mode))?;
        rustix::net::listen(&sock, 128)?;
        Ok(())
    })();
    if let Err(e) = set_up {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(UnixListener::from(sock))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_socket_gets_the_mode_and_group_asked_for() {
        let dir = std::env::temp_dir().join(format!("vmpls-sys-unix-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.sock");
        let l = listen_with_mode(&path, 0o600, None).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o600);
        assert!(UnixStream::connect(&path).is_ok());
        drop(l);
        std::fs::remove_file(&path).unwrap();
        // Group 1 ("daemon" on Debian): any group other than the caller's own will do.
        let l = listen_with_mode(&path, 0o660, Some(1)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o660, 1));
        drop(l);
        // An existing file is not taken over.
        assert!(listen_with_mode(&path, 0o600, None).is_err());
        assert!(path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
