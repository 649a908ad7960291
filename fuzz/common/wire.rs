//! What every wire fuzz target checks, one function a target, shared by the cargo-fuzz
//! targets (`fuzz/fuzz_targets/*.rs`) and the stable replay of the saved corpus
//! (`crates/dataplane/tests/fuzz_corpus.rs`), both of which include this file with
//! `#[path]`. Depends on `vmpls_wire` only.
//!
//! Each check feeds arbitrary bytes to a decoder and then asserts what its contract
//! promises: `new_checked` either fails or yields a view whose accessors stay in bounds;
//! the lengths the view reports agree with its fields; a decoded `Repr` emits bytes that
//! decode to the same `Repr`; checksums filled verify; incremental updates keep a valid
//! checksum valid. A panic or a failed assertion is a finding.
#![allow(dead_code)]

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

use vmpls_wire::{
    arp, checksum, ethernet, icmp_ext, icmpv4, icmpv6, ipv4, ipv6, ipv6_ext, mpls, tcp, udp, virtio_net,
};

const SRC4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const DST4: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 2);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);

/// A target's check.
pub type Check = fn(&[u8]);

/// The wire targets by name, for the replay test.
pub const TARGETS: &[(&str, Check)] = &[
    ("ethernet", ethernet),
    ("mpls", mpls),
    ("ipv4", ipv4),
    ("ipv6", ipv6),
    ("tcp", tcp),
    ("udp", udp),
    ("arp", arp),
    ("icmpv4", icmpv4),
    ("icmpv6", icmpv6),
    ("virtio_net", virtio_net),
    ("checksum", checksum),
];

/// Ethernet: header length, tag, payload, and `Repr` round trip to identical header bytes.
pub fn ethernet(data: &[u8]) {
    if let Some(a) = ethernet::Address::from_bytes(data) {
        assert_eq!(a.as_bytes(), &data[..6]);
        assert_eq!(a.is_unicast(), !a.is_multicast());
        assert!(!a.is_broadcast() || a.is_multicast());
        assert_eq!(a.to_string().len(), 17);
        black_box(a.is_local());
    } else {
        assert!(data.len() < 6);
    }
    let Ok(frame) = ethernet::Frame::new_checked(data) else {
        let tagged = data.len() >= 14 && data[12..14] == [0x81, 0x00];
        assert!(data.len() < 14 || (tagged && data.len() < 18), "rejected a whole header");
        return;
    };
    let hl = frame.header_len();
    assert!(hl == 14 || hl == 18);
    assert_eq!(hl == 18, frame.is_tagged());
    assert_eq!(frame.is_tagged(), frame.vlan().is_some());
    assert!(hl <= data.len());
    assert_eq!(frame.payload(), &data[hl..]);
    assert_eq!(u16::from(frame.outer_ethertype()), u16::from_be_bytes([data[12], data[13]]));
    black_box(frame.ethertype().to_string());
    let repr = ethernet::Repr::parse(&frame).expect("a checked frame parses");
    assert_eq!(repr.buffer_len(), hl);
    let mut out = vec![0u8; hl];
    repr.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..hl], "emitted header differs from the parsed one");
    let again = ethernet::Repr::parse(&ethernet::Frame::new_checked(&out[..]).unwrap()).unwrap();
    assert_eq!(again, repr);
    // EtherType conversions are a bijection on u16.
    let raw = u16::from(frame.ethertype());
    assert_eq!(u16::from(ethernet::EtherType::from(raw)), raw);
}

