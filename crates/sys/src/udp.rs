//! UDP with segmentation offload: one `sendmsg` of many datagrams (`UDP_SEGMENT`), one
//! `recvmsg` of a coalesced train (`UDP_GRO`), as an MPLS-in-UDP tunnel uses them.

use std::io::{self, IoSlice};
use std::mem::{size_of, zeroed};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

/// `UDP_SEGMENT` (linux/udp.h): the segment size of a GSO send.
pub const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (linux/udp.h): coalesce received datagrams; each read says the segment size.
pub const UDP_GRO: libc::c_int = 104;

/// Sends the bytes of `bufs` (gathered) on connected socket `fd`, non-blocking: one
/// datagram, or with `segment`, `UDP_SEGMENT` datagrams of `segment` bytes (the last may
/// be shorter). Returns the bytes sent.
pub fn send_segments(fd: impl AsFd, bufs: &[IoSlice<'_>], segment: Option<usize>) -> io::Result<usize> {
    // Room for one cmsghdr with a u16, aligned for cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    // IoSlice is ABI-compatible with iovec; sendmsg only reads through it.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len() as _;
    if let Some(seg) = segment {
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg_control` points at `control` (32 bytes, 8-aligned), which holds
        // one cmsghdr and a u16 (`space` bytes); CMSG_FIRSTHDR is therefore non-null and
        // CMSG_DATA within the buffer.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
        }
    }
    // SAFETY: `msg` points at `bufs` (borrowed for the call, valid for reads of their
    // lengths) and at `control`, both live until the call returns.
    let r = unsafe { libc::sendmsg(fd.as_fd().as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r as usize) }
}

/// What [`recv_gro`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Bytes read.
    pub len: usize,
    /// The size of the datagrams coalesced into them (`len` when not coalesced).
    pub segment: usize,
    /// Where they came from.
    pub from: Option<IpAddr>,
    /// The datagram was longer than `buf` (`MSG_TRUNC`).
    pub truncated: bool,
}

/// Receives one datagram, or with `UDP_GRO` on, one coalesced train, into `buf`,
/// non-blocking.
pub fn recv_gro(fd: impl AsFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: all-zero sockaddr_storage and msghdr are valid.
    let mut from: libc::sockaddr_storage = unsafe { zeroed() };
    let mut control = [0u64; 8];
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&raw mut from).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>() as _;
    // SAFETY: every pointer in `msg` is valid for writes of the lengths given, for the
    // duration of the call.
    let n = unsafe { libc::recvmsg(fd.as_fd().as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = n as usize;
    let truncated = msg.msg_flags & libc::MSG_TRUNC != 0;
    let mut segment = len;
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`; the CMSG macros walk
    // within them, and a UDP_GRO message carries an int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                if v > 0 {
                    segment = v as usize;
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let from = match libc::c_int::from(from.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { &*(&raw const from).cast::<libc::sockaddr_in>() };
            Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { &*(&raw const from).cast::<libc::sockaddr_in6>() };
            Some(IpAddr::from(a.sin6_addr.s6_addr))
        }
        _ => None,
    };
    Ok(Received { len, segment, from, truncated })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn segments_sent_in_one_call_arrive_as_datagrams_of_that_size() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let (a, b) = ([1u8; 100], [2u8; 50]);
        assert_eq!(send_segments(&tx, &[IoSlice::new(&a), IoSlice::new(&b)], Some(100)).unwrap(), 150);
        rx.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 200];
        let mut got = Vec::new();
        while got.len() < 2 {
            if !crate::wait_readable(&rx, std::time::Duration::from_secs(1)) {
                break;
            }
            let r = recv_gro(&rx, &mut buf).unwrap();
            assert_eq!(r.from, Some(IpAddr::from([127, 0, 0, 1])));
            got.push((r.len, buf[0]));
        }
        assert_eq!(got, [(100, 1), (50, 2)]);
    }
}
