//! TAP ports against the kernel's own stack, in network namespaces each test creates for
//! itself (vmpls-testkit) and removes on drop, even on panic. Needs root.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{AfPacketPort, Port, PortError, TapOptions, TapPort, interface_exists};
use vmpls_testkit::{Netns, ip_output, readable, wait_readable};
use vmpls_wire::virtio_net::{GsoType, Repr};

#[test]
fn create_makes_a_tap_that_is_up_with_the_configured_mtu_and_goes_away_on_drop() {
    let ns = Netns::new("tt-open");
    ns.run(|| {
        let opts = TapOptions { mtu: Some(9000), ..TapOptions::default() };
        let port = TapPort::create(2, "host", "vtap0", &opts).unwrap();
        assert_eq!(port.info().id, 2);
        assert_eq!(port.info().name, "host");
        assert_eq!(port.info().mtu, 9000);
        let caps = port.info().caps;
        assert!(caps.tso4 && caps.tso6 && caps.csum);
        assert!(!caps.mpls_gso, "MPLS GSO must be off by default");
        assert!(interface_exists("vtap0"));
        let link = ip_output(&["-d", "link", "show", "vtap0"]);
        assert!(link.contains("mtu 9000"), "{link}");
        assert!(link.contains(",UP"), "{link}");
        assert!(link.contains("tun type tap"), "{link}");
        assert!(link.contains("vnet_hdr on"), "{link}");
        // The port's MAC is not the kernel side's.
        let tap_mac =
            link.split("link/ether ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().to_string();
        let port_mac = port.info().mac.map(|b| format!("{b:02x}")).join(":");
        assert_ne!(tap_mac, port_mac);
        // The kernel sees the offloads we asked for.
        let out = Command::new("ethtool").args(["-k", "vtap0"]).output();
        if let Ok(out) = out {
            let k = String::from_utf8_lossy(&out.stdout);
            assert!(k.contains("tcp-segmentation-offload: on"), "{k}");
            assert!(k.contains("tx-checksumming: on"), "{k}");
        }
        drop(port);
        assert!(!interface_exists("vtap0"), "the TAP outlived its port");

        let opts = TapOptions { mtu: Some(10), ..TapOptions::default() };
        assert!(matches!(
            TapPort::create(0, "host", "vtap0", &opts),
            Err(PortError::MtuTooSmall { requested: 10, .. })
        ));
        assert!(matches!(
            TapPort::create(0, "host", "much-too-long-ifname", &TapOptions::default()),
            Err(PortError::InvalidName { .. })
        ));
        let opts = TapOptions { mtu: Some(70000), mpls_gso: true, mac: Some([0x02, 0, 0, 0, 0, 7]) };
        let err = TapPort::create(0, "host", "vtap1", &opts).unwrap_err();
        assert!(matches!(err, PortError::MtuTooLarge { requested: 70000, .. }), "{err:?}");
        let opts = TapOptions { mtu: None, mpls_gso: true, mac: Some([0x02, 0, 0, 0, 0, 7]) };
        let port = TapPort::create(0, "host", "vtap1", &opts).unwrap();
        assert_eq!(port.info().mac, [0x02, 0, 0, 0, 0, 7]);
        assert_eq!(port.info().mtu, 1500);
        assert!(port.info().caps.mpls_gso);
        assert_eq!(port.ifname(), "vtap1");
    });
}

/// Moves frames between two TAP ports until `stop`, counting the super-frames (frames
/// longer than 1514 bytes with a GSO type) seen in each direction.
fn bridge(mut a: TapPort, mut b: TapPort, stop: Arc<AtomicBool>) -> ([u64; 2], [u64; 2]) {
    let mut pool = PacketPool::new(256);
    let mut rx: Vec<Packet> = Vec::new();
    let mut superframes = [0u64; 2];
    let mut sent = [0u64; 2];
    while !stop.load(Ordering::Relaxed) {
        let ready = readable(&[a.as_fd(), b.as_fd()], Duration::from_millis(20));
        for (dir, r) in ready.into_iter().enumerate() {
            if !r {
                continue;
            }
            let (from, to) = if dir == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
            from.recv_batch(&mut pool, &mut rx, 64).expect("recv_batch");
            for p in &rx {
                if p.offload.is_gso() && p.len() > 1514 {
                    superframes[dir] += 1;
                }
            }
            sent[dir] += to.send_batch(&mut rx, &mut pool).expect("send_batch") as u64;
            assert!(rx.is_empty());
        }
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.rx_dropped() + sb.rx_dropped(), 0, "{sa:?} {sb:?}");
    assert_eq!(sa.tx_errors.total() + sb.tx_errors.total(), 0, "{sa:?} {sb:?}");
    (superframes, sent)
}

fn pattern(i: usize) -> u8 {
    ((i * 7 + i / 251) % 256) as u8
}

/// Sends `len` bytes of a pattern over TCP from namespace `from` to `to_addr` (a listener
/// in namespace `to`), checking every byte on arrival.
fn tcp_transfer(from: &Netns, to: &Netns, to_addr: IpAddr, len: usize) {
    let addr = SocketAddr::new(to_addr, 5001);
    let listener = to.run(|| TcpListener::bind(addr).expect("bind"));
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let (mut conn, _) = listener.accept().expect("accept");
            conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut got = 0usize;
            loop {
                let n = conn.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                for (i, b) in buf[..n].iter().enumerate() {
                    assert_eq!(*b, pattern(got + i), "byte {} differs", got + i);
                }
                got += n;
            }
            got
        });
        let mut conn =
            from.run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect"));
        conn.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let data: Vec<u8> = (0..len).map(pattern).collect();
        conn.write_all(&data).expect("write");
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        let got = receiver.join().unwrap();
        assert_eq!(got, len);
    });
}