/// MPLS: the stack walk (`stack_depth`, `Stack`) agrees with the S bits; entries round trip.
pub fn mpls(data: &[u8]) {
    let depth = mpls::stack_depth(data);
    let first_bottom = data.chunks_exact(4).position(|e| e[2] & 1 != 0);
    match depth {
        Ok(d) => {
            assert_eq!(Some(d - 1), first_bottom);
            assert!(4 * d <= data.len());
        }
        Err(e) => {
            assert_eq!(e, vmpls_wire::Error::Truncated);
            assert_eq!(first_bottom, None);
        }
    }
    let mut stack = mpls::Stack::new(data);
    let mut n = 0usize;
    for (i, repr) in stack.by_ref().enumerate() {
        let chunk = &data[4 * i..4 * i + 4];
        let entry = mpls::Entry::new_checked(chunk).expect("a 4-byte entry");
        assert_eq!(mpls::Repr::parse(&entry).unwrap(), repr);
        assert_eq!(entry.label(), repr.label);
        assert_eq!(entry.tc(), repr.tc);
        assert_eq!(entry.bottom_of_stack(), repr.bottom);
        assert_eq!(entry.ttl(), repr.ttl);
        assert_eq!(repr.to_u32(), entry.raw());
        assert_eq!(mpls::Repr::from_u32(entry.raw()), repr);
        assert!(repr.label <= mpls::MAX_LABEL);
        assert_eq!(repr.is_reserved(), repr.label < mpls::FIRST_UNRESERVED);
        let mut out = [0u8; 4];
        repr.emit(&mut mpls::Entry::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], chunk);
        n += 1;
    }
    assert!(stack.next().is_none(), "Stack is fused");
    match depth {
        Ok(d) => assert_eq!(n, d),
        Err(_) => assert_eq!(n, data.len() / 4),
    }
    assert_eq!(stack.remaining(), &data[4 * n..]);
    if data.len() < 4 {
        assert!(mpls::Entry::new_checked(data).is_err());
    }
}

/// IPv4: `check_len` bounds, accessors, options and payload slices, `Repr` round trip,
/// checksum fill and incremental TTL updates.
pub fn ipv4(data: &[u8]) {
    let Ok(p) = ipv4::Packet::new_checked(data) else { return };
    let hl = p.header_len();
    let total = usize::from(p.total_len());
    assert_eq!(p.version(), 4);
    assert!((20..=60).contains(&hl) && hl <= total && total <= data.len());
    assert_eq!(p.options().len(), hl - 20);
    assert_eq!(p.payload().len(), total - hl);
    assert_eq!(p.dscp_ecn(), (p.dscp() << 2) | p.ecn());
    black_box((p.ident(), p.dont_frag(), p.more_frags(), p.frag_offset(), p.is_fragment()));
    black_box((p.ttl(), p.protocol(), p.src_addr(), p.dst_addr()));
    black_box(p.pseudo_header_sum(p.payload().len() as u32));
    assert_eq!(p.header().len(), hl);
    assert_eq!(p.flags() & 0b011, (u8::from(p.dont_frag()) << 1) | u8::from(p.more_frags()));
    let mut walked = 0;
    for o in p.option_iter() {
        let Ok(o) = o else { break };
        walked += o.bytes().len();
        assert!(o.bytes().len() == 1 || o.data().len() + 2 == o.bytes().len());
        black_box((o.kind(), o.copied()));
    }
    assert!(walked <= hl - 20);
    let valid = p.verify_checksum();
    match ipv4::Repr::parse(&p) {
        Ok(repr) => {
            assert!(valid);
            assert_eq!(repr.payload_len, total - hl);
            let mut out = vec![0u8; repr.buffer_len() + repr.payload_len];
            repr.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]));
            let q = ipv4::Packet::new_checked(&out[..]).expect("an emitted header checks");
            assert!(q.verify_checksum());
            assert_eq!(ipv4::Repr::parse(&q).unwrap(), repr);
        }
        Err(_) => assert!(!valid),
    }
    let mut b = data.to_vec();
    let mut m = ipv4::Packet::new_checked(&mut b[..]).unwrap();
    let ttl = m.ttl();
    assert_eq!(m.decrement_ttl(), ttl.saturating_sub(1));
    assert_eq!(m.ttl(), ttl.saturating_sub(1));
    assert_eq!(m.verify_checksum(), valid, "incremental TTL update changed validity");
    m.set_ttl_incremental(ttl ^ 0x5a);
    assert_eq!(m.verify_checksum(), valid);
    m.fill_checksum();
    assert!(m.verify_checksum());
}

