//! MPLS receive coalescing (GRO), which the kernel does not have for labelled frames.
//!
//! Within one received batch, adjacent frames that are consecutive TCP segments of one
//! flow under the same label stack are merged into one super-frame, so a core of
//! 1500-byte links still hands the egress PE (and the customer host behind it) 64 KiB
//! units. The rules follow the kernel's `tcp_gro_receive`:
//! - same port, byte-identical Ethernet header and label stack (TTL and TC included),
//!   same IP header except length, identification and checksum, no IPv4 options or
//!   fragments, no IPv6 extension headers;
//! - same TCP ports, acknowledgment, window and byte-identical options; the next
//!   segment's sequence number continues the run exactly (strictly in order);
//! - only ACK (and PSH, which ends the run) set: SYN, FIN, RST, URG, CWR are not merged;
//! - every segment but the last has the first one's payload size; the last may be shorter
//!   and ends the run; at most 64 KiB of IP packet;
//! - complete checksums are verified before merging, so a corrupted segment is never
//!   "repaired" by the merge (it is passed on alone, for the receiver to reject).
//!
//! The merged frame leaves with GSO metadata (`TcpV4`/`TcpV6`, `gso_size` = the first
//! segment's payload) and a partial checksum, as the kernel's GRO produces. Runs never
//! cross flows, stacks or batches: the caller flushes at the end of every batch by
//! calling [`coalesce`] once per batch.

use vmpls_wire::ipv4::protocol;
use vmpls_wire::tcp::flags::{ACK as TCP_ACK, PSH as TCP_PSH};
use vmpls_wire::virtio_net::{self, GsoType};
use vmpls_wire::{checksum, ethernet, ip, ipv4, ipv6, mpls, tcp};

use crate::packet::{MAX_FRAME, Packet, PacketPool};

/// The largest IP packet a merged frame may hold (the IPv4 total length field's limit,
/// which is also what a GSO super-frame from the kernel carries at most).
const MAX_MERGED_L3: usize = 65535;

/// What one [`coalesce`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroStats {
    /// Super-frames built.
    pub merged: u64,
    /// Segments absorbed into them (not counting each run's first segment).
    pub absorbed: u64,
}

/// Where one candidate frame's headers are.
#[derive(Debug, Clone, Copy)]
struct Segment {
    /// Offset of the IP header (after Ethernet and the label stack).
    l3: usize,
    ipv6: bool,
    /// Offset of the TCP header.
    l4: usize,
    /// Offset of the TCP payload.
    payload: usize,
    seq: u32,
    flags: u8,
    payload_len: usize,
}

/// A run being built: the head frame's index in the output and its state.
struct Run {
    index: usize,
    seg: Segment,
    gso_size: usize,
    next_seq: u32,
    segments: usize,
    /// The last merged segment was shorter than `gso_size`, or carried PSH.
    closed: bool,
}

/// Coalesces runs of adjacent mergeable frames in `frames`, in place, keeping order.
/// `eligible` decides per frame whether it may be merged at all (the pipeline lets only
/// frames that leave the label-switched path here be merged: coalescing in front of a
/// swap toward another small-MTU link would be undone at once). `scratch` is an empty
/// vector reused between calls so the pass does not allocate.
pub fn coalesce(
    frames: &mut Vec<Packet>,
    scratch: &mut Vec<Packet>,
    pool: &mut PacketPool,
    mut eligible: impl FnMut(&Packet) -> bool,
) -> GroStats {
    let mut stats = GroStats::default();
    if frames.len() < 2 {
        return stats;
    }
    // Most batches hold nothing to merge: find out without moving a packet. Two adjacent
    // eligible frames are the least a run needs.
    let mut previous = false;
    let mut pair = false;
    for p in frames.iter() {
        let now = eligible(p);
        if now && previous {
            pair = true;
            break;
        }
        previous = now;
    }
    if !pair {
        return stats;
    }
    debug_assert!(scratch.is_empty());
    let mut run: Option<Run> = None;
    for pkt in frames.drain(..) {
        let seg = if eligible(&pkt) { candidate(&pkt) } else { None };
        let Some(seg) = seg else {
            finish(&mut run, scratch, &mut stats);
            scratch.push(pkt);
            continue;
        };
        if let Some(r) = run.as_mut()
            && !r.closed
            && try_append(r, &mut scratch[r.index], &pkt, &seg)
        {
            pool.put(pkt);
            continue;
        }
        finish(&mut run, scratch, &mut stats);
        let closed = seg.flags & TCP_PSH != 0;
        run = Some(Run {
            index: scratch.len(),
            seg,
            gso_size: seg.payload_len,
            next_seq: seg.seq.wrapping_add(seg.payload_len as u32),
            segments: 1,
            closed,
        });
        scratch.push(pkt);
    }
    finish(&mut run, scratch, &mut stats);
    std::mem::swap(frames, scratch);
    stats
}

