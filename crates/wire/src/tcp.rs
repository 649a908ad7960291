//! TCP segments (RFC 9293), as much as a router that segments TSO super-frames needs:
//! ports, sequence numbers, flags, the checksum over the IPv4/IPv6 pseudo-header.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                        Sequence Number                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Acknowledgment Number                      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Data |       |C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//! |       |       |R|E|G|K|H|T|N|N|                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Checksum            |         Urgent Pointer        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Options                    |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! A TCP segment has no length field: the view's buffer must be exactly the segment, as
//! delimited by the IP header.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::checksum;
use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Length of the TCP header without options.
pub const HEADER_LEN: usize = 20;
/// Length of the TCP header with the most options (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;
/// The IP protocol number of TCP.
pub const PROTOCOL: u8 = 6;
/// Offset of the checksum field in the header (virtio-net `csum_offset`).
pub const CHECKSUM_OFFSET: usize = 16;

/// The flag bits of byte 13.
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment number is valid.
    pub const ACK: u8 = 0x10;
    /// The urgent pointer is valid.
    pub const URG: u8 = 0x20;
    /// ECN echo (RFC 3168).
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced (RFC 3168).
    pub const CWR: u8 = 0x80;
}

/// A view over a TCP segment.
#[derive(Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer that holds the fixed header and the options its data offset claims.
    /// `Err(Truncated)` if the buffer is shorter, `Err(Malformed)` for a data offset below 5.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let packet = Packet { buffer };
        let hl = usize::from(packet.header_len());
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if packet.buffer.as_ref().len() < hl {
            return Err(Error::Truncated);
        }
        Ok(packet)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, f: Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    fn u32_at(&self, f: Field) -> u32 {
        let b = &self.buffer.as_ref()[f];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }
    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }
    /// The sequence number.
    pub fn seq_number(&self) -> u32 {
        self.u32_at(field::SEQ_NUM)
    }
    /// The acknowledgment number.
    pub fn ack_number(&self) -> u32 {
        self.u32_at(field::ACK_NUM)
    }
    /// The header length in bytes (data offset times 4), options included.
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }
    /// The four reserved bits between the data offset and the flags (RFC 9293 "Rsrvd";
    /// the lowest was ECN-nonce's NS, RFC 3540, and is AccECN's AE).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::DATA_OFF] & 0x0f
    }
    /// The eight flag bits of byte 13 ([`flags`]).
    pub fn flags_raw(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    fn flag(&self, f: u8) -> bool {
        self.flags_raw() & f != 0
    }
    /// The FIN flag.
    pub fn fin(&self) -> bool {
        self.flag(flags::FIN)
    }
    /// The SYN flag.
    pub fn syn(&self) -> bool {
        self.flag(flags::SYN)
    }
    /// The RST flag.
    pub fn rst(&self) -> bool {
        self.flag(flags::RST)
    }
    /// The PSH flag.
    pub fn psh(&self) -> bool {
        self.flag(flags::PSH)
    }
    /// The ACK flag.
    pub fn ack(&self) -> bool {
        self.flag(flags::ACK)
    }
    /// The URG flag.
    pub fn urg(&self) -> bool {
        self.flag(flags::URG)
    }
    /// The ECE flag.
    pub fn ece(&self) -> bool {
        self.flag(flags::ECE)
    }
    /// The CWR flag.
    pub fn cwr(&self) -> bool {
        self.flag(flags::CWR)
    }
    /// The window field (unscaled).
    pub fn window_len(&self) -> u16 {
        self.u16_at(field::WIN_SIZE)
    }
    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }
    /// The urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        self.u16_at(field::URGENT)
    }
    /// The option bytes between the fixed header and the payload (padding included).
    pub fn options(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.header_len()).min(b.len());
        &b[HEADER_LEN.min(end)..end]
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[usize::from(self.header_len()).min(b.len())..]
    }
    /// True when the checksum over the IPv4 pseudo-header and the segment is correct.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, b.len() as u32);
        checksum::fold(checksum::add(ph, checksum::sum(b))) == 0xffff
    }
    /// True when the checksum over the IPv6 pseudo-header and the segment is correct.
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, b.len() as u32);
        checksum::fold(checksum::add(ph, checksum::sum(b))) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }
    fn set_flag(&mut self, f: u8, on: bool) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        if on {
            *b |= f;
        } else {
            *b &= !f;
        }
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.set_u16_at(field::SRC_PORT, v)
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set_u16_at(field::DST_PORT, v)
    }
    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::ACK_NUM].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the header length in bytes (a multiple of 4 from 20 to 60); the reserved bits
    /// of byte 12 are cleared.
    pub fn set_header_len(&mut self, len: u8) {
        self.buffer.as_mut()[field::DATA_OFF] = (len / 4) << 4;
    }
    /// Sets the four reserved bits, keeping the data offset; bits above the 4th are dropped.
    pub fn set_reserved(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::DATA_OFF];
        *b = (*b & 0xf0) | (v & 0x0f);
    }
    /// Sets all eight flag bits of byte 13.
    pub fn set_flags_raw(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets or clears FIN.
    pub fn set_fin(&mut self, on: bool) {
        self.set_flag(flags::FIN, on)
    }
    /// Sets or clears SYN.
    pub fn set_syn(&mut self, on: bool) {
        self.set_flag(flags::SYN, on)
    }
    /// Sets or clears RST.
    pub fn set_rst(&mut self, on: bool) {
        self.set_flag(flags::RST, on)
    }
    /// Sets or clears PSH.
    pub fn set_psh(&mut self, on: bool) {
        self.set_flag(flags::PSH, on)
    }
    /// Sets or clears ACK.
    pub fn set_ack(&mut self, on: bool) {
        self.set_flag(flags::ACK, on)
    }
    /// Sets or clears URG.
    pub fn set_urg(&mut self, on: bool) {
        self.set_flag(flags::URG, on)
    }
    /// Sets or clears ECE.
    pub fn set_ece(&mut self, on: bool) {
        self.set_flag(flags::ECE, on)
    }
    /// Sets or clears CWR.
    pub fn set_cwr(&mut self, on: bool) {
        self.set_flag(flags::CWR, on)
    }
    /// Sets the window field.
    pub fn set_window_len(&mut self, v: u16) {
        self.set_u16_at(field::WIN_SIZE, v)
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v)
    }
    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, v: u16) {
        self.set_u16_at(field::URGENT, v)
    }
    /// The option bytes, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.header_len());
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = usize::from(self.header_len());
        let b = self.buffer.as_mut();
        let start = start.min(b.len());
        &mut b[start..]
    }
    fn fill_with_pseudo_header(&mut self, ph: u32) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::add(ph, checksum::sum(self.buffer.as_ref())));
        self.set_checksum(c);
    }
    /// Computes and writes the checksum over the IPv4 pseudo-header and the segment.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let len = self.buffer.as_ref().len() as u32;
        self.fill_with_pseudo_header(checksum::pseudo_header_v4(src, dst, PROTOCOL, len));
    }
    /// Computes and writes the checksum over the IPv6 pseudo-header and the segment.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let len = self.buffer.as_ref().len() as u32;
        self.fill_with_pseudo_header(checksum::pseudo_header_v6(src, dst, PROTOCOL, len));
    }
    /// Writes the partial checksum a `NEEDS_CSUM` frame carries: the folded, not
    /// complemented, IPv4 pseudo-header sum, which whoever completes the checksum adds to
    /// the sum of the segment.
    pub fn fill_partial_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let len = self.buffer.as_ref().len() as u32;
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, len);
        self.set_checksum(checksum::fold(ph));
    }
    /// Writes the partial checksum (IPv6 pseudo-header sum) of a `NEEDS_CSUM` frame.
    pub fn fill_partial_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let len = self.buffer.as_ref().len() as u32;
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, len);
        self.set_checksum(checksum::fold(ph));
    }
}

