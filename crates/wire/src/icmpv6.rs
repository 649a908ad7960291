//! ICMPv6 (RFC 4443) and the neighbour discovery messages a router needs on its own links
//! (RFC 4861): echo, errors (with the RFC 4884 length field and the RFC 4950 MPLS
//! extension), neighbour solicitation and advertisement.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Identifier          |        Sequence Number        |  echo
//! |                              MTU                              |  packet too big
//! |    Length     |                  unused                       |  time exceeded,
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  unreachable
//! |     Data ...
//! ```
//!
//! Neighbour solicitation (135) and advertisement (136):
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |R|S|O|                     Reserved                            |  (R/S/O: advert only)
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Target Address (16)                     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Options: type (1), length (1, in 8-byte units), data ...
//! ```
//!
//! The checksum covers the IPv6 pseudo-header (next header 58) and the whole message.

use core::net::Ipv6Addr;

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
    pub const MTU: Field = 4..8;
    pub const LENGTH: usize = 4;
    pub const UNUSED: Field = 5..8;
    pub const NDISC_FLAGS: usize = 4;
    pub const NDISC_RESERVED: Field = 4..8;
    pub const TARGET: Field = 8..24;
}

/// Length of the ICMPv6 header (type, code, checksum and the 4 type-specific bytes).
pub const HEADER_LEN: usize = 8;
/// The IPv6 next header value of ICMPv6.
pub const PROTOCOL: u8 = 58;
/// The IPv6 minimum MTU (RFC 8200); an ICMPv6 error must fit in it (RFC 4443 2.4 (c)).
pub const MIN_MTU: usize = 1280;
/// Length of the fixed IPv6 header vmpls puts in front of the messages it sends.
const IP_HEADER_LEN: usize = 40;
/// The largest ICMPv6 error message without extension: 1280 - 40 bytes.
pub const MAX_ERROR_LEN: usize = MIN_MTU - IP_HEADER_LEN;
/// Length of a neighbour solicitation or advertisement without options.
pub const NDISC_LEN: usize = 24;
/// Length of a link-layer address option carrying an Ethernet MAC address.
pub const LINK_ADDR_OPTION_LEN: usize = 8;

/// ICMPv6 message types.
pub mod msg_type {
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbour solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbour advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
}

/// Destination unreachable codes.
pub mod unreachable_code {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication with destination administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Beyond scope of source address.
    pub const BEYOND_SCOPE: u8 = 2;
    /// Address unreachable.
    pub const ADDR_UNREACHABLE: u8 = 3;
    /// Port unreachable.
    pub const PORT_UNREACHABLE: u8 = 4;
}

/// Hop limit exceeded in transit (time exceeded code 0).
pub const HOP_LIMIT_EXCEEDED: u8 = 0;

/// Neighbour discovery option types (RFC 4861 section 4.6).
pub mod ndisc_option {
    /// Source link-layer address.
    pub const SOURCE_LINK_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LINK_ADDR: u8 = 2;
    /// Prefix information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected header.
    pub const REDIRECTED_HEADER: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
    /// Nonce (RFC 3971), sent by Linux in duplicate address detection.
    pub const NONCE: u8 = 14;
}

/// True for error messages (types below 128, RFC 4443 section 2.1), which must never be
/// answered with an error.
pub fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

/// The solicited-node multicast address of `addr`: `ff02::1:ff` and its low 24 bits
/// (RFC 4291 section 2.7.1).
pub fn solicited_node_multicast(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15]])
}

