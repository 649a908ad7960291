//! AF_PACKET ports against real veth pairs, in network namespaces each test creates for
//! itself (vmpls-testkit) and removes on drop, even on panic. Needs root.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{AfPacketPort, Port, PortError, interface_exists};
use vmpls_testkit::{End, Netns, PacketSocket, veth, wait_readable};
use vmpls_wire::virtio_net::{GsoType, Repr};

const MAC_A: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0xaa, 0x01];
const MAC_B: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0xbb, 0x01];
const TEST_ETHERTYPE: u16 = 0x88b5; // IEEE local experimental
const MARKER: &[u8] = b"vmpls-ports-test";

/// Two namespaces joined by a veth pair: `vpa` (MAC_A) in `a`, `vpb` (MAC_B) in `b`, both
/// up, IPv6 off (no neighbour discovery noise). Both go when the lab is dropped.
struct Lab {
    a: Netns,
    b: Netns,
}

impl Lab {
    fn new(tag: &str, mtu: u32) -> Lab {
        let lab = Lab {
            a: Netns::without_ipv6(&format!("pt-{tag}-a")),
            b: Netns::without_ipv6(&format!("pt-{tag}-b")),
        };
        veth(
            End { ns: &lab.a, ifname: "vpa", mac: Some(MAC_A) },
            End { ns: &lab.b, ifname: "vpb", mac: Some(MAC_B) },
            mtu,
        );
        lab
    }
}

/// Polls `port` until a received frame satisfies `want` or `deadline` passes; frames
/// seen are passed to `seen` and returned to the pool.
fn recv_until(
    port: &mut AfPacketPort,
    pool: &mut PacketPool,
    deadline: Instant,
    mut seen: impl FnMut(&Packet),
    mut want: impl FnMut(&Packet) -> bool,
) -> Option<Packet> {
    let mut out = Vec::new();
    while Instant::now() < deadline {
        if !wait_readable(&port, Duration::from_millis(50)) {
            continue;
        }
        port.recv_batch(pool, &mut out, 64).expect("recv_batch");
        let mut found = None;
        for p in out.drain(..) {
            seen(&p);
            if found.is_none() && want(&p) {
                found = Some(p);
            } else {
                pool.put(p);
            }
        }
        if found.is_some() {
            return found;
        }
    }
    None
}

fn test_frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&TEST_ETHERTYPE.to_be_bytes());
    f.extend_from_slice(MARKER);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < len {
        f.push(f.len() as u8);
    }
    f
}

fn test_seq(frame: &[u8]) -> Option<u32> {
    let m = 14 + MARKER.len();
    if frame.len() < m + 4 || frame[12..14] != TEST_ETHERTYPE.to_be_bytes() || &frame[14..m] != MARKER {
        return None;
    }
    Some(u32::from_be_bytes(frame[m..m + 4].try_into().unwrap()))
}

fn csum_add(mut sum: u32, bytes: &[u8]) -> u32 {
    for c in bytes.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    sum
}

