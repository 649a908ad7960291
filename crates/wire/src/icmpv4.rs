//! ICMP for IPv4 (RFC 792), with the fields vmpls needs as a router: echo, time exceeded,
//! destination unreachable / fragmentation needed (RFC 1191) and the RFC 4884 length field
//! that announces an extension such as the MPLS label stack of RFC 4950.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Identifier          |        Sequence Number        |  echo
//! |    unused     |    Length     |         Next-Hop MTU          |  errors
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Data (echo payload, or the original datagram) ...
//! ```
//!
//! The checksum covers the whole ICMP message, without a pseudo-header.

use crate::checksum;
use crate::icmp_ext;
use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQNO: Field = 6..8;
    pub const UNUSED: usize = 4;
    pub const LENGTH: usize = 5;
    pub const MTU: Field = 6..8;
}

/// Length of the ICMP header (type, code, checksum and the 4 type-specific bytes).
pub const HEADER_LEN: usize = 8;

/// The largest IPv4 datagram every host must accept (RFC 791); RFC 1812 section 4.3.2.3
/// says an ICMP error quotes as much of the original as fits in it.
pub const MIN_MTU: usize = 576;

/// Length of the IPv4 header vmpls puts in front of the ICMP messages it sends.
const IP_HEADER_LEN: usize = 20;

/// The largest ICMP error message without extension: 576 - 20 bytes.
pub const MAX_ERROR_LEN: usize = MIN_MTU - IP_HEADER_LEN;

/// ICMPv4 message types.
pub mod msg_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 12;
}

/// Destination unreachable codes.
pub mod unreachable_code {
    /// Network unreachable.
    pub const NET_UNREACHABLE: u8 = 0;
    /// Host unreachable.
    pub const HOST_UNREACHABLE: u8 = 1;
    /// Protocol unreachable.
    pub const PROTO_UNREACHABLE: u8 = 2;
    /// Port unreachable.
    pub const PORT_UNREACHABLE: u8 = 3;
    /// Fragmentation needed and DF set (RFC 1191: next-hop MTU in bytes 6..8).
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication administratively prohibited (RFC 1812).
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Fragmentation needed and DF set (destination unreachable code 4).
pub const FRAG_NEEDED: u8 = unreachable_code::FRAG_NEEDED;
/// Time to live exceeded in transit (time exceeded code 0).
pub const TTL_EXCEEDED: u8 = 0;

/// True for the message types that report an error (and so must never be answered with an
/// error, RFC 1812 section 4.3.2.7). Unknown types count as errors, to be safe.
pub fn is_error(msg_type: u8) -> bool {
    !matches!(msg_type, msg_type::ECHO_REPLY | msg_type::ECHO_REQUEST | 13..=18)
}

/// A view over an ICMPv4 message.
#[derive(Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer of at least [`HEADER_LEN`] bytes (the whole ICMP message, as delimited
    /// by the IP header).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// The code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }
    /// The identifier of an echo request or reply.
    pub fn echo_ident(&self) -> u16 {
        self.u16_at(field::ECHO_IDENT)
    }
    /// The sequence number of an echo request or reply.
    pub fn echo_seq_no(&self) -> u16 {
        self.u16_at(field::ECHO_SEQNO)
    }
    /// The RFC 4884 length of the original datagram field, in 32-bit words (byte 5);
    /// zero when no extension follows.
    pub fn rfc4884_length(&self) -> u8 {
        self.buffer.as_ref()[field::LENGTH]
    }
    /// The next-hop MTU of a "fragmentation needed" message (RFC 1191).
    pub fn next_hop_mtu(&self) -> u16 {
        self.u16_at(field::MTU)
    }
    /// Everything after the 8-byte header: the echo payload, or the original datagram
    /// (and the extension, if any) of an error.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// The RFC 4884 extension structure of an error message, if its length field announces
    /// one and bytes follow the original datagram field.
    pub fn extension(&self) -> Option<&[u8]> {
        icmp_ext::find_extension(self.data(), self.rfc4884_length(), icmp_ext::LENGTH_UNIT_V4)
    }
    /// True when the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the message type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }
    /// Sets the code.
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v)
    }
    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        self.set_u16_at(field::ECHO_IDENT, v)
    }
    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        self.set_u16_at(field::ECHO_SEQNO, v)
    }
    /// Sets the RFC 4884 length (byte 5) and zeroes the unused byte 4.
    pub fn set_rfc4884_length(&mut self, v: u8) {
        let b = self.buffer.as_mut();
        b[field::UNUSED] = 0;
        b[field::LENGTH] = v;
    }
    /// Sets the next-hop MTU (bytes 6..8).
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        self.set_u16_at(field::MTU, v)
    }
    /// The bytes after the header, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
    /// Computes and writes the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// Writes the echo reply to `request` (a whole ICMP echo request message) into `buf` and
