//! Who is on the other end: the process and user of a Unix socket's peer
//! (`SO_PEERCRED`), the owner of a local TCP peer's socket (TCP has no `SO_PEERCRED`),
//! and users by name.
//!
//! The owner comes from the kernel's socket diagnostics (`NETLINK_SOCK_DIAG`, the
//! interface `ss` uses): an exact lookup of the peer's socket by its 4-tuple, which
//! answers with the socket's `uid` (the file system user of whoever created it) and its
//! inode (0 once no process holds the socket). `/proc/net/tcp` has the same columns but
//! is a text table walked in full; the lookup is one request and one answer.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netlink};

/// `SOCK_DIAG_BY_FAMILY`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_HDRLEN: usize = 16;
/// `struct inet_diag_req_v2`.
const REQ_LEN: usize = 56;
/// `struct inet_diag_msg`.
const MSG_LEN: usize = 72;
const TCP_LISTEN: u8 = 10;
/// `INET_DIAG_NOCOOKIE`: no socket cookie to match.
const NO_COOKIE: [u8; 8] = [0xff; 8];

/// The other end of a connected Unix socket, as the kernel recorded it when the
/// connection was made (`connect` or `socketpair`), whatever the peer did since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnixPeer {
    /// Its process, as this process's pid namespace sees it; `None` where that namespace
    /// cannot see it.
    pub pid: Option<u32>,
    /// Its effective user.
    pub uid: u32,
    /// Its effective group.
    pub gid: u32,
}

/// The process, user and group at the other end of the connected Unix socket `socket`
/// (`SO_PEERCRED`).
///
/// # Errors
/// `socket` is not a socket. (Of a socket that never had a peer the kernel answers
/// with pid 0, `pid: None`.)
pub fn unix_peer(socket: impl AsFd) -> io::Result<UnixPeer> {
    let cred: libc::ucred = crate::sockopt::get(socket, libc::SOL_SOCKET, libc::SO_PEERCRED)?;
    Ok(UnixPeer { pid: u32::try_from(cred.pid).ok().filter(|&p| p > 0), uid: cred.uid, gid: cred.gid })
}

/// The owner of a TCP socket, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOwner {
    /// The user that created the socket.
    pub uid: u32,
    /// Whether a process still holds the socket (inode not 0). A socket its process has
    /// closed (or one in `TIME_WAIT`) reports uid 0, which says nothing about who made it.
    pub held: bool,
}

/// The owner of the TCP socket at `peer` connected to `local` (the local end of a
/// connection this process accepted: `peer` is the client's socket). `Ok(None)` when the
/// kernel has no such socket (closed since, or in another network namespace).
///
/// # Errors
/// The diagnostics socket cannot be opened or answers with an error; or the addresses
/// are of different families.
pub fn tcp_peer_owner(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<SocketOwner>> {
    let req = inet_diag_request(local, peer)?;
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    rustix::net::send(&fd, &req, SendFlags::empty())?;
    let mut buf = [0u8; 512];
    let (n, _) = rustix::net::recv(&fd, &mut buf, RecvFlags::empty())?;
    parse_inet_diag_reply(buf.get(..n).unwrap_or_default(), local)
}

/// The request for the socket whose local end is `peer` and remote end `local`.
fn inet_diag_request(local: SocketAddr, peer: SocketAddr) -> io::Result<Vec<u8>> {
    let family = match (local.ip(), peer.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET,
        (IpAddr::V6(_), IpAddr::V6(_)) => libc::AF_INET6,
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "addresses of different families")),
    };
    let len = NLMSG_HDRLEN + REQ_LEN;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    m.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    // struct inet_diag_sockid: the socket's own end is the peer's.
    m.extend_from_slice(&peer.port().to_be_bytes());
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&address_bytes(peer.ip()));
    m.extend_from_slice(&address_bytes(local.ip()));
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&NO_COOKIE);
    debug_assert_eq!(m.len(), len);
    Ok(m)
}

fn address_bytes(a: IpAddr) -> [u8; 16] {
    let mut out = [0; 16];
    match a {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => out = a.octets(),
    }
    out
}

/// The owner in the kernel's answer. A listener found instead of the connected socket
/// (the lookup falls back to listeners) is no answer.
fn parse_inet_diag_reply(reply: &[u8], local: SocketAddr) -> io::Result<Option<SocketOwner>> {
    let short = || io::Error::new(io::ErrorKind::InvalidData, "a short socket diagnostics answer");
    let header = reply.get(..NLMSG_HDRLEN).ok_or_else(short)?;
    let kind = u16::from_ne_bytes([header[4], header[5]]);
    let body = &reply[NLMSG_HDRLEN..];
    if kind == NLMSG_ERROR {
        let code = body.get(..4).ok_or_else(short)?;
        let errno = -i32::from_ne_bytes([code[0], code[1], code[2], code[3]]);
        return match errno {
            libc::ENOENT => Ok(None),
            e => Err(io::Error::from_raw_os_error(e)),
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("socket diagnostics message type {kind}"),
        ));
    }
    let msg = body.get(..MSG_LEN).ok_or_else(short)?;
    let state = msg[1];
    let dport = u16::from_be_bytes([msg[6], msg[7]]);
    if state == TCP_LISTEN || dport != local.port() {
        return Ok(None);
    }
    let word = |at: usize| u32::from_ne_bytes([msg[at], msg[at + 1], msg[at + 2], msg[at + 3]]);
    Ok(Some(SocketOwner { uid: word(64), held: word(68) != 0 }))
}

/// The user id of user `name` in the passwd database (files, LDAP, whatever NSS is
/// configured with). `Ok(None)`: no such user.
///
/// # Errors
/// The lookup itself failed (NSS error), or the name holds a NUL byte.
pub fn user_id(name: &str) -> io::Result<Option<u32>> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a user name with a NUL byte"))?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: passwd is plain C data (pointers and integers); all zeroes is a valid
        // value, overwritten by the call on success.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `cname` is a NUL-terminated string, `pwd`, `buf` and `found` are live
        // for the call and `buf.len()` is the size of `buf`; the strings `pwd` points to
        // live in `buf`, and only `pwd.pw_uid` (an integer) is read after the call.
        let r = unsafe {
            libc::getpwnam_r(cname.as_ptr(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found)
        };
        match r {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(pwd.pw_uid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            // "Not found" as some NSS modules report it.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_unix_peer_is_this_process_its_user_and_group() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let peer = unix_peer(&a).unwrap();
        assert_eq!(
            peer,
            UnixPeer {
                pid: Some(std::process::id()),
                uid: rustix::process::geteuid().as_raw(),
                gid: rustix::process::getegid().as_raw(),
            }
        );
    }

    #[test]
    fn the_owner_of_a_local_peer_is_this_process_user() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let local = listener.local_addr().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let uid = rustix::process::geteuid().as_raw();
        assert_eq!(tcp_peer_owner(local, peer).unwrap(), Some(SocketOwner { uid, held: true }));
        // The accepted end is not the peer: asking for a tuple nobody has finds nothing.
        let nobody = SocketAddr::new(peer.ip(), 1);
        assert_eq!(tcp_peer_owner(local, nobody).unwrap(), None);
        // Closed by its process: no longer held.
        drop(client);
        let owner = tcp_peer_owner(local, peer).unwrap();
        assert!(owner.is_none_or(|o| !o.held), "{owner:?}");
    }

    #[test]
    fn users_by_name() {
        assert_eq!(user_id("root").unwrap(), Some(0));
        assert_eq!(user_id("no-such-user-vmpls").unwrap(), None);
    }
}
