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

/// Sets a socket option whose value is a plain C struct (or integer) `T`.
pub fn setsockopt<T>(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
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

/// `PACKET_AUXDATA`: each received frame comes with a `tpacket_auxdata` control message,
/// which holds the 802.1Q tag the kernel took out of the frame.
pub const PACKET_AUXDATA: libc::c_int = 8;
/// `tp_status` bit: `tp_vlan_tci` holds a tag.
const TP_STATUS_VLAN_VALID: u32 = 0x10;
/// `tp_status` bit: `tp_vlan_tpid` holds the tag's EtherType.
const TP_STATUS_VLAN_TPID_VALID: u32 = 0x40;

/// Room for one `cmsghdr` + `tpacket_auxdata` (16 + 20 bytes), and some to spare.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct ControlBuf([u8; 64]);

/// The 802.1Q tag the kernel took out of a received frame: (TPID, TCI).
pub type VlanTag = (u16, u16);

/// The VLAN tag in the control messages of one received message (`control` as the kernel
/// filled it): from a `SOL_PACKET`/`PACKET_AUXDATA` message whose status says it is valid.
/// A plain walk over the bytes (`cmsghdr` = len: usize, level: i32, type: i32, then data
/// at an 8-byte boundary), so malformed lengths end the walk instead of reading beyond it.
fn vlan_tag(control: &[u8]) -> Option<VlanTag> {
    const HDR: usize = mem::size_of::<libc::cmsghdr>();
    const ALIGN: usize = mem::size_of::<usize>();
    let mut off = 0;
    while off + HDR <= control.len() {
        let len = usize::from_ne_bytes(control[off..off + ALIGN].try_into().ok()?);
        let level = i32::from_ne_bytes(control[off + ALIGN..off + ALIGN + 4].try_into().ok()?);
        let kind = i32::from_ne_bytes(control[off + ALIGN + 4..off + ALIGN + 8].try_into().ok()?);
        if len < HDR || off + len > control.len() {
            return None;
        }
        let data = &control[off + HDR..off + len];
        if level == libc::SOL_PACKET && kind == PACKET_AUXDATA && data.len() >= 20 {
            // struct tpacket_auxdata { u32 tp_status, tp_len, tp_snaplen; u16 tp_mac,
            // tp_net, tp_vlan_tci, tp_vlan_tpid; }
            let status = u32::from_ne_bytes(data[0..4].try_into().ok()?);
            if status & TP_STATUS_VLAN_VALID == 0 {
                return None;
            }
            let tci = u16::from_ne_bytes(data[16..18].try_into().ok()?);
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                u16::from_ne_bytes(data[18..20].try_into().ok()?)
            } else {
                0x8100
            };
            return Some((tpid, tci));
        }
        off += len.div_ceil(ALIGN) * ALIGN;
    }
    None
}

/// The arrays `recvmmsg`/`sendmmsg` work on, allocated once per port and reused: each
/// message has two iovecs, [10-byte virtio-net header][frame], and on receive a control
/// buffer for `PACKET_AUXDATA`.
pub struct MmsgBatch {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<[libc::iovec; 2]>,
    hdrs: Vec<[u8; virtio_net::HEADER_LEN]>,
    addrs: Vec<libc::sockaddr_ll>,
    controls: Vec<ControlBuf>,
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
            controls: vec![ControlBuf([0; 64]); BATCH],
        }
    }

    /// Points message `i` at its header, `frame` (`len` bytes) and, for receive, its
    /// address slot and control buffer.
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
        if with_addr {
            h.msg_control = self.controls[i].0.as_mut_ptr().cast();
            h.msg_controllen = mem::size_of::<ControlBuf>();
        } else {
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
        }
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

    /// The 802.1Q tag the kernel took out of message `i` of the last receive, if any
    /// (needs `PACKET_AUXDATA` on the socket).
    pub fn received_vlan(&self, i: usize) -> Option<VlanTag> {
        let len = self.msgs[i].msg_hdr.msg_controllen.min(mem::size_of::<ControlBuf>());
        vlan_tag(&self.controls[i].0[..len])
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

    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let hdr = mem::size_of::<libc::cmsghdr>();
        let len = hdr + data.len();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(data);
        v.resize(len.div_ceil(8) * 8, 0);
        v
    }

    fn auxdata(status: u32, tci: u16, tpid: u16) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&status.to_ne_bytes());
        d.extend_from_slice(&[0; 8]);
        d.extend_from_slice(&[0; 4]);
        d.extend_from_slice(&tci.to_ne_bytes());
        d.extend_from_slice(&tpid.to_ne_bytes());
        d
    }

    #[test]
    fn vlan_tags_come_from_valid_auxdata_only() {
        let tagged = cmsg(libc::SOL_PACKET, PACKET_AUXDATA, &auxdata(0x10 | 0x40 | 1, 100, 0x88a8));
        assert_eq!(vlan_tag(&tagged), Some((0x88a8, 100)));
        let no_tpid = cmsg(libc::SOL_PACKET, PACKET_AUXDATA, &auxdata(0x10, 7, 0));
        assert_eq!(vlan_tag(&no_tpid), Some((0x8100, 7)));
        assert_eq!(vlan_tag(&cmsg(libc::SOL_PACKET, PACKET_AUXDATA, &auxdata(1, 100, 0x8100))), None);
        // Behind another message; then cut short, or with a length running past the end.
        let mut two = cmsg(libc::SOL_SOCKET, 1, &[0; 4]);
        two.extend_from_slice(&tagged);
        assert_eq!(vlan_tag(&two), Some((0x88a8, 100)));
        assert_eq!(vlan_tag(&tagged[..20]), None);
        let mut long = tagged.clone();
        long[..8].copy_from_slice(&1000usize.to_ne_bytes());
        assert_eq!(vlan_tag(&long), None);
        assert_eq!(vlan_tag(&[]), None);
    }

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