fn csum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// A TCP segment (20-byte header, ACK|PSH) whose checksum field holds only the
/// pseudo-header sum, as a TSO sender leaves it (`pseudo` is the address part).
fn tcp_partial(pseudo: &[u8], payload_len: usize) -> Vec<u8> {
    let mut t = vec![0u8; 20 + payload_len];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&5001u16.to_be_bytes());
    t[4..8].copy_from_slice(&1u32.to_be_bytes());
    t[8..12].copy_from_slice(&1u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x18;
    t[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    for (i, b) in t[20..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let mut sum = csum_add(0, pseudo);
    sum += 6 + t.len() as u32;
    t[16..18].copy_from_slice(&csum_fold(sum).to_be_bytes());
    t
}

/// An Ethernet frame A -> B with `ethertype`, optional label stack entry, and an IPv4 TCP
/// super-frame of `payload_len` bytes; its offload metadata asks for TSO at 1448.
fn ipv4_tso_frame(labelled: bool, payload_len: usize) -> (Vec<u8>, Repr) {
    let src = [198, 18, 0, 1];
    let dst = [198, 18, 0, 2];
    let tcp = tcp_partial(&[src, dst].concat(), payload_len);
    let mut iph = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
    iph[2..4].copy_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
    iph.extend_from_slice(&src);
    iph.extend_from_slice(&dst);
    let c = !csum_fold(csum_add(0, &iph));
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = [&MAC_B[..], &MAC_A[..]].concat();
    let l2 = if labelled {
        f.extend_from_slice(&0x8847u16.to_be_bytes());
        let lse: u32 = (100 << 12) | (1 << 8) | 64;
        f.extend_from_slice(&lse.to_be_bytes());
        18
    } else {
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        14
    };
    f.extend_from_slice(&iph);
    f.extend_from_slice(&tcp);
    let offload = Repr {
        needs_csum: true,
        gso_type: GsoType::TcpV4,
        hdr_len: (l2 + 40) as u16,
        gso_size: 1448,
        csum_start: (l2 + 20) as u16,
        csum_offset: 16,
        ..Repr::default()
    };
    (f, offload)
}

/// An Ethernet frame A -> B holding an IPv6 TCP super-frame, with TSO6 metadata.
fn ipv6_tso_frame(payload_len: usize) -> (Vec<u8>, Repr) {
    let mut src = [0u8; 16];
    src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    let mut dst = src;
    src[15] = 1;
    dst[15] = 2;
    let tcp = tcp_partial(&[src, dst].concat(), payload_len);
    let mut f = [&MAC_B[..], &MAC_A[..]].concat();
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[6, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&tcp);
    let offload = Repr {
        needs_csum: true,
        gso_type: GsoType::TcpV6,
        hdr_len: 14 + 40 + 20,
        gso_size: 1428,
        csum_start: 54,
        csum_offset: 16,
        ..Repr::default()
    };
    (f, offload)
}

#[test]
fn open_on_a_missing_interface_says_no_such_interface() {
    let err = AfPacketPort::open(0, "core0", "vmpls-nosuch0", None).unwrap_err();
    assert!(matches!(&err, PortError::NoSuchInterface { ifname } if ifname == "vmpls-nosuch0"), "{err:?}");
    assert!(err.to_string().contains("no network interface named \"vmpls-nosuch0\""));
    assert!(!interface_exists("vmpls-nosuch0"));
    assert!(interface_exists("lo"));
    assert!(matches!(
        AfPacketPort::open(0, "core0", "much-too-long-ifname", None),
        Err(PortError::InvalidName { .. })
    ));
    assert!(matches!(
        AfPacketPort::open(0, "lo", "lo", None),
        Err(PortError::NotEthernet { hw_type: 772, .. })
    ));
}

#[test]
fn open_reports_mac_and_mtu_and_refuses_a_bad_mtu_or_a_down_link() {
    let lab = Lab::new("info", 1400);
    lab.a.run(|| {
        let port = AfPacketPort::open(3, "core0", "vpa", None).unwrap();
        assert_eq!(port.info().id, 3);
        assert_eq!(port.info().name, "core0");
        assert_eq!(port.info().mac, MAC_A);
        assert_eq!(port.info().mtu, 1400);
        assert!(port.info().caps.tso4 && !port.info().caps.mpls_gso);

        let lower = AfPacketPort::open(3, "core0", "vpa", Some(1300)).unwrap();
        assert_eq!(lower.info().mtu, 1300);
        let err = AfPacketPort::open(3, "core0", "vpa", Some(1500)).unwrap_err();
        assert!(
            matches!(err, PortError::MtuTooLarge { requested: 1500, interface_mtu: 1400, .. }),
            "{err:?}"
        );
        assert!(matches!(
            AfPacketPort::open(3, "core0", "vpa", Some(10)),
            Err(PortError::MtuTooSmall { .. })
        ));

        lab.a.ip(&["link", "set", "vpa", "down"]);
        let err = AfPacketPort::open(3, "core0", "vpa", None).unwrap_err();
        assert!(matches!(err, PortError::InterfaceDown { .. }), "{err:?}");
        assert!(err.to_string().contains("ip link set vpa up"));
    });
}

#[test]
fn frames_cross_a_veth_in_both_directions() {
    let lab = Lab::new("xfer", 1500);
    let mut port = lab.a.run(|| AfPacketPort::open(1, "core0", "vpa", None).unwrap());
    let peer = lab.b.run(|| PacketSocket::open("vpb"));
    let mut pool = PacketPool::new(128);
    let deadline = Instant::now() + Duration::from_secs(3);

    // Out through the port, in at the plain socket on the other end.
    let frame = test_frame(MAC_B, MAC_A, 7, 200);
    let mut batch = vec![Packet::from_frame(1, &frame)];
    assert_eq!(port.send_batch(&mut batch, &mut pool).unwrap(), 1);
    assert!(batch.is_empty());
    let got = std::iter::from_fn(|| peer.recv(deadline))
        .find(|f| test_seq(f) == Some(7))
        .expect("frame sent by the port arrives at the peer");
    assert_eq!(got, frame);

    // In from the plain socket, out of the port with empty offload metadata.
    let frame = test_frame(MAC_A, MAC_B, 8, 300);
    peer.send(&frame);
    let p = recv_until(&mut port, &mut pool, deadline, |_| {}, |p| test_seq(p.frame()) == Some(8))
        .expect("frame sent by the peer arrives at the port");
    assert_eq!(p.frame(), &frame[..]);
    assert_eq!(p.port, 1);
    assert_eq!(p.offload, Repr::default());

    let s = port.stats();
    assert_eq!((s.tx_packets, s.tx_bytes), (1, 200));
    assert!(s.rx_packets >= 1 && s.rx_bytes >= 300);
    assert_eq!(s.rx_dropped(), 0);
    assert_eq!(s.rx_outgoing, 0);
}

#[test]
fn kernel_tcp_with_tso_arrives_as_gso_super_frames() {
    let lab = Lab::new("tso", 1500);
    lab.a.ip(&["addr", "add", "198.18.0.1/24", "dev", "vpa"]);
    lab.b.ip(&["addr", "add", "198.18.0.2/24", "dev", "vpb"]);
    let mut port = lab.a.run(|| AfPacketPort::open(0, "core0", "vpa", None).unwrap());
    let listener = lab.a.run(|| TcpListener::bind("198.18.0.1:0").unwrap());
    let addr = listener.local_addr().unwrap();
    let stream = lab.b.run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap());

    let receiver = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0;
        while let Ok(n @ 1..) = s.read(&mut buf) {
            total += n;
        }
        total
    });
    let sender = std::thread::spawn(move || {
        let mut s = stream;
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let chunk = vec![0x5au8; 1 << 16];
        for _ in 0..256 {
            s.write_all(&chunk).unwrap();
        }
    });

    let mut pool = PacketPool::new(128);
    let mut own_frames = 0;
    let mut gso = recv_until(
        &mut port,
        &mut pool,
        Instant::now() + Duration::from_secs(4),
        |p| own_frames += usize::from(p.frame()[6..12] == MAC_A),
        |p| p.offload.is_gso(),
    );
    sender.join().unwrap();
    assert_eq!(receiver.join().unwrap(), 256 << 16);
    let p = gso.take().expect("a GSO super-frame from the kernel TCP sender");
    assert_eq!(p.offload.gso_type, GsoType::TcpV4);
    assert!(p.offload.needs_csum);
    assert!(p.len() > 1514, "super-frame of {} bytes", p.len());
    assert_eq!(p.offload.csum_start, 34);
    assert_eq!(p.offload.csum_offset, 16);
    assert_eq!(&p.frame()[6..12], &MAC_B);
    // The kernel stack in `a` sends ACKs out of vpa: PACKET_IGNORE_OUTGOING keeps them
    // from the port (and the sll_pkttype check would count any that slipped through).
    assert_eq!(own_frames, 0, "the port must not read back frames sent from vpa");
    assert_eq!(port.stats().rx_outgoing, 0, "{:?}", port.stats());
}

