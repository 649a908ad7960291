//! IPv4 fragmentation (RFC 791 section 3.2) for packets too big for the egress MTU once
//! labels are pushed, when Don't Fragment is clear.
//!
//! The bytes in front of the IP header (Ethernet, label stack) are copied onto every
//! fragment. Options whose copy flag is set go into every fragment; the others only into
//! the first (RFC 791: "copied" options). Each fragment's payload but the last is a
//! multiple of 8 bytes. An original that is itself a fragment (MF set or a non-zero
//! offset) is cut again with offsets relative to its own, and its MF carried on the last
//! piece, so the receiver reassembles the same datagram.
//!
//! Pure function over buffers: no I/O, no allocation per fragment. Malformed packets give
//! a [`FragError`], never a panic.

use core::fmt;

use vmpls_wire::ipv4;

use crate::gso::{self, GsoError};
use crate::packet::{Packet, PacketPool};

/// Why a packet could not be fragmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragError {
    /// The packet has Don't Fragment set and is larger than the limit: answer with an
    /// ICMP "fragmentation needed" carrying the MTU instead.
    DontFragment,
    /// The packet is a GSO super-frame: segment it with [`gso::segment`] instead.
    Gso,
    /// The frame ends before the IPv4 header or before the total length it claims.
    Truncated,
    /// Not a valid IPv4 packet: version other than 4, header length below 20 bytes, total
    /// length shorter than the header, an option running past the header, or a datagram
    /// whose fragments would need an offset beyond 65528.
    Malformed,
    /// `max_ip_len` leaves no room for 8 payload bytes after the IP header.
    MtuTooSmall,
    /// The packet's partial transport checksum could not be completed first.
    Checksum(GsoError),
    /// The packet pool ran out of buffers. Fragments already appended to the output are
    /// complete and valid; the rest of the packet is lost.
    NoBuffer,
}

impl fmt::Display for FragError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FragError::DontFragment => "packet too big and Don't Fragment set",
            FragError::Gso => "GSO super-frame: segment it instead of fragmenting",
            FragError::Truncated => "frame shorter than its IPv4 header or total length",
            FragError::Malformed => "malformed IPv4 header",
            FragError::MtuTooSmall => "MTU too small for an IPv4 fragment",
            FragError::Checksum(_) => "cannot complete the partial checksum before fragmenting",
            FragError::NoBuffer => "packet pool exhausted while fragmenting",
        })
    }
}

impl std::error::Error for FragError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FragError::Checksum(e) => Some(e),
            _ => None,
        }
    }
}

/// The header for every fragment after the first: the fixed 20 bytes of `orig`'s, then
/// the options with the copied flag, padded with End of Option List (zeros) to a multiple
/// of 4 bytes. Returns the buffer and its length.
fn copied_options_header(
    orig: &ipv4::Packet<&[u8]>,
) -> Result<([u8; ipv4::MAX_HEADER_LEN], usize), FragError> {
    let mut out = [0u8; ipv4::MAX_HEADER_LEN];
    out[..ipv4::HEADER_LEN].copy_from_slice(&orig.header()[..ipv4::HEADER_LEN]);
    let mut len = ipv4::HEADER_LEN;
    for opt in orig.option_iter() {
        let opt = opt.map_err(|_| FragError::Malformed)?;
        if opt.copied() {
            // The copied options are part of the original's at most 40.
            let b = opt.bytes();
            out[len..len + b.len()].copy_from_slice(b);
            len += b.len();
        }
    }
    let len = len.next_multiple_of(4);
    ipv4::Packet::new_unchecked(&mut out[..]).set_header_len(len);
    Ok((out, len))
}

