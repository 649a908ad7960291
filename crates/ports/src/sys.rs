//! The syscalls under the ports. Every `unsafe` block of the crate is here, each small and
//! with a `// SAFETY:` comment; the rest of the crate sees safe functions.

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use vmpls_dataplane::Packet;
use vmpls_wire::virtio_net;

/// Most messages one `recvmmsg`/`sendmmsg` call moves.
pub const BATCH: usize = 64;

// From <linux/if_packet.h>; defined here so we do not depend on which libc version
// exports them.
/// `PACKET_ADD_MEMBERSHIP` socket option.
pub const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
/// `PACKET_VNET_HDR` socket option: every frame is preceded by a `virtio_net_hdr`.
pub const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_IGNORE_OUTGOING` socket option: do not loop our own transmitted frames back.
pub const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_MR_PROMISC` membership type: receive every frame (promiscuous mode while the
/// socket is open).
pub const PACKET_MR_PROMISC: libc::c_ushort = 1;
/// `PACKET_MR_ALLMULTI` membership type: receive all multicast.
pub const PACKET_MR_ALLMULTI: libc::c_ushort = 2;
/// `sll_pkttype` of a frame this host transmitted.
pub const PACKET_OUTGOING: u8 = 4;

/// `struct packet_mreq` from <linux/if_packet.h>.
#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// A valid Linux interface name as a C string: 1 to 15 bytes, no NUL, no '/'.
pub fn ifname_cstring(ifname: &str) -> Option<CString> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('/') {
        return None;
    }
    CString::new(ifname).ok()
}