/// The link-local address an interface with MAC `mac` forms by itself: `fe80::/64` and
/// the modified EUI-64 interface identifier (RFC 4291 appendix A, RFC 2464 section 4),
/// what Linux gives an Ethernet interface by default (`addr_gen_mode` 0).
pub fn link_local_from_mac(mac: [u8; 6]) -> Ipv6Addr {
    let m = mac;
    Ipv6Addr::from([0xfe, 0x80, 0, 0, 0, 0, 0, 0, m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

/// The Ethernet multicast address for an IPv6 multicast address: `33:33` and its low 32
/// bits (RFC 2464 section 7).
pub fn multicast_mac(addr: Ipv6Addr) -> [u8; 6] {
    let o = addr.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

fn sum_with_pseudo_header(data: &[u8], src: Ipv6Addr, dst: Ipv6Addr) -> u32 {
    let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, data.len() as u32);
    checksum::add(ph, checksum::sum(data))
}

/// Computes and writes the ICMPv6 checksum of the message in `buf` (at least 4 bytes).
fn fill_checksum_in(buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) {
    buf[field::CHECKSUM].fill(0);
    let c = checksum::finish(sum_with_pseudo_header(buf, src, dst));
    buf[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
}

fn ipv6_at(b: &[u8], f: Field) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[f]);
    Ipv6Addr::from(o)
}

/// A view over an ICMPv6 message.
#[derive(Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer of at least [`HEADER_LEN`] bytes (the whole message, as delimited by
    /// the IPv6 payload length).
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
    /// The MTU of a packet too big message (bytes 4..8).
    pub fn mtu(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::MTU];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// The RFC 4884 length of the original datagram field, in 64-bit words (byte 4);
    /// zero when no extension follows.
    pub fn rfc4884_length(&self) -> u8 {
        self.buffer.as_ref()[field::LENGTH]
    }
    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// The RFC 4884 extension structure of a time exceeded or destination unreachable
    /// message, if its length field announces one and bytes follow the original datagram.
    pub fn extension(&self) -> Option<&[u8]> {
        if !matches!(self.msg_type(), msg_type::DST_UNREACHABLE | msg_type::TIME_EXCEEDED) {
            return None;
        }
        icmp_ext::find_extension(self.data(), self.rfc4884_length(), icmp_ext::LENGTH_UNIT_V6)
    }
    /// True when the checksum over the pseudo-header and the message is correct.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::fold(sum_with_pseudo_header(self.buffer.as_ref(), src, dst)) == 0xffff
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
    /// Sets the MTU (bytes 4..8).
    pub fn set_mtu(&mut self, v: u32) {
        self.buffer.as_mut()[field::MTU].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the RFC 4884 length (byte 4) and zeroes the unused bytes 5..8.
    pub fn set_rfc4884_length(&mut self, v: u8) {
        let b = self.buffer.as_mut();
        b[field::LENGTH] = v;
        b[field::UNUSED].fill(0);
    }
    /// The bytes after the header, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
    /// Computes and writes the checksum over the pseudo-header and the message.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        fill_checksum_in(self.buffer.as_mut(), src, dst)
    }
}

/// Writes the echo reply to `request` (a whole ICMPv6 echo request message) into `buf` and
/// returns its length. `src` and `dst` are the reply's addresses (the router's own address
/// and the requester's); the checksum is computed afresh over them. Callers check the
/// request's checksum first.
///
/// `Err(Malformed)` if `request` is not an echo request with code 0, `Err(Truncated)` if it
/// is shorter than the header or `buf` is shorter than it.
pub fn emit_echo_reply(request: &[u8], buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<usize> {
    let req = Packet::new_checked(request)?;
    if req.msg_type() != msg_type::ECHO_REQUEST || req.code() != 0 {
        return Err(Error::Malformed);
    }
    let out = buf.get_mut(..request.len()).ok_or(Error::Truncated)?;
    out.copy_from_slice(request);
    let mut reply = Packet::new_unchecked(out);
    reply.set_msg_type(msg_type::ECHO_REPLY);
    reply.fill_checksum(src, dst);
    Ok(request.len())
}

/// The ICMPv6 errors a router sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind6 {
    /// Time exceeded, hop limit exceeded in transit (type 3, code 0).
    TimeExceeded,
    /// Packet too big, with the MTU of the next hop (type 2, code 0).
    PacketTooBig {
        /// The MTU of the next hop, in bytes.
        mtu: u32,
    },
    /// Destination unreachable with the given code (type 1).
    Unreachable {
        /// The unreachable code ([`unreachable_code`]).
        code: u8,
    },
}

impl ErrorKind6 {
    /// RFC 4884 multi-part messages exist for time exceeded and destination unreachable,
    /// not for packet too big.
    fn takes_extension(self) -> bool {
        !matches!(self, ErrorKind6::PacketTooBig { .. })
    }
}

/// Length of the message [`emit_error`] writes for an original packet of `original_len`
/// bytes and a received label stack of `n_labels` entries.
pub fn error_len(kind: ErrorKind6, original_len: usize, n_labels: usize) -> usize {
    if n_labels == 0 || !kind.takes_extension() {
        HEADER_LEN + original_len.min(MAX_ERROR_LEN - HEADER_LEN)
    } else {
        HEADER_LEN + icmp_ext::quote_and_extension_len(n_labels)
    }
}

/// Writes a complete ICMPv6 error message into `buf`, checksum included, and returns its
/// length. `src` and `dst` are the addresses of the IPv6 packet that will carry it.
///
/// `original` is the offending packet from its IPv6 header on. Without a label stack (and
/// always for packet too big) the message quotes as much of it as fits in a 1280-byte IPv6
/// packet (RFC 4443 section 2.4 (c)). With a label stack (`mpls_stack`: the received label
/// stack entries as raw words, top first), time exceeded and destination unreachable follow
/// RFC 4884/4950: the quote is zero-padded or truncated to exactly 128 bytes, byte 4 says
/// 16 (64-bit words), and an extension with the MPLS label stack object follows.
///
/// `Err(Truncated)` if `buf` is shorter than [`error_len`]; `Err(Malformed)` for a label
/// stack too long for an extension object.
pub fn emit_error(
    buf: &mut [u8],
    kind: ErrorKind6,
    original: &[u8],
    mpls_stack: &[u32],
    src: Ipv6Addr,
    dst: Ipv6Addr,
) -> Result<usize> {
    let len = error_len(kind, original.len(), mpls_stack.len());
    let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
    let extended = !mpls_stack.is_empty() && kind.takes_extension();
    if extended {
        icmp_ext::emit_quote_and_extension(&mut out[HEADER_LEN..], original, mpls_stack)?;
    } else {
        out[HEADER_LEN..].copy_from_slice(&original[..len - HEADER_LEN]);
    }
    let mut packet = Packet::new_unchecked(out);
    let length = if extended { icmp_ext::length_field(icmp_ext::LENGTH_UNIT_V6) } else { 0 };
    match kind {
        ErrorKind6::TimeExceeded => {
            packet.set_msg_type(msg_type::TIME_EXCEEDED);
            packet.set_code(HOP_LIMIT_EXCEEDED);
            packet.set_rfc4884_length(length);
        }
        ErrorKind6::PacketTooBig { mtu } => {
            packet.set_msg_type(msg_type::PACKET_TOO_BIG);
            packet.set_code(0);
            packet.set_mtu(mtu);
        }
        ErrorKind6::Unreachable { code } => {
            packet.set_msg_type(msg_type::DST_UNREACHABLE);
            packet.set_code(code);
            packet.set_rfc4884_length(length);
        }
    }
    packet.fill_checksum(src, dst);
    Ok(len)
}

/// Iterator over neighbour discovery options: yields `(type, data)` where `data` is the
/// option after its type and length bytes. Yields an error and stops at an option with
/// length zero (`Malformed`, RFC 4861 section 4.6) or one running past the buffer
/// (`Truncated`).
#[derive(Debug, Clone)]
pub struct NdiscOptions<'a> {
    rest: &'a [u8],
}

impl<'a> NdiscOptions<'a> {
    /// Iterates over the options in `bytes`.
    pub fn new(bytes: &'a [u8]) -> NdiscOptions<'a> {
        NdiscOptions { rest: bytes }
    }

    /// The MAC address in the first option of type `kind` (source or target link-layer
    /// address). `Ok(None)` if there is none; `Err(Malformed)` if it holds fewer than 6
    /// bytes, or an error from a malformed option before it.
    pub fn link_layer_addr(self, kind: u8) -> Result<Option<[u8; 6]>> {
        for opt in self {
            let (t, data) = opt?;
            if t == kind {
                return match data {
                    [a, b, c, d, e, f, ..] => Ok(Some([*a, *b, *c, *d, *e, *f])),
                    _ => Err(Error::Malformed),
                };
            }
        }
        Ok(None)
    }
}

impl<'a> Iterator for NdiscOptions<'a> {
    type Item = Result<(u8, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        let (kind, units) = match self.rest {
            [] => return None,
            [kind, units, ..] => (*kind, usize::from(*units)),
            [_] => {
                self.rest = &[];
                return Some(Err(Error::Truncated));
            }
        };
        let len = units * 8;
        if len == 0 || len > self.rest.len() {
            self.rest = &[];
            return Some(Err(if len == 0 { Error::Malformed } else { Error::Truncated }));
        }
        let (this, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Ok((kind, &this[2..])))
    }
}

fn write_link_addr_option(buf: &mut [u8], kind: u8, mac: [u8; 6]) {
    buf[0] = kind;
    buf[1] = (LINK_ADDR_OPTION_LEN / 8) as u8;
    buf[2..8].copy_from_slice(&mac);
}

fn check_ndisc<T: AsRef<[u8]>>(buffer: &T, kind: u8) -> Result<()> {
    let b = buffer.as_ref();
    if b.len() < NDISC_LEN {
        return Err(Error::Truncated);
    }
    if b[field::TYPE] != kind || b[field::CODE] != 0 {
        return Err(Error::Malformed);
    }
    Ok(())
}

/// A view over a neighbour solicitation (type 135).
#[derive(Debug)]
pub struct NeighborSolicit<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NeighborSolicit<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> NeighborSolicit<T> {
        NeighborSolicit { buffer }
    }

