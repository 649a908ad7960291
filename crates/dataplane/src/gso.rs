//! Software segmentation of TCP/UDP super-frames and checksum completion, the way the
//! kernel's `mpls_gso` plus TCP/UDP GSO do it, in userspace.
//!
//! A super-frame is one Ethernet frame, zero or more MPLS label stack entries, an IPv4 or
//! IPv6 header, a TCP or UDP header and up to 64 KiB of payload, with virtio-net offload
//! metadata ([`vmpls_wire::virtio_net::Repr`]) that says how to cut it: `gso_type` and
//! `gso_size`. [`segment`] cuts the payload at `gso_size` and writes each piece, preceded
//! by a copy of every header in front of it, into a buffer from the [`PacketPool`]. Every
//! segment leaves with complete checksums and no offload metadata.
//!
//! Everything here is a pure function over buffers: no I/O, no allocation per segment.
//! Offsets are computed from the headers themselves: `hdr_len` and `csum_start` of the
//! offload metadata come from the sender (a guest may lie) and are not trusted for
//! segmentation.
//!
//! Panic-freedom: headers are read through `vmpls_wire` views validated by `new_checked()`
//! (or written through `new_unchecked()` views over copies of validated headers); malformed
//! frames give a [`GsoError`].

use core::fmt;

use vmpls_wire::ipv4::protocol;
use vmpls_wire::virtio_net::GsoType;
use vmpls_wire::{checksum, ipv4, ipv6, tcp, udp, virtio_net};

use crate::packet::{Packet, PacketPool};

/// Why a frame could not be segmented or its checksum completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoError {
    /// The frame ends before a header it claims (IP, TCP or UDP) ends, or before the
    /// length an IP or UDP length field claims.
    Truncated,
    /// A header field holds a value the protocol does not allow: IP version other than 4
    /// or 6, IPv4 header length below 20 bytes or above the total length, TCP data offset
    /// below 20 bytes, UDP length below 8.
    Malformed,
    /// The frame is well formed but not something vmpls segments: IPv6 extension headers,
    /// an IPv4 fragment, a transport other than TCP or UDP, or the legacy UDP
    /// fragmentation offload (`GsoType::Udp`).
    Unsupported,
    /// The IP length field disagrees with the frame: a super-frame's IPv4 total length or
    /// IPv6 payload length must cover exactly the bytes from the IP header to the end of
    /// the frame, as the kernel sets them. (Lengths above 64 KiB, BIG TCP, are not
    /// supported.)
    LengthMismatch,
    /// [`segment`] was given a frame that is not a super-frame (`gso_type` none): complete
    /// its checksum with [`complete_checksum`] instead.
    NotGso,
    /// The super-frame asks for segments of 0 payload bytes.
    ZeroGsoSize,
    /// `gso_type` does not match the headers (TCPv4 over IPv6, TCP GSO over UDP, ...).
    GsoTypeMismatch,
    /// `csum_start + csum_offset` of a partial checksum points outside the frame.
    BadChecksumOffset,
    /// The packet pool ran out of buffers. Segments already appended to the output are
    /// complete and valid; the rest of the super-frame is lost.
    NoBuffer,
    /// The transport checksum of a packet with a complete checksum is wrong.
    BadChecksum,
    /// A segment would not fit in a packet buffer (a frame grown beyond `MAX_FRAME` by
    /// pushed labels with a `gso_size` close to 64 KiB).
    TooLarge,
    /// The super-frame would be cut into more than [`MAX_GSO_SEGMENTS`] segments.
    TooManySegments,
}

impl fmt::Display for GsoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GsoError::Truncated => "frame shorter than its IP/TCP/UDP headers or lengths",
            GsoError::Malformed => "malformed IP or transport header",
            GsoError::Unsupported => {
                "unsupported for segmentation (IPv6 extension headers, IPv4 fragment, \
                 transport other than TCP/UDP, or UDP fragmentation offload)"
            }
            GsoError::LengthMismatch => "IP length field disagrees with the frame length",
            GsoError::NotGso => "not a GSO super-frame: complete the checksum instead",
            GsoError::ZeroGsoSize => "GSO super-frame with gso_size 0",
            GsoError::GsoTypeMismatch => "gso_type does not match the frame's headers",
            GsoError::BadChecksumOffset => "partial checksum offsets point outside the frame",
            GsoError::NoBuffer => "packet pool exhausted while segmenting",
            GsoError::TooLarge => "segment larger than a packet buffer",
            GsoError::BadChecksum => "transport checksum is wrong",
            GsoError::TooManySegments => "super-frame would be cut into too many segments",
        })
    }
}

impl std::error::Error for GsoError {}

impl From<vmpls_wire::Error> for GsoError {
    fn from(e: vmpls_wire::Error) -> GsoError {
        match e {
            vmpls_wire::Error::Truncated => GsoError::Truncated,
            vmpls_wire::Error::Malformed => GsoError::Malformed,
        }
    }
}

/// The smallest `gso_size` a port takes from whoever hands it a super-frame (a guest, a
/// host behind a veth or a TAP): Linux's `TCP_MIN_MSS`. It is the least MSS Linux lets a
/// socket set (`TCP_MAXSEG`) and where its path-MTU probing stops; its TCP goes below it
/// only for a peer that advertises a smaller MSS, which is itself the attack Linux's
/// `tcp_min_snd_mss` (CVE-2019-11479) limits. Real links do not force it either: IPv6
/// needs 1280 bytes (MSS 1220) and no IPv4 link in use is near its 68-byte minimum. Real
/// UDP GSO senders (QUIC, WireGuard) cut at path-MTU sizes. Below this floor a 64 KiB
/// frame asks for thousands of segments (65,535 at `gso_size` 1): refused where the
/// frame enters ([`received_offload`]).
pub const MIN_GSO_SIZE: u16 = 88;

/// The most segments one super-frame is cut into: a whole 64 KiB IP payload cut at
/// [`MIN_GSO_SIZE`] (745). Real TSO frames stay far below (45 at MSS 1448, 123 at 536);
/// Linux's own bound (`GSO_MAX_SEGS`, 65,535) is no bound at all. Checked where a frame is
/// cut, on the exact count, so it also holds for super-frames the router builds itself
/// (coalescing, the egress rebuild for a customer's MTU).
pub const MAX_GSO_SEGMENTS: usize = (u16::MAX as usize).div_ceil(MIN_GSO_SIZE as usize);

/// Why a port refuses the virtio-net header a frame came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadRefused {
    /// Shorter than the header, an unknown `gso_type`, or offsets (`hdr_len`, the partial
    /// checksum's field) outside the frame.
    BadHeader,
    /// A super-frame with a `gso_size` below [`MIN_GSO_SIZE`].
    GsoSizeTooSmall,
}

/// Decodes the virtio-net header (`header`, its first [`virtio_net::HEADER_LEN`] bytes)
/// that came with a frame of `frame_len` bytes, as every port does where frames enter:
/// the offsets must lie inside the frame and a super-frame's `gso_size` must be at least
/// [`MIN_GSO_SIZE`]. The sender is not trusted.
#[inline(always)]
pub fn received_offload(header: &[u8], frame_len: usize) -> Result<virtio_net::Repr, OffloadRefused> {
    let header = virtio_net::Header::new_checked(header).map_err(|_| OffloadRefused::BadHeader)?;
    let offload = virtio_net::Repr::parse(&header).map_err(|_| OffloadRefused::BadHeader)?;
    let csum_end = usize::from(offload.csum_start) + usize::from(offload.csum_offset) + 2;
    if (offload.needs_csum && csum_end > frame_len) || usize::from(offload.hdr_len) > frame_len {
        return Err(OffloadRefused::BadHeader);
    }
    if offload.is_gso() && offload.gso_size < MIN_GSO_SIZE {
        return Err(OffloadRefused::GsoSizeTooSmall);
    }
    Ok(offload)
}

/// Where the headers of a super-frame are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Start of the IP header in the frame (after Ethernet and any label stack).
    pub l3_offset: usize,
    /// The IP header is IPv6 (else IPv4).
    pub ipv6: bool,
    /// Start of the TCP or UDP header.
    pub l4_offset: usize,
    /// `protocol::TCP` or `protocol::UDP` (`vmpls_wire::ipv4::protocol`).
    pub l4_proto: u8,
    /// Start of the transport payload: end of the headers every segment carries.
    pub payload_offset: usize,
}

/// Finds the IP and transport headers of `frame`, whose IP header starts at `l3_offset`:
/// IPv4 (options allowed, not a fragment) or IPv6 (no extension headers), then TCP or UDP.
/// Checks that every header fits in the frame and that no IP or UDP length field claims
/// more than the frame holds; shorter lengths (trailing bytes) are left to the caller.
pub fn layout(frame: &[u8], l3_offset: usize) -> Result<Layout, GsoError> {
    let ip = frame.get(l3_offset..).ok_or(GsoError::Truncated)?;
    let (ipv6, ip_hdr_len, proto) = match ip.first().map(|b| b >> 4) {
        None => return Err(GsoError::Truncated),
        Some(4) => {
            let p = ipv4::Packet::new_checked(ip)?;
            if p.is_fragment() {
                return Err(GsoError::Unsupported);
            }
            (false, p.header_len(), p.protocol())
        }
        Some(6) => {
            let p = ipv6::Packet::new_checked(ip)?;
            (true, ipv6::HEADER_LEN, p.next_header())
        }
        Some(_) => return Err(GsoError::Malformed),
    };
    let l4_offset = l3_offset + ip_hdr_len;
    let l4 = &frame[l4_offset..];
    let l4_hdr_len = match proto {
        protocol::TCP => usize::from(tcp::Packet::new_checked(l4)?.header_len()),
        protocol::UDP => {
            udp::Packet::new_checked(l4)?;
            udp::HEADER_LEN
        }
        _ => return Err(GsoError::Unsupported),
    };
    Ok(Layout { l3_offset, ipv6, l4_offset, l4_proto: proto, payload_offset: l4_offset + l4_hdr_len })
}

/// Checks that the IP length field covers exactly the frame from the IP header on. The
/// kernel sets it to the whole super-frame's length (measured: a 5066-byte TSO frame
/// carries IPv4 total length 5052, an IPv6 one of 3086 bytes payload length 3032).
fn check_ip_length(frame: &[u8], lay: &Layout) -> Result<(), GsoError> {
    let ip = &frame[lay.l3_offset..];
    let claimed = if lay.ipv6 {
        ipv6::Packet::new_unchecked(ip).total_len()
    } else {
        usize::from(ipv4::Packet::new_unchecked(ip).total_len())
    };
    if claimed == ip.len() { Ok(()) } else { Err(GsoError::LengthMismatch) }
}

/// Completes a partial transport checksum (`offload.needs_csum`): the ones-complement sum
/// from `csum_start` to the end of the frame, stored at `csum_start + csum_offset`; then
/// clears `needs_csum`. The partial field already holds the pseudo-header sum, as the
/// kernel leaves it. A frame without `needs_csum` is left alone.
///
/// The IP payload is taken to end with the frame: frames handed over with a partial
/// checksum (by the kernel, a guest, a TAP) carry no Ethernet padding. On a super-frame
/// this completes the checksum over the whole frame (for sending it whole, e.g. on a
/// jumbo link) and leaves the GSO fields alone.
pub fn complete_checksum(pkt: &mut Packet) -> Result<(), GsoError> {
    if !pkt.offload.needs_csum {
        return Ok(());
    }
    let start = usize::from(pkt.offload.csum_start);
    let field = start + usize::from(pkt.offload.csum_offset);
    let frame = pkt.frame_mut();
    if field + 2 > frame.len() {
        return Err(GsoError::BadChecksumOffset);
    }
    let mut c = checksum::finish(checksum::sum(&frame[start..]));
    if c == 0 {
        // As the kernel's skb_checksum_help: 0 means "no checksum" to UDP; 0xffff is
        // the same value in ones-complement arithmetic.
        c = 0xffff;
    }
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    pkt.offload.needs_csum = false;
    Ok(())
}