/// IPv6: fixed header bounds, payload slice, extension header views over the payload,
/// `Repr` round trip, hop limit decrement.
pub fn ipv6(data: &[u8]) {
    let Ok(p) = ipv6::Packet::new_checked(data) else { return };
    assert_eq!(p.version(), 6);
    let total = p.total_len();
    assert_eq!(total, 40 + usize::from(p.payload_len()));
    assert!(total <= data.len());
    assert_eq!(p.payload().len(), usize::from(p.payload_len()));
    assert!(p.flow_label() <= 0xf_ffff);
    black_box((p.traffic_class(), p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr()));
    black_box(p.pseudo_header_sum(p.next_header(), u32::from(p.payload_len())));
    let repr = ipv6::Repr::parse(&p).expect("a checked packet parses");
    let mut out = vec![0u8; repr.buffer_len() + repr.payload_len];
    repr.emit(&mut ipv6::Packet::new_unchecked(&mut out[..]));
    assert_eq!(&out[..40], &data[..40], "emitted header differs from the parsed one");
    assert_eq!(ipv6::Repr::parse(&ipv6::Packet::new_checked(&out[..]).unwrap()).unwrap(), repr);
    // The extension header views over whatever follows the fixed header.
    let mut next = p.payload();
    for _ in 0..8 {
        let (h, f, a) = (
            ipv6_ext::Header::new_checked(next),
            ipv6_ext::FragmentHeader::new_checked(next),
            ipv6_ext::AuthHeader::new_checked(next),
        );
        if let Ok(f) = &f {
            assert_eq!(f.frag_offset() % 8, 0);
            black_box((f.next_header(), f.more_frags(), f.ident(), f.payload()));
        }
        if let Ok(a) = &a {
            assert!(a.header_len() >= 8 && a.header_len() + a.payload().len() == next.len());
            black_box((a.next_header(), a.spi()));
        }
        let Ok(h) = h else { break };
        assert_eq!(h.header_len() + h.payload().len(), next.len());
        assert_eq!(h.data().len() + 2, h.header_len());
        black_box(h.next_header());
        next = h.payload();
    }
    let mut b = data.to_vec();
    let mut m = ipv6::Packet::new_checked(&mut b[..]).unwrap();
    let hl = m.hop_limit();
    assert_eq!(m.decrement_hop_limit(), hl.saturating_sub(1));
    assert_eq!(m.hop_limit(), hl.saturating_sub(1));
}

/// TCP: data offset bounds, options and payload slices, `Repr` round trip, checksums.
pub fn tcp(data: &[u8]) {
    let Ok(p) = tcp::Packet::new_checked(data) else {
        if data.len() >= 20 {
            let hl = usize::from(data[12] >> 4) * 4;
            assert!(hl < 20 || hl > data.len(), "rejected a complete header");
        }
        return;
    };
    let hl = usize::from(p.header_len());
    assert!((20..=60).contains(&hl) && hl <= data.len());
    assert_eq!(p.options().len(), hl - 20);
    assert_eq!(p.payload(), &data[hl..]);
    black_box((p.src_port(), p.dst_port(), p.seq_number(), p.ack_number(), p.flags_raw()));
    black_box((p.fin(), p.syn(), p.rst(), p.psh(), p.ack(), p.urg(), p.ece(), p.cwr()));
    black_box((p.window_len(), p.checksum(), p.urgent_at()));
    black_box((p.verify_checksum_v4(SRC4, DST4), p.verify_checksum_v6(SRC6, DST6)));
    let repr = tcp::Repr::parse(&p).expect("a checked segment parses");
    assert_eq!(repr.header_len(), Ok(hl));
    let payload = p.payload();
    let mut out = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
    let mut q = tcp::Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut q).expect("a parsed header emits");
    q.payload_mut().copy_from_slice(payload);
    q.fill_checksum_v4(SRC4, DST4);
    assert!(q.verify_checksum_v4(SRC4, DST4));
    q.fill_checksum_v6(SRC6, DST6);
    assert!(q.verify_checksum_v6(SRC6, DST6));
    let q = tcp::Packet::new_checked(&out[..]).expect("an emitted segment checks");
    let again = tcp::Repr::parse(&q).unwrap();
    assert_eq!(again, repr);
    assert_eq!(q.payload(), payload);
}