/// The headers of a frame that could take part in a run, or `None`.
fn candidate(pkt: &Packet) -> Option<Segment> {
    if pkt.offload.is_gso() {
        return None;
    }
    let frame = pkt.frame();
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    if eth.ethertype() != ethernet::EtherType::Mpls || eth.vlan().is_some() {
        return None;
    }
    let l3 =
        ethernet::HEADER_LEN + mpls::ENTRY_LEN * mpls::stack_depth(&frame[ethernet::HEADER_LEN..]).ok()?;
    let ip_bytes = frame.get(l3..)?;
    let (ipv6, l4, ip_end) = match ip::Version::of_packet(ip_bytes)? {
        ip::Version::Ipv4 => {
            let ip = ipv4::Packet::new_checked(ip_bytes).ok()?;
            if ip.header_len() != ipv4::HEADER_LEN || ip.protocol() != protocol::TCP || ip.is_fragment() {
                return None;
            }
            (false, l3 + ipv4::HEADER_LEN, l3 + usize::from(ip.total_len()))
        }
        ip::Version::Ipv6 => {
            let ip = ipv6::Packet::new_checked(ip_bytes).ok()?;
            if ip.next_header() != protocol::TCP {
                return None;
            }
            (true, l3 + ipv6::HEADER_LEN, l3 + ip.total_len())
        }
    };
    // Ethernet padding after the IP packet would end up inside the merged payload.
    if ip_end != frame.len() {
        return None;
    }
    let t = tcp::Packet::new_checked(frame.get(l4..)?).ok()?;
    let flags = t.flags_raw();
    if flags & !(TCP_ACK | TCP_PSH) != 0 || flags & TCP_ACK == 0 {
        return None;
    }
    let payload = l4 + usize::from(t.header_len());
    let payload_len = frame.len().checked_sub(payload)?;
    if payload_len == 0 {
        return None;
    }
    if pkt.offload.needs_csum {
        // A partial checksum must point at this TCP header's checksum field.
        if usize::from(pkt.offload.csum_start) != l4
            || usize::from(pkt.offload.csum_offset) != tcp::CHECKSUM_OFFSET
        {
            return None;
        }
    } else if !transport_checksum_ok(frame, l3, l4, ipv6) {
        return None;
    }
    Some(Segment { l3, ipv6, l4, payload, seq: t.seq_number(), flags, payload_len })
}

fn transport_checksum_ok(frame: &[u8], l3: usize, l4: usize, ipv6: bool) -> bool {
    let segment = tcp::Packet::new_unchecked(&frame[l4..]);
    if ipv6 {
        let ip = ipv6::Packet::new_unchecked(&frame[l3..]);
        segment.verify_checksum_v6(ip.src_addr(), ip.dst_addr())
    } else {
        let ip = ipv4::Packet::new_unchecked(&frame[l3..]);
        segment.verify_checksum_v4(ip.src_addr(), ip.dst_addr())
    }
}