    /// Wraps a buffer of at least 24 bytes holding type 135, code 0. The hop limit of 255
    /// and the rules tied to IPv6 addresses (RFC 4861 section 7.1.1) are the caller's.
    pub fn new_checked(buffer: T) -> Result<NeighborSolicit<T>> {
        check_ndisc(&buffer, msg_type::NEIGHBOR_SOLICIT)?;
        Ok(NeighborSolicit { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The address whose link-layer address is sought.
    pub fn target_addr(&self) -> Ipv6Addr {
        ipv6_at(self.buffer.as_ref(), field::TARGET)
    }
    /// The options.
    pub fn options(&self) -> NdiscOptions<'_> {
        NdiscOptions::new(&self.buffer.as_ref()[NDISC_LEN..])
    }
    /// The source link-layer address option's MAC, if present.
    pub fn source_link_addr(&self) -> Result<Option<[u8; 6]>> {
        self.options().link_layer_addr(ndisc_option::SOURCE_LINK_ADDR)
    }
    /// True when the checksum over the pseudo-header and the message is correct.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::fold(sum_with_pseudo_header(self.buffer.as_ref(), src, dst)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NeighborSolicit<T> {
    /// Sets the target address.
    pub fn set_target_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&addr.octets());
    }
    /// Computes and writes the checksum.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        fill_checksum_in(self.buffer.as_mut(), src, dst)
    }
}

/// A neighbour solicitation, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborSolicitRepr {
    /// The address whose link-layer address is sought.
    pub target_addr: Ipv6Addr,
    /// The sender's MAC (source link-layer address option); absent in duplicate address
    /// detection, where the source is `::`.
    pub source_mac: Option<[u8; 6]>,
}

impl NeighborSolicitRepr {
    /// Decodes a checked solicitation; unknown options are skipped, malformed ones are
    /// errors.
    pub fn parse<T: AsRef<[u8]>>(packet: &NeighborSolicit<T>) -> Result<NeighborSolicitRepr> {
        Ok(NeighborSolicitRepr { target_addr: packet.target_addr(), source_mac: packet.source_link_addr()? })
    }

    /// Length of the message.
    pub fn buffer_len(&self) -> usize {
        NDISC_LEN + self.source_mac.map_or(0, |_| LINK_ADDR_OPTION_LEN)
    }

    /// Writes the message with a zero checksum into `packet`; then fill the checksum.
    /// `Err(Truncated)` if the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut NeighborSolicit<T>) -> Result<()> {
        let b = packet.buffer.as_mut().get_mut(..self.buffer_len()).ok_or(Error::Truncated)?;
        b[field::TYPE] = msg_type::NEIGHBOR_SOLICIT;
        b[field::CODE] = 0;
        b[field::CHECKSUM].fill(0);
        b[field::NDISC_RESERVED].fill(0);
        b[field::TARGET].copy_from_slice(&self.target_addr.octets());
        if let Some(mac) = self.source_mac {
            write_link_addr_option(&mut b[NDISC_LEN..], ndisc_option::SOURCE_LINK_ADDR, mac);
        }
        Ok(())
    }
}

/// A view over a neighbour advertisement (type 136).
#[derive(Debug)]
pub struct NeighborAdvert<T: AsRef<[u8]>> {
    buffer: T,
}

/// Neighbour advertisement flag bits (byte 4).
pub mod advert_flags {
    /// The sender is a router.
    pub const ROUTER: u8 = 0x80;
    /// Sent in response to a solicitation.
    pub const SOLICITED: u8 = 0x40;
    /// Override an existing cache entry.
    pub const OVERRIDE: u8 = 0x20;
}

impl<T: AsRef<[u8]>> NeighborAdvert<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> NeighborAdvert<T> {
        NeighborAdvert { buffer }
    }

    /// Wraps a buffer of at least 24 bytes holding type 136, code 0.
    pub fn new_checked(buffer: T) -> Result<NeighborAdvert<T>> {
        check_ndisc(&buffer, msg_type::NEIGHBOR_ADVERT)?;
        Ok(NeighborAdvert { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The flags byte ([`advert_flags`]).
    pub fn flags_raw(&self) -> u8 {
        self.buffer.as_ref()[field::NDISC_FLAGS]
    }
    /// The R flag: the sender is a router.
    pub fn router(&self) -> bool {
        self.flags_raw() & advert_flags::ROUTER != 0
    }
    /// The S flag: this answers a solicitation.
    pub fn solicited(&self) -> bool {
        self.flags_raw() & advert_flags::SOLICITED != 0
    }
    /// The O flag: override an existing cache entry.
    pub fn override_(&self) -> bool {
        self.flags_raw() & advert_flags::OVERRIDE != 0
    }
    /// The address the advertisement is about.
    pub fn target_addr(&self) -> Ipv6Addr {
        ipv6_at(self.buffer.as_ref(), field::TARGET)
    }
    /// The options.
    pub fn options(&self) -> NdiscOptions<'_> {
        NdiscOptions::new(&self.buffer.as_ref()[NDISC_LEN..])
    }
    /// The target link-layer address option's MAC, if present.
    pub fn target_link_addr(&self) -> Result<Option<[u8; 6]>> {
        self.options().link_layer_addr(ndisc_option::TARGET_LINK_ADDR)
    }
    /// True when the checksum over the pseudo-header and the message is correct.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::fold(sum_with_pseudo_header(self.buffer.as_ref(), src, dst)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NeighborAdvert<T> {
    /// Sets the flags byte.
    pub fn set_flags_raw(&mut self, v: u8) {
        self.buffer.as_mut()[field::NDISC_FLAGS] = v;
    }
    /// Sets the target address.
    pub fn set_target_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&addr.octets());
    }
    /// Computes and writes the checksum.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        fill_checksum_in(self.buffer.as_mut(), src, dst)
    }
}

/// A neighbour advertisement, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborAdvertRepr {
    /// R: the sender is a router.
    pub router: bool,
    /// S: sent in response to a solicitation.
    pub solicited: bool,
    /// O: override an existing cache entry.
    pub override_: bool,
    /// The address the advertisement is about.
    pub target_addr: Ipv6Addr,
    /// The target's MAC (target link-layer address option).
    pub target_mac: Option<[u8; 6]>,
}

impl NeighborAdvertRepr {
    /// Decodes a checked advertisement; unknown options are skipped, malformed ones are
    /// errors.
    pub fn parse<T: AsRef<[u8]>>(packet: &NeighborAdvert<T>) -> Result<NeighborAdvertRepr> {
        Ok(NeighborAdvertRepr {
            router: packet.router(),
            solicited: packet.solicited(),
            override_: packet.override_(),
            target_addr: packet.target_addr(),
            target_mac: packet.target_link_addr()?,
        })
    }