/// Turns a large non-GSO TCP packet back into a super-frame whose segments carry at most
/// `max_l3_len` bytes of IP packet each: what the egress PE does with a frame that crossed
/// the core whole as one jumbo frame, before it goes to a customer port with a smaller
/// MTU (the port's TSO, or [`segment`], then cuts it). Sets `gso_type`, `gso_size`,
/// `hdr_len` and a partial checksum; a complete checksum is verified first and replaced
/// by the pseudo-header sum, as the `NEEDS_CSUM` convention wants. Returns the new
/// `gso_size`. UDP and fragments are not rebuilt ([`GsoError::Unsupported`]): cutting a
/// UDP datagram would change what the receiver's application reads.
///
/// A TCP super-frame whose segments are too large for `max_l3_len` (one the pipeline
/// merged from jumbo frames, which a transit router had merged and sent whole) gets the
/// smaller `gso_size`; its partial checksum must point at its TCP checksum field.
pub fn rebuild(pkt: &mut Packet, l3_offset: usize, max_l3_len: usize) -> Result<u16, GsoError> {
    if pkt.offload.is_gso() {
        return shrink_gso_size(pkt, l3_offset, max_l3_len);
    }
    let lay = layout(pkt.frame(), l3_offset)?;
    if lay.l4_proto != protocol::TCP {
        return Err(GsoError::Unsupported);
    }
    check_ip_length(pkt.frame(), &lay)?;
    let headers = lay.payload_offset - l3_offset;
    let gso_size = max_l3_len.checked_sub(headers).filter(|n| *n > 0).ok_or(GsoError::ZeroGsoSize)?;
    let gso_size = u16::try_from(gso_size).map_err(|_| GsoError::TooLarge)?;
    let field = lay.l4_offset + 16;
    if pkt.offload.needs_csum {
        if usize::from(pkt.offload.csum_start) != lay.l4_offset || pkt.offload.csum_offset != 16 {
            return Err(GsoError::BadChecksumOffset);
        }
    } else {
        let frame = pkt.frame_mut();
        let tcp_len = (frame.len() - lay.l4_offset) as u32;
        let ip = &frame[l3_offset..];
        let pseudo = if lay.ipv6 {
            let ip = ipv6::Packet::new_unchecked(ip);
            checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), protocol::TCP, tcp_len)
        } else {
            let ip = ipv4::Packet::new_unchecked(ip);
            checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), protocol::TCP, tcp_len)
        };
        if checksum::fold(checksum::add(pseudo, checksum::sum(&frame[lay.l4_offset..]))) != 0xffff {
            return Err(GsoError::BadChecksum);
        }
        frame[field..field + 2].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
    }
    pkt.offload.needs_csum = true;
    pkt.offload.csum_start = lay.l4_offset as u16;
    pkt.offload.csum_offset = 16;
    pkt.offload.gso_type = if lay.ipv6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
    pkt.offload.gso_size = gso_size;
    pkt.offload.hdr_len = lay.payload_offset as u16;
    Ok(gso_size)
}

/// [`rebuild`] for a TCP super-frame: lowers its `gso_size` so each segment carries at
/// most `max_l3_len` bytes of IP packet.
fn shrink_gso_size(pkt: &mut Packet, l3_offset: usize, max_l3_len: usize) -> Result<u16, GsoError> {
    if !matches!(pkt.offload.gso_type, GsoType::TcpV4 | GsoType::TcpV6) {
        return Err(GsoError::Unsupported);
    }
    let p = plan(pkt, l3_offset)?;
    if !pkt.offload.needs_csum
        || usize::from(pkt.offload.csum_start) != p.lay.l4_offset
        || pkt.offload.csum_offset != 16
    {
        return Err(GsoError::BadChecksumOffset);
    }
    let headers = p.lay.payload_offset - l3_offset;
    let gso_size = max_l3_len.checked_sub(headers).filter(|n| *n > 0).ok_or(GsoError::ZeroGsoSize)?;
    let gso_size = u16::try_from(gso_size.min(p.gso_size)).map_err(|_| GsoError::TooLarge)?;
    pkt.offload.gso_size = gso_size;
    pkt.offload.hdr_len = p.lay.payload_offset as u16;
    Ok(gso_size)
}

/// What [`segment`] needs to know about a validated super-frame.
struct Plan {
    lay: Layout,
    gso_size: usize,
    payload_len: usize,
    segments: usize,
}

fn plan(pkt: &Packet, l3_offset: usize) -> Result<Plan, GsoError> {
    let off = &pkt.offload;
    match off.gso_type {
        GsoType::None => return Err(GsoError::NotGso),
        GsoType::Udp => return Err(GsoError::Unsupported),
        GsoType::TcpV4 | GsoType::TcpV6 | GsoType::UdpL4 => {}
    }
    if off.gso_size == 0 {
        return Err(GsoError::ZeroGsoSize);
    }
    let frame = pkt.frame();
    let lay = layout(frame, l3_offset)?;
    let type_ok = match off.gso_type {
        GsoType::TcpV4 => !lay.ipv6 && lay.l4_proto == protocol::TCP,
        GsoType::TcpV6 => lay.ipv6 && lay.l4_proto == protocol::TCP,
        _ => lay.l4_proto == protocol::UDP,
    };
    if !type_ok {
        return Err(GsoError::GsoTypeMismatch);
    }
    check_ip_length(frame, &lay)?;
    let gso_size = usize::from(off.gso_size);
    let payload_len = frame.len() - lay.payload_offset;
    let segments = payload_len.div_ceil(gso_size).max(1);
    if segments > MAX_GSO_SEGMENTS {
        return Err(GsoError::TooManySegments);
    }
    Ok(Plan { lay, gso_size, payload_len, segments })
}

/// The largest L3 length (IP header + transport header + `gso_size` payload) any segment
/// of this super-frame will have, for MTU checks before segmenting. For a frame that is
/// not a super-frame, its L3 length (frame length minus `l3_offset`).
pub fn segment_l3_len(pkt: &Packet, l3_offset: usize) -> Result<usize, GsoError> {
    if !pkt.offload.is_gso() {
        return pkt.len().checked_sub(l3_offset).ok_or(GsoError::Truncated);
    }
    let p = plan(pkt, l3_offset)?;
    Ok(p.lay.payload_offset - l3_offset + p.gso_size.min(p.payload_len))
}

/// Splits a super-frame (`offload.gso_type` TcpV4, TcpV6 or UdpL4) into frames of at most
/// `offload.gso_size` payload bytes each, appended to `out`, buffers from `pool`.
///
/// Every segment carries a copy of everything in front of the payload (Ethernet, label
/// stack, IP, TCP/UDP headers) with: IPv4 total length, identification (+i for the i-th
/// segment) and header checksum; IPv6 payload length; TCP sequence number (+ payload
/// offset), FIN and PSH on the last segment only, CWR on the first only (with or without
/// `gso_ecn`); UDP length. The transport checksum is computed in full (pseudo-header from
/// the addresses, header, payload; the payload summed while it is copied), so segments
/// leave with default offload metadata and the port of the super-frame. A super-frame
/// whose payload fits in `gso_size` becomes one segment. The super-frame's UDP length is
/// not checked beyond fitting the frame: each segment gets its own.
///
/// Returns the number of segments. On pool exhaustion returns [`GsoError::NoBuffer`];
/// segments already appended stay valid.
pub fn segment(
    pkt: &Packet,
    l3_offset: usize,
    pool: &mut PacketPool,
    out: &mut Vec<Packet>,
) -> Result<usize, GsoError> {
    let cut = Cut::new(pkt, l3_offset)?;
    let frame = pkt.frame();
    let hl = cut.lay.payload_offset;
    for i in 0..cut.segments {
        let payload = cut.payload(i);
        let Some(mut seg) = pool.get() else {
            return Err(GsoError::NoBuffer);
        };
        let Some(buf) = seg.extend(hl + payload.len()) else {
            pool.put(seg);
            return Err(GsoError::TooLarge);
        };
        buf[..hl].copy_from_slice(&frame[..hl]);
        let payload_sum = copy_and_sum(&mut buf[hl..], &frame[payload.clone()]);
        cut.fill_headers(i, &mut buf[..hl], 0, Some(payload_sum));
        seg.port = pkt.port;
        out.push(seg);
    }
    Ok(cut.segments)
}

/// The segments of a super-frame without their payloads copied: for a port that sends
/// each segment as its headers followed by a slice of the super-frame (an iovec each, as
/// the MPLS-in-UDP port does with `UDP_SEGMENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeaders {
    /// How many segments.
    pub segments: usize,
    /// Bytes of headers each segment carries (from the `from` offset given to
    /// [`segment_headers`] to the payload), stored one after the other.
    pub header_len: usize,
    /// The largest payload of a segment (every segment's but the last's).
    pub gso_size: usize,
    /// Where the transport payload starts in the super-frame.
    pub payload_offset: usize,
    /// Where the transport header starts in the super-frame (a partial checksum's
    /// `csum_start`, counted from the frame's start).
    pub l4_offset: usize,
    /// Where the transport checksum sits in the transport header (`csum_offset`: 16 for
    /// TCP, 6 for UDP).
    pub csum_offset: usize,
}

/// How [`segment_headers`] leaves each segment's transport checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentChecksum {
    /// Computed in full over the segment's payload (a pass over every payload byte).
    Full,
    /// Left partial, for a receiver that completes it (a virtio-net guest that
    /// negotiated `GUEST_CSUM`, told by `NEEDS_CSUM` with the segment's `csum_start` and
    /// `csum_offset`): the field holds the pseudo-header sum, as Linux leaves it for a
    /// device with checksum offload. The payloads are not read.
    Partial,
}

/// [`segment`] without copying payloads: writes each segment's headers (the super-frame's
/// bytes from `from` to the payload, adjusted exactly as [`segment`] adjusts them,
/// transport checksum over the segment's payload included with [`SegmentChecksum::Full`])
/// into `headers`, one after the other, and returns where they are; segment `i`'s payload
/// is `payload_offset + i * gso_size ..`, at most `gso_size` bytes, up to the frame's
/// end. With `Full`, the bytes from `from` on, headers and payloads, are exactly the bytes
/// of the frames [`segment`] makes from `from` on; with `Partial` they differ only in the
/// transport checksum field.
pub fn segment_headers(
    pkt: &Packet,
    l3_offset: usize,
    from: usize,
    csum: SegmentChecksum,
    headers: &mut Vec<u8>,
) -> Result<SegmentHeaders, GsoError> {
    let cut = Cut::new(pkt, l3_offset)?;
    if from > l3_offset {
        return Err(GsoError::Truncated);
    }
    let frame = pkt.frame();
    let hl = cut.lay.payload_offset;
    let header_len = hl - from;
    headers.clear();
    headers.resize(header_len * cut.segments, 0);
    for (i, h) in headers.chunks_exact_mut(header_len).enumerate() {
        h.copy_from_slice(&frame[from..hl]);
        match csum {
            SegmentChecksum::Full => {
                let payload_sum = checksum::sum(&frame[cut.payload(i)]);
                cut.fill_headers(i, h, from, Some(payload_sum));
            }
            SegmentChecksum::Partial => cut.fill_headers(i, h, from, None),
        }
    }
    Ok(SegmentHeaders {
        segments: cut.segments,
        header_len,
        gso_size: cut.gso_size,
        payload_offset: hl,
        l4_offset: cut.lay.l4_offset,
        csum_offset: if cut.is_tcp { 16 } else { 6 },
    })
}

/// A validated super-frame and what every segment's headers are made from.
struct Cut {
    lay: Layout,
    gso_size: usize,
    payload_len: usize,
    segments: usize,
    is_tcp: bool,
    /// Sum of the pseudo-header without its length: the addresses and the protocol.
    pseudo: u32,
    base_ident: u16,
    base_seq: u32,
    base_flags: u8,
}

impl Cut {
    fn new(pkt: &Packet, l3_offset: usize) -> Result<Cut, GsoError> {
        let Plan { lay, gso_size, payload_len, segments } = plan(pkt, l3_offset)?;
        let frame = pkt.frame();
        let is_tcp = lay.l4_proto == protocol::TCP;
        let l3 = &frame[lay.l3_offset..];
        let (pseudo, base_ident) = if lay.ipv6 {
            let ip = ipv6::Packet::new_unchecked(l3);
            (ip.pseudo_header_sum(lay.l4_proto, 0), 0)
        } else {
            let ip = ipv4::Packet::new_unchecked(l3);
            (ip.pseudo_header_sum(0), ip.ident())
        };
        let (base_seq, base_flags) = if is_tcp {
            let th = tcp::Packet::new_unchecked(&frame[lay.l4_offset..lay.payload_offset]);
            (th.seq_number(), th.flags_raw())
        } else {
            (0, 0)
        };
        Ok(Cut { lay, gso_size, payload_len, segments, is_tcp, pseudo, base_ident, base_seq, base_flags })
    }

    /// Segment `i`'s payload in the super-frame.
    fn payload(&self, i: usize) -> std::ops::Range<usize> {
        let start = i * self.gso_size;
        let n = self.gso_size.min(self.payload_len - start);
        self.lay.payload_offset + start..self.lay.payload_offset + start + n
    }