/// The index of an interface in the calling thread's network namespace.
pub fn if_nametoindex(ifname: &str) -> Option<u32> {
    let name = ifname_cstring(ifname)?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// A raw, non-blocking, close-on-exec packet socket, not yet bound. It is created with
/// protocol 0, so it receives nothing (from any interface) until [`bind_to_ifindex`] sets
/// `ETH_P_ALL` for one interface.
pub fn packet_socket() -> io::Result<OwnedFd> {
    let proto = 0;
    // SAFETY: socket() takes no pointers; the result is checked before use.
    let fd = check(unsafe {
        libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto)
    })?;
    // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` points to a live `T` of `size_of::<T>()` bytes for the duration of the
    // call; the kernel only reads it.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (val as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Sets an integer socket option.
pub fn set_int(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> io::Result<()> {
    setsockopt(fd, level, opt, &val)
}

/// `PACKET_STATISTICS`: frames received and dropped since the last read (the kernel
/// resets both on every read).
pub const PACKET_STATISTICS: libc::c_int = 6;

/// Frames the kernel dropped for this packet socket since the last call (its receive
/// queue was full: the router fell behind), from `PACKET_STATISTICS` (`tp_drops`). The
/// kernel resets the count on every read.
pub fn packet_drops(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // struct tpacket_stats { unsigned int tp_packets; unsigned int tp_drops; }
    let mut stats = [0u32; 2];
    let mut len = mem::size_of_val(&stats) as libc::socklen_t;
    // SAFETY: `stats` and `len` are live for the call and `len` is the size of `stats`;
    // the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_STATISTICS,
            stats.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok(u64::from(stats[1]))
}

/// Adds a packet-socket membership (`PACKET_MR_*`) on `ifindex`.
pub fn add_membership(fd: BorrowedFd<'_>, ifindex: u32, mr_type: libc::c_ushort) -> io::Result<()> {
    let mreq = PacketMreq { mr_ifindex: ifindex as libc::c_int, mr_type, mr_alen: 0, mr_address: [0; 8] };
    setsockopt(fd, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
}

/// Binds a packet socket to one interface, for every protocol.
pub fn bind_to_ifindex(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `sll` is a live sockaddr_ll and the length passed is its size.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// What the interface ioctls tell about an interface.
#[derive(Debug, Clone, Copy)]
pub struct IfDetails {
    /// `IFF_*` flags.
    pub flags: libc::c_int,
    /// `ARPHRD_*` hardware type.
    pub hw_type: u16,
    /// Hardware address (the first 6 bytes).
    pub mac: [u8; 6],
    /// MTU.
    pub mtu: u32,
}

fn ifreq_ioctl(fd: BorrowedFd<'_>, name: &CString, req: libc::c_ulong) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data (a name and a union of plain data); zeroes are valid.
    let mut ifr: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `ifr` is a live, NUL-terminated (name shorter than IFNAMSIZ, rest zero)
    // ifreq; the SIOCGIF* requests used here write only inside it.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, &mut ifr as *mut libc::ifreq) })?;
    Ok(ifr)
}

/// Flags, hardware address and MTU of `name`, through `fd` (any socket).
pub fn if_details(fd: BorrowedFd<'_>, name: &CString) -> io::Result<IfDetails> {
    let ifr = ifreq_ioctl(fd, name, libc::SIOCGIFFLAGS)?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags } as u16 as libc::c_int;
    let ifr = ifreq_ioctl(fd, name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member of the union.
    let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, src) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *dst = *src as u8;
    }
    let ifr = ifreq_ioctl(fd, name, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    Ok(IfDetails { flags, hw_type: hw.sa_family, mac, mtu: mtu.max(0) as u32 })
}

/// The arrays `recvmmsg`/`sendmmsg` work on, allocated once per port and reused: each
/// message has two iovecs, [10-byte virtio-net header][frame].
pub struct MmsgBatch {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<[libc::iovec; 2]>,
    hdrs: Vec<[u8; virtio_net::HEADER_LEN]>,
    addrs: Vec<libc::sockaddr_ll>,
}

// SAFETY: the raw pointers inside `msgs` and `iovs` point only into this batch's own heap
// arrays and into the packets of the call in progress; they are rewritten before every
// syscall and never dereferenced by Rust code, so the batch may move between threads.
unsafe impl Send for MmsgBatch {}

impl MmsgBatch {
    /// Arrays for [`BATCH`] messages.
    pub fn new() -> MmsgBatch {
        // SAFETY: mmsghdr, iovec and sockaddr_ll are plain C data (integers and raw
        // pointers); all zeroes (null pointers, zero lengths) is a valid value.
        let (msg, iov, addr) = unsafe {
            (mem::zeroed::<libc::mmsghdr>(), mem::zeroed::<libc::iovec>(), mem::zeroed::<libc::sockaddr_ll>())
        };
        MmsgBatch {
            msgs: vec![msg; BATCH],
            iovs: vec![[iov; 2]; BATCH],
            hdrs: vec![[0; virtio_net::HEADER_LEN]; BATCH],
            addrs: vec![addr; BATCH],
        }
    }

    /// Points message `i` at its header, `frame` (`len` bytes) and, for receive, its
    /// address slot.
    fn prepare(&mut self, i: usize, frame: *mut libc::c_void, len: usize, with_addr: bool) {
        self.iovs[i][0] =
            libc::iovec { iov_base: self.hdrs[i].as_mut_ptr().cast(), iov_len: virtio_net::HEADER_LEN };
        self.iovs[i][1] = libc::iovec { iov_base: frame, iov_len: len };
        let h = &mut self.msgs[i].msg_hdr;
        if with_addr {
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        } else {
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
        }
        h.msg_iov = self.iovs[i].as_mut_ptr();
        h.msg_iovlen = 2;
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        h.msg_flags = 0;
        self.msgs[i].msg_len = 0;
    }

    fn recvmmsg(&mut self, fd: BorrowedFd<'_>, n: usize) -> io::Result<usize> {
        // SAFETY: messages 0..n were prepared just before this call: every pointer in them
        // points into this batch's arrays or into a receive area that the caller holds a
        // `&mut` borrow of for the duration of this call, with the lengths given.
        let r = check(unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        })?;
        Ok(r as usize)
    }

    /// Receives up to `pkts.len()` (at most [`BATCH`]) frames into the receive areas of
    /// `pkts`, message `i` into `pkts[i]`. Returns how many messages were filled; inspect
    /// them with [`MmsgBatch::received`].
    pub fn recv(&mut self, fd: BorrowedFd<'_>, pkts: &mut [Packet]) -> io::Result<usize> {
        let n = pkts.len().min(BATCH);
        for (i, p) in pkts[..n].iter_mut().enumerate() {
            let area = p.receive_area();
            let (ptr, len) = (area.as_mut_ptr().cast(), area.len());
            self.prepare(i, ptr, len, true);
        }
        self.recvmmsg(fd, n)
    }

    /// Reads and throws away up to `n` waiting frames (when no buffer is free), each
    /// truncated to its virtio-net header (the frame iovec is empty). Returns how many.
    pub fn discard(&mut self, fd: BorrowedFd<'_>, n: usize) -> io::Result<usize> {
        let n = n.min(BATCH);
        for i in 0..n {
            self.prepare(i, std::ptr::null_mut(), 0, true);
        }
        self.recvmmsg(fd, n)
    }

    /// What message `i` of the last receive holds: (bytes including the virtio-net
    /// header, `msg_flags`, `sll_pkttype`, the header).
    pub fn received(&self, i: usize) -> (usize, libc::c_int, u8, &[u8; virtio_net::HEADER_LEN]) {
        (
            self.msgs[i].msg_len as usize,
            self.msgs[i].msg_hdr.msg_flags,
            self.addrs[i].sll_pkttype,
            &self.hdrs[i],
        )
    }

    /// Sends `pkts` (at most [`BATCH`]), each with its `offload` as virtio-net header, to
    /// the interface the socket is bound to. Returns how many the kernel took; an error
    /// is the first message's.
    pub fn send(&mut self, fd: BorrowedFd<'_>, pkts: &[Packet]) -> io::Result<usize> {
        let n = pkts.len().min(BATCH);
        for (i, p) in pkts[..n].iter().enumerate() {
            p.offload.emit(&mut virtio_net::Header::new_unchecked(&mut self.hdrs[i][..]));
            let frame = p.frame();
            // The kernel only reads through this pointer on send.
            let (ptr, len) = (frame.as_ptr().cast_mut().cast(), frame.len());
            self.prepare(i, ptr, len, false);
        }
        // SAFETY: messages 0..n were prepared just above: every pointer in them points into
        // this batch's arrays or into the frames of `pkts`, which the caller borrows for the
        // duration of this call; the kernel only reads the frames.
        let r = check(unsafe {
            libc::sendmmsg(fd.as_raw_fd(), self.msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT)
        })?;
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked_before_the_kernel_sees_them() {
        assert!(ifname_cstring("").is_none());
        assert!(ifname_cstring("a/b").is_none());
        assert!(ifname_cstring("a\0b").is_none());
        assert!(ifname_cstring("0123456789abcdef").is_none());
        assert!(ifname_cstring("0123456789abcde").is_some());
    }

    #[test]
    fn loopback_has_an_index() {
        assert!(if_nametoindex("lo").is_some());
        assert!(if_nametoindex("vmpls-none0").is_none());
    }
}
