//! What IPv4 and IPv6 headers share, read before it is known which of the two a buffer
//! holds: after the bottom label is popped, in a packet quoted by an ICMP error, or to
//! decide cheaply whether a frame is worth a closer look.
//!
//! ```text
//!        0       4       8              16                      32
//! IPv4: | Ver=4 | IHL   | DSCP      |ECN| Total length          |
//!       | ...   (byte 9: Protocol)                            ...
//! IPv6: | Ver=6 | Traffic class |    Flow label                 |
//!       |           (DSCP, ECN) |                               |
//!       | Payload length        | Next header   | Hop limit     |
//! ```
//!
//! These read single fields and check only that the bytes they read are there (never a
//! panic); they validate nothing else. [`ipv4::Packet::new_checked`] and
//! [`ipv6::Packet::new_checked`] validate a whole header.

use crate::ethernet::EtherType;
use crate::{ipv4, ipv6};

/// The IP version of a packet, from the high nibble of its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// 4.
    Ipv4,
    /// 6.
    Ipv6,
}

impl Version {
    /// The version of the packet at the start of `data`; `None` for an empty buffer or a
    /// version other than 4 and 6.
    #[inline]
    pub fn of_packet(data: &[u8]) -> Option<Version> {
        match data.first()? >> 4 {
            4 => Some(Version::Ipv4),
            6 => Some(Version::Ipv6),
            _ => None,
        }
    }

    /// The EtherType of a frame carrying this version.
    #[inline]
    pub const fn ethertype(self) -> EtherType {
        match self {
            Version::Ipv4 => EtherType::Ipv4,
            Version::Ipv6 => EtherType::Ipv6,
        }
    }
}

/// The DSCP (6 bits) of the IPv4 or IPv6 header at the start of `data`: the high bits of
/// IPv4's second byte, of IPv6's traffic class. `None` when `data` is neither or shorter
/// than two bytes.
#[inline]
pub fn dscp(data: &[u8]) -> Option<u8> {
    let [b0, b1] = *data.first_chunk::<2>()?;
    match Version::of_packet(data)? {
        Version::Ipv4 => Some(b1 >> 2),
        Version::Ipv6 => Some(((b0 & 0x0f) << 2) | (b1 >> 6)),
    }
}

/// The protocol of what follows the fixed header at the start of `data`: IPv4's Protocol
/// field, IPv6's Next Header (which may name an extension header). `None` when `data` is
/// neither or ends before that field.
#[inline]
pub fn protocol(data: &[u8]) -> Option<u8> {
    match Version::of_packet(data)? {
        Version::Ipv4 => data.get(ipv4::field::PROTOCOL).copied(),
        Version::Ipv6 => data.get(ipv6::field::NXT_HDR).copied(),
    }
}

/// The source and destination ports at the start of `l4`, a TCP or UDP header: both keep
/// them in their first four bytes. `None` when `l4` is shorter than that; nothing else is
/// checked (a flow hash needs the ports of a datagram cut short, too).
#[inline]
pub fn ports(l4: &[u8]) -> Option<(u16, u16)> {
    let [s0, s1, d0, d1] = *l4.first_chunk::<4>()?;
    Some((u16::from_be_bytes([s0, s1]), u16::from_be_bytes([d0, d1])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::protocol::{ICMP, IPV6_ICMP};

    // The first 10 bytes of the IPv4 header of `ping -Q 0xb9 -t 17 198.18.1.2`, captured
    // with an AF_PACKET socket on a veth pair between two namespaces (the packet under the
    // labels of mpls.rs's MPLS_FRAME): TOS 0xb9 = DSCP 46 (EF) << 2 | ECN 1, protocol 1.
    static IPV4_HEAD: [u8; 10] = [0x45, 0xb9, 0x00, 0x54, 0xa5, 0x4b, 0x40, 0x00, 0x11, 0x01];

    // The first 8 bytes of the IPv6 header of `ping -6 -c1 -Q 0xb9 -t 17 2001:db8:1::2`,
    // captured the same way (ipv6.rs's ECHO_FRAME): traffic class 0xb9 = DSCP 46 << 2 |
    // ECN 1, flow label 0xee041, payload length 64, next header 58 (ICMPv6), hop limit 17.
    static IPV6_HEAD: [u8; 8] = [0x6b, 0x9e, 0xe0, 0x41, 0x00, 0x40, 0x3a, 0x11];

    #[test]
    fn version_of_captured_headers() {
        assert_eq!(Version::of_packet(&IPV4_HEAD), Some(Version::Ipv4));
        assert_eq!(Version::of_packet(&IPV6_HEAD), Some(Version::Ipv6));
        assert_eq!(Version::of_packet(&[]), None);
        assert_eq!(Version::of_packet(&[0x50]), None);
        assert_eq!(Version::Ipv4.ethertype(), EtherType::Ipv4);
        assert_eq!(Version::Ipv6.ethertype(), EtherType::Ipv6);
    }

    #[test]
    fn dscp_agrees_with_the_full_views() {
        assert_eq!(dscp(&IPV4_HEAD), Some(46));
        assert_eq!(dscp(&IPV4_HEAD), Some(ipv4::Packet::new_unchecked(&IPV4_HEAD[..]).dscp()));
        assert_eq!(dscp(&IPV6_HEAD), Some(46));
        assert_eq!(dscp(&IPV6_HEAD), Some(ipv6::Packet::new_unchecked(&IPV6_HEAD[..]).traffic_class() >> 2));
        assert_eq!(dscp(&IPV4_HEAD[..1]), None);
        assert_eq!(dscp(&[0x00, 0xff]), None);
    }

    #[test]
    fn protocol_of_captured_headers() {
        assert_eq!(protocol(&IPV4_HEAD), Some(ICMP));
        assert_eq!(protocol(&IPV6_HEAD), Some(IPV6_ICMP));
        // Cut before the field.
        assert_eq!(protocol(&IPV4_HEAD[..9]), None);
        assert_eq!(protocol(&IPV6_HEAD[..6]), None);
    }

    #[test]
    fn ports_of_captured_headers() {
        // The UDP header of ipv6_ext.rs's first fragment (48814 -> 4000), and the TCP
        // header of tcp.rs's captured SYN (40001 -> 5001).
        let udp = [0xbe, 0xae, 0x0f, 0xa0, 0x05, 0x6c, 0x65, 0x87];
        assert_eq!(ports(&udp), Some((48814, 4000)));
        assert_eq!(ports(&udp[..4]), Some((48814, 4000)));
        assert_eq!(ports(&udp[..3]), None);
        assert_eq!(ports(&[]), None);
        let syn = [0x9c, 0x41, 0x13, 0x89, 0xf3, 0xed, 0x70, 0x59];
        assert_eq!(ports(&syn), Some((40001, 5001)));
    }

    #[test]
    fn no_panic_on_any_prefix() {
        for head in [&IPV4_HEAD[..], &IPV6_HEAD[..]] {
            for len in 0..=head.len() {
                let _ = (Version::of_packet(&head[..len]), dscp(&head[..len]), protocol(&head[..len]));
            }
        }
    }
}