    /// Adjusts `h`, a copy of the super-frame's bytes from `base` to the payload, into
    /// segment `i`'s headers, whose payload sums to `payload_sum`; `None`: the transport
    /// checksum is left partial (the pseudo-header sum, for the receiver to complete).
    fn fill_headers(&self, i: usize, h: &mut [u8], base: usize, payload_sum: Option<u32>) {
        let lay = &self.lay;
        let start = i * self.gso_size;
        let n = self.gso_size.min(self.payload_len - start);
        let last = i + 1 == self.segments;
        let hl = lay.payload_offset - base;
        // The lengths fit in 16 bits: a segment is no longer than the super-frame, whose
        // IP length field already expressed them.
        let l4_len = lay.payload_offset - lay.l4_offset + n;
        let ip = &mut h[lay.l3_offset - base..lay.l4_offset - base];
        if lay.ipv6 {
            ipv6::Packet::new_unchecked(ip).set_payload_len(l4_len as u16);
        } else {
            let mut ip = ipv4::Packet::new_unchecked(ip);
            ip.set_total_len((ip.header_len() + l4_len) as u16);
            ip.set_ident(self.base_ident.wrapping_add(i as u16));
            ip.fill_checksum();
        }
        let th = &mut h[lay.l4_offset - base..hl];
        if self.is_tcp {
            let mut t = tcp::Packet::new_unchecked(&mut *th);
            t.set_seq_number(self.base_seq.wrapping_add(start as u32));
            let mut flags = self.base_flags;
            if i > 0 {
                flags &= !tcp::flags::CWR;
            }
            if !last {
                flags &= !(tcp::flags::FIN | tcp::flags::PSH);
            }
            t.set_flags_raw(flags);
            t.set_checksum(0);
        } else {
            let mut u = udp::Packet::new_unchecked(&mut *th);
            u.set_len(l4_len as u16);
            u.set_checksum(0);
        }
        let len_sum = (l4_len as u32 & 0xffff) + (l4_len as u32 >> 16);
        let Some(payload_sum) = payload_sum else {
            let pseudo = checksum::fold(checksum::add(self.pseudo, len_sum));
            if self.is_tcp {
                tcp::Packet::new_unchecked(th).set_checksum(pseudo);
            } else {
                udp::Packet::new_unchecked(th).set_checksum(pseudo);
            }
            return;
        };
        let acc =
            checksum::add(checksum::add(self.pseudo, len_sum), checksum::add(checksum::sum(th), payload_sum));
        let c = checksum::finish(acc);
        if self.is_tcp {
            tcp::Packet::new_unchecked(th).set_checksum(c);
        } else {
            // 0 would mean "no checksum": send its ones-complement twin.
            udp::Packet::new_unchecked(th).set_checksum(if c == 0 { 0xffff } else { c });
        }
    }
}

/// Copies `src` to the start of `dst` and returns the ones-complement sum of the bytes,
/// as [`checksum::sum`], in one pass: 32-byte blocks loaded once, stored and summed in eight
/// 64-bit lanes (which the compiler keeps in vector registers). Measured on 1448-byte
/// pieces: about 13 GB/s against 10 for `memcpy` then [`checksum::sum`] and 5 for a 4-byte loop.
fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u32 {
    let dst = &mut dst[..src.len()];
    let mut lanes = [0u64; 8];
    let mut d = dst.chunks_exact_mut(32);
    let mut s = src.chunks_exact(32);
    for (dc, sc) in (&mut d).zip(&mut s) {
        let mut block = [0u8; 32];
        block.copy_from_slice(sc);
        dc.copy_from_slice(&block);
        for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(4)) {
            *lane += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
        }
    }
    let d_rest = d.into_remainder();
    d_rest.copy_from_slice(s.remainder());
    // Each lane stays below 2^48 for any frame; 2^32 = 1 in ones-complement arithmetic.
    let total: u64 = lanes.iter().map(|&l| (l & 0xffff_ffff) + (l >> 32)).sum();
    // The tail starts at a multiple of 32, so big-endian word alignment is preserved.
    checksum::add(checksum::fold_native(total), checksum::sum(d_rest))
}

/// Builders of synthetic frames shared by the tests of this module and of `fragment`.
#[cfg(test)]
pub(crate) mod test_frames {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    /// IP protocol number of TCP.
    pub const PROTO_TCP: u8 = 6;
    /// IP protocol number of UDP.
    pub const PROTO_UDP: u8 = 17;

    /// Raw header offsets, so the tests check the wire views' work independently.
    pub mod hdr {
        pub const IPV4_TOTAL_LEN: usize = 2;
        pub const IPV4_IDENT: usize = 4;
        pub const IPV4_CHECKSUM: usize = 10;
        pub const IPV4_SRC: usize = 12;
        pub const IPV4_DST: usize = 16;
        pub const IPV4_DF: u16 = 0x4000;
        pub const IPV4_MF: u16 = 0x2000;
        pub const IPV6_PAYLOAD_LEN: usize = 4;
        pub const IPV6_SRC: usize = 8;
        pub const IPV6_DST: usize = 24;
        pub const TCP_SEQ: usize = 4;
        pub const TCP_FLAGS: usize = 13;
        pub const TCP_FIN: u8 = 0x01;
        pub const TCP_PSH: u8 = 0x08;
        pub const TCP_CWR: u8 = 0x80;
        pub const UDP_LENGTH: usize = 4;
        pub const UDP_CHECKSUM: usize = 6;

        pub fn get16(b: &[u8], off: usize) -> u16 {
            u16::from_be_bytes([b[off], b[off + 1]])
        }

        pub fn put16(b: &mut [u8], off: usize, v: u16) {
            b[off..off + 2].copy_from_slice(&v.to_be_bytes());
        }

        pub fn get32(b: &[u8], off: usize) -> u32 {
            u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
        }

        /// Recomputes the IPv4 header checksum of `h` (exactly the header).
        pub fn fill_ipv4_checksum(h: &mut [u8]) {
            put16(h, IPV4_CHECKSUM, 0);
            let c = vmpls_wire::checksum::checksum(h);
            put16(h, IPV4_CHECKSUM, c);
        }
    }

    /// The 16 bytes of an IPv6 address at `off`.
    pub fn ipv6_addr(ip: &[u8], off: usize) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&ip[off..off + 16]);
        a
    }

    /// Ethernet source/destination used by the synthetic frames.
    pub const ETH: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

    /// The bytes of a frame: Ethernet, `labels` label stack entries (bottom one with S),
    /// then `l3` (an IP packet).
    pub fn wrap(labels: usize, l3: &[u8], ipv6: bool) -> Vec<u8> {
        let mut f = ETH.to_vec();
        if labels == 0 {
            f.extend_from_slice(if ipv6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        } else {
            f.extend_from_slice(&[0x88, 0x47]);
            for i in 0..labels {
                let label = 100 + i as u32;
                let s = u32::from(i + 1 == labels);
                f.extend_from_slice(&((label << 12) | (s << 8) | 64).to_be_bytes());
            }
        }
        f.extend_from_slice(l3);
        f
    }

    /// A deterministic payload pattern.
    pub fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| ((i * 7) as u8).wrapping_add(seed) ^ ((i >> 8) as u8)).collect()
    }

    /// An IP packet carrying TCP or UDP with `payload`, its transport checksum left
    /// partial (pseudo-header sum, length included) as the kernel hands over super-frames.
    pub fn ip_packet(ipv6: bool, tcp: bool, tcp_flags: u8, payload: &[u8]) -> Vec<u8> {
        let l4_hdr: Vec<u8> = if tcp {
            let mut t = vec![0u8; 32];
            t[0..2].copy_from_slice(&40000u16.to_be_bytes());
            t[2..4].copy_from_slice(&5001u16.to_be_bytes());
            t[4..8].copy_from_slice(&0xfffff000u32.to_be_bytes()); // wraps mid-stream
            t[8..12].copy_from_slice(&0x01020304u32.to_be_bytes());
            t[12] = 8 << 4;
            t[13] = tcp_flags;
            t[14..16].copy_from_slice(&502u16.to_be_bytes());
            t[20..22].copy_from_slice(&[1, 1]);
            t[22..32].copy_from_slice(&[8, 10, 1, 2, 3, 4, 5, 6, 7, 8]);
            t
        } else {
            let mut u = vec![0u8; 8];
            u[0..2].copy_from_slice(&40000u16.to_be_bytes());
            u[2..4].copy_from_slice(&5002u16.to_be_bytes());
            u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            u
        };
        let l4_len = l4_hdr.len() + payload.len();
        let proto = if tcp { PROTO_TCP } else { PROTO_UDP };
        let mut p = Vec::new();
        let pseudo = if ipv6 {
            let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
            let dst: Ipv6Addr = "2001:db8:1::2".parse().unwrap();
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&(l4_len as u16).to_be_bytes());
            p.extend_from_slice(&[proto, 64]);
            p.extend_from_slice(&src.octets());
            p.extend_from_slice(&dst.octets());
            checksum::pseudo_header_v6(src, dst, proto, l4_len as u32)
        } else {
            let src = Ipv4Addr::new(198, 18, 0, 1);
            let dst = Ipv4Addr::new(198, 18, 1, 2);
            // With a 4-byte option (NOP NOP NOP EOL) so the IHL is not the common 5.
            let ihl = 24;
            p.extend_from_slice(&[0x46, 0]);
            p.extend_from_slice(&((ihl + l4_len) as u16).to_be_bytes());
            p.extend_from_slice(&[0xff, 0xf0, 0x40, 0, 64, proto, 0, 0]);
            p.extend_from_slice(&src.octets());
            p.extend_from_slice(&dst.octets());
            p.extend_from_slice(&[1, 1, 1, 0]);
            hdr::fill_ipv4_checksum(&mut p[..ihl]);
            checksum::pseudo_header_v4(src, dst, proto, l4_len as u32)
        };
        let l4_at = p.len();
        p.extend_from_slice(&l4_hdr);
        p.extend_from_slice(payload);
        let field = l4_at + if tcp { 16 } else { 6 };
        hdr::put16(&mut p, field, checksum::fold(pseudo));
        p
    }

    /// Verifies the transport checksum of the IP packet `ip` in full.
    pub fn transport_checksum_ok(ip: &[u8]) -> bool {
        let lay = layout(ip, 0).unwrap();
        let l4 = &ip[lay.l4_offset..];
        let pseudo = if lay.ipv6 {
            let a = |o| Ipv6Addr::from(ipv6_addr(ip, o));
            checksum::pseudo_header_v6(a(hdr::IPV6_SRC), a(hdr::IPV6_DST), lay.l4_proto, l4.len() as u32)
        } else {
            let a = |o| Ipv4Addr::from(hdr::get32(ip, o));
            checksum::pseudo_header_v4(a(hdr::IPV4_SRC), a(hdr::IPV4_DST), lay.l4_proto, l4.len() as u32)
        };
        checksum::fold(checksum::add(pseudo, checksum::sum(l4))) == 0xffff
    }
}

#[cfg(test)]
mod tests {
    use super::test_frames::*;
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;
    use std::cell::RefCell;
    use vmpls_wire::virtio_net::{self, Header};