#[test]
fn kernel_tcp_super_frames_cross_two_taps_whole_both_ways_over_ipv4_and_ipv6() {
    let (na, nb) = (Netns::new("tt-tcp-a"), Netns::new("tt-tcp-b"));
    let a = na.run(|| TapPort::create(0, "a", "tta", &TapOptions::default()).unwrap());
    let b = nb.run(|| TapPort::create(1, "b", "ttb", &TapOptions::default()).unwrap());
    for (n, dev, v4, v6) in [
        (&na, "tta", "198.18.50.1/24", "2001:db8:50::1/64"),
        (&nb, "ttb", "198.18.50.2/24", "2001:db8:50::2/64"),
    ] {
        n.ip(&["addr", "add", v4, "dev", dev]);
        n.ip(&["-6", "addr", "add", v6, "dev", dev, "nodad"]);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let bridge_thread = {
        let stop = stop.clone();
        std::thread::spawn(move || bridge(a, b, stop))
    };
    let result = std::panic::catch_unwind(|| {
        tcp_transfer(&na, &nb, "198.18.50.2".parse().unwrap(), 20 << 20);
        tcp_transfer(&nb, &na, "2001:db8:50::1".parse().unwrap(), 20 << 20);
    });
    stop.store(true, Ordering::Relaxed);
    let (superframes, sent) = bridge_thread.join().unwrap();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    // a -> b carried the IPv4 flow, b -> a the IPv6 one; both as kernel TSO super-frames
    // that the other kernel took whole.
    assert!(superframes[0] > 10, "a->b super-frames {superframes:?} of {sent:?}");
    assert!(superframes[1] > 10, "b->a super-frames {superframes:?} of {sent:?}");
}

/// An Ethernet frame with one MPLS label over an IPv4 TCP super-frame of `payload` bytes,
/// checksum partial, and its TSO metadata.
fn mpls_tso_frame(dst: [u8; 6], src: [u8; 6], payload: usize) -> (Vec<u8>, Repr) {
    let mut f = [&dst[..], &src[..]].concat();
    f.extend_from_slice(&0x8847u16.to_be_bytes());
    let lse: u32 = (1000 << 12) | (1 << 8) | 64;
    f.extend_from_slice(&lse.to_be_bytes());
    let total = 20 + 20 + payload;
    let mut iph = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0];
    iph[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    iph.extend_from_slice(&[198, 18, 51, 1, 198, 18, 51, 2]);
    f.extend_from_slice(&iph);
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5001u16.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x10;
    f.extend_from_slice(&tcp);
    f.extend((0..payload).map(|i| i as u8));
    let offload = Repr {
        needs_csum: true,
        gso_type: GsoType::TcpV4,
        hdr_len: 18 + 40,
        gso_size: 1448,
        csum_start: 18 + 20,
        csum_offset: 16,
        ..Repr::default()
    };
    (f, offload)
}

#[test]
fn an_mpls_super_frame_written_to_a_tap_reaches_a_packet_socket_on_it_whole() {
    // The "tap pipe" of research/kernel-io.md: why `mpls_gso` may be declared on a TAP
    // whose reader is another router's AF_PACKET port.
    let ns = Netns::new("tt-pipe");
    ns.run(|| {
        let opts = TapOptions { mpls_gso: true, ..TapOptions::default() };
        let mut tap = TapPort::create(0, "pipe-w", "tpipe", &opts).unwrap();
        let mut reader = AfPacketPort::open(1, "pipe-r", "tpipe", None).unwrap();
        let mut pool = PacketPool::new(16);
        let (frame, offload) = mpls_tso_frame(reader.info().mac, tap.info().mac, 30000);
        let mut p = pool.get().unwrap();
        p.set_frame(&frame);
        p.offload = offload;
        let mut out = vec![p];
        assert_eq!(tap.send_batch(&mut out, &mut pool).unwrap(), 1);
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut rx = Vec::new();
        let mut found = None;
        while found.is_none() && Instant::now() < deadline {
            if !wait_readable(&reader, Duration::from_millis(50)) {
                continue;
            }
            reader.recv_batch(&mut pool, &mut rx, 64).unwrap();
            found = rx.drain(..).find(|p| p.frame() == &frame[..]);
        }
        let got = found.expect("the MPLS super-frame did not reach the packet socket whole");
        assert_eq!(got.offload.gso_type, GsoType::TcpV4);
        assert_eq!(got.offload.gso_size, 1448);
        assert_eq!(got.offload.csum_start, 38);
    });
}
