//! Raw IP sockets (ICMP and ICMPv6, as `ping` uses them) and TCP socket details.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, ipproto};

/// A raw, non-blocking, close-on-exec ICMP socket (ICMPv6 if `v6`): send echo requests,
/// receive every ICMP message for this host. Needs `CAP_NET_RAW`.
pub fn icmp_socket(v6: bool) -> io::Result<OwnedFd> {
    let (family, proto) =
        if v6 { (AddressFamily::INET6, ipproto::ICMPV6) } else { (AddressFamily::INET, ipproto::ICMP) };
    Ok(rustix::net::socket_with(
        family,
        SocketType::RAW,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        Some(proto),
    )?)
}

/// Sends `packet` to `dst` on a raw IP socket.
pub fn send_to(fd: impl AsFd, packet: &[u8], dst: IpAddr) -> io::Result<usize> {
    Ok(rustix::net::sendto(fd, packet, SendFlags::empty(), &SocketAddr::new(dst, 0))?)
}

/// Receives one datagram into `buf`: its length and the address it came from.
pub fn recv_from(fd: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, IpAddr)> {
    let (n, _, from) = rustix::net::recvfrom(fd, buf, RecvFlags::empty())?;
    let from = from
        .and_then(|a| SocketAddr::try_from(a).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a datagram without an IP source"))?;
    Ok((n, from.ip()))
}

/// `tcpi_total_retrans` of a TCP socket: the segments it retransmitted.
pub fn tcp_total_retransmits(fd: impl AsFd) -> io::Result<u32> {
    let info: libc::tcp_info = crate::sockopt::get(fd, libc::IPPROTO_TCP, libc::TCP_INFO)?;
    Ok(info.tcpi_total_retrans)
}