    // Captured on kernel 6.18 with a PACKET_VNET_HDR socket (setsockopt(263, 15, 1)) on
    // the receiving end of a veth pair between two network namespaces, the sender a
    // kernel TCP/UDP socket on the other end (TSO/GSO on, the veth default). Each string
    // is the 10-byte virtio-net header followed by the frame. The payloads are a pattern,
    // byte i = ((7 i + seed) mod 256) xor (i >> 8), written by Python in one send():
    // - TSO_V4: 5000 bytes (seed 2) over TCP/IPv4, TCP_NODELAY off: one super-frame,
    //   vnet hdr NEEDS_CSUM, TCPV4, hdr_len 66, gso_size 1448, csum_start 34, offset 16;
    //   IPv4 total length 5052 (the whole super-frame), TCP checksum field 0x9fd6 = the
    //   pseudo-header sum with length 5032.
    // - TSO_V6: 3000 bytes (seed 3) over TCP/IPv6: TCPV6, gso_size 1428, csum_start 54.
    // - USO_V4: 1300 bytes (seed 4) over UDP/IPv4 with UDP_SEGMENT 500: UDP_L4,
    //   gso_size 500, UDP length 1308 (the whole super-frame).
    // - CSUM_V4: 100 bytes (seed 1) over TCP/IPv4: not GSO, NEEDS_CSUM only.
    const TSO_V4_HEX: &str = concat!(
        "01014200a805220010009a4a318ae77d9629343efb840800450013bcda2c40004006c0e7c6120001c6120002c0901389",
        "cb2b4c910e0e08d68018003f9fd600000101080a15ea76981fdd708f020910171e252c333a41484f565d646b72798087",
        "8e959ca3aab1b8bfc6cdd4dbe2e9f0f7fe050c131a21282f363d444b525960676e757c838a91989fa6adb4bbc2c9d0d7",
        "dee5ecf3fa01080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd040b12192027",
        "2e353c434a51585f666d747b828990979ea5acb3bac1c8cfd6dde4ebf2f900070e151c232a31383f464d545b62697077",
        "7e858c939aa1a8afb6bdc4cbd2d9e0e7eef5fc030a11181f262d343b424950575e656c737a81888f969da4abb2b9c0c7",
        "ced5dce3eaf1f8ff060d141b222930373e454c535a61686f767d848b9299a0a7aeb5bcc3cad1d8dfe6edf4fb03081116",
        "1f242d323b40494e575c656a737881868f949da2abb0b9bec7ccd5dae3e8f1f6ff040d121b20292e373c454a53586166",
        "6f747d828b90999ea7acb5bac3c8d1d6dfe4edf2fb00090e171c252a333841464f545d626b70797e878c959aa3a8b1b6",
        "bfc4cdd2dbe0e9eef7fc050a131821262f343d424b50595e676c757a838891969fa4adb2bbc0c9ced7dce5eaf3f80106",
        "0f141d222b30393e474c555a636871767f848d929ba0a9aeb7bcc5cad3d8e1e6eff4fd020b10191e272c353a43485156",
        "5f646d727b80898e979ca5aab3b8c1c6cfd4dde2ebf0f9fe070c151a232831363f444d525b60696e777c858a9398a1a6",
        "afb4bdc2cbd0d9dee7ecf5fa000b12151c272e3138434a4d545f6669707b82858c979ea1a8b3babdc4cfd6d9e0ebf2f5",
        "fc070e1118232a2d343f4649505b62656c777e8188939a9da4afb6b9c0cbd2d5dce7eef1f8030a0d141f2629303b4245",
        "4c575e6168737a7d848f9699a0abb2b5bcc7ced1d8e3eaedf4ff0609101b22252c373e4148535a5d646f7679808b9295",
        "9ca7aeb1b8c3cacdd4dfe6e9f0fb02050c171e2128333a3d444f5659606b72757c878e9198a3aaadb4bfc6c9d0dbe2e5",
        "ecf7fe0108131a1d242f3639404b52555c676e7178838a8d949fa6a9b0bbc2c5ccd7dee1e8f3fafd040f1619202b3235",
        "3c474e5158636a6d747f8689909ba2a5acb7bec1c8d3dadde4eff6f9010a13141d262f3039424b4c555e6768717a8384",
        "8d969fa0a9b2bbbcc5ced7d8e1eaf3f4fd060f1019222b2c353e4748515a63646d767f8089929b9ca5aeb7b8c1cad3d4",
        "dde6eff0f9020b0c151e2728313a43444d565f6069727b7c858e9798a1aab3b4bdc6cfd0d9e2ebecf5fe0708111a2324",
        "2d363f4049525b5c656e7778818a93949da6afb0b9c2cbccd5dee7e8f1fa03040d161f2029323b3c454e5758616a7374",
        "7d868f9099a2abacb5bec7c8d1dae3e4edf6ff0009121b1c252e3738414a53545d666f7079828b8c959ea7a8b1bac3c4",
        "cdd6dfe0e9f2fbfc050e1718212a33343d464f5059626b6c757e8788919aa3a4adb6bfc0c9d2dbdce5eef7f8060d1413",
        "1a2128373e454c4b5259606f767d84838a9198a7aeb5bcbbc2c9d0dfe6edf4f3fa0108171e252c2b3239404f565d6463",
        "6a7178878e959c9ba2a9b0bfc6cdd4d3dae1e8f7fe050c0b1219202f363d44434a5158676e757c7b8289909fa6adb4b3",
        "bac1c8d7dee5ecebf2f9000f161d24232a3138474e555c5b6269707f868d94939aa1a8b7bec5cccbd2d9e0eff6fd0403",
        "0a1118272e353c3b4249505f666d74737a8188979ea5acabb2b9c0cfd6dde4e3eaf1f8070e151c1b2229303f464d5453",
        "5a6168777e858c8b9299a0afb6bdc4c3cad1d8e7eef5fcfb0209101f262d34333a4148575e656c6b7279808f969da4a3",
        "aab1b8c7ced5dcdbe2e9f0ff070c15121b2029363f444d4a5358616e777c85828b9099a6afb4bdbac3c8d1dee7ecf5f2",
        "fb0009161f242d2a3338414e575c65626b7079868f949d9aa3a8b1bec7ccd5d2dbe0e9f6ff040d0a1318212e373c4542",
        "4b5059666f747d7a8388919ea7acb5b2bbc0c9d6dfe4edeaf3f8010e171c25222b3039464f545d5a6368717e878c9592",
        "9ba0a9b6bfc4cdcad3d8e1eef7fc05020b1019262f343d3a4348515e676c75727b8089969fa4adaab3b8c1ced7dce5e2",
        "ebf0f9060f141d1a2328313e474c55525b6069767f848d8a9398a1aeb7bcc5c2cbd0d9e6eff4fdfa0308111e272c3532",
        "3b4049565f646d6a7378818e979ca5a2abb0b9c6cfd4dddae3e8f1fe040f161118232a353c474e49505b626d747f8681",
        "88939aa5acb7beb9c0cbd2dde4eff6f1f8030a151c272e29303b424d545f666168737a858c979e99a0abb2bdc4cfd6d1",
        "d8e3eaf5fc070e09101b222d343f464148535a656c777e79808b929da4afb6b1b8c3cad5dce7eee9f0fb020d141f2621",
        "28333a454c575e59606b727d848f969198a3aab5bcc7cec9d0dbe2edf4ff060108131a252c373e39404b525d646f7671",
        "78838a959ca7aea9b0bbc2cdd4dfe6e1e8f3fa050c171e19202b323d444f565158636a757c878e89909ba2adb4bfc6c1",
        "c8d3dae5ecf7fef9000b121d242f363138434a555c676e69707b828d949fa6a1a8b3bac5ccd7ded9e0ebf2fd050e1710",
        "19222b343d464f48515a636c757e878089929ba4adb6bfb8c1cad3dce5eef7f0f9020b141d262f28313a434c555e6760",
        "69727b848d969f98a1aab3bcc5ced7d0d9e2ebf4fd060f08111a232c353e474049525b646d767f78818a939ca5aeb7b0",
        "b9c2cbd4dde6efe8f1fa030c151e272029323b444d565f58616a737c858e979099a2abb4bdc6cfc8d1dae3ecf5fe0700",
        "09121b242d363f38414a535c656e777079828b949da6afa8b1bac3ccd5dee7e0e9f2fb040d161f18212a333c454e5750",
        "59626b747d868f88919aa3acb5bec7c0c9d2dbe4edf6fff8010a131c252e373039424b545d666f68717a838c959ea7a0",
        "a9b2bbc4cdd6dfd8e1eaf3fc0a01181f162d243b324940475e556c637a71888f869d94aba2b9b0b7cec5dcd3eae1f8ff",
        "f60d041b122920273e354c435a51686f667d748b82999097aea5bcb3cac1d8dfd6ede4fbf20900071e152c233a31484f",
        "465d546b627970778e859c93aaa1b8bfb6cdc4dbd2e9e0e7fef50c031a11282f263d344b425950576e657c738a81989f",
        "96ada4bbb2c9c0c7ded5ece3faf1080f061d142b223930374e455c536a61787f768d849b92a9a0a7beb5ccc3dad1e8ef",
        "e6fdf40b021910172e253c334a41585f566d647b728980879e95aca3bab1c8cfc6ddd4ebe2f9f0f70e051c132a21383f",
        "364d445b526960677e758c839a91a8afa6bdb4cbc2d9d0d7eee5fcf30b00191e172c253a334841465f546d627b70898e",
        "879c95aaa3b8b1b6cfc4ddd2ebe0f9fef70c051a132821263f344d425b50696e677c758a83989196afa4bdb2cbc0d9de",
        "d7ece5faf30801061f142d223b30494e475c556a637871768f849d92aba0b9beb7ccc5dad3e8e1e6fff40d021b10292e",
        "273c354a435851566f647d728b80999e97aca5bab3c8c1c6dfd4ede2fbf0090e071c152a233831364f445d526b60797e",
        "778c859a93a8a1a6bfb4cdc2dbd0e9eee7fcf50a031811162f243d324b40595e576c657a738881869f94ada2bbb0c9ce",
        "c7dcd5eae3f8f1f60f041d122b20393e374c455a536861667f748d829b90a9aea7bcb5cac3d8d1d6efe4fdf208031a1d",
        "142f2639304b42455c576e6178738a8d849f96a9a0bbb2b5ccc7ded1e8e3fafdf40f0619102b22253c374e4158536a6d",
        "647f7689809b9295aca7beb1c8c3daddd4efe6f9f00b02051c172e2138334a4d445f5669607b72758c879e91a8a3babd",
        "b4cfc6d9d0ebe2e5fcf70e0118132a2d243f3649405b52556c677e7188839a9d94afa6b9b0cbc2c5dcd7eee1f8f30a0d",
        "041f1629203b32354c475e5168637a7d748f869990aba2a5bcb7cec1d8d3eaede4fff609001b12152c273e3148435a5d",
        "546f6679708b82859c97aea1b8b3cacdc4dfd6e9e0fbf2f50c071e1128233a3d344f4659506b62657c778e819893aaad",
        "a4bfb6c9c0dbd2d5ece7fef109021b1c152e2738314a43445d566f6079728b8c859e97a8a1bab3b4cdc6dfd0e9e2fbfc",
        "f50e0718112a23243d364f4059526b6c657e7788819a9394ada6bfb0c9c2dbdcd5eee7f8f10a03041d162f2039324b4c",
        "455e5768617a73748d869f90a9a2bbbcb5cec7d8d1eae3e4fdf60f0019122b2c253e3748415a53546d667f7089829b9c",
        "95aea7b8b1cac3c4ddd6efe0f9f20b0c051e1728213a33344d465f5069627b7c758e879891aaa3a4bdb6cfc0d9d2ebec",
        "e5fef708011a13142d263f3049425b5c556e6778718a83849d96afa0b9b2cbccc5ded7e8e1faf3f40d061f1029223b3c",
        "354e4758516a63647d768f809992abaca5beb7c8c1dad3d4ede6fff00e051c1b1229203f364d44435a5168677e758c8b",
        "829990afa6bdb4b3cac1d8d7eee5fcfbf209001f162d24233a3148475e556c6b6279708f869d9493aaa1b8b7cec5dcdb",
        "d2e9e0fff60d04031a1128273e354c4b4259506f667d74738a819897aea5bcbbb2c9c0dfd6ede4e3faf108071e152c2b",
        "2239304f465d54536a6178778e859c9b92a9a0bfb6cdc4c3dad1e8e7fef50c0b0219102f263d34334a4158576e657c7b",
        "7289809f96ada4a3bab1c8c7ded5ecebe2f9f00f061d14132a2138374e455c5b5269607f768d84839a91a8a7beb5cccb",
        "c2d9d0efe6fdf4f30a0118172e253c3b3249405f566d64637a7188879e95acaba2b9b0cfc6ddd4d3eae1f8f70f041d1a",
        "1328213e374c45425b5069667f748d8a839891aea7bcb5b2cbc0d9d6efe4fdfaf308011e172c25223b3049465f546d6a",
        "6378718e879c9592aba0b9b6cfc4dddad3e8e1fef70c05021b1029263f344d4a4358516e677c75728b809996afa4bdba",
        "b3c8c1ded7ece5e2fbf009061f142d2a2338314e475c55526b6079768f849d9a93a8a1beb7ccc5c2dbd0e9e6fff40d0a",
        "0318112e273c35324b4059566f647d7a7388819e97aca5a2bbb0c9c6dfd4edeae3f8f10e071c15122b2039364f445d5a",
        "5368617e778c85829b90a9a6bfb4cdcac3d8d1eee7fcf5f20b0019162f243d3a3348415e576c65627b7089869f94adaa",
        "a3b8b1cec7dcd5d2ebe0f9f60c071e19102b223d344f464158536a657c778e89809b92ada4bfb6b1c8c3dad5ece7fef9",
        "f00b021d142f262138334a455c576e69607b728d849f9691a8a3bab5ccc7ded9d0ebe2fdf40f060118132a253c374e49",
        "405b526d647f767188839a95aca7beb9b0cbc2ddd4efe6e1f8f30a051c172e29203b324d445f565168637a758c879e99",
        "90aba2bdb4cfc6c1d8d3eae5fcf70e09001b122d243f363148435a556c677e79708b829d94afa6a1b8b3cac5dcd7eee9",
        "e0fbf20d041f161128233a354c475e59506b627d748f86819893aaa5bcb7cec9c0dbd2ede4fff6f108031a152c273e39",
        "304b425d546f666178738a859c97aea9a0bbb2cdc4dfd6d1e8e3faf50d061f18112a233c354e474059526b647d768f88",
        "819a93aca5beb7b0c9c2dbd4ede6fff8f10a031c152e272039324b445d566f68617a738c859e9790a9a2bbb4cdc6dfd8",
        "d1eae3fcf50e070019122b243d364f48415a536c657e777089829b94ada6bfb8b1cac3dcd5eee7e0f9f20b041d162f28",
        "213a334c455e575069627b748d869f9891aaa3bcb5cec7c0d9d2ebe4fdf60f08011a132c253e373049425b546d667f78",
        "718a839c95aea7a0b9b2cbc4ddd6efe8e1faf30c051e171029223b344d465f58516a637c758e87809992aba4bdb6cfc8",
        "c1dad3ece5fef7f009021b142d263f38314a435c556e676079728b849d96afa8a1bab3ccc5ded7d0e9e2fbf412190007",
        "0e353c232a51585f464d747b626990979e858cb3baa1a8afd6ddc4cbf2f9e0e7ee151c030a31383f262d545b42497077",
        "7e656c939a81888fb6bda4abd2d9c0c7cef5fce3ea11181f060d343b222950575e454c737a61686f969d848bb2b9a0a7",
        "aed5dcc3caf1f8ffe6ed141b020930373e252c535a41484f767d646b929980878eb5bca3aad1d8dfc6cdf4fbe2e91017",
        "1e050c333a21282f565d444b727960676e959c838ab1b8bfa6add4dbc2c9f0f7fee5ec131a01080f363d242b52594047",
        "4e757c636a91989f868db4bba2a9d0d7dec5ccf3fae1e8ef161d040b323920272e555c434a71787f666d949b8289b0b7",
        "bea5acd3dac1c8cff6fde4eb131801060f343d222b50595e474c757a636891969f848db2bba0a9aed7dcc5caf3f8e1e6",
        "ef141d020b30393e272c555a434871767f646d929b80898eb7bca5aad3d8c1c6cff4fde2eb10191e070c353a23285156",
        "5f444d727b60696e979c858ab3b8a1a6afd4ddc2cbf0f9fee7ec151a030831363f242d525b40494e777c656a93988186",
        "8fb4bda2abd0d9dec7ccf5fae3e811161f040d323b20292e575c454a737861666f949d828bb0b9bea7acd5dac3c8f1f6",
        "ffe4ed121b00090e373c252a535841464f747d626b90999e878cb5baa3a8d1d6dfc4cdf2fbe0e9ee171c050a33382126",
        "2f545d424b70797e676c959a8388b1b6bfa4add2dbc0c9cef7fce5ea101b02050c373e2128535a5d444f7679606b9295",
        "9c878eb1b8a3aaadd4dfc6c9f0fbe2e5ec171e0108333a3d242f5659404b72757c676e9198838a8db4bfa6a9d0dbc2c5",
        "ccf7fee1e8131a1d040f3639202b52555c474e7178636a6d949f8689b0bba2a5acd7dec1c8f3fafde4ef1619000b3235",
        "3c272e5158434a4d747f6669909b82858cb7bea1a8d3daddc4cff6f9e0eb12151c070e3138232a2d545f4649707b6265",
        "6c979e8188b3babda4afd6d9c0cbf2f5fce7ee1118030a0d343f2629505b42454c777e6168939a9d848fb6b9a0abd2d5",
        "dcc7cef1f8e3eaed141f0609303b22252c575e4148737a7d646f9699808bb2b5bca7aed1d8c3cacdf4ffe6e9111a0304",
        "0d363f2029525b5c454e7778616a93949d868fb0b9a2abacd5dec7c8f1fae3e4ed161f0009323b3c252e5758414a7374",
        "7d666f9099828b8cb5bea7a8d1dac3c4cdf6ffe0e9121b1c050e3738212a53545d464f7079626b6c959e8788b1baa3a4",
        "add6dfc0c9f2fbfce5ee1718010a33343d262f5059424b4c757e6768919a83848db6bfa0",
    );