/// UDP: length field bounds, payload slice, `Repr` round trip, checksums.
pub fn udp(data: &[u8]) {
    let Ok(p) = udp::Packet::new_checked(data) else { return };
    let len = usize::from(p.len());
    assert!(len >= 8 && len <= data.len());
    assert_eq!(p.payload(), &data[8..len]);
    black_box((p.src_port(), p.dst_port(), p.checksum()));
    black_box((p.verify_checksum_v4(SRC4, DST4), p.verify_checksum_v6(SRC6, DST6)));
    let repr = udp::Repr::parse(&p).expect("a checked datagram parses");
    assert_eq!(repr.buffer_len(), len);
    let mut out = vec![0u8; repr.buffer_len()];
    let mut q = udp::Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut q).expect("a parsed header emits");
    q.payload_mut().copy_from_slice(p.payload());
    q.fill_checksum_v4(SRC4, DST4);
    assert!(q.verify_checksum_v4(SRC4, DST4));
    q.fill_checksum_v6(SRC6, DST6);
    assert!(q.verify_checksum_v6(SRC6, DST6));
    let q = udp::Packet::new_checked(&out[..]).expect("an emitted datagram checks");
    assert_eq!(udp::Repr::parse(&q).unwrap(), repr);
    assert_eq!(&out[..4], &data[..4]);
}

/// ARP: length and address-size checks, `Repr` round trip to identical bytes, reply.
pub fn arp(data: &[u8]) {
    let Ok(p) = arp::Packet::new_checked(data) else { return };
    assert!(data.len() >= arp::PACKET_LEN);
    assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
    black_box((p.hardware_type(), p.protocol_type(), p.operation()));
    black_box((p.sender_hardware_addr(), p.sender_protocol_addr()));
    black_box((p.target_hardware_addr(), p.target_protocol_addr()));
    let raw_op = u16::from_be_bytes([data[6], data[7]]);
    assert_eq!(u16::from(p.operation()), raw_op);
    let Ok(repr) = arp::Repr::parse(&p) else {
        assert!(p.hardware_type() != arp::HARDWARE_ETHERNET || p.protocol_type() != arp::PROTOCOL_IPV4);
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut arp::Packet::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..arp::PACKET_LEN], "emitted packet differs from the parsed one");
    let reply = repr.reply([2, 0, 0, 0, 0, 1]);
    reply.emit(&mut arp::Packet::new_unchecked(&mut out[..]));
    let back = arp::Repr::parse(&arp::Packet::new_checked(&out[..]).unwrap()).unwrap();
    assert_eq!(back, reply);
    assert_eq!(back.target_protocol_addr, repr.sender_protocol_addr);
}

/// Walks an RFC 4884 extension structure: objects, the MPLS label stack object.
fn extension(ext: &[u8]) {
    let Ok(e) = icmp_ext::Extension::new_checked(ext) else { return };
    assert_eq!(e.version(), icmp_ext::VERSION);
    black_box((e.checksum(), e.verify_checksum()));
    let mut consumed = icmp_ext::HEADER_LEN;
    for obj in e.objects() {
        let Ok(obj) = obj else { break };
        let len = usize::from(obj.length());
        assert!(len >= icmp_ext::OBJECT_HEADER_LEN);
        assert_eq!(obj.payload().len(), len - icmp_ext::OBJECT_HEADER_LEN);
        black_box((obj.class_num(), obj.c_type()));
        consumed += len;
        assert!(consumed <= ext.len());
    }
    if let Ok(Some(stack)) = e.mpls_label_stack() {
        let n = stack.len();
        assert_eq!(stack.count(), n);
    }
}

