//! Hand-made Ethernet frames, written onto a lab interface with an AF_PACKET socket:
//! malformed label stacks, bad IP headers, anything a test wants a router to see.
//!
//! The builders here make well-formed pieces ([`mpls_entry`], [`ipv4_udp`],
//! [`ethernet`]); a test breaks them on purpose afterwards (cuts the frame, flips a
//! checksum byte, clears the bottom-of-stack bit).

use std::io;
use std::mem::{size_of, zeroed};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, bail};

use crate::netns;

/// Ethertype of MPLS unicast.
pub const ETHERTYPE_MPLS: u16 = 0x8847;
/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// An Ethernet frame: `dst`, `src`, `ethertype`, then `payload` (no padding, no FCS:
/// veth carries frames of any length).
pub fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// One MPLS label stack entry (RFC 3032): 20-bit label, 3-bit traffic class,
/// bottom-of-stack bit, TTL.
pub fn mpls_entry(label: u32, tc: u8, bottom: bool, ttl: u8) -> [u8; 4] {
    let word = (label & 0xf_ffff) << 12 | u32::from(tc & 7) << 9 | u32::from(bottom) << 8 | u32::from(ttl);
    word.to_be_bytes()
}

/// An IPv4 packet (20-byte header, no options, DF clear, valid header checksum)
/// carrying a UDP datagram with `payload` (UDP checksum 0: none).
pub fn ipv4_udp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ttl: u8,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = u16::try_from(20 + udp_len).unwrap_or(u16::MAX);
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[4..6].copy_from_slice(&0x5a5au16.to_be_bytes());
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = vmpls_wire::checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&src_port.to_be_bytes());
    p.extend_from_slice(&dst_port.to_be_bytes());
    p.extend_from_slice(&u16::try_from(udp_len).unwrap_or(u16::MAX).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

fn raw_socket() -> io::Result<OwnedFd> {
    // Protocol 0: this socket receives nothing, it only sends.
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh, valid descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(ifname: &str) -> anyhow::Result<libc::ifreq> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        bail!("bad interface name {ifname:?}");
    }
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn ifindex(fd: &OwnedFd, ifname: &str) -> anyhow::Result<i32> {
    let mut req = ifreq(ifname)?;
    // SAFETY: SIOCGIFINDEX reads the name and writes the index into `req`, which is a
    // valid, writable ifreq.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFINDEX, &mut req) } != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("no interface {ifname}"));
    }
    // SAFETY: SIOCGIFINDEX filled the ifindex member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_ifindex })
}

fn mac_here(ifname: &str) -> anyhow::Result<[u8; 6]> {
    let fd = raw_socket().context("opening an AF_PACKET socket (needs root)")?;
    let mut req = ifreq(ifname)?;
    // SAFETY: SIOCGIFHWADDR reads the name and writes a sockaddr into `req`, which is a
    // valid, writable ifreq.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("no interface {ifname}"));
    }
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *d as u8;
    }
    Ok(mac)
}

/// The MAC address of interface `ifname` in the namespace `ns`.
pub fn interface_mac(ns: &str, ifname: &str) -> anyhow::Result<[u8; 6]> {
    netns::in_netns(ns, || mac_here(ifname))?
}

fn send_here(ifname: &str, frames: &[Vec<u8>]) -> anyhow::Result<usize> {
    let fd = raw_socket().context("opening an AF_PACKET socket (needs root)")?;
    let index = ifindex(&fd, ifname)?;
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_ifindex = index;
    sll.sll_halen = 6;
    for (n, frame) in frames.iter().enumerate() {
        if frame.len() < 14 {
            bail!("frame {n} is {} bytes, shorter than an Ethernet header", frame.len());
        }
        // SAFETY: `frame` is valid for reading frame.len() bytes and `sll` is a valid
        // sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::sendto(
                fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("sending frame {n} ({} bytes) on {ifname}", frame.len()));
        }
    }
    Ok(frames.len())
}

/// Writes `frames` (whole Ethernet frames, at least 14 bytes each) onto interface
/// `ifname` in namespace `ns`, as they are; the peer of a veth receives them.
/// Returns how many were sent.
pub fn send_frames(ns: &str, ifname: &str, frames: &[Vec<u8>]) -> anyhow::Result<usize> {
    netns::in_netns(ns, || send_here(ifname, frames))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_label_entries() {
        assert_eq!(mpls_entry(1002, 0, true, 63), [0x00, 0x3e, 0xa1, 0x3f]);
        assert_eq!(mpls_entry(13, 7, false, 0), [0x00, 0x00, 0xde, 0x00]);
        assert_eq!(mpls_entry(0xfffff, 0, false, 255), [0xff, 0xff, 0xf0, 0xff]);
    }

    #[test]
    fn builds_valid_ipv4_udp() {
        let p = ipv4_udp(Ipv4Addr::new(198, 18, 1, 2), Ipv4Addr::new(198, 18, 2, 2), 64, 1000, 2000, b"abcd");
        assert_eq!(p.len(), 32);
        assert!(vmpls_wire::checksum::verify(&p[..20]));
        assert_eq!(u16::from_be_bytes([p[2], p[3]]), 32);
        assert_eq!(u16::from_be_bytes([p[24], p[25]]), 12);
        let f = ethernet([1; 6], [2; 6], ETHERTYPE_MPLS, &p);
        assert_eq!(&f[12..14], &[0x88, 0x47]);
        assert_eq!(f.len(), 46);
    }
}