    const TSO_V6_HEX: &str = concat!(
        "010456009405360010009a4a318ae77d9629343efb8486dd60005a200bd8064020010db8000000000000000000000001",
        "20010db8000000000000000000000002e446138961892814b02258b980180040675300000101080a26340370fdbdc386",
        "030a11181f262d343b424950575e656c737a81888f969da4abb2b9c0c7ced5dce3eaf1f8ff060d141b222930373e454c",
        "535a61686f767d848b9299a0a7aeb5bcc3cad1d8dfe6edf4fb020910171e252c333a41484f565d646b727980878e959c",
        "a3aab1b8bfc6cdd4dbe2e9f0f7fe050c131a21282f363d444b525960676e757c838a91989fa6adb4bbc2c9d0d7dee5ec",
        "f3fa01080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd040b121920272e353c",
        "434a51585f666d747b828990979ea5acb3bac1c8cfd6dde4ebf2f900070e151c232a31383f464d545b626970777e858c",
        "939aa1a8afb6bdc4cbd2d9e0e7eef5fc020b10191e272c353a434851565f646d727b80898e979ca5aab3b8c1c6cfd4dd",
        "e2ebf0f9fe070c151a232831363f444d525b60696e777c858a9398a1a6afb4bdc2cbd0d9dee7ecf5fa030811161f242d",
        "323b40494e575c656a737881868f949da2abb0b9bec7ccd5dae3e8f1f6ff040d121b20292e373c454a535861666f747d",
        "828b90999ea7acb5bac3c8d1d6dfe4edf2fb00090e171c252a333841464f545d626b70797e878c959aa3a8b1b6bfc4cd",
        "d2dbe0e9eef7fc050a131821262f343d424b50595e676c757a838891969fa4adb2bbc0c9ced7dce5eaf3f801060f141d",
        "222b30393e474c555a636871767f848d929ba0a9aeb7bcc5cad3d8e1e6eff4fd0108131a1d242f3639404b52555c676e",
        "7178838a8d949fa6a9b0bbc2c5ccd7dee1e8f3fafd040f1619202b32353c474e5158636a6d747f8689909ba2a5acb7be",
        "c1c8d3dadde4eff6f9000b12151c272e3138434a4d545f6669707b82858c979ea1a8b3babdc4cfd6d9e0ebf2f5fc070e",
        "1118232a2d343f4649505b62656c777e8188939a9da4afb6b9c0cbd2d5dce7eef1f8030a0d141f2629303b42454c575e",
        "6168737a7d848f9699a0abb2b5bcc7ced1d8e3eaedf4ff0609101b22252c373e4148535a5d646f7679808b92959ca7ae",
        "b1b8c3cacdd4dfe6e9f0fb02050c171e2128333a3d444f5659606b72757c878e9198a3aaadb4bfc6c9d0dbe2e5ecf7fe",
        "0009121b1c252e3738414a53545d666f7079828b8c959ea7a8b1bac3c4cdd6dfe0e9f2fbfc050e1718212a33343d464f",
        "5059626b6c757e8788919aa3a4adb6bfc0c9d2dbdce5eef7f8010a13141d262f3039424b4c555e6768717a83848d969f",
        "a0a9b2bbbcc5ced7d8e1eaf3f4fd060f1019222b2c353e4748515a63646d767f8089929b9ca5aeb7b8c1cad3d4dde6ef",
        "f0f9020b0c151e2728313a43444d565f6069727b7c858e9798a1aab3b4bdc6cfd0d9e2ebecf5fe0708111a23242d363f",
        "4049525b5c656e7778818a93949da6afb0b9c2cbccd5dee7e8f1fa03040d161f2029323b3c454e5758616a73747d868f",
        "9099a2abacb5bec7c8d1dae3e4edf6ff070e151c1b2229303f464d54535a6168777e858c8b9299a0afb6bdc4c3cad1d8",
        "e7eef5fcfb0209101f262d34333a4148575e656c6b7279808f969da4a3aab1b8c7ced5dcdbe2e9f0ff060d14131a2128",
        "373e454c4b5259606f767d84838a9198a7aeb5bcbbc2c9d0dfe6edf4f3fa0108171e252c2b3239404f565d64636a7178",
        "878e959c9ba2a9b0bfc6cdd4d3dae1e8f7fe050c0b1219202f363d44434a5158676e757c7b8289909fa6adb4b3bac1c8",
        "d7dee5ecebf2f9000f161d24232a3138474e555c5b6269707f868d94939aa1a8b7bec5cccbd2d9e0eff6fd04030a1118",
        "272e353c3b4249505f666d74737a8188979ea5acabb2b9c0cfd6dde4e3eaf1f8060f141d1a2328313e474c55525b6069",
        "767f848d8a9398a1aeb7bcc5c2cbd0d9e6eff4fdfa0308111e272c35323b4049565f646d6a7378818e979ca5a2abb0b9",
        "c6cfd4dddae3e8f1fe070c15121b2029363f444d4a5358616e777c85828b9099a6afb4bdbac3c8d1dee7ecf5f2fb0009",
        "161f242d2a3338414e575c65626b7079868f949d9aa3a8b1bec7ccd5d2dbe0e9f6ff040d0a1318212e373c45424b5059",
        "666f747d7a8388919ea7acb5b2bbc0c9d6dfe4edeaf3f8010e171c25222b3039464f545d5a6368717e878c95929ba0a9",
        "b6bfc4cdcad3d8e1eef7fc05020b1019262f343d3a4348515e676c75727b8089969fa4adaab3b8c1ced7dce5e2ebf0f9",
        "050c171e19202b323d444f565158636a757c878e89909ba2adb4bfc6c1c8d3dae5ecf7fef9000b121d242f363138434a",
        "555c676e69707b828d949fa6a1a8b3bac5ccd7ded9e0ebf2fd040f161118232a353c474e49505b626d747f868188939a",
        "a5acb7beb9c0cbd2dde4eff6f1f8030a151c272e29303b424d545f666168737a858c979e99a0abb2bdc4cfd6d1d8e3ea",
        "f5fc070e09101b222d343f464148535a656c777e79808b929da4afb6b1b8c3cad5dce7eee9f0fb020d141f262128333a",
        "454c575e59606b727d848f969198a3aab5bcc7cec9d0dbe2edf4ff060108131a252c373e39404b525d646f767178838a",
        "959ca7aea9b0bbc2cdd4dfe6e1e8f3fa040d161f18212a333c454e575059626b747d868f88919aa3acb5bec7c0c9d2db",
        "e4edf6fff8010a131c252e373039424b545d666f68717a838c959ea7a0a9b2bbc4cdd6dfd8e1eaf3fc050e171019222b",
        "343d464f48515a636c757e878089929ba4adb6bfb8c1cad3dce5eef7f0f9020b141d262f28313a434c555e676069727b",
        "848d969f98a1aab3bcc5ced7d0d9e2ebf4fd060f08111a232c353e474049525b646d767f78818a939ca5aeb7b0b9c2cb",
        "d4dde6efe8f1fa030c151e272029323b444d565f58616a737c858e979099a2abb4bdc6cfc8d1dae3ecf5fe070009121b",
        "242d363f38414a535c656e777079828b949da6afa8b1bac3ccd5dee7e0e9f2fb0b021910172e253c334a41585f566d64",
        "7b728980879e95aca3bab1c8cfc6ddd4ebe2f9f0f70e051c132a21383f364d445b526960677e758c839a91a8afa6bdb4",
        "cbc2d9d0d7eee5fcf30a01181f162d243b324940475e556c637a71888f869d94aba2b9b0b7cec5dcd3eae1f8fff60d04",
        "1b122920273e354c435a51686f667d748b82999097aea5bcb3cac1d8dfd6ede4fbf20900071e152c233a31484f465d54",
        "6b627970778e859c93aaa1b8bfb6cdc4dbd2e9e0e7fef50c031a11282f263d344b425950576e657c738a81989f96ada4",
        "bbb2c9c0c7ded5ece3faf1080f061d142b223930374e455c536a61787f768d849b92a9a0a7beb5ccc3dad1e8efe6fdf4",
        "0a031811162f243d324b40595e576c657a738881869f94ada2bbb0c9cec7dcd5eae3f8f1f60f041d122b20393e374c45",
        "5a536861667f748d829b90a9aea7bcb5cac3d8d1d6efe4fdf20b00191e172c253a334841465f546d627b70898e879c95",
        "aaa3b8b1b6cfc4ddd2ebe0f9fef70c051a132821263f344d425b50696e677c758a83989196afa4bdb2cbc0d9ded7ece5",
        "faf30801061f142d223b30494e475c556a637871768f849d92aba0b9beb7ccc5dad3e8e1e6fff40d021b10292e273c35",
        "4a435851566f647d728b80999e97aca5bab3c8c1c6dfd4ede2fbf0090e071c152a233831364f445d526b60797e778c85",
        "9a93a8a1a6bfb4cdc2dbd0e9eee7fcf509001b12152c273e3148435a5d546f6679708b82859c97aea1b8b3cacdc4dfd6",
        "e9e0fbf2f50c071e1128233a3d344f4659506b62657c778e819893aaada4bfb6c9c0dbd2d5ece7fef108031a1d142f26",
        "39304b42455c576e6178738a8d849f96a9a0bbb2b5ccc7ded1e8e3fafdf40f0619102b22253c374e4158536a6d647f76",
        "89809b9295aca7beb1c8c3daddd4efe6f9f00b02051c172e2138334a4d445f5669607b72758c879e91a8a3babdb4cfc6",
        "d9d0ebe2e5fcf70e0118132a2d243f3649405b52556c677e7188839a9d94afa6b9b0cbc2c5dcd7eee1f8f30a0d041f16",
        "29203b32354c475e5168637a7d748f869990aba2a5bcb7cec1d8d3eaede4fff608011a13142d263f3049425b5c556e67",
        "78718a83849d96afa0b9b2cbccc5ded7e8e1faf3f40d061f1029223b3c354e4758516a63647d768f809992abaca5beb7",
        "c8c1dad3d4ede6fff009021b1c152e2738314a43445d566f6079728b8c859e97a8a1bab3b4cdc6dfd0e9e2fbfcf50e07",
        "18112a23243d364f4059526b6c657e7788819a9394ada6bfb0c9c2dbdcd5eee7f8f10a03041d162f2039324b4c455e57",
        "68617a73748d869f90a9a2bbbcb5cec7d8d1eae3e4fdf60f",
    );