/// A label stack taken from the first bytes of `data`: at most 32 words.
fn words(data: &[u8]) -> Vec<u32> {
    let n = usize::from(data.first().copied().unwrap_or(0) % 33);
    data.chunks_exact(4).take(n).map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]])).collect()
}

/// The label stack in the extension of an emitted ICMP error, checksum verified.
fn emitted_stack(ext: Option<&[u8]>) -> Vec<u32> {
    let ext = ext.expect("an error with a label stack carries an extension");
    let e = icmp_ext::Extension::new_checked(ext).expect("a valid extension");
    assert!(e.verify_checksum(), "extension checksum");
    e.mpls_label_stack().expect("well-formed objects").expect("an MPLS object").collect()
}

/// ICMPv4: accessors, RFC 4884 extension parsing, echo reply and error builders.
pub fn icmpv4(data: &[u8]) {
    black_box(icmp_ext::find_extension(data, data.first().copied().unwrap_or(0), 4));
    let Ok(p) = icmpv4::Packet::new_checked(data) else { return };
    assert_eq!(p.data(), &data[8..]);
    black_box((p.msg_type(), p.code(), p.checksum(), p.echo_ident(), p.echo_seq_no()));
    black_box((p.rfc4884_length(), p.next_hop_mtu(), icmpv4::is_error(p.msg_type())));
    if let Some(ext) = p.extension() {
        assert!(p.rfc4884_length() != 0);
        assert_eq!(ext, &p.data()[usize::from(p.rfc4884_length()) * 4..]);
        extension(ext);
    }
    let valid = p.verify_checksum();
    let mut buf = vec![0u8; data.len()];
    match icmpv4::emit_echo_reply(data, &mut buf) {
        Ok(n) => {
            assert_eq!(n, data.len());
            let r = icmpv4::Packet::new_checked(&buf[..n]).unwrap();
            assert_eq!(r.msg_type(), icmpv4::msg_type::ECHO_REPLY);
            assert_eq!(r.data(), p.data());
            assert_eq!(r.verify_checksum(), valid, "echo reply checksum");
        }
        Err(_) => assert!(p.msg_type() != icmpv4::msg_type::ECHO_REQUEST || p.code() != 0),
    }
    // The error builder, quoting this message as the original datagram.
    let stack = words(data);
    let kind = match data.get(1).copied().unwrap_or(0) % 3 {
        0 => icmpv4::ErrorKind::TimeExceeded,
        1 => icmpv4::ErrorKind::FragNeeded { mtu: p.echo_seq_no() },
        _ => icmpv4::ErrorKind::Unreachable { code: p.code() },
    };
    let len = icmpv4::error_len(kind, data.len(), stack.len());
    let mut out = vec![0u8; len];
    assert_eq!(
        icmpv4::emit_error(&mut out[..len - 1], kind, data, &stack),
        Err(vmpls_wire::Error::Truncated)
    );
    assert_eq!(icmpv4::emit_error(&mut out, kind, data, &stack), Ok(len));
    assert!(len <= icmpv4::MAX_ERROR_LEN);
    let e = icmpv4::Packet::new_checked(&out[..]).unwrap();
    assert!(e.verify_checksum(), "error checksum");
    assert!(icmpv4::is_error(e.msg_type()));
    if stack.is_empty() {
        assert_eq!(e.rfc4884_length(), 0);
        assert!(e.extension().is_none());
        assert_eq!(e.data(), &data[..len - 8]);
    } else {
        assert_eq!(emitted_stack(e.extension()), stack);
        let quoted = data.len().min(icmp_ext::ORIGINAL_DATAGRAM_LEN);
        assert_eq!(&e.data()[..quoted], &data[..quoted]);
    }
}