#[test]
fn ip_tso_frames_are_accepted_and_mpls_gso_is_refused_without_losing_the_rest() {
    let lab = Lab::new("gso", 1500);
    let mut port = lab.a.run(|| AfPacketPort::open(0, "core0", "vpa", None).unwrap());
    let peer = lab.b.run(|| PacketSocket::open("vpb"));
    let mut pool = PacketPool::new(16);

    let (v4, v4_offload) = ipv4_tso_frame(false, 8000);
    let mut p = Packet::from_frame(0, &v4);
    p.offload = v4_offload;
    let mut batch = vec![p];
    assert_eq!(port.send_batch(&mut batch, &mut pool).unwrap(), 1);
    assert_eq!(port.stats().tx_errors.total(), 0);

    let (mpls, mpls_offload) = ipv4_tso_frame(true, 8000);
    let (v6, v6_offload) = ipv6_tso_frame(8000);
    let small = test_frame(MAC_B, MAC_A, 42, 100);
    let mut batch = Vec::new();
    for (frame, offload) in [(&mpls, mpls_offload), (&v6, v6_offload), (&small, Repr::default())] {
        let mut p = Packet::from_frame(0, frame);
        p.offload = offload;
        batch.push(p);
    }
    assert_eq!(port.send_batch(&mut batch, &mut pool).unwrap(), 2);
    let s = port.stats();
    // research/kernel-io.md: the kernel refuses labelled GSO frames with ENOMEM.
    assert_eq!(s.tx_errors.nomem, 1, "{s:?}");
    assert_eq!(s.tx_errors.total(), 1, "{s:?}");
    assert_eq!(s.tx_packets, 3);
    assert_eq!(s.tx_bytes as usize, v4.len() + v6.len() + small.len());

    // The super-frames arrive whole (a plain socket gets them without metadata).
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut want = vec![v4, v6, small];
    while let Some(f) = peer.recv(deadline) {
        want.retain(|w| *w != f);
        if want.is_empty() {
            break;
        }
    }
    assert!(want.is_empty(), "{} frames did not arrive", want.len());
}