    const USO_V4_HEX: &str = concat!(
        "01052a00f401220006009a4a318ae77d9629343efb84080045000530f82340004011b171c6120001c6120002bb90138a",
        "051c9155040b121920272e353c434a51585f666d747b828990979ea5acb3bac1c8cfd6dde4ebf2f900070e151c232a31",
        "383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9e0e7eef5fc030a11181f262d343b424950575e656c737a81",
        "888f969da4abb2b9c0c7ced5dce3eaf1f8ff060d141b222930373e454c535a61686f767d848b9299a0a7aeb5bcc3cad1",
        "d8dfe6edf4fb020910171e252c333a41484f565d646b727980878e959ca3aab1b8bfc6cdd4dbe2e9f0f7fe050c131a21",
        "282f363d444b525960676e757c838a91989fa6adb4bbc2c9d0d7dee5ecf3fa01080f161d242b323940474e555c636a71",
        "787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd050a131821262f343d424b50595e676c757a838891969fa4adb2bbc0",
        "c9ced7dce5eaf3f801060f141d222b30393e474c555a636871767f848d929ba0a9aeb7bcc5cad3d8e1e6eff4fd020b10",
        "191e272c353a434851565f646d727b80898e979ca5aab3b8c1c6cfd4dde2ebf0f9fe070c151a232831363f444d525b60",
        "696e777c858a9398a1a6afb4bdc2cbd0d9dee7ecf5fa030811161f242d323b40494e575c656a737881868f949da2abb0",
        "b9bec7ccd5dae3e8f1f6ff040d121b20292e373c454a535861666f747d828b90999ea7acb5bac3c8d1d6dfe4edf2fb00",
        "090e171c252a333841464f545d626b70797e878c959aa3a8b1b6bfc4cdd2dbe0e9eef7fc0609101b22252c373e414853",
        "5a5d646f7679808b92959ca7aeb1b8c3cacdd4dfe6e9f0fb02050c171e2128333a3d444f5659606b72757c878e9198a3",
        "aaadb4bfc6c9d0dbe2e5ecf7fe0108131a1d242f3639404b52555c676e7178838a8d949fa6a9b0bbc2c5ccd7dee1e8f3",
        "fafd040f1619202b32353c474e5158636a6d747f8689909ba2a5acb7bec1c8d3dadde4eff6f9000b12151c272e313843",
        "4a4d545f6669707b82858c979ea1a8b3babdc4cfd6d9e0ebf2f5fc070e1118232a2d343f4649505b62656c777e818893",
        "9a9da4afb6b9c0cbd2d5dce7eef1f8030a0d141f2629303b42454c575e6168737a7d848f9699a0abb2b5bcc7ced1d8e3",
        "eaedf4ff0708111a23242d363f4049525b5c656e7778818a93949da6afb0b9c2cbccd5dee7e8f1fa03040d161f202932",
        "3b3c454e5758616a73747d868f9099a2abacb5bec7c8d1dae3e4edf6ff0009121b1c252e3738414a53545d666f707982",
        "8b8c959ea7a8b1bac3c4cdd6dfe0e9f2fbfc050e1718212a33343d464f5059626b6c757e8788919aa3a4adb6bfc0c9d2",
        "dbdce5eef7f8010a13141d262f3039424b4c555e6768717a83848d969fa0a9b2bbbcc5ced7d8e1eaf3f4fd060f101922",
        "2b2c353e4748515a63646d767f8089929b9ca5aeb7b8c1cad3d4dde6eff0f9020b0c151e2728313a43444d565f606972",
        "7b7c858e9798a1aab3b4bdc6cfd0d9e2ebecf5fe000f161d24232a3138474e555c5b6269707f868d94939aa1a8b7bec5",
        "cccbd2d9e0eff6fd04030a1118272e353c3b4249505f666d74737a8188979ea5acabb2b9c0cfd6dde4e3eaf1f8070e15",
        "1c1b2229303f464d54535a6168777e858c8b9299a0afb6bdc4c3cad1d8e7eef5fcfb0209101f262d34333a4148575e65",
        "6c6b7279808f969da4a3aab1b8c7ced5dcdbe2e9f0ff060d14131a2128373e454c4b5259606f767d84838a9198a7aeb5",
        "bcbbc2c9d0dfe6edf4f3fa0108171e252c2b3239404f565d64636a7178878e959c9ba2a9b0bfc6cdd4d3dae1e8f7fe05",
        "0c0b1219202f363d44434a5158676e757c7b8289909fa6adb4b3bac1c8d7dee5ecebf2f9010e171c25222b3039464f54",
        "5d5a6368717e878c",
    );