/// Appends `next`'s payload to the run's head frame if it continues the run.
fn try_append(run: &mut Run, head: &mut Packet, next: &Packet, seg: &Segment) -> bool {
    let h = run.seg;
    if head.port != next.port
        || seg.ipv6 != h.ipv6
        || seg.l3 != h.l3
        || seg.payload != h.payload
        || seg.seq != run.next_seq
        || seg.payload_len > run.gso_size
        || head.offload.needs_csum != next.offload.needs_csum
        || head.len() + seg.payload_len > MAX_FRAME
        || head.len() - h.l3 + seg.payload_len > MAX_MERGED_L3
    {
        return false;
    }
    let a = head.frame();
    let b = next.frame();
    // Ethernet and the whole label stack, byte for byte.
    if a[..h.l3] != b[..h.l3] {
        return false;
    }
    // The version, the IPv4 header length (20) and the TCP data offset are alike already:
    // both are candidates of one version with their payload at the same place.
    let same_ip = if h.ipv6 {
        // Traffic class, flow label; next header, hop limit, addresses: not the length.
        let (x, y) = (ipv6::Packet::new_unchecked(&a[h.l3..]), ipv6::Packet::new_unchecked(&b[h.l3..]));
        x.traffic_class() == y.traffic_class()
            && x.flow_label() == y.flow_label()
            && x.next_header() == y.next_header()
            && x.hop_limit() == y.hop_limit()
            && x.src_addr() == y.src_addr()
            && x.dst_addr() == y.dst_addr()
    } else {
        // TOS; flags (DF) but not the offset; TTL, protocol; addresses: not the length,
        // identification or checksum.
        let (x, y) = (ipv4::Packet::new_unchecked(&a[h.l3..]), ipv4::Packet::new_unchecked(&b[h.l3..]));
        x.dscp_ecn() == y.dscp_ecn()
            && x.flags() == y.flags()
            && x.ttl() == y.ttl()
            && x.protocol() == y.protocol()
            && x.src_addr() == y.src_addr()
            && x.dst_addr() == y.dst_addr()
    };
    // Ports, acknowledgment, reserved bits, window, options; not the sequence number,
    // flags (PSH may differ), checksum or urgent pointer.
    let (x, y) = (tcp::Packet::new_unchecked(&a[h.l4..]), tcp::Packet::new_unchecked(&b[h.l4..]));
    let same_tcp = x.src_port() == y.src_port()
        && x.dst_port() == y.dst_port()
        && x.ack_number() == y.ack_number()
        && x.reserved() == y.reserved()
        && x.window_len() == y.window_len()
        && x.options() == y.options();
    if !same_ip || !same_tcp {
        return false;
    }
    let Some(tail) = head.extend(seg.payload_len) else { return false };
    let at = tail.len() - seg.payload_len;
    tail[at..].copy_from_slice(&b[seg.payload..]);
    run.next_seq = run.next_seq.wrapping_add(seg.payload_len as u32);
    run.segments += 1;
    if seg.flags & TCP_PSH != 0 {
        tcp::Packet::new_unchecked(&mut head.frame_mut()[h.l4..]).set_psh(true);
        run.closed = true;
    }
    if seg.payload_len < run.gso_size {
        run.closed = true;
    }
    true
}