#[test]
fn a_batch_of_64_small_frames_goes_out_in_one_call() {
    let lab = Lab::new("b64", 1500);
    let mut port = lab.a.run(|| AfPacketPort::open(0, "core0", "vpa", None).unwrap());
    let peer = lab.b.run(|| PacketSocket::open("vpb"));
    let mut pool = PacketPool::new(64);
    let mut batch: Vec<Packet> = (0..64u32)
        .map(|seq| {
            let mut p = pool.get().unwrap();
            p.set_frame(&test_frame(MAC_B, MAC_A, seq, 60 + seq as usize));
            p
        })
        .collect();
    assert_eq!(port.send_batch(&mut batch, &mut pool).unwrap(), 64);
    assert!(batch.is_empty());
    assert_eq!(pool.available(), 64, "every buffer went back to the pool");

    let deadline = Instant::now() + Duration::from_secs(3);
    let mut seen = [false; 64];
    while let Some(f) = peer.recv(deadline) {
        if let Some(seq) = test_seq(&f) {
            assert_eq!(f, test_frame(MAC_B, MAC_A, seq, 60 + seq as usize));
            seen[seq as usize] = true;
        }
        if seen.iter().all(|s| *s) {
            break;
        }
    }
    let missing: Vec<_> = (0..64).filter(|i| !seen[*i]).collect();
    assert!(missing.is_empty(), "missing frames {missing:?}");
    assert_eq!(port.stats().tx_packets, 64);
}

#[test]
fn an_empty_pool_drops_waiting_frames_and_counts_them() {
    let lab = Lab::new("nobuf", 1500);
    let mut port = lab.a.run(|| AfPacketPort::open(0, "core0", "vpa", None).unwrap());
    let peer = lab.b.run(|| PacketSocket::open("vpb"));
    for seq in 0..5 {
        peer.send(&test_frame(MAC_A, MAC_B, seq, 80));
    }
    assert!(wait_readable(&port, Duration::from_secs(1)));
    let mut empty = PacketPool::new(0);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while port.stats().rx_no_buffer < 5 && Instant::now() < deadline {
        assert_eq!(port.recv_batch(&mut empty, &mut out, 64).unwrap(), 0);
        wait_readable(&port, Duration::from_millis(20));
    }
    assert!(out.is_empty());
    assert!(port.stats().rx_no_buffer >= 5, "{:?}", port.stats());
    assert_eq!(port.stats().rx_packets, 0);
}