/// returns its length. The reply carries the request's identifier, sequence number and data;
/// its checksum is derived incrementally (RFC 1624) from the request's, so a request that
/// was corrupted in flight yields a reply its sender will also reject. Callers check the
/// request's checksum first if they want to drop such requests here.
///
/// Where the update lands on 0x0000 the reply carries 0xffff, the other ones-complement
/// zero: for a message whose other words all sum to zero (identifier, sequence and data
/// all zero) 0xffff is the only valid checksum, and for any other message both verify the
/// same way. (Found by the `icmpv4` fuzz target twice: 0x0000 made an all-zero request's
/// reply invalid; recomputing the checksum instead made a corrupted request's reply valid.)
///
/// `Err(Malformed)` if `request` is not an echo request with code 0, `Err(Truncated)` if it
/// is shorter than the header or `buf` is shorter than it.
pub fn emit_echo_reply(request: &[u8], buf: &mut [u8]) -> Result<usize> {
    let req = Packet::new_checked(request)?;
    if req.msg_type() != msg_type::ECHO_REQUEST || req.code() != 0 {
        return Err(Error::Malformed);
    }
    let out = buf.get_mut(..request.len()).ok_or(Error::Truncated)?;
    out.copy_from_slice(request);
    let mut reply = Packet::new_unchecked(out);
    let old = u16::from_be_bytes([msg_type::ECHO_REQUEST, 0]);
    let new = u16::from_be_bytes([msg_type::ECHO_REPLY, 0]);
    reply.set_msg_type(msg_type::ECHO_REPLY);
    let c = checksum::update16(req.checksum(), old, new);
    reply.set_checksum(if c == 0 { 0xffff } else { c });
    Ok(request.len())
}

/// The ICMPv4 errors a router sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Time exceeded, TTL exceeded in transit (type 11, code 0).
    TimeExceeded,
    /// Destination unreachable, fragmentation needed and DF set, with the next-hop MTU
    /// (type 3, code 4, RFC 1191).
    FragNeeded {
        /// The MTU of the next hop, in bytes.
        mtu: u16,
    },
    /// Destination unreachable with the given code (type 3).
    Unreachable {
        /// The unreachable code ([`unreachable_code`]).
        code: u8,
    },
}

impl ErrorKind {
    fn type_code(self) -> (u8, u8) {
        match self {
            ErrorKind::TimeExceeded => (msg_type::TIME_EXCEEDED, TTL_EXCEEDED),
            ErrorKind::FragNeeded { .. } => (msg_type::DST_UNREACHABLE, FRAG_NEEDED),
            ErrorKind::Unreachable { code } => (msg_type::DST_UNREACHABLE, code),
        }
    }
}

/// Length of the message [`emit_error`] writes for an original datagram of `original_len`
/// bytes and a received label stack of `n_labels` entries.
pub fn error_len(kind: ErrorKind, original_len: usize, n_labels: usize) -> usize {
    // Every kind has the same 8-byte header; `kind` is kept for symmetry with ICMPv6.
    let _ = kind;
    if n_labels == 0 {
        HEADER_LEN + original_len.min(MAX_ERROR_LEN - HEADER_LEN)
    } else {
        HEADER_LEN + icmp_ext::quote_and_extension_len(n_labels)
    }
}

