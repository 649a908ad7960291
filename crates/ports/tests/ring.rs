//! `AfPacketRingPort` (TPACKET_V3 receive ring) against real veth pairs, in network
//! namespaces each test creates for itself (vmpls-testkit) and removes on
//! drop, even on panic. Needs root.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{AfPacketRingPort, Port, RingConfig};
use vmpls_testkit::{End, Netns, PacketSocket, veth, wait_readable};
use vmpls_wire::virtio_net::GsoType;

const MAC_A: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0xaa, 0x01];
const MAC_B: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0xbb, 0x01];
const TEST_ETHERTYPE: u16 = 0x88b5;
const MARKER: &[u8] = b"vmpls-ring-test";

/// Two namespaces joined by a veth pair: `vpa` (MAC_A) in `a`, `vpb` (MAC_B) in `b`, both
/// up, IPv6 off (no neighbour discovery noise). Both go when the lab is dropped.
struct Lab {
    a: Netns,
    b: Netns,
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let lab = Lab {
            a: Netns::without_ipv6(&format!("rg-{tag}-a")),
            b: Netns::without_ipv6(&format!("rg-{tag}-b")),
        };
        veth(
            End { ns: &lab.a, ifname: "vpa", mac: Some(MAC_A) },
            End { ns: &lab.b, ifname: "vpb", mac: Some(MAC_B) },
            1500,
        );
        lab
    }
}