/// A TCP header, decoded. The options are kept as raw bytes (padding included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// The flag bits ([`flags`]).
    pub flags: u8,
    /// Window field (unscaled).
    pub window_len: u16,
    /// Urgent pointer.
    pub urgent_at: u16,
    /// Option bytes: a multiple of 4, at most 40.
    pub options: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Decodes the header of a checked segment.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        let bytes: &'a [u8] = packet.buffer.as_ref();
        let end = usize::from(packet.header_len()).min(bytes.len());
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags_raw(),
            window_len: packet.window_len(),
            urgent_at: packet.urgent_at(),
            options: &bytes[HEADER_LEN.min(end)..end],
        })
    }

    /// Length of the header this writes. `Err(Malformed)` if the options are not a
    /// multiple of 4 bytes or longer than 40.
    pub fn header_len(&self) -> Result<usize> {
        let len = HEADER_LEN + self.options.len();
        if !self.options.len().is_multiple_of(4) || len > MAX_HEADER_LEN {
            return Err(Error::Malformed);
        }
        Ok(len)
    }

    /// Length of the header this writes plus `payload_len`.
    pub fn buffer_len(&self, payload_len: usize) -> Result<usize> {
        Ok(self.header_len()? + payload_len)
    }

    /// Writes the header and options at the start of `packet`, with a zero checksum: write
    /// the payload after it, then fill the checksum. `Err(Truncated)` if the buffer is
    /// shorter than the header, `Err(Malformed)` for options [`Repr::header_len`] rejects.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        let hl = self.header_len()?;
        if packet.buffer.as_ref().len() < hl {
            return Err(Error::Truncated);
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        packet.set_header_len(hl as u8);
        packet.set_flags_raw(self.flags);
        packet.set_window_len(self.window_len);
        packet.set_checksum(0);
        packet.set_urgent_at(self.urgent_at);
        packet.options_mut().copy_from_slice(self.options);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Frames captured with a Python AF_PACKET socket (ETH_P_ALL) on the receiving veth of a
    // pair between two network namespaces, A (198.18.50.1 / 2001:db8:50::1) and B
    // (198.18.50.2 / 2001:db8:50::2), after `ethtool -K <dev> tx off` on both ends so the
    // kernel computed every checksum in full (a local sender on veth otherwise leaves only
    // the pseudo-header sum). Traffic: Python `socket.create_connection` from A port 40001
    // to a Python server on B port 5001 (IPv4), and from A port 40004 to B port 5004 (IPv6).
    const TCP4: usize = 14 + 20;
    const TCP6: usize = 14 + 40;
    const A4: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 1);
    const B4: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 2);
    const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 1);
    const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 2);

    // A's SYN (MSS 1460, SACK permitted, timestamps, window scale 7).
    static TCP_SYN_V4: [u8; 74] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x3c, 0xa4, 0x7f, 0x40, 0x00, 0x40, 0x06, 0xa6, 0x14, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x32, 0x02,
        0x9c, 0x41, 0x13, 0x89, 0xf3, 0xed, 0x70, 0x59, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0x4b,
        0x79, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x26, 0x10, 0xd7, 0x48, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
    ];

    // A's "hello\n" with PSH|ACK and a timestamp option.
    static TCP_DATA_V4: [u8; 72] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x3a, 0xa4, 0x81, 0x40, 0x00, 0x40, 0x06, 0xa6, 0x14, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x32, 0x02,
        0x9c, 0x41, 0x13, 0x89, 0xf3, 0xed, 0x70, 0x5a, 0x90, 0x3c, 0x53, 0xd0, 0x80, 0x18, 0x00, 0x3f, 0x7c,
        0xc6, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x26, 0x10, 0xd7, 0x48, 0xdc, 0x6b, 0xf3, 0xc0, 0x68, 0x65,
        0x6c, 0x6c, 0x6f, 0x0a,
    ];

    // A's FIN|ACK.
    static TCP_FIN_V4: [u8; 66] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x08, 0x00, 0x45, 0x00, 0x00,
        0x34, 0xa4, 0x83, 0x40, 0x00, 0x40, 0x06, 0xa6, 0x18, 0xc6, 0x12, 0x32, 0x01, 0xc6, 0x12, 0x32, 0x02,
        0x9c, 0x41, 0x13, 0x89, 0xf3, 0xed, 0x70, 0x60, 0x90, 0x3c, 0x53, 0xd6, 0x80, 0x11, 0x00, 0x3f, 0xc0,
        0xa3, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x26, 0x10, 0xd7, 0x48, 0xdc, 0x6b, 0xf3, 0xc0,
    ];

    // A's SYN over IPv6 (MSS 1440).
    static TCP_SYN_V6: [u8; 94] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x01, 0x9b,
        0x5e, 0x00, 0x28, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x9c, 0x44, 0x13, 0x8c, 0xef, 0x32, 0x04, 0x84, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02,
        0xfd, 0x20, 0xbb, 0xa7, 0x00, 0x00, 0x02, 0x04, 0x05, 0xa0, 0x04, 0x02, 0x08, 0x0a, 0xa9, 0x99, 0xe6,
        0x12, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
    ];

    // A's "hello6\n" over IPv6.
    static TCP_DATA_V6: [u8; 93] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x86, 0xdd, 0x60, 0x01, 0x9b,
        0x5e, 0x00, 0x27, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x01, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x9c, 0x44, 0x13, 0x8c, 0xef, 0x32, 0x04, 0x85, 0xd6, 0x80, 0x94, 0x45, 0x80, 0x18,
        0x00, 0x40, 0x2e, 0x2a, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0xa9, 0x99, 0xe6, 0x12, 0x87, 0x6f, 0x78,
        0xbc, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x36, 0x0a,
    ];

    #[test]
    fn parses_captured_syn() {
        let p = Packet::new_checked(&TCP_SYN_V4[TCP4..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (40001, 5001));
        assert_eq!(p.seq_number(), 0xf3ed7059);
        assert_eq!(p.ack_number(), 0);
        assert_eq!((p.header_len(), p.reserved()), (40, 0));
        assert_eq!(p.flags_raw(), flags::SYN);
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst() && !p.psh());
        assert!(!p.urg() && !p.ece() && !p.cwr());
        assert_eq!(p.window_len(), 64240);
        assert_eq!(p.checksum(), 0x4b79);
        assert_eq!(p.urgent_at(), 0);
        // MSS option first: kind 2, length 4, 1460.
        assert_eq!(&p.options()[..4], &[2, 4, 0x05, 0xb4]);
        assert_eq!(p.options().len(), 20);
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum_v4(A4, B4));
        assert!(!p.verify_checksum_v4(A4, Ipv4Addr::new(198, 18, 50, 3)));
    }

    #[test]
    fn parses_captured_data_and_fin() {
        let p = Packet::new_checked(&TCP_DATA_V4[TCP4..]).unwrap();
        assert_eq!(p.payload(), b"hello\n");
        assert_eq!(p.flags_raw(), flags::PSH | flags::ACK);
        assert_eq!(p.seq_number(), 0xf3ed705a);
        assert_eq!(p.ack_number(), 0x903c53d0);
        assert_eq!(p.header_len(), 32);
        assert!(p.verify_checksum_v4(A4, B4));

        let p = Packet::new_checked(&TCP_FIN_V4[TCP4..]).unwrap();
        assert!(p.fin() && p.ack() && !p.psh());
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum_v4(A4, B4));
    }

    #[test]
    fn parses_captured_ipv6_segments() {
        let p = Packet::new_checked(&TCP_SYN_V6[TCP6..]).unwrap();
        assert!(p.syn());
        assert_eq!((p.src_port(), p.dst_port()), (40004, 5004));
        assert_eq!(&p.options()[..4], &[2, 4, 0x05, 0xa0]);
        assert!(p.verify_checksum_v6(A6, B6));
        let p = Packet::new_checked(&TCP_DATA_V6[TCP6..]).unwrap();
        assert_eq!(p.payload(), b"hello6\n");
        assert!(p.verify_checksum_v6(A6, B6));
        assert!(!p.verify_checksum_v6(B6, B6));
    }

    #[test]
    fn fill_checksum_reproduces_kernel_checksums() {
        for frame in [&TCP_SYN_V4[..], &TCP_DATA_V4, &TCP_FIN_V4] {
            let mut seg = frame[TCP4..].to_vec();
            let mut p = Packet::new_checked(&mut seg[..]).unwrap();
            p.set_checksum(0xdead);
            p.fill_checksum_v4(A4, B4);
            assert_eq!(&seg[..], &frame[TCP4..]);
        }
        for frame in [&TCP_SYN_V6[..], &TCP_DATA_V6] {
            let mut seg = frame[TCP6..].to_vec();
            let mut p = Packet::new_checked(&mut seg[..]).unwrap();
            p.set_checksum(0);
            p.fill_checksum_v6(A6, B6);
            assert_eq!(&seg[..], &frame[TCP6..]);
        }
    }

    #[test]
    fn partial_checksum_completes_to_full() {
        // What a NEEDS_CSUM consumer does: sum from csum_start, field holding the
        // pseudo-header sum, and store the complement at csum_offset.
        for (frame, v6) in [(&TCP_DATA_V4[..], false), (&TCP_DATA_V6[..], true)] {
            let off = if v6 { TCP6 } else { TCP4 };
            let mut seg = frame[off..].to_vec();
            let mut p = Packet::new_checked(&mut seg[..]).unwrap();
            if v6 {
                p.fill_partial_checksum_v6(A6, B6);
            } else {
                p.fill_partial_checksum_v4(A4, B4);
            }
            let c = checksum::checksum(&seg);
            seg[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 2].copy_from_slice(&c.to_be_bytes());
            assert_eq!(&seg[..], &frame[off..]);
        }
    }

    #[test]
    fn segmentation_edits_keep_checksum_valid() {
        let mut seg = TCP_DATA_V4[TCP4..].to_vec();
        let mut p = Packet::new_checked(&mut seg[..]).unwrap();
        p.set_seq_number(p.seq_number().wrapping_add(1448));
        p.set_psh(false);
        p.set_fin(true);
        p.set_cwr(true);
        assert!(p.fin() && p.cwr() && !p.psh() && p.ack());
        assert!(!p.verify_checksum_v4(A4, B4));
        p.fill_checksum_v4(A4, B4);
        assert!(p.verify_checksum_v4(A4, B4));
        p.set_flags_raw(flags::ACK);
        assert_eq!(p.flags_raw(), flags::ACK);
        p.set_syn(true);
        p.set_rst(true);
        p.set_urg(true);
        p.set_ece(true);
        p.set_ack(false);
        assert_eq!(p.flags_raw(), flags::SYN | flags::RST | flags::URG | flags::ECE);
    }

    #[test]
    fn setters_write_their_fields() {
        let mut seg = TCP_DATA_V4[TCP4..].to_vec();
        seg[12] |= 0x01; // AccECN's AE bit, as a sender that uses it sets it
        let mut p = Packet::new_checked(&mut seg[..]).unwrap();
        assert_eq!(p.reserved(), 0x01);
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_ack_number(3);
        p.set_window_len(4);
        p.set_urgent_at(5);
        p.payload_mut()[0] = b'j';
        p.options_mut()[0] = 0;
        assert_eq!(
            (p.src_port(), p.dst_port(), p.ack_number(), p.window_len(), p.urgent_at()),
            (1, 2, 3, 4, 5)
        );
        assert_eq!(p.payload(), b"jello\n");
        assert_eq!(p.options()[0], 0);
        p.set_reserved(0xf2);
        assert_eq!((p.header_len(), p.reserved()), (32, 0x02));
        p.set_header_len(20);
        assert_eq!((p.header_len(), p.reserved()), (20, 0));
        assert_eq!(p.payload().len(), 18);
        assert_eq!(seg[..4], [0, 1, 0, 2]);
    }

    #[test]
    fn repr_round_trips_captured_segments() {
        for (frame, off, v6) in [
            (&TCP_SYN_V4[..], TCP4, false),
            (&TCP_DATA_V4, TCP4, false),
            (&TCP_FIN_V4, TCP4, false),
            (&TCP_SYN_V6, TCP6, true),
            (&TCP_DATA_V6, TCP6, true),
        ] {
            let seg = &frame[off..];
            let p = Packet::new_checked(seg).unwrap();
            let repr = Repr::parse(&p).unwrap();
            let payload = p.payload();
            let mut out = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
            let mut q = Packet::new_unchecked(&mut out[..]);
            repr.emit(&mut q).unwrap();
            q.payload_mut().copy_from_slice(payload);
            if v6 {
                q.fill_checksum_v6(A6, B6);
            } else {
                q.fill_checksum_v4(A4, B4);
            }
            assert_eq!(&out[..], seg);
        }
    }

    #[test]
    fn repr_rejects_bad_options_and_short_buffers() {
        let p = Packet::new_checked(&TCP_SYN_V4[TCP4..]).unwrap();
        let mut repr = Repr::parse(&p).unwrap();
        let mut buf = [0u8; 39];
        assert_eq!(repr.emit(&mut Packet::new_unchecked(&mut buf[..])), Err(Error::Truncated));
        repr.options = &[1, 1, 1];
        assert_eq!(repr.header_len(), Err(Error::Malformed));
        let long = [1u8; 44];
        repr.options = &long;
        assert_eq!(repr.buffer_len(0), Err(Error::Malformed));
    }

    #[test]
    fn malformed_and_truncated_segments_are_errors() {
        let mut seg = TCP_SYN_V4[TCP4..].to_vec();
        seg[12] = 0x40; // data offset 4: 16 bytes
        assert_eq!(Packet::new_checked(&seg[..]).unwrap_err(), Error::Malformed);
        seg[12] = 0xf0; // 60 bytes claimed, 40 present
        assert_eq!(Packet::new_checked(&seg[..]).unwrap_err(), Error::Truncated);
        for frame in [
            &TCP_SYN_V4[TCP4..],
            &TCP_DATA_V4[TCP4..],
            &TCP_FIN_V4[TCP4..],
            &TCP_SYN_V6[TCP6..],
            &TCP_DATA_V6[TCP6..],
        ] {
            let hl = usize::from(frame[12] >> 4) * 4;
            for len in 0..=frame.len() {
                match Packet::new_checked(&frame[..len]) {
                    Ok(p) => {
                        assert!(len >= hl);
                        let _ = (p.options().len(), p.payload().len(), p.flags_raw());
                        let _ = p.verify_checksum_v4(A4, B4);
                        let _ = Repr::parse(&p).unwrap();
                    }
                    Err(e) => {
                        assert!(len < hl);
                        assert_eq!(e, Error::Truncated);
                    }
                }
            }
        }
    }
}
