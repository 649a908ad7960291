//! `AF_PACKET` sockets: open, bind to one interface, send and receive single frames, and
//! the `SOL_PACKET` options vmpls uses. What this kernel accepts on them is in
//! research/kernel-io.md. Batched I/O (`recvmmsg`/`sendmmsg`) and the packet-mmap rings
//! live with the ports that use them.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::net::addr::{SocketAddrArg, SocketAddrLen, SocketAddrOpaque};
use rustix::net::{AddressFamily, SocketFlags, SocketType};

use crate::sockopt;

// From <linux/if_packet.h>; defined here so we do not depend on which libc version
// exports them.
/// `PACKET_ADD_MEMBERSHIP` socket option.
pub const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
/// `PACKET_RX_RING` socket option.
pub const PACKET_RX_RING: libc::c_int = 5;
/// `PACKET_STATISTICS` socket option: frames received and dropped since the last read.
pub const PACKET_STATISTICS: libc::c_int = 6;
/// `PACKET_AUXDATA` socket option: each received frame comes with a `tpacket_auxdata`
/// control message (which holds the 802.1Q tag the kernel took out of the frame).
pub const PACKET_AUXDATA: libc::c_int = 8;
/// `PACKET_VERSION` socket option.
pub const PACKET_VERSION: libc::c_int = 10;
/// `PACKET_TX_RING` socket option.
pub const PACKET_TX_RING: libc::c_int = 13;
/// `PACKET_LOSS` socket option: skip malformed frames in the TX ring.
pub const PACKET_LOSS: libc::c_int = 14;
/// `PACKET_VNET_HDR` socket option: every frame is preceded by a `virtio_net_hdr`.
pub const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_TX_HAS_OFF` socket option: TX ring frames say where their data starts.
pub const PACKET_TX_HAS_OFF: libc::c_int = 19;
/// `PACKET_IGNORE_OUTGOING` socket option: do not loop our own transmitted frames back.
pub const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_MR_PROMISC` membership type: receive every frame (promiscuous mode while the
/// socket is open).
pub const PACKET_MR_PROMISC: libc::c_ushort = 1;
/// `PACKET_MR_ALLMULTI` membership type: receive all multicast.
pub const PACKET_MR_ALLMULTI: libc::c_ushort = 2;
/// `sll_pkttype` of a frame this host transmitted.
pub const PACKET_OUTGOING: u8 = 4;
/// `TPACKET_V2` ring version.
pub const TPACKET_V2: libc::c_int = 1;
/// `TPACKET_V3` ring version.
pub const TPACKET_V3: libc::c_int = 2;
/// `ETH_P_ALL`: every protocol.
pub const ETH_P_ALL: u16 = libc::ETH_P_ALL as u16;

/// Opens a raw, close-on-exec packet socket, not yet bound. It is created with protocol
/// 0, so it receives nothing (from any interface) until [`bind`] names a protocol for
/// one interface; unbound, it can still send with [`send_to`].
pub fn socket(nonblocking: bool) -> io::Result<OwnedFd> {
    let mut flags = SocketFlags::CLOEXEC;
    if nonblocking {
        flags |= SocketFlags::NONBLOCK;
    }
    Ok(rustix::net::socket_with(AddressFamily::PACKET, SocketType::RAW, flags, None)?)
}

/// A link-layer address (`struct sockaddr_ll`): an interface and a protocol.
#[derive(Clone, Copy)]
pub struct LinkAddr(libc::sockaddr_ll);

impl LinkAddr {
    /// Interface `ifindex`, EtherType `protocol` (host order; [`ETH_P_ALL`] for every
    /// protocol, 0 for none), with a 6-byte hardware address length.
    pub fn new(ifindex: u32, protocol: u16) -> LinkAddr {
        // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = ifindex as libc::c_int;
        sll.sll_halen = 6;
        LinkAddr(sll)
    }
}

impl std::fmt::Debug for LinkAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkAddr")
            .field("ifindex", &self.0.sll_ifindex)
            .field("protocol", &u16::from_be(self.0.sll_protocol))
            .finish()
    }
}

// SAFETY: `with_sockaddr` passes a pointer to the live `sockaddr_ll` inside `self` and its
// exact size, a valid AF_PACKET address for the calls that read a `sockaddr`.
unsafe impl SocketAddrArg for LinkAddr {
    unsafe fn with_sockaddr<R>(&self, f: impl FnOnce(*const SocketAddrOpaque, SocketAddrLen) -> R) -> R {
        f((&raw const self.0).cast(), mem::size_of::<libc::sockaddr_ll>() as SocketAddrLen)
    }
}