    /// Length of the message.
    pub fn buffer_len(&self) -> usize {
        NDISC_LEN + self.target_mac.map_or(0, |_| LINK_ADDR_OPTION_LEN)
    }

    /// Writes the message with a zero checksum into `packet`; then fill the checksum.
    /// `Err(Truncated)` if the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut NeighborAdvert<T>) -> Result<()> {
        let b = packet.buffer.as_mut().get_mut(..self.buffer_len()).ok_or(Error::Truncated)?;
        b[field::TYPE] = msg_type::NEIGHBOR_ADVERT;
        b[field::CODE] = 0;
        b[field::CHECKSUM].fill(0);
        b[field::NDISC_RESERVED].fill(0);
        let mut flags = 0;
        if self.router {
            flags |= advert_flags::ROUTER;
        }
        if self.solicited {
            flags |= advert_flags::SOLICITED;
        }
        if self.override_ {
            flags |= advert_flags::OVERRIDE;
        }
        b[field::NDISC_FLAGS] = flags;
        b[field::TARGET].copy_from_slice(&self.target_addr.octets());
        if let Some(mac) = self.target_mac {
            write_link_addr_option(&mut b[NDISC_LEN..], ndisc_option::TARGET_LINK_ADDR, mac);
        }
        Ok(())
    }
}

/// A neighbour solicitation or advertisement, decoded from a generic ICMPv6 view: what a
/// router dispatches on after checking the hop limit (255) and the checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdRepr {
    /// Neighbour solicitation (135).
    NeighborSolicit {
        /// The address whose link-layer address is sought.
        target: Ipv6Addr,
        /// The sender's MAC, absent in duplicate address detection.
        source_mac: Option<[u8; 6]>,
    },
    /// Neighbour advertisement (136).
    NeighborAdvert {
        /// R: the sender is a router.
        router: bool,
        /// S: sent in response to a solicitation.
        solicited: bool,
        /// O: override an existing cache entry.
        override_: bool,
        /// The address the advertisement is about.
        target: Ipv6Addr,
        /// The target's MAC, if the option is present.
        target_mac: Option<[u8; 6]>,
    },
}

impl NdRepr {
    /// Decodes a solicitation or advertisement. `Err(Malformed)` for any other message
    /// type, a nonzero code or a malformed option; `Err(Truncated)` for a message shorter
    /// than 24 bytes or an option running past its end.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<NdRepr> {
        let bytes = packet.buffer.as_ref();
        match packet.msg_type() {
            msg_type::NEIGHBOR_SOLICIT => {
                let r = NeighborSolicitRepr::parse(&NeighborSolicit::new_checked(bytes)?)?;
                Ok(NdRepr::NeighborSolicit { target: r.target_addr, source_mac: r.source_mac })
            }
            msg_type::NEIGHBOR_ADVERT => {
                let r = NeighborAdvertRepr::parse(&NeighborAdvert::new_checked(bytes)?)?;
                Ok(NdRepr::NeighborAdvert {
                    router: r.router,
                    solicited: r.solicited,
                    override_: r.override_,
                    target: r.target_addr,
                    target_mac: r.target_mac,
                })
            }
            _ => Err(Error::Malformed),
        }
    }

    /// Length of the message.
    pub fn buffer_len(&self) -> usize {
        match *self {
            NdRepr::NeighborSolicit { target, source_mac } => {
                NeighborSolicitRepr { target_addr: target, source_mac }.buffer_len()
            }
            NdRepr::NeighborAdvert { target_mac, .. } => {
                NDISC_LEN + target_mac.map_or(0, |_| LINK_ADDR_OPTION_LEN)
            }
        }
    }

    /// Writes the message into `buf`, checksum filled for an IPv6 packet from `src` to
    /// `dst`, and returns its length. `Err(Truncated)` if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<usize> {
        let len = self.buffer_len();
        let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
        match *self {
            NdRepr::NeighborSolicit { target, source_mac } => {
                NeighborSolicitRepr { target_addr: target, source_mac }
                    .emit(&mut NeighborSolicit::new_unchecked(&mut *out))?
            }
            NdRepr::NeighborAdvert { router, solicited, override_, target, target_mac } => {
                NeighborAdvertRepr { router, solicited, override_, target_addr: target, target_mac }
                    .emit(&mut NeighborAdvert::new_unchecked(&mut *out))?
            }
        }
        fill_checksum_in(out, src, dst);
        Ok(len)
    }
}

/// Writes a neighbour solicitation for `target` into `buf`, checksum filled for an IPv6
/// packet from `src` to `dst` (usually [`solicited_node_multicast`]`(target)`), and returns
/// its length. It carries a source link-layer address option with `source_mac`, except when
/// `src` is `::` (duplicate address detection), where RFC 4861 forbids it.
/// `Err(Truncated)` if `buf` is too short (32 bytes, 24 for DAD).
pub fn emit_neighbor_solicit(
    buf: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    source_mac: [u8; 6],
) -> Result<usize> {
    let repr = NeighborSolicitRepr {
        target_addr: target,
        source_mac: (!src.is_unspecified()).then_some(source_mac),
    };
    let len = repr.buffer_len();
    let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
    let mut packet = NeighborSolicit::new_unchecked(out);
    repr.emit(&mut packet)?;
    packet.fill_checksum(src, dst);
    Ok(len)
}