    const CSUM_V4_HEX: &str = concat!(
        "010000000000220010009a4a318ae77d9629343efb84080045000098da2b40004006d40cc6120001c6120002c0901389",
        "cb2b4c2d0e0e08d68018003f8cb200000101080a15ea756b1fdd6f6201080f161d242b323940474e555c636a71787f86",
        "8d949ba2a9b0b7bec5ccd3dae1e8eff6fd040b121920272e353c434a51585f666d747b828990979ea5acb3bac1c8cfd6",
        "dde4ebf2f900070e151c232a31383f464d545b626970777e858c939aa1a8afb6",
    );

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The captured packet: offload metadata parsed from the vnet header, frame after it.
    fn captured(hex: &str) -> Packet {
        let bytes = unhex(hex);
        let repr = virtio_net::Repr::parse(&Header::new_checked(&bytes[..10]).unwrap()).unwrap();
        let mut p = Packet::from_frame(3, &bytes[10..]);
        p.offload = repr;
        p
    }

    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| (((i * 7 + seed) ^ (i >> 8)) & 0xff) as u8).collect()
    }

    thread_local! {
        static POOL: RefCell<PacketPool> = RefCell::new(PacketPool::new(300));
    }

    fn with_pool<R>(f: impl FnOnce(&mut PacketPool) -> R) -> R {
        POOL.with(|p| f(&mut p.borrow_mut()))
    }

    fn ip_len(ip: &[u8], ipv6: bool) -> usize {
        if ipv6 {
            40 + usize::from(hdr::get16(ip, hdr::IPV6_PAYLOAD_LEN))
        } else {
            usize::from(hdr::get16(ip, hdr::IPV4_TOTAL_LEN))
        }
    }

    /// Checks every segment against the super-frame and returns the payloads joined.
    /// Returns the segments to the pool.
    fn check_segments(sup: &Packet, l3: usize, segs: Vec<Packet>, pool: &mut PacketPool) -> Vec<u8> {
        let lay = layout(sup.frame(), l3).unwrap();
        let sf = sup.frame();
        let max_l3 = segment_l3_len(sup, l3).unwrap();
        let is_tcp = lay.l4_proto == PROTO_TCP;
        let mut joined = Vec::new();
        let n = segs.len();
        for (i, s) in segs.into_iter().enumerate() {
            let f = s.frame();
            assert_eq!(s.offload, virtio_net::Repr::default());
            assert_eq!(s.port, sup.port);
            // Ethernet and labels unchanged.
            assert_eq!(&f[..l3], &sf[..l3]);
            let ip = &f[l3..];
            assert_eq!(ip_len(ip, lay.ipv6), ip.len(), "segment {i}: IP length");
            assert!(ip.len() <= max_l3, "segment {i}: {} > {max_l3}", ip.len());
            if !lay.ipv6 {
                let ihl = lay.l4_offset - l3;
                assert!(checksum::verify(&ip[..ihl]), "segment {i}: IPv4 header checksum");
                let id = hdr::get16(ip, hdr::IPV4_IDENT);
                let id0 = hdr::get16(&sf[l3..], hdr::IPV4_IDENT);
                assert_eq!(id, id0.wrapping_add(i as u16));
                // Everything but length, id and checksum as in the super-frame.
                assert_eq!(&ip[6..10], &sf[l3 + 6..l3 + 10]);
                assert_eq!(&ip[12..ihl], &sf[l3 + 12..l3 + ihl]);
            }
            assert!(transport_checksum_ok(ip), "segment {i}: transport checksum");
            let l4 = &f[lay.l4_offset..];
            let sl4 = &sf[lay.l4_offset..];
            if is_tcp {
                let seq = hdr::get32(l4, hdr::TCP_SEQ);
                assert_eq!(
                    seq,
                    hdr::get32(sl4, hdr::TCP_SEQ).wrapping_add(joined.len() as u32),
                    "segment {i}: sequence number"
                );
                let flags = l4[hdr::TCP_FLAGS];
                let sflags = sl4[hdr::TCP_FLAGS];
                let last = i + 1 == n;
                for (bit, keep) in [
                    (hdr::TCP_FIN, last),
                    (hdr::TCP_PSH, last),
                    (hdr::TCP_CWR, i == 0),
                    (0x10, true),
                    (0x40, true),
                ] {
                    assert_eq!(flags & bit, if keep { sflags & bit } else { 0 }, "seg {i} flag {bit:#x}");
                }
            } else {
                assert_eq!(usize::from(hdr::get16(l4, hdr::UDP_LENGTH)), l4.len());
                assert_ne!(hdr::get16(l4, hdr::UDP_CHECKSUM), 0);
            }
            let payload = &f[lay.payload_offset..];
            if i + 1 < n {
                assert_eq!(payload.len(), usize::from(sup.offload.gso_size));
            }
            joined.extend_from_slice(payload);
            pool.put(s);
        }
        joined
    }

    fn segment_all(sup: &Packet, l3: usize, pool: &mut PacketPool) -> (usize, Vec<Packet>) {
        let mut out = Vec::new();
        let n = segment(sup, l3, pool, &mut out).unwrap();
        assert_eq!(n, out.len());
        (n, out)
    }

    #[test]
    fn captured_tso_v4_superframe_splits_into_four_valid_segments() {
        let sup = captured(TSO_V4_HEX);
        assert_eq!(sup.offload.gso_type, GsoType::TcpV4);
        assert_eq!(segment_l3_len(&sup, 14).unwrap(), 20 + 32 + 1448);
        with_pool(|pool| {
            let (n, segs) = segment_all(&sup, 14, pool);
            assert_eq!(n, 4);
            let lens: Vec<usize> = segs.iter().map(|s| s.len()).collect();
            assert_eq!(lens, [1514, 1514, 1514, 66 + 656]);
            let joined = check_segments(&sup, 14, segs, pool);
            assert_eq!(joined, pattern(5000, 2));
            assert_eq!(joined, &sup.frame()[66..]);
        });
    }

    #[test]
    fn captured_tso_v6_superframe_splits_into_three_valid_segments() {
        let sup = captured(TSO_V6_HEX);
        assert_eq!(sup.offload.gso_type, GsoType::TcpV6);
        with_pool(|pool| {
            let (n, segs) = segment_all(&sup, 14, pool);
            assert_eq!(n, 3);
            assert_eq!(segs[0].len(), 1514);
            assert_eq!(check_segments(&sup, 14, segs, pool), pattern(3000, 3));
        });
    }

    #[test]
    fn captured_udp_gso_superframe_splits_into_datagrams() {
        let sup = captured(USO_V4_HEX);
        assert_eq!(sup.offload.gso_type, GsoType::UdpL4);
        with_pool(|pool| {
            let (n, segs) = segment_all(&sup, 14, pool);
            assert_eq!(n, 3);
            assert_eq!(segs[2].len(), 14 + 20 + 8 + 300);
            assert_eq!(check_segments(&sup, 14, segs, pool), pattern(1300, 4));
        });
    }

    /// Pushes `n` labels onto a captured frame the way the pipeline does.
    fn push_labels(p: &mut Packet, n: usize) {
        p.shift_head(12, (4 * n) as isize).unwrap();
        let f = p.frame_mut();
        f[12..14].copy_from_slice(&[0x88, 0x47]);
        for i in 0..n {
            let s = u32::from(i + 1 == n);
            let lse = ((1000 + i as u32) << 12) | (s << 8) | 63;
            f[14 + 4 * i..18 + 4 * i].copy_from_slice(&lse.to_be_bytes());
        }
        p.offload.shift((4 * n) as isize);
    }

    #[test]
    fn labelled_tso_superframe_keeps_the_label_stack_on_every_segment() {
        let mut sup = captured(TSO_V4_HEX);
        push_labels(&mut sup, 3);
        with_pool(|pool| {
            let (n, segs) = segment_all(&sup, 26, pool);
            assert_eq!(n, 4);
            assert_eq!(segs[0].len(), 1514 + 12);
            assert_eq!(check_segments(&sup, 26, segs, pool), pattern(5000, 2));
        });
    }

    #[test]
    fn segment_headers_and_payload_slices_are_the_bytes_segment_makes() {
        for (hex, labels) in [(TSO_V4_HEX, 1), (TSO_V6_HEX, 2), (USO_V4_HEX, 1), (TSO_V4_HEX, 0)] {
            let mut sup = captured(hex);
            push_labels(&mut sup, labels);
            let l3 = 14 + 4 * labels;
            // From the label stack on (what a tunnel sends), and from the Ethernet header.
            for from in [14, 0] {
                with_pool(|pool| {
                    let (n, segs) = segment_all(&sup, l3, pool);
                    let mut headers = Vec::new();
                    let h = segment_headers(&sup, l3, from, SegmentChecksum::Full, &mut headers).unwrap();
                    assert_eq!(h.segments, n);
                    assert_eq!(headers.len(), n * h.header_len);
                    for (i, seg) in segs.iter().enumerate() {
                        let start = h.payload_offset + i * h.gso_size;
                        let end = (start + h.gso_size).min(sup.len());
                        let mut made = headers[i * h.header_len..(i + 1) * h.header_len].to_vec();
                        made.extend_from_slice(&sup.frame()[start..end]);
                        assert_eq!(made, &seg.frame()[from..], "segment {i} of {hex:.20}, {labels} labels");
                    }
                    segs.into_iter().for_each(|p| pool.put(p));
                });
            }
        }
        let plain = captured(CSUM_V4_HEX);
        assert_eq!(
            segment_headers(&plain, 14, 14, SegmentChecksum::Full, &mut Vec::new()),
            Err(GsoError::NotGso)
        );
    }

    #[test]
    fn partial_segment_checksums_complete_to_the_full_ones() {
        for (hex, labels) in [(TSO_V4_HEX, 1), (TSO_V6_HEX, 2), (USO_V4_HEX, 1), (TSO_V4_HEX, 0)] {
            let mut sup = captured(hex);
            push_labels(&mut sup, labels);
            let l3 = 14 + 4 * labels;
            with_pool(|pool| {
                let (mut full, mut partial) = (Vec::new(), Vec::new());
                let f = segment_headers(&sup, l3, 0, SegmentChecksum::Full, &mut full).unwrap();
                let p = segment_headers(&sup, l3, 0, SegmentChecksum::Partial, &mut partial).unwrap();
                assert_eq!(f, p);
                for i in 0..p.segments {
                    let start = p.payload_offset + i * p.gso_size;
                    let payload = &sup.frame()[start..(start + p.gso_size).min(sup.len())];
                    let headers = |h: &[u8]| h[i * p.header_len..(i + 1) * p.header_len].to_vec();
                    let made = [headers(&partial), payload.to_vec()].concat();
                    let mut seg = pool.get().unwrap();
                    seg.extend(made.len()).unwrap().copy_from_slice(&made);
                    seg.offload.needs_csum = true;
                    seg.offload.csum_start = p.l4_offset as u16;
                    seg.offload.csum_offset = p.csum_offset as u16;
                    complete_checksum(&mut seg).unwrap();
                    let want = [headers(&full), payload.to_vec()].concat();
                    assert_eq!(seg.frame(), &want[..], "segment {i} of {hex:.20}, {labels} labels");
                    pool.put(seg);
                }
            });
        }
    }

    #[test]
    fn complete_checksum_on_captured_frame_matches_full_recompute() {
        for hex in [CSUM_V4_HEX, TSO_V4_HEX, TSO_V6_HEX, USO_V4_HEX] {
            let mut p = captured(hex);
            assert!(p.offload.needs_csum);
            let start = usize::from(p.offload.csum_start);
            let field = start + usize::from(p.offload.csum_offset);
            complete_checksum(&mut p).unwrap();
            assert!(!p.offload.needs_csum);
            let got = hdr::get16(p.frame(), field);
            assert!(transport_checksum_ok(&p.frame()[14..]));
            // Full recompute: field zeroed, pseudo-header from the addresses.
            let mut f = p.frame().to_vec();
            hdr::put16(&mut f, field, 0);
            let ip = &f[14..];
            let l4 = &f[start..];
            let pseudo = if ip[0] >> 4 == 4 {
                checksum::pseudo_header_v4(
                    Ipv4Addr::from(hdr::get32(ip, 12)),
                    Ipv4Addr::from(hdr::get32(ip, 16)),
                    ip[9],
                    l4.len() as u32,
                )
            } else {
                checksum::pseudo_header_v6(
                    Ipv6Addr::from(ipv6_addr(ip, 8)),
                    Ipv6Addr::from(ipv6_addr(ip, 24)),
                    ip[6],
                    l4.len() as u32,
                )
            };
            let full = checksum::finish(checksum::add(pseudo, checksum::sum(l4)));
            assert_eq!(got, full);
        }
        // The small frame's checksum, computed independently with Python from the capture.
        let mut p = captured(CSUM_V4_HEX);
        complete_checksum(&mut p).unwrap();
        assert_eq!(hdr::get16(p.frame(), 34 + 16), 0x8659);
    }

    #[test]
    fn complete_checksum_leaves_a_full_checksum_alone_and_rejects_bad_offsets() {
        let mut p = captured(CSUM_V4_HEX);
        p.offload.needs_csum = false;
        let before = p.frame().to_vec();
        complete_checksum(&mut p).unwrap();
        assert_eq!(p.frame(), &before[..]);
        p.offload.needs_csum = true;
        p.offload.csum_offset = 200;
        assert_eq!(complete_checksum(&mut p), Err(GsoError::BadChecksumOffset));
        p.offload.csum_start = u16::MAX;
        p.offload.csum_offset = u16::MAX;
        assert_eq!(complete_checksum(&mut p), Err(GsoError::BadChecksumOffset));
        assert!(p.offload.needs_csum);
    }

    #[test]
    fn rebuild_turns_a_jumbo_tcp_packet_back_into_segments_that_fit() {
        for ipv6 in [false, true] {
            let data = payload(20000, 3);
            let headers = if ipv6 { 40 + 32 } else { 24 + 32 };
            // ip_packet leaves the checksum partial: complete it, as a jumbo frame with a
            // complete checksum arrives.
            let mut p = Packet::from_frame(0, &wrap(0, &ip_packet(ipv6, true, hdr::TCP_PSH, &data), ipv6));
            p.offload.needs_csum = true;
            p.offload.csum_start = (14 + headers - 32) as u16;
            p.offload.csum_offset = 16;
            complete_checksum(&mut p).unwrap();
            let frame = p.frame().to_vec();
            let l3_mtu = 1500;
            let gso_size = rebuild(&mut p, 14, l3_mtu).unwrap();
            assert_eq!(usize::from(gso_size), l3_mtu - headers);
            let max = segment_l3_len(&p, 14).unwrap();
            assert_eq!(max, l3_mtu);
            let mut pool = PacketPool::new(32);
            let mut out = Vec::new();
            segment(&p, 14, &mut pool, &mut out).unwrap();
            let mut joined = Vec::new();
            for s in &out {
                assert!(s.len() - 14 <= l3_mtu);
                assert!(transport_checksum_ok(&s.frame()[14..]));
                joined.extend_from_slice(&s.frame()[14 + headers..]);
            }
            assert_eq!(joined, data);
            // A corrupted packet is not vouched for.
            let mut bad = frame.clone();
            let n = bad.len();
            bad[n - 1] ^= 1;
            let mut p = Packet::from_frame(0, &bad);
            assert_eq!(rebuild(&mut p, 14, l3_mtu), Err(GsoError::BadChecksum));
        }
    }

    #[test]
    fn rebuild_lowers_the_gso_size_of_a_super_frame_merged_from_jumbo_frames() {
        for ipv6 in [false, true] {
            let data = payload(24000, 5);
            let headers = if ipv6 { 40 + 32 } else { 24 + 32 };
            // Two 12,000-byte "segments" merged: gso_size 12000, partial checksum.
            let mut p = Packet::from_frame(0, &wrap(0, &ip_packet(ipv6, true, hdr::TCP_PSH, &data), ipv6));
            p.offload.needs_csum = true;
            p.offload.csum_start = (14 + headers - 32) as u16;
            p.offload.csum_offset = 16;
            p.offload.gso_type = if ipv6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
            p.offload.gso_size = 12000;
            let l3_mtu = 1500;
            assert_eq!(usize::from(rebuild(&mut p, 14, l3_mtu).unwrap()), l3_mtu - headers);
            assert_eq!(segment_l3_len(&p, 14).unwrap(), l3_mtu);
            let mut pool = PacketPool::new(32);
            let mut out = Vec::new();
            segment(&p, 14, &mut pool, &mut out).unwrap();
            let mut joined = Vec::new();
            for s in &out {
                assert!(s.len() - 14 <= l3_mtu);
                assert!(transport_checksum_ok(&s.frame()[14..]));
                joined.extend_from_slice(&s.frame()[14 + headers..]);
            }
            assert_eq!(joined, data);
            // Never larger than it was; a checksum that does not point at TCP's is refused.
            assert_eq!(usize::from(rebuild(&mut p, 14, 9000).unwrap()), l3_mtu - headers);
            p.offload.csum_offset = 6;
            assert_eq!(rebuild(&mut p, 14, l3_mtu), Err(GsoError::BadChecksumOffset));
        }
    }

    #[test]
    fn copy_and_sum_copies_and_sums_like_checksum_sum_at_every_alignment() {
        let data = payload(300, 9);
        for start in 0..8 {
            for end in start..data.len() {
                let d = &data[start..end];
                let reference = checksum::fold(checksum::sum(d));
                let mut dst = [0u8; 320];
                let copied = copy_and_sum(&mut dst, d);
                assert_eq!(checksum::fold(copied), reference, "copy {start}..{end}");
                assert_eq!(&dst[..d.len()], d);
            }
        }
    }

    #[test]
    fn lying_hdr_len_and_csum_start_do_not_matter() {
        let sup0 = captured(TSO_V4_HEX);
        let mut sup = captured(TSO_V4_HEX);
        sup.offload.hdr_len = 10;
        sup.offload.csum_start = 3;
        sup.offload.needs_csum = false;
        with_pool(|pool| {
            let mut a = Vec::new();
            let mut b = Vec::new();
            segment(&sup0, 14, pool, &mut a).unwrap();
            segment(&sup, 14, pool, &mut b).unwrap();
            assert!(a.iter().zip(&b).all(|(x, y)| x.frame() == y.frame()));
            for p in a.into_iter().chain(b) {
                pool.put(p);
            }
        });
    }

    #[test]
    fn small_superframe_becomes_one_segment_and_empty_payload_too() {
        for plen in [0usize, 1, 1448] {
            let f = wrap(1, &ip_packet(false, true, 0x19, &payload(plen, 1)), false);
            let mut sup = Packet::from_frame(1, &f);
            sup.offload.gso_type = GsoType::TcpV4;
            sup.offload.gso_size = 1448;
            with_pool(|pool| {
                assert_eq!(segment_l3_len(&sup, 18).unwrap(), f.len() - 18);
                let (n, segs) = segment_all(&sup, 18, pool);
                assert_eq!(n, 1);
                // FIN and PSH stay on the only segment.
                assert_eq!(segs[0].frame()[18 + 24 + 13], 0x19);
                assert_eq!(check_segments(&sup, 18, segs, pool), payload(plen, 1));
            });
        }
    }

    #[test]
    fn errors_for_frames_that_cannot_be_segmented() {
        let good = wrap(0, &ip_packet(false, true, 0x10, &payload(3000, 1)), false);
        let gso = |f: &[u8], t: GsoType, size: u16| {
            let mut p = Packet::from_frame(0, f);
            p.offload.gso_type = t;
            p.offload.gso_size = size;
            p
        };
        let mut pool = PacketPool::new(4);
        let mut out = Vec::new();
        let mut run = |p: &Packet, l3: usize| segment(p, l3, &mut pool, &mut out);

        assert_eq!(run(&gso(&good, GsoType::None, 1000), 14), Err(GsoError::NotGso));
        assert_eq!(run(&gso(&good, GsoType::TcpV4, 0), 14), Err(GsoError::ZeroGsoSize));
        assert_eq!(run(&gso(&good, GsoType::Udp, 1000), 14), Err(GsoError::Unsupported));
        assert_eq!(run(&gso(&good, GsoType::TcpV6, 1000), 14), Err(GsoError::GsoTypeMismatch));
        assert_eq!(run(&gso(&good, GsoType::UdpL4, 1000), 14), Err(GsoError::GsoTypeMismatch));
        // Total length says less or more than the frame holds.
        let mut bad = good.clone();
        hdr::put16(&mut bad, 14 + 2, 3000);
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::LengthMismatch));
        hdr::put16(&mut bad, 14 + 2, 3057);
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::Truncated));
        hdr::put16(&mut bad, 14 + 2, 0);
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::Malformed));
        let mut bad6 = wrap(0, &ip_packet(true, false, 0, &payload(3000, 1)), true);
        hdr::put16(&mut bad6, 14 + 4, 3000);
        assert_eq!(run(&gso(&bad6, GsoType::UdpL4, 1000), 14), Err(GsoError::LengthMismatch));
        // Truncated in the TCP header, then in the TCP options.
        assert_eq!(run(&gso(&good[..14 + 24 + 10], GsoType::TcpV4, 1000), 14), Err(GsoError::Truncated));
        assert_eq!(run(&gso(&good[..14 + 24 + 25], GsoType::TcpV4, 1000), 14), Err(GsoError::Truncated));
        assert_eq!(run(&gso(&good, GsoType::TcpV4, 1000), 5000), Err(GsoError::Truncated));
        // TCP data offset below 5 words, IHL below 5 words, IP version 5.
        let mut bad = good.clone();
        bad[14 + 24 + 12] = 4 << 4;
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::Malformed));
        let mut bad = good.clone();
        bad[14] = 0x44;
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::Malformed));
        bad[14] = 0x56;
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::Malformed));
        // An IPv4 fragment, ICMP.
        let mut bad = good.clone();
        bad[14 + 6] |= 0x20;
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::Unsupported));
        let mut bad = good.clone();
        bad[14 + 9] = 1;
        assert_eq!(run(&gso(&bad, GsoType::TcpV4, 1000), 14), Err(GsoError::Unsupported));
        // IPv6 with a hop-by-hop header.
        let mut v6 = wrap(0, &ip_packet(true, true, 0x10, &payload(3000, 1)), true);
        v6[14 + 6] = 0;
        assert_eq!(run(&gso(&v6, GsoType::TcpV6, 1000), 14), Err(GsoError::Unsupported));
        assert!(out.is_empty());
        assert_eq!(pool.available(), 4);
    }

    #[test]
    fn pool_exhaustion_keeps_the_segments_already_made() {
        let f = wrap(2, &ip_packet(true, false, 0, &payload(10000, 5)), true);
        let mut sup = Packet::from_frame(0, &f);
        sup.offload.gso_type = GsoType::UdpL4;
        sup.offload.gso_size = 1000;
        let mut pool = PacketPool::new(4);
        let mut out = Vec::new();
        assert_eq!(segment(&sup, 22, &mut pool, &mut out), Err(GsoError::NoBuffer));
        assert_eq!(out.len(), 4);
        for (i, s) in out.iter().enumerate() {
            assert!(transport_checksum_ok(&s.frame()[22..]));
            assert_eq!(&s.frame()[22 + 48..], &payload(10000, 5)[i * 1000..(i + 1) * 1000]);
        }
    }

    #[test]
    fn cwr_only_on_first_segment_also_with_gso_ecn() {
        for ecn in [false, true] {
            let f = wrap(0, &ip_packet(false, true, 0x80 | 0x40 | 0x18 | 0x01, &payload(5000, 1)), false);
            let mut sup = Packet::from_frame(0, &f);
            sup.offload.gso_type = GsoType::TcpV4;
            sup.offload.gso_ecn = ecn;
            sup.offload.gso_size = 1448;
            with_pool(|pool| {
                let (_, segs) = segment_all(&sup, 14, pool);
                let flags: Vec<u8> = segs.iter().map(|s| s.frame()[14 + 24 + 13]).collect();
                assert_eq!(flags, [0xd0, 0x50, 0x50, 0x59]);
                check_segments(&sup, 14, segs, pool);
            });
        }
    }

    /// Builds a super-frame from the test parameters.
    fn superframe(
        ipv6: bool,
        tcp: bool,
        labels: usize,
        plen: usize,
        gso: u16,
        needs_csum: bool,
    ) -> (Packet, usize) {
        let ip = ip_packet(ipv6, tcp, 0x80 | 0x18 | 0x01, &payload(plen, plen as u8));
        let f = wrap(labels, &ip, ipv6);
        let mut p = Packet::from_frame(2, &f);
        let l3 = 14 + 4 * labels;
        p.offload.gso_type = match (ipv6, tcp) {
            (false, true) => GsoType::TcpV4,
            (true, true) => GsoType::TcpV6,
            _ => GsoType::UdpL4,
        };
        p.offload.gso_size = gso;
        p.offload.needs_csum = needs_csum;
        let lay = layout(&f, l3).unwrap();
        p.offload.csum_start = lay.l4_offset as u16;
        p.offload.csum_offset = if tcp { 16 } else { 6 };
        p.offload.hdr_len = lay.payload_offset as u16;
        (p, l3)
    }

    /// A Linux guest's TSO header (NEEDS_CSUM, TCPV4, hdr_len 66, gso_size 1448,
    /// csum_start 34, csum_offset 16) with `gso_size` replaced.
    fn tso_header(gso_size: u16) -> [u8; 10] {
        let mut h = [0x01, 0x01, 0x42, 0x00, 0, 0, 0x22, 0x00, 0x10, 0x00];
        h[4..6].copy_from_slice(&gso_size.to_le_bytes());
        h
    }

    #[test]
    fn a_received_super_frame_with_a_tiny_gso_size_is_refused() {
        let frame_len = 65_000;
        for tiny in [1, 2, 64, MIN_GSO_SIZE - 1] {
            assert_eq!(
                received_offload(&tso_header(tiny), frame_len),
                Err(OffloadRefused::GsoSizeTooSmall),
                "gso_size {tiny}"
            );
        }
        let at_floor = received_offload(&tso_header(MIN_GSO_SIZE), frame_len).unwrap();
        assert_eq!((at_floor.gso_type, at_floor.gso_size), (GsoType::TcpV4, MIN_GSO_SIZE));
        assert_eq!(received_offload(&tso_header(1448), frame_len).unwrap().gso_size, 1448);
        // Not a super-frame: gso_size means nothing and is not looked at.
        let mut plain = tso_header(1);
        plain[1] = 0;
        assert!(received_offload(&plain, frame_len).is_ok());
    }

    #[test]
    fn a_received_header_with_offsets_outside_the_frame_is_refused() {
        let h = tso_header(1448);
        assert_eq!(received_offload(&h[..9], 1000), Err(OffloadRefused::BadHeader));
        assert_eq!(received_offload(&h, 65), Err(OffloadRefused::BadHeader), "hdr_len 66");
        let mut unknown = h;
        unknown[1] = 2;
        assert_eq!(received_offload(&unknown, 1000), Err(OffloadRefused::BadHeader));
        assert!(received_offload(&h, 66).is_ok());
    }

    #[test]
    fn no_super_frame_is_cut_into_more_than_max_gso_segments() {
        // 64,000 bytes at gso_size 80: 800 segments, more than any real TSO frame.
        let (sup, l3) = superframe(false, true, 0, 64_000, 80, true);
        assert_eq!(segment_l3_len(&sup, l3), Err(GsoError::TooManySegments));
        let mut headers = Vec::new();
        assert_eq!(
            segment_headers(&sup, l3, 0, SegmentChecksum::Partial, &mut headers).map(|h| h.segments),
            Err(GsoError::TooManySegments)
        );
        with_pool(|pool| {
            let mut out = Vec::new();
            assert_eq!(segment(&sup, l3, pool, &mut out), Err(GsoError::TooManySegments));
            assert!(out.is_empty());
        });
        // A whole 64 KiB IPv6 payload (behind a 32-byte TCP header) at the floor is the
        // most a port lets in: it is cut.
        let (sup, l3) = superframe(true, true, 0, 65_535 - 32, MIN_GSO_SIZE, true);
        let cut = segment_headers(&sup, l3, 0, SegmentChecksum::Partial, &mut headers).unwrap();
        assert_eq!(cut.segments, MAX_GSO_SEGMENTS);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn segment_then_reassemble_gives_back_the_payload(
            (gso, plen) in (1u16..9000).prop_flat_map(|g| (Just(g), 1usize..=(64000usize).min(usize::from(g) * 256))),
            ipv6 in any::<bool>(),
            tcp in any::<bool>(),
            labels in 0usize..=3,
            needs_csum in any::<bool>(),
        ) {
            let (sup, l3) = superframe(ipv6, tcp, labels, plen, gso, needs_csum);
            with_pool(|pool| {
                let (n, segs) = segment_all(&sup, l3, pool);
                prop_assert_eq!(n, plen.div_ceil(usize::from(gso)));
                let joined = check_segments(&sup, l3, segs, pool);
                prop_assert_eq!(joined, payload(plen, plen as u8));
                Ok(())
            })?;
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            l3 in 0usize..40,
            gso in 0u16..100,
            ty in 0usize..5,
            start in any::<u16>(),
            off in any::<u16>(),
        ) {
            let mut p = Packet::from_frame(0, &bytes);
            p.offload.gso_type = [GsoType::None, GsoType::TcpV4, GsoType::TcpV6, GsoType::UdpL4, GsoType::Udp][ty];
            p.offload.gso_size = gso;
            p.offload.needs_csum = true;
            p.offload.csum_start = start % 256;
            p.offload.csum_offset = off % 256;
            with_pool(|pool| {
                let mut out = Vec::new();
                let _ = segment_l3_len(&p, l3);
                if segment(&p, l3, pool, &mut out).is_ok() {
                    for s in &out {
                        prop_assert!(s.len() <= p.len());
                    }
                }
                for s in out {
                    pool.put(s);
                }
                let _ = complete_checksum(&mut p);
                Ok(())
            })?;
        }

        #[test]
        fn mutated_superframes_never_panic(
            idx in 0usize..200, val in any::<u8>(), cut in 0usize..400,
            ipv6 in any::<bool>(), tcp in any::<bool>(),
        ) {
            let (sup, l3) = superframe(ipv6, tcp, 1, 300, 100, true);
            let mut f = sup.frame().to_vec();
            let i = idx % f.len();
            f[i] = val;
            f.truncate(f.len() - cut.min(f.len()));
            let mut p = Packet::from_frame(0, &f);
            p.offload = sup.offload;
            with_pool(|pool| {
                let mut out = Vec::new();
                let r = segment(&p, l3, pool, &mut out);
                if r.is_ok() {
                    for s in &out {
                        prop_assert!(transport_checksum_ok(&s.frame()[l3..]));
                    }
                }
                for s in out {
                    pool.put(s);
                }
                Ok(())
            })?;
        }
    }

    /// `cargo test -p vmpls-dataplane --release -- --ignored --nocapture gso_speed`
    #[test]
    #[ignore]
    fn gso_speed() {
        use std::time::Instant;
        for (ipv6, labels) in [(false, 0usize), (false, 2), (true, 2)] {
            // 64 KB super-frames into 1448-byte segments: 45 segments of payload.
            let plen = 65000 - 20 - 32 - if ipv6 { 20 } else { 4 };
            let (sup, l3) = superframe(ipv6, true, labels, plen, 1448, true);
            let mut pool = PacketPool::new(64);
            let mut out = Vec::with_capacity(64);
            let rounds = 4000;
            let t = Instant::now();
            let mut segs = 0;
            for _ in 0..rounds {
                segs += segment(&sup, l3, &mut pool, &mut out).unwrap();
                for p in out.drain(..) {
                    pool.put(p);
                }
            }
            let dt = t.elapsed().as_secs_f64();
            let bytes = (plen * rounds) as f64;
            println!(
                "ipv6={ipv6} labels={labels}: {:.2} GB/s of payload, {:.1} Mseg/s, {:.0} ns per 64 KB super-frame",
                bytes / dt / 1e9,
                segs as f64 / dt / 1e6,
                dt / rounds as f64 * 1e9
            );
        }
        // Baseline in the same run: a plain memcpy of the same payload bytes.
        let src = payload(64000, 1);
        let mut dst = vec![0u8; 64000];
        let t = Instant::now();
        for _ in 0..4000 {
            for (d, s) in dst.chunks_mut(1448).zip(src.chunks(1448)) {
                d.copy_from_slice(s);
            }
            std::hint::black_box(&mut dst);
        }
        let dt = t.elapsed().as_secs_f64();
        println!("memcpy baseline: {:.2} GB/s", 64000.0 * 4000.0 / dt / 1e9);
    }
}