fn test_frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&TEST_ETHERTYPE.to_be_bytes());
    f.extend_from_slice(MARKER);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < len {
        f.push((f.len() * 7) as u8);
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

/// Receives from `port` until `each` returns true (done) or `deadline` passes; every
/// frame goes to `each` and back to the pool.
fn drain(
    port: &mut AfPacketRingPort,
    pool: &mut PacketPool,
    deadline: Instant,
    mut each: impl FnMut(&Packet) -> bool,
) {
    let mut out = Vec::new();
    let mut done = false;
    while !done && Instant::now() < deadline {
        if !wait_readable(&port, Duration::from_millis(20)) {
            continue;
        }
        // Small batches: a block is then consumed over several calls.
        port.recv_batch(pool, &mut out, 7).expect("recv_batch");
        for p in out.drain(..) {
            done |= each(&p);
            pool.put(p);
        }
    }
}

#[test]
fn frames_cross_the_ring_port_in_both_directions() {
    let lab = Lab::new("xfer");
    let mut port = lab.a.run(|| AfPacketRingPort::open(1, "core0", "vpa", None).unwrap());
    let peer = lab.b.run(|| PacketSocket::open("vpb"));
    let mut pool = PacketPool::new(64);
    let deadline = Instant::now() + Duration::from_secs(5);

    // In at the ring port: 200 frames of varied sizes, more than one block's worth with
    // small blocks consumed over several calls.
    let sizes = |i: u32| [60usize, 61, 333, 1000, 1514][i as usize % 5];
    let sent: Vec<Vec<u8>> = (0..200).map(|i| test_frame(MAC_A, MAC_B, i, sizes(i))).collect();
    for f in &sent {
        peer.send(f);
    }
    let mut got = vec![false; sent.len()];
    let mut count = 0;
    drain(&mut port, &mut pool, deadline, |p| {
        if let Some(seq) = test_seq(p.frame()) {
            assert_eq!(p.frame(), &sent[seq as usize][..], "frame {seq} changed");
            assert_eq!(p.port, 1);
            assert!(!p.offload.is_gso() && !p.offload.needs_csum);
            got[seq as usize] = true;
            count += 1;
        }
        count == 200
    });
    assert!(got.iter().all(|&g| g), "received {count} of 200");
    let st = port.stats();
    assert!(st.rx_packets >= 200 && st.rx_dropped() == 0, "{st:?}");
    assert_eq!(port.bad_blocks(), 0);

    // Out through the port, in at the plain socket.
    let mut batch: Vec<Packet> = (0..40)
        .map(|i| {
            let mut p = pool.get().expect("buffer");
            p.set_frame(&test_frame(MAC_B, MAC_A, 1000 + i, sizes(i)));
            p
        })
        .collect();
    assert_eq!(port.send_batch(&mut batch, &mut pool).unwrap(), 40);
    assert!(batch.is_empty());
    let mut seen = Vec::new();
    while seen.len() < 40 {
        let Some(f) = peer.recv(deadline) else { break };
        if let Some(seq) = test_seq(&f) {
            assert_eq!(f, test_frame(MAC_B, MAC_A, seq, f.len()));
            seen.push(seq);
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (1000..1040).collect::<Vec<_>>());
    assert_eq!(port.stats().tx_packets, 40);
    // Every buffer came back.
    assert_eq!(pool.available(), 64);
}

#[test]
fn a_kernel_tcp_super_frame_arrives_with_its_vnet_header() {
    let lab = Lab::new("tso");
    lab.a.ip(&["addr", "add", "198.18.7.1/24", "dev", "vpa"]);
    lab.b.ip(&["addr", "add", "198.18.7.2/24", "dev", "vpb"]);
    // The ring port watches vpb; the kernel stack of `b` still takes the flow.
    let cfg = RingConfig { block_size: 128 << 10, block_nr: 16, retire_timeout_ms: 5 };
    let mut port = lab.b.run(|| AfPacketRingPort::open_with(2, "edge0", "vpb", None, cfg).unwrap());
    assert_eq!(port.ring_config(), cfg);
    let listener = lab.b.run(|| TcpListener::bind("198.18.7.2:5201").unwrap());
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0usize;
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let client = lab.a.run(|| {
        let c =
            TcpStream::connect_timeout(&"198.18.7.2:5201".parse().unwrap(), Duration::from_secs(3)).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        c
    });
    let writer = std::thread::spawn(move || {
        let mut c = client;
        let chunk = vec![0x5au8; 1 << 20];
        for _ in 0..32 {
            c.write_all(&chunk).unwrap();
        }
    });

    let mut pool = PacketPool::new(64);
    let mut found = None;
    drain(&mut port, &mut pool, Instant::now() + Duration::from_secs(10), |p| {
        if found.is_none() && p.len() > 1514 && p.frame()[12..14] == [0x08, 0x00] {
            found = Some((p.len(), p.offload));
        }
        found.is_some()
    });
    writer.join().unwrap();
    assert_eq!(server.join().unwrap(), 32 << 20);
    let (len, o) = found.expect("no super-frame seen on the ring");
    assert!(len > 1514 && len <= 65550, "{len}");
    assert_eq!(o.gso_type, GsoType::TcpV4);
    assert!(o.needs_csum);
    assert_eq!(o.csum_start, 34);
    assert_eq!(o.csum_offset, 16);
    assert!(o.gso_size > 0 && o.gso_size <= 1460);
    assert!(o.hdr_len >= 54);
    assert_eq!(port.stats().rx_truncated, 0);
    assert_eq!(port.stats().rx_bad_vnet_hdr, 0);
    assert_eq!(pool.available(), 64);
}

fn socket_inode(fd: impl AsFd) -> u64 {
    std::fs::metadata(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())).unwrap().ino()
}

#[test]
fn dropping_the_port_unmaps_the_ring_and_closes_the_socket() {
    let lab = Lab::new("leak");
    let port = lab.a.run(|| AfPacketRingPort::open(0, "core0", "vpa", None).unwrap());
    let tag = format!("socket:[{}]", socket_inode(&port));
    let maps = || std::fs::read_to_string("/proc/self/maps").unwrap();
    let fds = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .any(|l| l.to_string_lossy() == tag)
    };
    assert!(maps().contains(&tag), "ring not mapped");
    assert!(fds());
    drop(port);
    assert!(!maps().contains(&tag), "ring still mapped after drop");
    assert!(!fds(), "socket still open after drop");
}