/// ICMPv6: accessors, extension parsing, neighbour discovery messages and options, echo
/// reply and error builders.
pub fn icmpv6(data: &[u8]) {
    for opt in icmpv6::NdiscOptions::new(data) {
        let Ok((_, body)) = opt else { break };
        assert_eq!((body.len() + 2) % 8, 0);
    }
    let _ = black_box(icmpv6::NdiscOptions::new(data).link_layer_addr(1));
    let Ok(p) = icmpv6::Packet::new_checked(data) else { return };
    assert_eq!(p.data(), &data[8..]);
    black_box((p.msg_type(), p.code(), p.checksum(), p.echo_ident(), p.echo_seq_no(), p.mtu()));
    black_box((p.rfc4884_length(), icmpv6::is_error(p.msg_type())));
    let valid = p.verify_checksum(SRC6, DST6);
    if let Some(ext) = p.extension() {
        assert_eq!(ext, &p.data()[usize::from(p.rfc4884_length()) * 8..]);
        extension(ext);
    }
    if let Ok(ns) = icmpv6::NeighborSolicit::new_checked(data) {
        let _ = black_box((ns.checksum(), ns.target_addr(), ns.source_link_addr()));
        assert_eq!(ns.verify_checksum(SRC6, DST6), valid);
        if let Ok(r) = icmpv6::NeighborSolicitRepr::parse(&ns) {
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut icmpv6::NeighborSolicit::new_unchecked(&mut out[..])).unwrap();
            let back = icmpv6::NeighborSolicit::new_checked(&out[..]).unwrap();
            assert_eq!(icmpv6::NeighborSolicitRepr::parse(&back).unwrap(), r);
        }
    }
    if let Ok(na) = icmpv6::NeighborAdvert::new_checked(data) {
        black_box((na.checksum(), na.flags_raw(), na.router(), na.solicited(), na.override_()));
        let _ = black_box((na.target_addr(), na.target_link_addr()));
        assert_eq!(na.verify_checksum(SRC6, DST6), valid);
        if let Ok(r) = icmpv6::NeighborAdvertRepr::parse(&na) {
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut icmpv6::NeighborAdvert::new_unchecked(&mut out[..])).unwrap();
            let back = icmpv6::NeighborAdvert::new_checked(&out[..]).unwrap();
            assert_eq!(icmpv6::NeighborAdvertRepr::parse(&back).unwrap(), r);
        }
    }
    if let Ok(nd) = icmpv6::NdRepr::parse(&p) {
        let mut out = vec![0u8; nd.buffer_len()];
        assert_eq!(nd.emit(&mut out, SRC6, DST6), Ok(nd.buffer_len()));
        let back = icmpv6::Packet::new_checked(&out[..]).unwrap();
        assert!(back.verify_checksum(SRC6, DST6));
        assert_eq!(icmpv6::NdRepr::parse(&back).unwrap(), nd);
    }
    let mut buf = vec![0u8; data.len()];
    match icmpv6::emit_echo_reply(data, &mut buf, DST6, SRC6) {
        Ok(n) => {
            let r = icmpv6::Packet::new_checked(&buf[..n]).unwrap();
            assert_eq!(r.msg_type(), icmpv6::msg_type::ECHO_REPLY);
            assert_eq!(r.data(), p.data());
            assert!(r.verify_checksum(DST6, SRC6), "echo reply checksum");
        }
        Err(_) => assert!(p.msg_type() != icmpv6::msg_type::ECHO_REQUEST || p.code() != 0),
    }
    let stack = words(data);
    let kind = match data.get(1).copied().unwrap_or(0) % 3 {
        0 => icmpv6::ErrorKind6::TimeExceeded,
        1 => icmpv6::ErrorKind6::PacketTooBig { mtu: p.mtu() },
        _ => icmpv6::ErrorKind6::Unreachable { code: p.code() },
    };
    let len = icmpv6::error_len(kind, data.len(), stack.len());
    let mut out = vec![0u8; len];
    assert_eq!(
        icmpv6::emit_error(&mut out[..len - 1], kind, data, &stack, DST6, SRC6),
        Err(vmpls_wire::Error::Truncated)
    );
    assert_eq!(icmpv6::emit_error(&mut out, kind, data, &stack, DST6, SRC6), Ok(len));
    assert!(len <= icmpv6::MAX_ERROR_LEN);
    let e = icmpv6::Packet::new_checked(&out[..]).unwrap();
    assert!(e.verify_checksum(DST6, SRC6), "error checksum");
    assert!(icmpv6::is_error(e.msg_type()));
    let extended = !stack.is_empty() && !matches!(kind, icmpv6::ErrorKind6::PacketTooBig { .. });
    if extended {
        assert_eq!(emitted_stack(e.extension()), stack);
    } else {
        assert!(e.extension().is_none());
        assert_eq!(e.data(), &data[..len - 8]);
    }
}