/// Writes a complete ICMP error message into `buf` and returns its length.
///
/// `original` is the offending IP datagram from its IP header on. Without a label stack
/// the message quotes as much of it as fits in a 576-byte IP datagram (RFC 1812 section
/// 4.3.2.3), which includes the IP header and the first 8 payload bytes that RFC 792 asks
/// for whenever the original is that long. With a label stack (`mpls_stack`: the received
/// label stack entries as raw words, top first), the message follows RFC 4884/4950: the
/// quote is zero-padded or truncated to exactly 128 bytes, byte 5 says 32 (words), and an
/// extension with the MPLS label stack object follows.
///
/// Which packets must not trigger an error (ICMP errors, broadcasts, non-first fragments)
/// is for the caller to decide. `Err(Truncated)` if `buf` is shorter than
/// [`error_len`]; `Err(Malformed)` for a label stack too long for an extension object.
pub fn emit_error(buf: &mut [u8], kind: ErrorKind, original: &[u8], mpls_stack: &[u32]) -> Result<usize> {
    let len = error_len(kind, original.len(), mpls_stack.len());
    let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
    if mpls_stack.is_empty() {
        out[HEADER_LEN..].copy_from_slice(&original[..len - HEADER_LEN]);
    } else {
        icmp_ext::emit_quote_and_extension(&mut out[HEADER_LEN..], original, mpls_stack)?;
    }
    let mut packet = Packet::new_unchecked(out);
    let (t, c) = kind.type_code();
    packet.set_msg_type(t);
    packet.set_code(c);
    packet.set_rfc4884_length(if mpls_stack.is_empty() {
        0
    } else {
        icmp_ext::length_field(icmp_ext::LENGTH_UNIT_V4)
    });
    packet.set_next_hop_mtu(match kind {
        ErrorKind::FragNeeded { mtu } => mtu,
        _ => 0,
    });
    packet.fill_checksum();
    Ok(len)
}