/// Binds a packet socket to interface `ifindex` for `protocol` (host order;
/// [`ETH_P_ALL`]: every protocol).
pub fn bind(fd: impl AsFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    Ok(rustix::net::bind(fd, &LinkAddr::new(ifindex, protocol))?)
}

/// Sends one frame as it is onto interface `ifindex` (the kernel decides whether its
/// length is acceptable). Returns the bytes sent.
pub fn send_to(fd: impl AsFd, ifindex: u32, frame: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::sendto(fd, frame, rustix::net::SendFlags::empty(), &LinkAddr::new(ifindex, 0))?)
}

/// Sends one frame on a bound packet socket. Returns the bytes sent.
pub fn send(fd: impl AsFd, frame: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(fd, frame, rustix::net::SendFlags::empty())?)
}

/// Receives one frame into `buf`: (bytes, `sll_pkttype`). `buf` shorter than the frame
/// gets its start.
pub fn recv_from(fd: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, u8)> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut from: libc::sockaddr_ll = unsafe { mem::zeroed() };
    let mut from_len = mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `buf` is valid for writing buf.len() bytes; `from` and `from_len` are a live,
    // writable sockaddr_ll and its size, so the kernel writes within them.
    let n = unsafe {
        libc::recvfrom(
            fd.as_fd().as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
            (&raw mut from).cast(),
            &mut from_len,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, from.sll_pkttype))
}

/// `struct packet_mreq` from <linux/if_packet.h>.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

// SAFETY: integers and a byte array, no padding (4 + 2 + 2 + 8 bytes).
unsafe impl sockopt::OptVal for PacketMreq {}

/// Adds a packet-socket membership (`PACKET_MR_*`) on `ifindex`.
pub fn add_membership(fd: impl AsFd, ifindex: u32, mr_type: libc::c_ushort) -> io::Result<()> {
    let mreq = PacketMreq { mr_ifindex: ifindex as libc::c_int, mr_type, ..PacketMreq::default() };
    sockopt::set(fd, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
}

/// Frames the kernel dropped for this packet socket since the last call (its receive
/// queue was full), from `PACKET_STATISTICS` (`tp_drops`). The kernel resets the count
/// on every read.
pub fn drops(fd: impl AsFd) -> io::Result<u64> {
    // struct tpacket_stats { unsigned int tp_packets; unsigned int tp_drops; }
    let stats: [u32; 2] = sockopt::get(fd, libc::SOL_PACKET, PACKET_STATISTICS)?;
    Ok(u64::from(stats[1]))
}

/// Sets an integer `SOL_PACKET` option.
pub fn set_option(fd: impl AsFd, opt: libc::c_int, val: libc::c_int) -> io::Result<()> {
    sockopt::set_int(fd, libc::SOL_PACKET, opt, val)
}

/// Attaches a classic BPF filter (`SO_ATTACH_FILTER`): frames it rejects never reach the
/// socket.
pub fn attach_filter(fd: impl AsFd, program: &[libc::sock_filter]) -> io::Result<()> {
    let len = u16::try_from(program.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
    // SAFETY: `fprog` is live for the call and points at `program`, `len` instructions
    // that the caller borrows for the call; the kernel copies them and only reads.
    let r = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const fprog).cast(),
            mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_socket_sends_on_loopback_and_sees_its_own_frame() {
        if !crate::process::is_root() {
            return;
        }
        let lo = crate::if_nametoindex("lo").unwrap();
        let rx = socket(false).unwrap();
        rustix::net::sockopt::set_socket_timeout(
            &rx,
            rustix::net::sockopt::Timeout::Recv,
            Some(std::time::Duration::from_millis(500)),
        )
        .unwrap();
        bind(&rx, lo, 0x88b5).unwrap();
        let tx = socket(true).unwrap();
        let mut frame = vec![0u8; 60];
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        frame[20] = 0x42;
        assert_eq!(send_to(&tx, lo, &frame).unwrap(), 60);
        let mut buf = [0u8; 128];
        let (n, _) = recv_from(&rx, &mut buf).unwrap();
        assert_eq!(&buf[..n], &frame[..]);
        assert_eq!(drops(&rx).unwrap(), 0);
    }
}
