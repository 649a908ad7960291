//! Batched packet-socket I/O: the `recvmmsg`/`sendmmsg` arrays of the AF_PACKET ports, and
//! the VLAN tag in a received frame's `PACKET_AUXDATA`. The rest of the OS layer (sockets,
//! options, interfaces) is `vmpls-sys`.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use vmpls_dataplane::Packet;
use vmpls_sys::packet;
use vmpls_wire::virtio_net;

/// Most messages one `recvmmsg`/`sendmmsg` call moves.
pub const BATCH: usize = 64;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

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
        if level == libc::SOL_PACKET && kind == packet::PACKET_AUXDATA && data.len() >= 20 {
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
        let tagged = cmsg(libc::SOL_PACKET, packet::PACKET_AUXDATA, &auxdata(0x10 | 0x40 | 1, 100, 0x88a8));
        assert_eq!(vlan_tag(&tagged), Some((0x88a8, 100)));
        let no_tpid = cmsg(libc::SOL_PACKET, packet::PACKET_AUXDATA, &auxdata(0x10, 7, 0));
        assert_eq!(vlan_tag(&no_tpid), Some((0x8100, 7)));
        assert_eq!(vlan_tag(&cmsg(libc::SOL_PACKET, packet::PACKET_AUXDATA, &auxdata(1, 100, 0x8100))), None);
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
}