/// virtio-net header: `Repr` round trip, offset shifting.
pub fn virtio_net(data: &[u8]) {
    let Ok(h) = virtio_net::Header::new_checked(data) else {
        assert!(data.len() < virtio_net::HEADER_LEN);
        return;
    };
    black_box((h.flags(), h.gso_type_raw(), h.hdr_len(), h.gso_size(), h.csum_start(), h.csum_offset()));
    let Ok(repr) = virtio_net::Repr::parse(&h) else { return };
    let mut out = [0u8; virtio_net::HEADER_LEN];
    repr.emit(&mut virtio_net::Header::new_unchecked(&mut out[..]));
    assert_eq!(virtio_net::Repr::parse(&virtio_net::Header::new_checked(&out[..]).unwrap()).unwrap(), repr);
    assert_eq!(&out[2..], &data[2..virtio_net::HEADER_LEN], "offsets round trip");
    let delta = isize::from(data.get(10).copied().unwrap_or(0) as i8) * 4;
    let mut shifted = repr;
    shifted.shift(delta);
    assert_eq!(shifted.is_gso(), repr.is_gso());
    let moved = |v: u16| (v as isize + delta).clamp(0, u16::MAX as isize) as u16;
    let csum_start = if repr.needs_csum { moved(repr.csum_start) } else { repr.csum_start };
    let hdr_len = if repr.hdr_len != 0 { moved(repr.hdr_len) } else { 0 };
    assert_eq!((shifted.csum_start, shifted.hdr_len), (csum_start, hdr_len));
    assert_eq!((shifted.gso_size, shifted.csum_offset), (repr.gso_size, repr.csum_offset));
}

/// The Internet checksum against a plain RFC 1071 reference, and incremental updates
/// (RFC 1624) against recomputation.
pub fn checksum(data: &[u8]) {
    fn reference(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for c in data.chunks(2) {
            acc += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }
    assert_eq!(checksum::fold(checksum::sum(data)), reference(data), "sum differs from RFC 1071");
    assert_eq!(checksum::checksum(data), !reference(data));
    // Split at an even offset: the sum of the pieces is the sum of the whole.
    let at = (usize::from(data.first().copied().unwrap_or(0)) * 2).min(data.len() & !1);
    let (a, b) = data.split_at(at);
    assert_eq!(checksum::fold(checksum::add(checksum::sum(a), checksum::sum(b))), reference(data));
    // Incremental update of a 16-bit word keeps a filled checksum valid.
    if data.len() >= 6 {
        let mut buf = data.to_vec();
        buf[0] = 0;
        buf[1] = 0;
        let c = checksum::checksum(&buf);
        buf[..2].copy_from_slice(&c.to_be_bytes());
        assert!(checksum::verify(&buf));
        let old = u16::from_be_bytes([buf[2], buf[3]]);
        let new = u16::from_be_bytes([buf[4], buf[5]]) ^ 0xa5a5;
        buf[2..4].copy_from_slice(&new.to_be_bytes());
        let c2 = checksum::update16(c, old, new);
        buf[..2].copy_from_slice(&c2.to_be_bytes());
        assert!(checksum::verify(&buf), "RFC 1624 update");
    }
}