/// The type of the message at the start of `data`, read without validating the rest of
/// the header (a message quoted in an error, or cut short); `None` for an empty buffer.
#[inline]
pub fn peek_msg_type(data: &[u8]) -> Option<u8> {
    data.get(field::TYPE).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Frames captured with a Python AF_PACKET socket (ETH_P_ALL) on the receiving veth of a
    // pair between two network namespaces, A (198.18.50.1, 02:00:00:00:0a:01) and B
    // (198.18.50.2, 02:00:00:00:0b:01, forwarding on, with a route to 198.18.51.0/24 over
    // a link of MTU 1300), after `ethtool -K <dev> tx off` on both ends so every checksum
    // is complete. Offsets: Ethernet 14 bytes, IPv4 header 20 bytes (IHL 5).
    const ICMP: usize = 14 + 20;

    // `ping -c1 -s 24 198.18.50.2` from A: echo request, ident 0x1969, seq 1.
    static ECHO_REQUEST_V4: [u8; 66] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x34, 0xda, 0x6a, 0x40, 0x00, 0x40, 0x01, 0x70, 0x36, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x32, 0x02,
        0x08, 0x00, 0x3c, 0x5d, 0x19, 0x69, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x22,
        0xab, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
    ];

    // B's kernel's echo reply to it.
    static ECHO_REPLY_V4: [u8; 66] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x34, 0x97, 0x4e, 0x00, 0x00, 0x40, 0x01, 0xf3, 0x52, 0xc6, 0x12, 0x32, 0x02, 0xc6, 0x12, 0x32, 0x01,
        0x00, 0x00, 0x44, 0x5d, 0x19, 0x69, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x22,
        0xab, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
    ];

    // `ping -c1 -t1 -s 24 198.18.51.5` from A: echo request with TTL 1, ident 0x196d.
    static ECHO_REQUEST_TTL1_V4: [u8; 66] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x34, 0x6e, 0x6e, 0x40, 0x00, 0x01, 0x01, 0x1a, 0x30, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x33, 0x05,
        0x08, 0x00, 0xc4, 0x40, 0x19, 0x6d, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x9a,
        0xc3, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
    ];

    // B's kernel's time exceeded for it (quotes the whole 52-byte datagram).
    static TIME_EXCEEDED_V4: [u8; 94] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x08, 0x00, 0x45, 0xc0, 0x00,
        0x50, 0x97, 0x4f, 0x00, 0x00, 0x40, 0x01, 0xf2, 0x75, 0xc6, 0x12, 0x32, 0x02, 0xc6, 0x12, 0x32, 0x01,
        0x0b, 0x00, 0xf4, 0xff, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x34, 0x6e, 0x6e, 0x40, 0x00, 0x01,
        0x01, 0x1a, 0x30, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x33, 0x05, 0x08, 0x00, 0xc4, 0x40, 0x19, 0x6d,
        0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x9a, 0xc3, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
    ];

    // `ping -c1 -M do -s 1400 198.18.51.5` from A: B's kernel's "fragmentation needed"
    // (next-hop MTU 1300), quoting the first 548 bytes of the 1428-byte datagram so that
    // the error fills exactly 576 bytes.
    static FRAG_NEEDED_V4: [u8; 590] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x08, 0x00, 0x45, 0xc0, 0x02,
        0x40, 0x97, 0x50, 0x00, 0x00, 0x40, 0x01, 0xf0, 0x84, 0xc6, 0x12, 0x32, 0x02, 0xc6, 0x12, 0x32, 0x01,
        0x03, 0x04, 0x0e, 0xb5, 0x00, 0x00, 0x05, 0x14, 0x45, 0x00, 0x05, 0x94, 0x00, 0x00, 0x40, 0x00, 0x40,
        0x01, 0x44, 0x3e, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x33, 0x05, 0x08, 0x00, 0xfe, 0x59, 0x19, 0x71,
        0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x41, 0xda, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
        0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30,
        0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41,
        0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52,
        0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63,
        0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74,
        0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85,
        0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96,
        0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
        0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8,
        0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9,
        0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
        0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb,
        0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc,
        0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
        0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e,
        0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
        0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40,
        0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51,
        0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62,
        0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73,
        0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84,
        0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95,
        0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6,
        0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
        0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8,
        0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9,
        0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea,
        0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb,
        0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
    ];

    // A Python UDP datagram from A (198.18.50.1:40002) to 198.18.50.2:5002 where nothing
    // listens, and B's kernel's port unreachable for it.
    static UDP_V4: [u8; 53] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x27, 0x28, 0xfe, 0x40, 0x00, 0x40, 0x11, 0x21, 0xa0, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x32, 0x02,
        0x9c, 0x42, 0x13, 0x8a, 0x00, 0x13, 0x16, 0x40, 0x76, 0x6d, 0x70, 0x6c, 0x73, 0x20, 0x75, 0x64, 0x70,
        0x34, 0x0a,
    ];
    static PORT_UNREACHABLE_V4: [u8; 81] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x08, 0x00, 0x45, 0xc0, 0x00,
        0x43, 0x97, 0x64, 0x00, 0x00, 0x40, 0x01, 0xf2, 0x6d, 0xc6, 0x12, 0x32, 0x02, 0xc6, 0x12, 0x32, 0x01,
        0x03, 0x03, 0xed, 0x49, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x27, 0x28, 0xfe, 0x40, 0x00, 0x40,
        0x11, 0x21, 0xa0, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x32, 0x02, 0x9c, 0x42, 0x13, 0x8a, 0x00, 0x13,
        0x16, 0x40, 0x76, 0x6d, 0x70, 0x6c, 0x73, 0x20, 0x75, 0x64, 0x70, 0x34, 0x0a,
    ];

    // Label 16 (TC 0, not bottom, TTL 1) over label 1000 (bottom, TTL 64).
    const STACK: [u32; 2] = [(16 << 12) | 1, (1000 << 12) | (1 << 8) | 64];

    #[test]
    fn parses_captured_echo_request() {
        let p = Packet::new_checked(&ECHO_REQUEST_V4[ICMP..]).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(p.code(), 0);
        assert_eq!(p.checksum(), 0x3c5d);
        assert_eq!(p.echo_ident(), 0x1969);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.data().len(), 24);
        assert!(p.verify_checksum());
    }

    #[test]
    fn echo_reply_matches_kernel_reply() {
        let mut buf = [0u8; 64];
        let n = emit_echo_reply(&ECHO_REQUEST_V4[ICMP..], &mut buf).unwrap();
        assert_eq!(&buf[..n], &ECHO_REPLY_V4[ICMP..]);
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REPLY);
        assert!(p.verify_checksum());
    }

    #[test]
    fn echo_reply_rejects_other_messages_and_short_buffers() {
        let mut buf = [0u8; 64];
        assert_eq!(emit_echo_reply(&ECHO_REPLY_V4[ICMP..], &mut buf), Err(Error::Malformed));
        assert_eq!(emit_echo_reply(&ECHO_REQUEST_V4[ICMP..], &mut buf[..31]), Err(Error::Truncated));
        assert_eq!(emit_echo_reply(&ECHO_REQUEST_V4[ICMP..ICMP + 7], &mut buf), Err(Error::Truncated));
    }

    #[test]
    fn time_exceeded_matches_kernel() {
        let kernel = Packet::new_checked(&TIME_EXCEEDED_V4[ICMP..]).unwrap();
        assert_eq!((kernel.msg_type(), kernel.code()), (11, 0));
        assert_eq!(kernel.rfc4884_length(), 0);
        assert_eq!(kernel.extension(), None);
        assert!(kernel.verify_checksum());
        let original = &ECHO_REQUEST_TTL1_V4[14..];
        assert_eq!(kernel.data(), original);

        let mut buf = [0u8; 600];
        let n = emit_error(&mut buf, ErrorKind::TimeExceeded, original, &[]).unwrap();
        assert_eq!(n, error_len(ErrorKind::TimeExceeded, original.len(), 0));
        assert_eq!(&buf[..n], &TIME_EXCEEDED_V4[ICMP..]);
    }

    #[test]
    fn frag_needed_matches_kernel_576_byte_limit() {
        let kernel = Packet::new_checked(&FRAG_NEEDED_V4[ICMP..]).unwrap();
        assert_eq!((kernel.msg_type(), kernel.code()), (3, FRAG_NEEDED));
        assert_eq!(kernel.next_hop_mtu(), 1300);
        assert!(kernel.verify_checksum());
        assert_eq!(kernel.data().len(), 548);
        // Rebuild a 1428-byte original: the quoted part, then any bytes.
        let mut original = kernel.data().to_vec();
        original.resize(1428, 0x5a);
        let kind = ErrorKind::FragNeeded { mtu: 1300 };
        let mut buf = [0u8; 1500];
        let n = emit_error(&mut buf, kind, &original, &[]).unwrap();
        assert_eq!(n, MAX_ERROR_LEN);
        assert_eq!(&buf[..n], &FRAG_NEEDED_V4[ICMP..]);
        assert_eq!(emit_error(&mut buf[..n - 1], kind, &original, &[]), Err(Error::Truncated));
    }

    #[test]
    fn port_unreachable_matches_kernel() {
        let kind = ErrorKind::Unreachable { code: unreachable_code::PORT_UNREACHABLE };
        let mut buf = [0u8; 600];
        let n = emit_error(&mut buf, kind, &UDP_V4[14..], &[]).unwrap();
        assert_eq!(&buf[..n], &PORT_UNREACHABLE_V4[ICMP..]);
    }

    #[test]
    fn time_exceeded_with_label_stack_follows_rfc4950() {
        let original = &ECHO_REQUEST_TTL1_V4[14..];
        let mut buf = [0u8; 600];
        let n = emit_error(&mut buf, ErrorKind::TimeExceeded, original, &STACK).unwrap();
        assert_eq!(n, 8 + 128 + 4 + 4 + 8);
        assert_eq!(n, error_len(ErrorKind::TimeExceeded, original.len(), 2));
        let msg = &buf[..n];

        // The layout of RFC 4950 section 7 / RFC 4884 figure, built by hand; checksums are
        // checked separately.
        let mut expected = vec![11, 0, 0, 0, 0, 32, 0, 0];
        expected.extend_from_slice(original);
        expected.resize(8 + 128, 0);
        expected.extend_from_slice(&[0x20, 0x00, 0, 0]); // version 2, checksum
        expected.extend_from_slice(&[0x00, 0x0c, 0x01, 0x01]); // length 12, class 1, c-type 1
        expected.extend_from_slice(&[0x00, 0x01, 0x00, 0x01]); // label 16, S 0, TTL 1
        expected.extend_from_slice(&[0x00, 0x3e, 0x81, 0x40]); // label 1000, S 1, TTL 64
        let mut masked = msg.to_vec();
        masked[2..4].fill(0);
        masked[8 + 128 + 2..8 + 128 + 4].fill(0);
        assert_eq!(masked, expected);

        // These exact bytes, wrapped in Ethernet and IP and written to a pcap, are
        // dissected by tshark 4.0.17 as an ICMP multi-part extension, version 2, with an
        // MPLS label stack object (class 1, c-type 1, length 12: label 16 S 0 TTL 1, label
        // 1000 S 1 TTL 64), message checksum 0xf4df and extension checksum 0x5d72, both
        // "[correct]".
        assert_eq!(u16::from_be_bytes([msg[2], msg[3]]), 0xf4df);
        assert_eq!(u16::from_be_bytes([msg[8 + 128 + 2], msg[8 + 128 + 3]]), 0x5d72);
        let p = Packet::new_checked(msg).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.rfc4884_length(), 32);
        let ext = icmp_ext::Extension::new_checked(p.extension().unwrap()).unwrap();
        assert_eq!(ext.version(), 2);
        assert!(ext.verify_checksum());
        assert_ne!(ext.checksum(), 0);
        let obj = ext.objects().next().unwrap().unwrap();
        assert_eq!((obj.length(), obj.class_num(), obj.c_type()), (12, 1, 1));
        let stack: Vec<u32> = ext.mpls_label_stack().unwrap().unwrap().collect();
        assert_eq!(stack, STACK);
    }

    #[test]
    fn long_original_is_truncated_to_128_with_extension() {
        let original = &FRAG_NEEDED_V4[ICMP + 8..];
        let kind = ErrorKind::FragNeeded { mtu: 1280 };
        let mut buf = [0u8; 600];
        let n = emit_error(&mut buf, kind, original, &STACK[1..]).unwrap();
        assert_eq!(n, 8 + 128 + 12);
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(p.next_hop_mtu(), 1280);
        assert_eq!(p.rfc4884_length(), 32);
        assert_eq!(&p.data()[..128], &original[..128]);
        assert!(p.verify_checksum());
        assert_eq!(emit_error(&mut buf[..n - 1], kind, original, &STACK[1..]), Err(Error::Truncated));
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = ECHO_REQUEST_V4;
        let mut p = Packet::new_checked(&mut bytes[ICMP..]).unwrap();
        p.set_echo_ident(0xbeef);
        p.set_echo_seq_no(7);
        p.set_code(0);
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0xbeef, 7));
        p.set_rfc4884_length(32);
        p.set_next_hop_mtu(1500);
        assert_eq!((p.rfc4884_length(), p.next_hop_mtu()), (32, 1500));
        assert!(!p.verify_checksum());
        p.data_mut()[0] = 1;
        assert_eq!(p.data()[0], 1);
        assert!(is_error(msg_type::TIME_EXCEEDED) && !is_error(msg_type::ECHO_REQUEST));
    }

    #[test]
    fn echo_reply_keeps_the_requests_checksum_validity_at_both_zeros() {
        let mut buf = [0u8; 64];
        // All zero but the type: the reply's only valid checksum is 0xffff.
        let zero = [8, 0, 0xf7, 0xff, 0, 0, 0, 0];
        let n = emit_echo_reply(&zero, &mut buf).unwrap();
        assert_eq!(&buf[..n], &[0, 0, 0xff, 0xff, 0, 0, 0, 0]);
        assert!(Packet::new_unchecked(&buf[..n]).verify_checksum());
        // Corrupted in flight (found by fuzzing): the update lands on zero, and the reply
        // must stay as invalid as the request.
        let bad = [8, 0, 0xf7, 0xff, 0, 0, 0, 0xff, 0, 0, 0xff, 0, 0xde, 0x46];
        assert!(!Packet::new_unchecked(&bad[..]).verify_checksum());
        let n = emit_echo_reply(&bad, &mut buf).unwrap();
        assert!(!Packet::new_unchecked(&buf[..n]).verify_checksum());
    }

    #[test]
    fn every_prefix_parses_or_errors() {
        for frame in
            [&ECHO_REQUEST_V4[..], &ECHO_REPLY_V4, &TIME_EXCEEDED_V4, &FRAG_NEEDED_V4, &PORT_UNREACHABLE_V4]
        {
            let msg = &frame[ICMP..];
            for len in 0..=msg.len() {
                match Packet::new_checked(&msg[..len]) {
                    Ok(p) => {
                        assert!(len >= HEADER_LEN);
                        let _ = (p.msg_type(), p.code(), p.checksum(), p.echo_ident());
                        let _ = (p.echo_seq_no(), p.rfc4884_length(), p.next_hop_mtu());
                        let _ = (p.data().len(), p.extension(), p.verify_checksum());
                    }
                    Err(e) => {
                        assert!(len < HEADER_LEN);
                        assert_eq!(e, Error::Truncated);
                    }
                }
                let mut buf = [0u8; 600];
                let _ = emit_echo_reply(&msg[..len], &mut buf);
            }
        }
    }

    #[test]
    fn peek_msg_type_reads_the_type_of_a_cut_message() {
        assert_eq!(peek_msg_type(&ECHO_REQUEST_V4[ICMP..]), Some(msg_type::ECHO_REQUEST));
        assert_eq!(peek_msg_type(&ECHO_REPLY_V4[ICMP..ICMP + 1]), Some(msg_type::ECHO_REPLY));
        assert_eq!(peek_msg_type(&[]), None);
    }
}