/// Ends the current run: a run of two or more segments becomes a super-frame.
fn finish(run: &mut Option<Run>, frames: &mut [Packet], stats: &mut GroStats) {
    let Some(r) = run.take() else { return };
    if r.segments < 2 {
        return;
    }
    let pkt = &mut frames[r.index];
    let s = r.seg;
    let l3_len = pkt.len() - s.l3;
    let tcp_len = (pkt.len() - s.l4) as u32;
    let frame = pkt.frame_mut();
    let pseudo = if s.ipv6 {
        let mut ip = ipv6::Packet::new_unchecked(&mut frame[s.l3..]);
        ip.set_payload_len((l3_len - ipv6::HEADER_LEN) as u16);
        checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), protocol::TCP, tcp_len)
    } else {
        let mut ip = ipv4::Packet::new_unchecked(&mut frame[s.l3..]);
        ip.set_total_len(l3_len as u16);
        ip.fill_checksum();
        checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), protocol::TCP, tcp_len)
    };
    // NEEDS_CSUM convention: the field holds the folded pseudo-header sum, not complemented.
    tcp::Packet::new_unchecked(&mut frame[s.l4..]).set_checksum(checksum::fold(pseudo));
    pkt.offload = virtio_net::Repr {
        needs_csum: true,
        data_valid: false,
        gso_type: if s.ipv6 { GsoType::TcpV6 } else { GsoType::TcpV4 },
        gso_ecn: false,
        hdr_len: s.payload as u16,
        gso_size: r.gso_size as u16,
        csum_start: s.l4 as u16,
        csum_offset: tcp::CHECKSUM_OFFSET as u16,
    };
    stats.merged += 1;
    stats.absorbed += (r.segments - 1) as u64;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gso;

    const LABEL: u32 = 2002;

    /// A labelled IPv4 or IPv6 TCP segment with complete checksums.
    fn segment_frame(ipv6: bool, seq: u32, flags: u8, payload: &[u8], src_port: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0x20, 0x02, 2, 0, 0, 0, 0x20, 0x01, 0x88, 0x47];
        let entry = mpls::Repr { label: LABEL, tc: 0, bottom: true, ttl: 62 };
        f.extend_from_slice(&entry.to_u32().to_be_bytes());
        let l3 = f.len();
        let tcp_len = 32 + payload.len();
        if ipv6 {
            let mut h = [0u8; 40];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            h[6] = 6;
            h[7] = 63;
            h[8..24].copy_from_slice(&"2001:db8:1::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
            h[24..40].copy_from_slice(&"2001:db8:2::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
            f.extend_from_slice(&h);
        } else {
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            h[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
            h[6] = 0x40;
            h[8] = 63;
            h[9] = 6;
            h[12..16].copy_from_slice(&[198, 18, 1, 2]);
            h[16..20].copy_from_slice(&[198, 18, 2, 2]);
            let c = checksum::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&h);
        }
        let l4 = f.len();
        let mut t = [0u8; 32];
        t[0..2].copy_from_slice(&src_port.to_be_bytes());
        t[2..4].copy_from_slice(&5201u16.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&77u32.to_be_bytes());
        t[12] = 8 << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&512u16.to_be_bytes());
        // Timestamp option: NOP NOP TS(10).
        t[20..24].copy_from_slice(&[1, 1, 8, 10]);
        t[24..28].copy_from_slice(&1000u32.to_be_bytes());
        f.extend_from_slice(&t);
        f.extend_from_slice(payload);
        let len = (f.len() - l4) as u32;
        let pseudo = if ipv6 {
            let ip = ipv6::Packet::new_unchecked(&f[l3..]);
            checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), 6, len)
        } else {
            let ip = ipv4::Packet::new_unchecked(&f[l3..]);
            checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), 6, len)
        };
        let c = checksum::finish(checksum::add(pseudo, checksum::sum(&f[l4..])));
        f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        f
    }

    fn payload(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    fn flow(ipv6: bool, n: usize, mss: usize, last: usize, src_port: u16) -> (Vec<Packet>, Vec<u8>) {
        let mut all = Vec::new();
        let mut frames = Vec::new();
        let mut seq = 1000u32;
        for i in 0..n {
            let len = if i == n - 1 { last } else { mss };
            let p = payload(len, i as u8);
            let flags = if i == n - 1 { TCP_ACK | TCP_PSH } else { TCP_ACK };
            frames.push(Packet::from_frame(3, &segment_frame(ipv6, seq, flags, &p, src_port)));
            all.extend_from_slice(&p);
            seq += len as u32;
        }
        (frames, all)
    }

    fn run(frames: &mut Vec<Packet>) -> GroStats {
        let mut pool = PacketPool::new(8);
        let mut scratch = Vec::new();
        coalesce(frames, &mut scratch, &mut pool, |_| true)
    }

    /// Segments `pkt` again and returns the concatenated payloads.
    fn resegmented_payload(pkt: &Packet) -> Vec<u8> {
        let mut pool = PacketPool::new(64);
        let mut out = Vec::new();
        gso::segment(pkt, 18, &mut pool, &mut out).unwrap();
        let mut data = Vec::new();
        for s in &out {
            let l4 = if s.frame()[18] >> 4 == 6 { 58 } else { 38 };
            assert!(transport_checksum_ok(s.frame(), 18, l4, l4 == 58), "segment checksum");
            data.extend_from_slice(&s.frame()[l4 + 32..]);
        }
        data
    }

    #[test]
    fn consecutive_segments_of_one_flow_become_one_super_frame() {
        for ipv6 in [false, true] {
            let (mut frames, data) = flow(ipv6, 10, 1448, 700, 40000);
            let stats = run(&mut frames);
            assert_eq!(stats, GroStats { merged: 1, absorbed: 9 });
            assert_eq!(frames.len(), 1);
            let m = &frames[0];
            assert_eq!(m.offload.gso_type, if ipv6 { GsoType::TcpV6 } else { GsoType::TcpV4 });
            assert_eq!(m.offload.gso_size, 1448);
            assert!(m.offload.needs_csum);
            let l4 = if ipv6 { 58 } else { 38 };
            assert_eq!(usize::from(m.offload.csum_start), l4);
            assert_eq!(&m.frame()[l4 + 32..], &data[..]);
            assert_eq!(m.frame()[l4 + 13] & TCP_PSH, TCP_PSH, "PSH of the last segment kept");
            if !ipv6 {
                assert!(ipv4::Packet::new_checked(&m.frame()[18..]).unwrap().verify_checksum());
            }
            // What the kernel would do with it: segment it again, every checksum valid.
            assert_eq!(resegmented_payload(m), data);
        }
    }

    #[test]
    fn runs_never_cross_flows_or_label_stacks() {
        let (mut a, _) = flow(false, 3, 1000, 1000, 40000);
        let (b, _) = flow(false, 3, 1000, 1000, 40001);
        // Interleave: a0 b0 a1 b1 a2 b2: nothing is adjacent, nothing merges.
        let mut frames = Vec::new();
        for (x, y) in a.drain(..).zip(b) {
            frames.push(x);
            frames.push(y);
        }
        assert_eq!(run(&mut frames), GroStats::default());
        assert_eq!(frames.len(), 6);

        let (mut frames, _) = flow(false, 4, 1000, 1000, 40000);
        // Another label on the third segment: it stands alone, and so does the fourth
        // (its stack differs from the third's).
        let f = frames[2].frame_mut();
        f[14..18].copy_from_slice(
            &mpls::Repr { label: 3003, tc: 0, bottom: true, ttl: 62 }.to_u32().to_be_bytes(),
        );
        let stats = run(&mut frames);
        assert_eq!(stats, GroStats { merged: 1, absorbed: 1 });
        assert_eq!(frames.len(), 3);
    }

    #[test]
    fn a_gap_or_reordering_ends_the_run() {
        let (mut frames, _) = flow(false, 4, 1000, 1000, 40000);
        frames.swap(1, 2);
        let stats = run(&mut frames);
        assert_eq!(stats.absorbed, 0, "out of order: nothing merged");
        assert_eq!(frames.len(), 4);
    }

    #[test]
    fn a_corrupted_segment_is_never_merged() {
        let (mut frames, _) = flow(false, 3, 1000, 1000, 40000);
        let n = frames[1].len();
        frames[1].frame_mut()[n - 1] ^= 0xff;
        let stats = run(&mut frames);
        assert_eq!(stats.absorbed, 0);
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[1].frame()[n - 1], (payload(1000, 1)[999]) ^ 0xff, "passed on as it came");
    }

    #[test]
    fn only_ack_and_psh_segments_merge_and_a_short_segment_ends_the_run() {
        let (mut frames, _) = flow(false, 3, 1000, 1000, 40000);
        // A FIN on the second segment: not merged.
        let seg = frames[1].frame().to_vec();
        let mut fin = seg.clone();
        fin[38 + 13] |= 0x01;
        frames[1] = Packet::from_frame(3, &fin);
        assert_eq!(run(&mut frames).absorbed, 0);

        // Short middle segment: the run ends after it.
        let p0 = payload(1000, 0);
        let p1 = payload(500, 1);
        let p2 = payload(1000, 2);
        let mut frames = vec![
            Packet::from_frame(3, &segment_frame(false, 0, TCP_ACK, &p0, 40000)),
            Packet::from_frame(3, &segment_frame(false, 1000, TCP_ACK, &p1, 40000)),
            Packet::from_frame(3, &segment_frame(false, 1500, TCP_ACK, &p2, 40000)),
        ];
        let stats = run(&mut frames);
        assert_eq!(stats, GroStats { merged: 1, absorbed: 1 });
        assert_eq!(frames.len(), 2);
    }

    #[test]
    fn segments_differing_in_ip_flags_or_tcp_reserved_bits_do_not_merge() {
        for edit in 0..2 {
            let (mut frames, _) = flow(false, 2, 1000, 1000, 40000);
            let f = frames[1].frame_mut();
            let mut ip = ipv4::Packet::new_unchecked(&mut f[18..]);
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            if edit == 0 {
                ip.set_dont_frag(false);
                ip.fill_checksum();
            } else {
                let mut t = tcp::Packet::new_unchecked(&mut ip.payload_mut()[..]);
                t.set_reserved(0x01);
                t.fill_checksum_v4(src, dst);
            }
            assert_eq!(run(&mut frames), GroStats::default(), "edit {edit}");
            let (mut frames, _) = flow(false, 2, 1000, 1000, 40000);
            assert_eq!(run(&mut frames).absorbed, 1, "unedited");
        }
    }

    #[test]
    fn merged_frames_stay_within_64k() {
        let (mut frames, _) = flow(false, 60, 1448, 1448, 40000);
        run(&mut frames);
        assert!(frames.len() >= 2);
        for f in &frames {
            assert!(f.len() - 18 <= MAX_MERGED_L3);
        }
    }

    #[test]
    fn ineligible_and_unlabelled_frames_pass_untouched() {
        let (mut frames, _) = flow(false, 3, 1000, 1000, 40000);
        let before: Vec<Vec<u8>> = frames.iter().map(|p| p.frame().to_vec()).collect();
        let mut pool = PacketPool::new(4);
        let mut scratch = Vec::new();
        let stats = coalesce(&mut frames, &mut scratch, &mut pool, |_| false);
        assert_eq!(stats, GroStats::default());
        let after: Vec<Vec<u8>> = frames.iter().map(|p| p.frame().to_vec()).collect();
        assert_eq!(before, after);
    }
}