/// Fragments the IPv4 packet at `l3_offset` of `pkt` so that each fragment's IP length is
/// at most `max_ip_len`: fragment payloads multiples of 8 bytes, options with the copy flag
/// in every fragment and the others only in the first, header checksums filled, MF and
/// offset set right (also when the original is itself a fragment). The bytes in front of
/// `l3_offset` (Ethernet, labels) are copied onto each; fragments get the packet's port and
/// default offload metadata.
///
/// A packet with a partial checksum (`needs_csum`) is completed first (in place); a GSO
/// super-frame is an error. A packet that already fits is copied as one fragment, without
/// trailing bytes past its total length. Appends the fragments to `out` with buffers from
/// `pool` and returns their number.
pub fn fragment_ipv4(
    pkt: &mut Packet,
    l3_offset: usize,
    max_ip_len: usize,
    pool: &mut PacketPool,
    out: &mut Vec<Packet>,
) -> Result<usize, FragError> {
    if pkt.offload.is_gso() {
        return Err(FragError::Gso);
    }
    if pkt.offload.needs_csum {
        gso::complete_checksum(pkt).map_err(FragError::Checksum)?;
    }
    let frame = pkt.frame();
    let ip = frame.get(l3_offset..).ok_or(FragError::Truncated)?;
    let orig = ipv4::Packet::new_checked(ip).map_err(|e| match e {
        vmpls_wire::Error::Truncated => FragError::Truncated,
        vmpls_wire::Error::Malformed => FragError::Malformed,
    })?;
    let ihl = orig.header_len();
    let total = usize::from(orig.total_len());

    if total <= max_ip_len {
        let mut p = pool.get().ok_or(FragError::NoBuffer)?;
        let Some(buf) = p.extend(l3_offset + total) else {
            pool.put(p);
            return Err(FragError::Truncated);
        };
        buf.copy_from_slice(&frame[..l3_offset + total]);
        p.port = pkt.port;
        out.push(p);
        return Ok(1);
    }

    if orig.dont_frag() {
        return Err(FragError::DontFragment);
    }
    let orig_offset = usize::from(orig.frag_offset());
    let orig_mf = orig.more_frags();
    let (rest_hdr, rest_ihl) = copied_options_header(&orig)?;

    let room = |h: usize| {
        max_ip_len.checked_sub(h).map(|r| r & !7).filter(|&r| r >= 8).ok_or(FragError::MtuTooSmall)
    };
    let first_max = room(ihl)?;
    let rest_max = room(rest_ihl)?;
    let payload = orig.payload();
    // The offset of the last fragment must fit in 13 bits of 8-byte units; the ones
    // before it are smaller.
    let last_start = if payload.len() <= first_max {
        0
    } else {
        first_max + (payload.len() - first_max - 1) / rest_max * rest_max
    };
    if orig_offset + last_start > usize::from(ipv4::MAX_FRAG_OFFSET) {
        return Err(FragError::Malformed);
    }

    let mut pos = 0;
    let mut count = 0;
    while pos < payload.len() {
        let (h, hl, max) = if pos == 0 {
            (orig.header(), ihl, first_max)
        } else {
            (&rest_hdr[..rest_ihl], rest_ihl, rest_max)
        };
        let n = max.min(payload.len() - pos);
        let last = pos + n == payload.len();
        let mut p = pool.get().ok_or(FragError::NoBuffer)?;
        let Some(buf) = p.extend(l3_offset + hl + n) else {
            pool.put(p);
            return Err(FragError::Truncated);
        };
        buf[..l3_offset].copy_from_slice(&frame[..l3_offset]);
        buf[l3_offset..l3_offset + hl].copy_from_slice(h);
        buf[l3_offset + hl..].copy_from_slice(&payload[pos..pos + n]);
        // Lengths and offsets fit in their fields: checked above.
        let mut fh = ipv4::Packet::new_unchecked(&mut buf[l3_offset..]);
        fh.set_total_len((hl + n) as u16);
        fh.set_frag_offset((orig_offset + pos) as u16);
        fh.set_more_frags(!last || orig_mf);
        fh.fill_checksum();
        p.port = pkt.port;
        out.push(p);
        count += 1;
        pos += n;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gso::test_frames::*;
    use proptest::prelude::*;
    use vmpls_wire::checksum;
    use vmpls_wire::virtio_net::GsoType;

    /// Loose source route: copy flag set, 11 bytes.
    const OPT_LSRR: [u8; 11] = [ipv4::option::LSRR, 11, 4, 198, 18, 5, 1, 198, 18, 5, 2];
    /// Record route: copy flag clear, 7 bytes.
    const OPT_RR: [u8; 7] = [ipv4::option::RECORD_ROUTE, 7, 4, 0, 0, 0, 0];
    /// Router alert: copy flag set, 4 bytes.
    const OPT_RA: [u8; 4] = [ipv4::option::ROUTER_ALERT, 4, 0, 0];

    /// An IPv4 UDP-ish packet (protocol 253, experimental) with `options` and `payload`.
    fn ipv4(options: &[&[u8]], frag_word: u16, payload: &[u8]) -> Vec<u8> {
        let mut opts: Vec<u8> = Vec::new();
        for (i, o) in options.iter().enumerate() {
            if i % 2 == 1 {
                opts.push(ipv4::option::NOP);
            }
            opts.extend_from_slice(o);
        }
        opts.resize(opts.len().next_multiple_of(4), ipv4::option::END_OF_LIST);
        let ihl = 20 + opts.len();
        assert!(ihl <= 60);
        let mut p = vec![0x40 | (ihl / 4) as u8, 0];
        p.extend_from_slice(&((ihl + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&0xbeefu16.to_be_bytes());
        p.extend_from_slice(&frag_word.to_be_bytes());
        p.extend_from_slice(&[64, 253, 0, 0, 198, 18, 0, 1, 198, 18, 1, 2]);
        p.extend_from_slice(&opts);
        hdr::fill_ipv4_checksum(&mut p[..ihl]);
        p.extend_from_slice(payload);
        p
    }

    /// The options every fragment after the first must carry, for `options` as given to
    /// [`ipv4`]: the ones with the copy flag, padded with zeros to 4 bytes.
    fn copied(options: &[&[u8]]) -> Vec<u8> {
        let mut v: Vec<u8> =
            options.iter().filter(|o| o[0] & 0x80 != 0).flat_map(|o| o.iter().copied()).collect();
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    /// Checks the fragments of `orig` (whose later fragments carry the `copied` options)
    /// and returns (offset, payload, MF) per fragment.
    fn check(
        orig: &[u8],
        l3: usize,
        max: usize,
        copied: &[u8],
        frags: &[Packet],
    ) -> Vec<(usize, Vec<u8>, bool)> {
        let oip = &orig[l3..];
        let oihl = usize::from(oip[0] & 15) * 4;
        let mut v = Vec::new();
        for (i, f) in frags.iter().enumerate() {
            let f = f.frame();
            assert_eq!(&f[..l3], &orig[..l3], "bytes before the IP header");
            let ip = &f[l3..];
            let ihl = usize::from(ip[0] & 15) * 4;
            assert!(checksum::verify(&ip[..ihl]), "fragment {i}: header checksum");
            assert_eq!(usize::from(hdr::get16(ip, 2)), ip.len());
            assert!(ip.len() <= max, "fragment {i}: {} > {max}", ip.len());
            // Identification, TTL, protocol, addresses kept.
            assert_eq!(&ip[4..6], &oip[4..6]);
            assert_eq!(&ip[8..10], &oip[8..10]);
            assert_eq!(&ip[12..20], &oip[12..20]);
            if i == 0 {
                assert_eq!(&ip[20..ihl], &oip[20..oihl], "first fragment has every option");
            } else {
                assert_eq!(&ip[20..ihl], copied, "copied options only");
            }
            let w = hdr::get16(ip, 6);
            assert_eq!(w & hdr::IPV4_DF, 0);
            let payload = ip[ihl..].to_vec();
            let mf = w & hdr::IPV4_MF != 0;
            if i + 1 < frags.len() {
                assert!(mf, "MF on every fragment but the last");
                assert_eq!(payload.len() % 8, 0, "fragment {i}: payload a multiple of 8");
            }
            v.push((usize::from(w & 0x1fff) * 8, payload, mf));
        }
        v
    }

    /// Puts the fragments back together by offset; panics on gaps or overlaps.
    fn reassemble(mut parts: Vec<(usize, Vec<u8>, bool)>, base: usize) -> Vec<u8> {
        parts.sort_by_key(|p| p.0);
        let mut out = Vec::new();
        for (off, data, _) in parts {
            assert_eq!(off, base + out.len(), "contiguous fragments");
            out.extend_from_slice(&data);
        }
        out
    }

    fn run(pkt: &mut Packet, l3: usize, max: usize) -> (Result<usize, FragError>, Vec<Packet>) {
        let mut pool = PacketPool::new(300);
        let mut out = Vec::new();
        let r = fragment_ipv4(pkt, l3, max, &mut pool, &mut out);
        (r, out)
    }

    #[test]
    fn fragments_with_options_and_labels_reassemble() {
        let data = payload(4000, 3);
        let ip = ipv4(&[&OPT_LSRR, &OPT_RR, &OPT_RA], 0, &data);
        let f = wrap(2, &ip, false);
        let mut p = Packet::from_frame(7, &f);
        let (r, frags) = run(&mut p, 22, 1500);
        let n = r.unwrap();
        assert_eq!(n, frags.len());
        assert!(frags.iter().all(|f| f.port == 7));
        // First: 1500 - 44 = 1456 bytes; others: header 20 + 16 (LSRR, RA) = 36 -> 1464.
        assert_eq!(frags[0].len() - 22, 44 + 1456);
        assert_eq!(frags[1].len() - 22, 36 + 1464);
        let parts = check(&f, 22, 1500, &copied(&[&OPT_LSRR, &OPT_RA]), &frags);
        assert!(!parts.last().unwrap().2);
        assert_eq!(reassemble(parts, 0), data);
    }

    #[test]
    fn captured_datagram_keeps_only_copied_options_after_the_first_fragment() {
        // wire's ipv4 OPTIONS_FRAME: UDP "vmpls" behind No Operation, Loose Source Route
        // (copied), Router Alert (copied), Record Route (not copied), End of Option List;
        // captured with DF set, cleared here.
        let mut f = vec![
            0x02, 0x00, 0x00, 0x00, 0x00, 0x07, 0x96, 0xb7, 0xbe, 0x33, 0x9f, 0xf8, 0x08, 0x00, 0x4b, 0x00,
            0x00, 0x39, 0x61, 0x0f, 0x40, 0x00, 0x40, 0x11, 0xc2, 0x06, 0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12,
            0x00, 0x07, 0x01, 0x83, 0x07, 0x04, 0xc6, 0x12, 0x00, 0x02, 0x94, 0x04, 0x00, 0x00, 0x07, 0x0b,
            0x08, 0xc6, 0x12, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x83, 0x4c, 0x0f, 0xa0, 0x00, 0x0d,
            0x8c, 0x4b, 0x76, 0x6d, 0x70, 0x6c, 0x73,
        ];
        let mut ip = ipv4::Packet::new_checked(&mut f[14..]).unwrap();
        assert!(ip.verify_checksum());
        ip.set_dont_frag(false);
        ip.fill_checksum();
        let lsrr = [ipv4::option::LSRR, 7, 4, 198, 18, 0, 2];
        let ra = [ipv4::option::ROUTER_ALERT, 4, 0, 0];
        // 44-byte header and 8 bytes, then a 32-byte header and the last 5.
        let (r, frags) = run(&mut Packet::from_frame(0, &f), 14, 52);
        assert_eq!(r, Ok(2));
        assert_eq!(frags[1].len() - 14, 32 + 5);
        let parts = check(&f, 14, 52, &copied(&[&lsrr, &ra]), &frags);
        assert_eq!(reassemble(parts, 0), &f[58..]);
    }

    #[test]
    fn dont_fragment_is_an_error_only_when_too_big() {
        let ip = ipv4(&[], hdr::IPV4_DF, &payload(2000, 1));
        let f = wrap(0, &ip, false);
        let mut p = Packet::from_frame(0, &f);
        assert_eq!(run(&mut p, 14, 1500).0, Err(FragError::DontFragment));
        let (r, frags) = run(&mut p, 14, 2020);
        assert_eq!(r, Ok(1));
        assert_eq!(frags[0].frame(), &f[..]);
    }

    #[test]
    fn gso_packet_tiny_mtu_and_broken_headers_are_errors() {
        let ip = ipv4(&[&OPT_LSRR], 0, &payload(2000, 1));
        let f = wrap(1, &ip, false);
        let mut p = Packet::from_frame(0, &f);
        p.offload.gso_type = GsoType::TcpV4;
        assert_eq!(run(&mut p, 18, 1500).0, Err(FragError::Gso));
        p.offload.gso_type = GsoType::None;
        // 32-byte header + 8 bytes fits 40, 39 does not.
        assert_eq!(run(&mut p, 18, 40).0, Ok(250));
        assert_eq!(run(&mut p, 18, 39).0, Err(FragError::MtuTooSmall));
        assert_eq!(run(&mut p, 18, 0).0, Err(FragError::MtuTooSmall));
        assert_eq!(run(&mut p, 5000, 1500).0, Err(FragError::Truncated));
        let mut bad = f.clone();
        bad[18 + 21] = 40; // LSRR length past the header
        assert_eq!(run(&mut Packet::from_frame(0, &bad), 18, 1500).0, Err(FragError::Malformed));
        let mut bad = f.clone();
        bad[18 + 21] = 1;
        assert_eq!(run(&mut Packet::from_frame(0, &bad), 18, 1500).0, Err(FragError::Malformed));
        let mut bad = f.clone();
        bad[18] = 0x66;
        assert_eq!(run(&mut Packet::from_frame(0, &bad), 18, 1500).0, Err(FragError::Malformed));
        let mut bad = f.clone();
        hdr::put16(&mut bad, 18 + 2, 3000);
        assert_eq!(run(&mut Packet::from_frame(0, &bad), 18, 1500).0, Err(FragError::Truncated));
        hdr::put16(&mut bad, 18 + 2, 10);
        assert_eq!(run(&mut Packet::from_frame(0, &bad), 18, 1500).0, Err(FragError::Malformed));
        // An original fragment at offset 65000 would need fragment offsets beyond 65528.
        let far = wrap(0, &ipv4(&[], (65000 / 8) as u16, &payload(1400, 1)), false);
        assert_eq!(run(&mut Packet::from_frame(0, &far), 14, 576).0, Err(FragError::Malformed));
    }

    #[test]
    fn pool_exhaustion_keeps_fragments_already_made() {
        let data = payload(3000, 1);
        let f = wrap(0, &ipv4(&[], 0, &data), false);
        let mut p = Packet::from_frame(0, &f);
        let mut pool = PacketPool::new(2);
        let mut out = Vec::new();
        assert_eq!(fragment_ipv4(&mut p, 14, 1000, &mut pool, &mut out), Err(FragError::NoBuffer));
        assert_eq!(out.len(), 2);
        let parts = check(&f, 14, 1000, &[], &out);
        assert!(reassemble(parts, 0) == data[..1952]);
    }

    #[test]
    fn partial_checksum_is_completed_before_fragmenting() {
        // A TCP packet with the transport checksum left partial, as the kernel hands it.
        let data = payload(3000, 2);
        let mut ip = ip_packet(false, true, 0x18, &data);
        ip[6] = 0; // clear DF
        hdr::fill_ipv4_checksum(&mut ip[..24]);
        let f = wrap(1, &ip, false);
        let mut p = Packet::from_frame(0, &f);
        p.offload.needs_csum = true;
        p.offload.csum_start = 18 + 24;
        p.offload.csum_offset = 16;
        let (r, frags) = run(&mut p, 18, 1280);
        assert_eq!(r, Ok(3));
        assert!(!p.offload.needs_csum);
        assert!(frags.iter().all(|f| f.offload == Default::default()));
        let parts = check(p.frame(), 18, 1280, &[], &frags);
        let l4 = reassemble(parts, 0);
        let mut whole = ip[..24].to_vec();
        whole.extend_from_slice(&l4);
        assert!(transport_checksum_ok(&whole));
        assert_eq!(&l4[32..], &data[..]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn fragments_reassemble_to_the_original(
            plen in 0usize..9000,
            max in 68usize..9100,
            labels in 0usize..=3,
            opts in proptest::sample::subsequence(vec![0usize, 1, 2], 0..=3),
            orig_off in 0u16..200,
            orig_mf in any::<bool>(),
            padding in 0usize..20,
        ) {
            let all: [&[u8]; 3] = [&OPT_LSRR, &OPT_RR, &OPT_RA];
            let options: Vec<&[u8]> = opts.iter().map(|&i| all[i]).collect();
            let word = orig_off | if orig_mf { hdr::IPV4_MF } else { 0 };
            let data = payload(plen, plen as u8);
            let ip = ipv4(&options, word, &data);
            let mut f = wrap(labels, &ip, false);
            let l3 = 14 + 4 * labels;
            let exact = f.clone();
            f.extend(std::iter::repeat_n(0xaa, padding)); // Ethernet padding is dropped
            let mut p = Packet::from_frame(1, &f);
            let (r, frags) = run(&mut p, l3, max);
            let n = r.unwrap();
            prop_assert_eq!(n, frags.len());
            if ip.len() <= max {
                prop_assert_eq!(n, 1);
                prop_assert_eq!(frags[0].frame(), &exact[..]);
            } else {
                let parts = check(&exact, l3, max, &copied(&options), &frags);
                prop_assert_eq!(parts.last().unwrap().2, orig_mf);
                prop_assert_eq!(reassemble(parts, usize::from(orig_off) * 8), data);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            l3 in 0usize..40,
            max in 0usize..200,
        ) {
            let mut p = Packet::from_frame(0, &bytes);
            let (r, frags) = run(&mut p, l3, max);
            if r.is_ok() {
                for f in &frags {
                    prop_assert!(f.len() >= l3 + 20 && f.len() - l3 <= max);
                }
            }
        }
    }
}