/// Writes a neighbour advertisement for `target` with a target link-layer address option
/// holding `target_mac` into `buf`, checksum filled for an IPv6 packet from `src` to `dst`,
/// and returns its length (32). `Err(Truncated)` if `buf` is too short.
#[allow(clippy::too_many_arguments)]
pub fn emit_neighbor_advert(
    buf: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    target_mac: [u8; 6],
    router: bool,
    solicited: bool,
    override_: bool,
) -> Result<usize> {
    let repr = NeighborAdvertRepr {
        router,
        solicited,
        override_,
        target_addr: target,
        target_mac: Some(target_mac),
    };
    let len = repr.buffer_len();
    let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
    let mut packet = NeighborAdvert::new_unchecked(out);
    repr.emit(&mut packet)?;
    packet.fill_checksum(src, dst);
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

    // Frames captured with a Python AF_PACKET socket (ETH_P_ALL) on the veth of namespace B
    // (2001:db8:50::2, 02:00:00:00:0b:01, IPv6 forwarding on, with a route to
    // 2001:db8:51::/64 over a link of MTU 1300) facing namespace A (2001:db8:50::1,
    // 02:00:00:00:0a:01), after `ethtool -K <dev> tx off` on both ends. Offsets: Ethernet
    // 14 bytes, IPv6 header 40 bytes (no extension headers).
    const ICMP: usize = 14 + 40;
    const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 1);
    const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 2);
    const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x01];
    const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0x0b, 0x01];

    fn addr_at(frame: &[u8], at: usize) -> Ipv6Addr {
        let mut o = [0u8; 16];
        o.copy_from_slice(&frame[at..at + 16]);
        Ipv6Addr::from(o)
    }
    fn src_of(frame: &[u8]) -> Ipv6Addr {
        addr_at(frame, 14 + 8)
    }
    fn dst_of(frame: &[u8]) -> Ipv6Addr {
        addr_at(frame, 14 + 24)
    }

    // `ping -6 -c1 -s 24 2001:db8:50::2` from A: echo request, ident 0x196b, seq 1.
    static ECHO_REQUEST_V6: [u8; 86] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x0f, 0x85,
        0x38, 0x00, 0x20, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x80, 0x00, 0x68, 0xde, 0x19, 0x6b, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00,
        0x00, 0x00, 0x21, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17,
    ];

    // B's kernel's echo reply to it.
    static ECHO_REPLY_V6: [u8; 86] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x86, 0xdd, 0x60, 0x0c, 0xd2,
        0xdf, 0x00, 0x20, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x81, 0x00, 0x67, 0xde, 0x19, 0x6b, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00,
        0x00, 0x00, 0x21, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17,
    ];

    // `ping -6 -c1 -t1 -s 24 2001:db8:51::5` from A: hop limit 1.
    static ECHO_REQUEST_HL1_V6: [u8; 86] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x0a, 0x67,
        0x1f, 0x00, 0x20, 0x3a, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x51, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x05, 0x80, 0x00, 0x8e, 0xbf, 0x19, 0x6f, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00,
        0x00, 0x00, 0xfb, 0xce, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17,
    ];

    // B's kernel's time exceeded for it (quotes the whole 72-byte packet).
    static TIME_EXCEEDED_V6: [u8; 134] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x86, 0xdd, 0x60, 0x0e, 0x2a,
        0x3a, 0x00, 0x50, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x03, 0x00, 0x9f, 0x6f, 0x00, 0x00, 0x00, 0x00, 0x60, 0x0a, 0x67, 0x1f, 0x00, 0x20,
        0x3a, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x51, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05,
        0x80, 0x00, 0x8e, 0xbf, 0x19, 0x6f, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xfb,
        0xce, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
    ];

    // `ping -6 -c1 -M do -s 1400 2001:db8:51::5` from A: B's kernel's packet too big
    // (MTU 1300), quoting the first 1232 bytes of the 1448-byte packet so that the error
    // fills exactly 1280 bytes of IPv6.
    static PACKET_TOO_BIG_V6: [u8; 1294] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x86, 0xdd, 0x60, 0x00, 0x73,
        0x9c, 0x04, 0xd8, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x02, 0x00, 0x6f, 0xd9, 0x00, 0x00, 0x05, 0x14, 0x60, 0x0a, 0x67, 0x1f, 0x05, 0x80,
        0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x51, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05,
        0x80, 0x00, 0x04, 0x79, 0x19, 0x73, 0x00, 0x01, 0x25, 0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x61,
        0xe5, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19,
        0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a,
        0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b,
        0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c,
        0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d,
        0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e,
        0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f,
        0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90,
        0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1,
        0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2,
        0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3,
        0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4,
        0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5,
        0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6,
        0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
        0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
        0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29,
        0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a,
        0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b,
        0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c,
        0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d,
        0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e,
        0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f,
        0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0,
        0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0, 0xb1,
        0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2,
        0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3,
        0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3, 0xe4,
        0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5,
        0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
        0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
        0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39,
        0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a,
        0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b,
        0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c,
        0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d,
        0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e,
        0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
        0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0,
        0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1,
        0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2,
        0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3,
        0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4,
        0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
        0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27,
        0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,
        0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
        0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a,
        0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b,
        0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c,
        0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d,
        0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e,
        0x9f, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
        0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0,
        0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1,
        0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2,
        0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf2, 0xf3,
        0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04,
        0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
        0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
        0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
        0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
        0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59,
        0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a,
        0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b,
        0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c,
        0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d,
        0x9e, 0x9f,
    ];

    // A Python UDP datagram from A ([2001:db8:50::1]:40003) to [2001:db8:50::2]:5003 where
    // nothing listens, and B's kernel's port unreachable for it.
    static UDP_V6: [u8; 73] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x05, 0x44,
        0x32, 0x00, 0x13, 0x11, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x9c, 0x43, 0x13, 0x8b, 0x00, 0x13, 0xaa, 0x4f, 0x76, 0x6d, 0x70, 0x6c, 0x73, 0x20,
        0x75, 0x64, 0x70, 0x36, 0x0a,
    ];
    static PORT_UNREACHABLE_V6: [u8; 121] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x86, 0xdd, 0x60, 0x04, 0xd4,
        0xba, 0x00, 0x43, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x01, 0x04, 0xed, 0x02, 0x00, 0x00, 0x00, 0x00, 0x60, 0x05, 0x44, 0x32, 0x00, 0x13,
        0x11, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
        0x9c, 0x43, 0x13, 0x8b, 0x00, 0x13, 0xaa, 0x4f, 0x76, 0x6d, 0x70, 0x6c, 0x73, 0x20, 0x75, 0x64, 0x70,
        0x36, 0x0a,
    ];

    // A's kernel's neighbour solicitation for 2001:db8:50::2 before the first ping:
    // to ff02::1:ff00:2 (33:33:ff:00:00:02), with a source link-layer address option.
    static NEIGHBOR_SOLICIT: [u8; 86] = [
        0x33, 0x33, 0xff, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x00, 0x00,
        0x00, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff,
        0x00, 0x00, 0x02, 0x87, 0x00, 0x11, 0x87, 0x00, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a,
        0x01,
    ];

    // B's kernel's answer: solicited, override and (forwarding on) router flags, with a
    // target link-layer address option.
    static NEIGHBOR_ADVERT: [u8; 86] = [
        0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x86, 0xdd, 0x60, 0x00, 0x00,
        0x00, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x88, 0x00, 0xfe, 0x81, 0xe0, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0b,
        0x01,
    ];

    // A's kernel's duplicate address detection for its link-local address fe80::ff:fe00:a01
    // when the link came up: from ::, no link-layer option, a nonce option (type 14).
    static DAD_SOLICIT: [u8; 86] = [
        0x33, 0x33, 0xff, 0x00, 0x0a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x00, 0x00,
        0x00, 0x00, 0x20, 0x3a, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff,
        0x00, 0x0a, 0x01, 0x87, 0x00, 0x77, 0x82, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xfe, 0x00, 0x0a, 0x01, 0x0e, 0x01, 0x14, 0x8c, 0x2a, 0x7c, 0xa4,
        0x91,
    ];

    // Label 16 (TC 0, not bottom, TTL 1) over label 1000 (bottom, TTL 64).
    const STACK: [u32; 2] = [(16 << 12) | 1, (1000 << 12) | (1 << 8) | 64];

    #[test]
    fn parses_captured_echo_request() {
        let p = Packet::new_checked(&ECHO_REQUEST_V6[ICMP..]).unwrap();
        assert_eq!((p.msg_type(), p.code()), (msg_type::ECHO_REQUEST, 0));
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x196b, 1));
        assert_eq!(p.data().len(), 24);
        assert!(p.verify_checksum(A6, B6));
        assert!(!p.verify_checksum(A6, A6));
        assert_eq!(p.extension(), None);
    }

    #[test]
    fn echo_reply_matches_kernel_reply() {
        let mut buf = [0u8; 64];
        let n = emit_echo_reply(&ECHO_REQUEST_V6[ICMP..], &mut buf, B6, A6).unwrap();
        assert_eq!(&buf[..n], &ECHO_REPLY_V6[ICMP..]);
        assert!(Packet::new_checked(&buf[..n]).unwrap().verify_checksum(B6, A6));
        assert_eq!(emit_echo_reply(&ECHO_REPLY_V6[ICMP..], &mut buf, B6, A6), Err(Error::Malformed));
        assert_eq!(emit_echo_reply(&ECHO_REQUEST_V6[ICMP..], &mut buf[..31], B6, A6), Err(Error::Truncated));
    }

    #[test]
    fn time_exceeded_matches_kernel() {
        let kernel = Packet::new_checked(&TIME_EXCEEDED_V6[ICMP..]).unwrap();
        assert_eq!((kernel.msg_type(), kernel.code()), (3, 0));
        assert_eq!(kernel.rfc4884_length(), 0);
        let original = &ECHO_REQUEST_HL1_V6[14..];
        assert_eq!(kernel.data(), original);
        let (src, dst) = (src_of(&TIME_EXCEEDED_V6), dst_of(&TIME_EXCEEDED_V6));
        assert!(kernel.verify_checksum(src, dst));

        let mut buf = [0u8; 1300];
        let kind = ErrorKind6::TimeExceeded;
        let n = emit_error(&mut buf, kind, original, &[], src, dst).unwrap();
        assert_eq!(n, error_len(kind, original.len(), 0));
        assert_eq!(&buf[..n], &TIME_EXCEEDED_V6[ICMP..]);
    }

    #[test]
    fn packet_too_big_matches_kernel_1280_byte_limit() {
        let kernel = Packet::new_checked(&PACKET_TOO_BIG_V6[ICMP..]).unwrap();
        assert_eq!((kernel.msg_type(), kernel.code()), (2, 0));
        assert_eq!(kernel.mtu(), 1300);
        assert_eq!(kernel.data().len(), 1232);
        let (src, dst) = (src_of(&PACKET_TOO_BIG_V6), dst_of(&PACKET_TOO_BIG_V6));
        assert!(kernel.verify_checksum(src, dst));
        // Rebuild a 1448-byte original: the quoted part, then any bytes.
        let mut original = kernel.data().to_vec();
        original.resize(1448, 0x5a);
        let kind = ErrorKind6::PacketTooBig { mtu: 1300 };
        let mut buf = [0u8; 1500];
        let n = emit_error(&mut buf, kind, &original, &[], src, dst).unwrap();
        assert_eq!(n, MAX_ERROR_LEN);
        assert_eq!(&buf[..n], &PACKET_TOO_BIG_V6[ICMP..]);
        // Packet too big never carries the extension, label stack or not.
        assert_eq!(error_len(kind, original.len(), 2), MAX_ERROR_LEN);
        let n = emit_error(&mut buf, kind, &original, &STACK, src, dst).unwrap();
        assert_eq!(&buf[..n], &PACKET_TOO_BIG_V6[ICMP..]);
        assert_eq!(emit_error(&mut buf[..n - 1], kind, &original, &[], src, dst), Err(Error::Truncated));
    }

    #[test]
    fn port_unreachable_matches_kernel() {
        let kind = ErrorKind6::Unreachable { code: unreachable_code::PORT_UNREACHABLE };
        let (src, dst) = (src_of(&PORT_UNREACHABLE_V6), dst_of(&PORT_UNREACHABLE_V6));
        let mut buf = [0u8; 1300];
        let n = emit_error(&mut buf, kind, &UDP_V6[14..], &[], src, dst).unwrap();
        assert_eq!(&buf[..n], &PORT_UNREACHABLE_V6[ICMP..]);
    }

    #[test]
    fn time_exceeded_with_label_stack_follows_rfc4950() {
        let original = &ECHO_REQUEST_HL1_V6[14..];
        let mut buf = [0u8; 1300];
        let kind = ErrorKind6::TimeExceeded;
        let n = emit_error(&mut buf, kind, original, &STACK, B6, A6).unwrap();
        assert_eq!(n, 8 + 128 + 4 + 4 + 8);
        assert_eq!(n, error_len(kind, original.len(), 2));
        let msg = &buf[..n];

        // RFC 4884 section 4.3 / RFC 4950 layout, built by hand; checksums masked.
        let mut expected = vec![3, 0, 0, 0, 16, 0, 0, 0];
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
        // 1000 S 1 TTL 64), message checksum 0x8f27 and extension checksum 0x5d72, both
        // "[correct]".
        assert_eq!(u16::from_be_bytes([msg[2], msg[3]]), 0x8f27);
        assert_eq!(u16::from_be_bytes([msg[8 + 128 + 2], msg[8 + 128 + 3]]), 0x5d72);
        let p = Packet::new_checked(msg).unwrap();
        assert!(p.verify_checksum(B6, A6));
        assert_eq!(p.rfc4884_length(), 16);
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
    fn unreachable_with_label_stack_truncates_long_original() {
        let original = &PACKET_TOO_BIG_V6[ICMP + 8..];
        let kind = ErrorKind6::Unreachable { code: 0 };
        let mut buf = [0u8; 400];
        let n = emit_error(&mut buf, kind, original, &STACK[1..], B6, A6).unwrap();
        assert_eq!(n, 8 + 128 + 12);
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!((p.msg_type(), p.code(), p.rfc4884_length()), (1, 0, 16));
        assert_eq!(&p.data()[..128], &original[..128]);
        assert!(p.verify_checksum(B6, A6));
        assert_eq!(emit_error(&mut buf[..n - 1], kind, original, &STACK[1..], B6, A6), Err(Error::Truncated));
    }

    #[test]
    fn link_local_from_mac_is_the_one_linux_forms() {
        // A veth's MAC and the link-local address its kernel formed (and zebra named as
        // a BGP unnumbered next hop), read from a lab run.
        let mac = [0x5e, 0x2e, 0x3b, 0x86, 0x59, 0xbe];
        assert_eq!(link_local_from_mac(mac), "fe80::5c2e:3bff:fe86:59be".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn solicited_node_and_multicast_mac_match_capture() {
        let ns = &NEIGHBOR_SOLICIT;
        let group = solicited_node_multicast(B6);
        assert_eq!(group, "ff02::1:ff00:2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(dst_of(ns), group);
        assert_eq!(multicast_mac(group), ns[0..6]);
        assert_eq!(
            solicited_node_multicast("2001:db8::1234:5678".parse().unwrap()),
            "ff02::1:ff34:5678".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn parses_captured_neighbor_solicit() {
        let ns = NeighborSolicit::new_checked(&NEIGHBOR_SOLICIT[ICMP..]).unwrap();
        assert!(ns.verify_checksum(src_of(&NEIGHBOR_SOLICIT), dst_of(&NEIGHBOR_SOLICIT)));
        assert_eq!(
            NeighborSolicitRepr::parse(&ns).unwrap(),
            NeighborSolicitRepr { target_addr: B6, source_mac: Some(MAC_A) }
        );
        let opts: Vec<_> = ns.options().collect::<Result<_>>().unwrap();
        assert_eq!(opts, vec![(ndisc_option::SOURCE_LINK_ADDR, &MAC_A[..])]);
    }

    #[test]
    fn neighbor_solicit_built_here_matches_kernel() {
        let mut buf = [0u8; 64];
        let src = src_of(&NEIGHBOR_SOLICIT);
        let dst = solicited_node_multicast(B6);
        let n = emit_neighbor_solicit(&mut buf, src, dst, B6, MAC_A).unwrap();
        assert_eq!(&buf[..n], &NEIGHBOR_SOLICIT[ICMP..]);
        let ns = NeighborSolicit::new_checked(&buf[..n]).unwrap();
        let repr = NeighborSolicitRepr::parse(&ns).unwrap();
        let kernel =
            NeighborSolicitRepr::parse(&NeighborSolicit::new_checked(&NEIGHBOR_SOLICIT[ICMP..]).unwrap())
                .unwrap();
        assert_eq!(repr, kernel);
        assert_eq!(emit_neighbor_solicit(&mut buf[..31], src, dst, B6, MAC_A), Err(Error::Truncated));
    }

    #[test]
    fn parses_captured_neighbor_advert() {
        let na = NeighborAdvert::new_checked(&NEIGHBOR_ADVERT[ICMP..]).unwrap();
        assert!(na.verify_checksum(src_of(&NEIGHBOR_ADVERT), dst_of(&NEIGHBOR_ADVERT)));
        assert!(na.router() && na.solicited() && na.override_());
        assert_eq!(
            NeighborAdvertRepr::parse(&na).unwrap(),
            NeighborAdvertRepr {
                router: true,
                solicited: true,
                override_: true,
                target_addr: B6,
                target_mac: Some(MAC_B),
            }
        );
    }

    #[test]
    fn neighbor_advert_built_here_matches_kernel() {
        let mut buf = [0u8; 64];
        let (src, dst) = (src_of(&NEIGHBOR_ADVERT), dst_of(&NEIGHBOR_ADVERT));
        assert_eq!((src, dst), (B6, A6));
        let n = emit_neighbor_advert(&mut buf, src, dst, B6, MAC_B, true, true, true).unwrap();
        assert_eq!(&buf[..n], &NEIGHBOR_ADVERT[ICMP..]);
        let na = NeighborAdvert::new_checked(&buf[..n]).unwrap();
        let kernel =
            NeighborAdvertRepr::parse(&NeighborAdvert::new_checked(&NEIGHBOR_ADVERT[ICMP..]).unwrap())
                .unwrap();
        assert_eq!(NeighborAdvertRepr::parse(&na).unwrap(), kernel);
        // Each flag lands on its own bit.
        let n = emit_neighbor_advert(&mut buf, src, dst, B6, MAC_B, false, true, false).unwrap();
        let na = NeighborAdvert::new_checked(&buf[..n]).unwrap();
        assert_eq!(na.flags_raw(), advert_flags::SOLICITED);
        assert!(na.verify_checksum(src, dst));
        assert_eq!(
            emit_neighbor_advert(&mut buf[..31], src, dst, B6, MAC_B, true, true, true),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn parses_captured_dad_solicit_and_builds_one() {
        let src = src_of(&DAD_SOLICIT);
        assert!(src.is_unspecified());
        let ns = NeighborSolicit::new_checked(&DAD_SOLICIT[ICMP..]).unwrap();
        assert!(ns.verify_checksum(src, dst_of(&DAD_SOLICIT)));
        let target = ns.target_addr();
        assert_eq!(target, "fe80::ff:fe00:a01".parse::<Ipv6Addr>().unwrap());
        assert_eq!(dst_of(&DAD_SOLICIT), solicited_node_multicast(target));
        assert_eq!(ns.source_link_addr().unwrap(), None);
        let kinds: Vec<u8> = ns.options().map(|o| o.unwrap().0).collect();
        assert_eq!(kinds, vec![ndisc_option::NONCE]);
        // Ours omits the link-layer option from :: (and sends no nonce).
        let mut buf = [0u8; 64];
        let n = emit_neighbor_solicit(&mut buf, src, dst_of(&DAD_SOLICIT), target, MAC_A).unwrap();
        assert_eq!(n, NDISC_LEN);
        assert_eq!(&buf[4..24], &DAD_SOLICIT[ICMP + 4..ICMP + 24]);
    }

    #[test]
    fn nd_repr_dispatches_captured_messages_and_round_trips() {
        for frame in [&NEIGHBOR_SOLICIT, &NEIGHBOR_ADVERT, &DAD_SOLICIT] {
            let (src, dst) = (src_of(frame), dst_of(frame));
            let repr = NdRepr::parse(&Packet::new_checked(&frame[ICMP..]).unwrap()).unwrap();
            if frame == &DAD_SOLICIT {
                // The kernel's nonce option is not kept, so only the fixed part matches.
                assert_eq!(
                    repr,
                    NdRepr::NeighborSolicit {
                        target: "fe80::ff:fe00:a01".parse().unwrap(),
                        source_mac: None
                    }
                );
                continue;
            }
            let mut buf = [0u8; 64];
            let n = repr.emit(&mut buf, src, dst).unwrap();
            assert_eq!(n, repr.buffer_len());
            assert_eq!(&buf[..n], &frame[ICMP..]);
            assert_eq!(repr.emit(&mut buf[..n - 1], src, dst), Err(Error::Truncated));
        }
        assert_eq!(
            NdRepr::parse(&Packet::new_checked(&NEIGHBOR_ADVERT[ICMP..]).unwrap()).unwrap(),
            NdRepr::NeighborAdvert {
                router: true,
                solicited: true,
                override_: true,
                target: B6,
                target_mac: Some(MAC_B),
            }
        );
        assert_eq!(
            NdRepr::parse(&Packet::new_checked(&ECHO_REQUEST_V6[ICMP..]).unwrap()),
            Err(Error::Malformed)
        );
        assert_eq!(
            NdRepr::parse(&Packet::new_checked(&NEIGHBOR_SOLICIT[ICMP..ICMP + 23]).unwrap()),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn ndisc_options_reject_zero_length_and_overruns() {
        let mut ns = NEIGHBOR_SOLICIT[ICMP..].to_vec();
        ns[NDISC_LEN + 1] = 0;
        let p = NeighborSolicit::new_checked(&ns[..]).unwrap();
        let items: Vec<_> = p.options().collect();
        assert_eq!(items, vec![Err(Error::Malformed)]);
        assert_eq!(p.source_link_addr(), Err(Error::Malformed));
        ns[NDISC_LEN + 1] = 2;
        let p = NeighborSolicit::new_checked(&ns[..]).unwrap();
        assert_eq!(p.source_link_addr(), Err(Error::Truncated));
        // A one-byte tail.
        assert_eq!(NdiscOptions::new(&[1]).collect::<Vec<_>>(), vec![Err(Error::Truncated)]);
        // Unknown options are skipped on the way to the one asked for.
        assert_eq!(
            NdiscOptions::new(&[14, 1, 9, 9, 9, 9, 9, 9, 2, 1, 1, 2, 3, 4, 5, 6]).link_layer_addr(2),
            Ok(Some([1, 2, 3, 4, 5, 6]))
        );
        assert_eq!(NdiscOptions::new(&[14, 1, 9, 9, 9, 9, 9, 9]).link_layer_addr(2), Ok(None));
    }

    #[test]
    fn ndisc_views_reject_other_types_and_short_buffers() {
        assert_eq!(NeighborSolicit::new_checked(&NEIGHBOR_ADVERT[ICMP..]).unwrap_err(), Error::Malformed);
        assert_eq!(NeighborAdvert::new_checked(&NEIGHBOR_SOLICIT[ICMP..]).unwrap_err(), Error::Malformed);
        let mut na = NEIGHBOR_ADVERT[ICMP..].to_vec();
        na[1] = 1;
        assert_eq!(NeighborAdvert::new_checked(&na[..]).unwrap_err(), Error::Malformed);
        let repr = NeighborAdvertRepr {
            router: false,
            solicited: false,
            override_: false,
            target_addr: A6,
            target_mac: None,
        };
        let mut short = [0u8; 23];
        assert_eq!(repr.emit(&mut NeighborAdvert::new_unchecked(&mut short[..])), Err(Error::Truncated));
        let mut ok = [0u8; 24];
        repr.emit(&mut NeighborAdvert::new_unchecked(&mut ok[..])).unwrap();
        let na = NeighborAdvert::new_checked(&ok[..]).unwrap();
        assert_eq!(NeighborAdvertRepr::parse(&na).unwrap(), repr);
    }

    #[test]
    fn setters_round_trip() {
        let mut msg = PACKET_TOO_BIG_V6[ICMP..ICMP + 48].to_vec();
        let mut p = Packet::new_checked(&mut msg[..]).unwrap();
        p.set_mtu(1500);
        assert_eq!(p.mtu(), 1500);
        p.set_msg_type(msg_type::TIME_EXCEEDED);
        p.set_rfc4884_length(5);
        assert_eq!((p.rfc4884_length(), p.mtu()), (5, 5 << 24));
        p.set_echo_ident(1);
        p.set_echo_seq_no(2);
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (1, 2));
        p.set_code(0);
        p.data_mut()[0] = 0x60;
        p.fill_checksum(A6, B6);
        assert!(p.verify_checksum(A6, B6));
        assert!(is_error(msg_type::PACKET_TOO_BIG) && !is_error(msg_type::ECHO_REPLY));

        let mut ns = NEIGHBOR_SOLICIT[ICMP..].to_vec();
        let mut v = NeighborSolicit::new_checked(&mut ns[..]).unwrap();
        v.set_target_addr(A6);
        v.fill_checksum(A6, B6);
        assert_eq!(v.target_addr(), A6);
        assert!(v.verify_checksum(A6, B6));
        let mut na = NEIGHBOR_ADVERT[ICMP..].to_vec();
        let mut v = NeighborAdvert::new_checked(&mut na[..]).unwrap();
        v.set_flags_raw(advert_flags::OVERRIDE);
        v.set_target_addr(A6);
        v.fill_checksum(B6, A6);
        assert!(v.override_() && !v.router() && !v.solicited());
        assert!(v.verify_checksum(B6, A6));
    }

    #[test]
    fn every_prefix_parses_or_errors() {
        let frames: [&[u8]; 9] = [
            &ECHO_REQUEST_V6,
            &ECHO_REPLY_V6,
            &TIME_EXCEEDED_V6,
            &PACKET_TOO_BIG_V6,
            &PORT_UNREACHABLE_V6,
            &NEIGHBOR_SOLICIT,
            &NEIGHBOR_ADVERT,
            &DAD_SOLICIT,
            &ECHO_REQUEST_HL1_V6,
        ];
        for frame in frames {
            let msg = &frame[ICMP..];
            for len in 0..=msg.len() {
                let m = &msg[..len];
                match Packet::new_checked(m) {
                    Ok(p) => {
                        assert!(len >= HEADER_LEN);
                        let _ = (p.msg_type(), p.code(), p.checksum(), p.mtu());
                        let _ = (p.echo_ident(), p.echo_seq_no(), p.rfc4884_length());
                        let _ = (p.data().len(), p.extension(), p.verify_checksum(A6, B6));
                    }
                    Err(e) => assert_eq!(e, Error::Truncated),
                }
                if let Ok(ns) = NeighborSolicit::new_checked(m) {
                    let _ = NeighborSolicitRepr::parse(&ns);
                    let _ = ns.options().count();
                }
                if let Ok(na) = NeighborAdvert::new_checked(m) {
                    let _ = NeighborAdvertRepr::parse(&na);
                }
                if let Ok(p) = Packet::new_checked(m) {
                    let _ = NdRepr::parse(&p);
                }
                let mut buf = [0u8; 128];
                let _ = emit_echo_reply(m, &mut buf, A6, B6);
            }
        }
    }

    #[test]
    fn peek_msg_type_reads_the_type_of_a_cut_message() {
        assert_eq!(peek_msg_type(&NEIGHBOR_SOLICIT[ICMP..]), Some(msg_type::NEIGHBOR_SOLICIT));
        assert_eq!(peek_msg_type(&NEIGHBOR_ADVERT[ICMP..ICMP + 1]), Some(msg_type::NEIGHBOR_ADVERT));
        assert_eq!(peek_msg_type(&[]), None);
    }
}
