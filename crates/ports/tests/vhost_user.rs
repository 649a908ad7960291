//! The vhost-user port against a real QEMU guest (TCG), booted with `vmpls-guest`.
//!
//! The test is the guest's only neighbour: it drives the port through the `Port` trait,
//! answers ARP and ICMP echo for 198.18.50.1, and speaks just enough TCP to receive the
//! guest's streams and to send it one labelled super-frame, which the port cuts into
//! segments (virtio-net has no MPLS GSO) and the guest's kernel MPLS pops. No host network interface is involved:
//! frames move between the guest's virtqueues and this process.
//!
//! Needs the Debian packages `qemu-system-x86`, `busybox-static`, `kmod`, `iproute2`,
//! `iperf3`, `ethtool` (the guest image) and a package mirror for the guest kernel on the
//! first run (cached in `target/guest-cache`).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use vmpls_testkit::TempDir;

use vmpls_dataplane::{Packet, PacketPool};
use vmpls_guest::{Accel, DONE_MARKER, Guest, GuestCache, GuestConfig, GuestError, GuestImage, Nic};
use vmpls_ports::{Port, VhostUserOptions, VhostUserPort};
use vmpls_wire::checksum;
use vmpls_wire::virtio_net::{GsoType, Repr};

const HOST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 1);
const GUEST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 50, 2);
/// The guest sends this many zero bytes to HOST_IP:5001.
const TO_HOST: usize = 256 * 1024;
/// Bytes of the one super-frame the test sends to the guest's port 5002; the guest sends
/// them back to HOST_IP:5003.
const TO_GUEST: usize = 30_000;
/// The label the super-frame to the guest carries; the guest's kernel MPLS pops it and
/// delivers locally. virtio-net has no MPLS GSO, so the port cuts it into segments.
const TO_GUEST_LABEL: u32 = 1002;
const MSS: u16 = 1460;

fn payload_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + ((i / 997 + i) % 26) as u8).collect()
}

/// The TCP segment fields the test reads.
#[derive(Debug, Clone, Copy)]
struct Tcp {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// An Ethernet + IPv4 frame from the host to the guest with `l4` as its payload; the
/// transport checksum is filled in by `fill_l4`.
fn ipv4_frame(host_mac: [u8; 6], guest_mac: [u8; 6], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(34 + l4.len());
    f.extend_from_slice(&guest_mac);
    f.extend_from_slice(&host_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + l4.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&HOST_IP.octets());
    ip[16..20].copy_from_slice(&GUEST_IP.octets());
    let c = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

/// A TCP segment (20-byte header, or 24 with an MSS option on SYN) with a full checksum,
/// or with only the pseudo-header sum and `NEEDS_CSUM` offload when `partial`.
fn tcp_frame(
    host_mac: [u8; 6],
    guest_mac: [u8; 6],
    t: Tcp,
    payload: &[u8],
    partial: bool,
) -> (Vec<u8>, Repr) {
    let opt_len = if t.flags & SYN != 0 { 4 } else { 0 };
    let mut seg = vec![0u8; 20 + opt_len];
    seg[0..2].copy_from_slice(&t.src_port.to_be_bytes());
    seg[2..4].copy_from_slice(&t.dst_port.to_be_bytes());
    seg[4..8].copy_from_slice(&t.seq.to_be_bytes());
    seg[8..12].copy_from_slice(&t.ack.to_be_bytes());
    seg[12] = (((20 + opt_len) / 4) as u8) << 4;
    seg[13] = t.flags;
    seg[14..16].copy_from_slice(&65535u16.to_be_bytes());
    if opt_len > 0 {
        seg[20..24].copy_from_slice(&[2, 4, (MSS >> 8) as u8, MSS as u8]);
    }
    seg.extend_from_slice(payload);
    let pseudo = checksum::pseudo_header_v4(HOST_IP, GUEST_IP, 6, seg.len() as u32);
    let mut offload = Repr::default();
    let c = if partial {
        offload.needs_csum = true;
        offload.csum_start = 34;
        offload.csum_offset = 16;
        checksum::fold(pseudo)
    } else {
        checksum::finish(checksum::add(pseudo, checksum::sum(&seg)))
    };
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    (ipv4_frame(host_mac, guest_mac, 6, &seg), offload)
}

/// One inbound TCP stream (guest -> host), in order only.
#[derive(Default)]
struct Inbound {
    guest_port: u16,
    rcv_nxt: u32,
    data: Vec<u8>,
    fin: bool,
    /// The host acknowledges no data before this instant (set by the first data segment),
    /// so the guest's writes pile up in its send queue and leave as super-frames whatever
    /// the relative speed of guest and host.
    acks_held_until: Option<Instant>,
    ack_owed: bool,
}

/// Less than Linux's minimum retransmission timeout (200 ms): holding the first ACK
/// never makes the guest retransmit.
const ACK_HOLD: Duration = Duration::from_millis(150);
/// The host's initial sequence number on the guest's connections.
const INBOUND_ISN: u32 = 7_000;

/// The test's side of the link: a port, a pool, and what it has seen.
struct Host {
    port: VhostUserPort,
    pool: PacketPool,
    mac: [u8; 6],
    guest_mac: Option<[u8; 6]>,
    arp_replies: u32,
    echo_replies: u32,
    /// Largest TCP super-frame from the guest: (frame length, offload).
    largest_tso: Option<(usize, Repr)>,
    inbound: Vec<(u16, Inbound)>,
    /// The connection the host opens to the guest's port 5002.
    out_state: OutState,
    out_last_sent: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutState {
    Idle,
    SynSent,
    /// Data and FIN sent, `ack` acknowledges the guest; resent until the guest acknowledges
    /// our FIN.
    Established {
        ack: u32,
        data_acked: bool,
    },
}

const OUT_ISN: u32 = 0x1000_0000;
/// Sequence number of the host's FIN: after the SYN and the data.
const OUT_FIN_SEQ: u32 = OUT_ISN + 1 + TO_GUEST as u32;
const HOST_PORT_OUT: u16 = 40_000;

impl Host {
    fn new(port: VhostUserPort) -> Host {
        let mac = port.info().mac;
        Host {
            port,
            pool: PacketPool::new(512),
            mac,
            guest_mac: None,
            arp_replies: 0,
            echo_replies: 0,
            largest_tso: None,
            inbound: Vec::new(),
            out_state: OutState::Idle,
            out_last_sent: Instant::now(),
        }
    }

    fn send(&mut self, frame: &[u8], offload: Repr) {
        let mut p = self.pool.get().expect("pool");
        p.set_frame(frame);
        p.offload = offload;
        let mut v = vec![p];
        self.port.send_batch(&mut v, &mut self.pool).unwrap();
    }

    /// Receives and answers for up to `d`.
    fn pump(&mut self, d: Duration) {
        let end = Instant::now() + d;
        let mut batch = Vec::new();
        while Instant::now() < end {
            vmpls_testkit::wait_readable(&self.port, Duration::from_millis(20));
            let n = self.port.recv_batch(&mut self.pool, &mut batch, 64).unwrap();
            self.send_owed_acks();
            if n == 0 {
                self.retransmit();
                continue;
            }
            for p in batch.drain(..) {
                self.handle(&p);
                self.pool.put(p);
            }
        }
    }

    fn handle(&mut self, p: &Packet) {
        let f = p.frame();
        if f.len() < 14 {
            return;
        }
        let src_mac: [u8; 6] = f[6..12].try_into().unwrap();
        match u16::from_be_bytes([f[12], f[13]]) {
            0x0806 if f.len() >= 42 && f[20..22] == [0, 1] && f[38..42] == HOST_IP.octets() => {
                self.guest_mac = Some(src_mac);
                let mut r = f[..42].to_vec();
                r[0..6].copy_from_slice(&src_mac);
                r[6..12].copy_from_slice(&self.mac);
                r[21] = 2; // reply
                r[32..42].copy_from_slice(&f[22..32]); // target = the asker
                r[22..28].copy_from_slice(&self.mac);
                r[28..32].copy_from_slice(&HOST_IP.octets());
                self.send(&r, Repr::default());
                self.arp_replies += 1;
            }
            0x0800 if f.len() >= 34 && f[30..34] == HOST_IP.octets() => {
                self.guest_mac = Some(src_mac);
                let ihl = usize::from(f[14] & 0x0f) * 4;
                let l4 = 14 + ihl;
                match f[23] {
                    1 if f.len() >= l4 + 8 && f[l4] == 8 => self.echo_reply(f, l4),
                    6 if f.len() >= l4 + 20 => self.tcp(p, l4),
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn echo_reply(&mut self, f: &[u8], l4: usize) {
        let guest_mac: [u8; 6] = f[6..12].try_into().unwrap();
        let mut icmp = f[l4..].to_vec();
        icmp[0] = 0;
        icmp[2..4].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let r = ipv4_frame(self.mac, guest_mac, 1, &icmp);
        self.send(&r, Repr::default());
        self.echo_replies += 1;
    }

    fn tcp(&mut self, p: &Packet, l4: usize) {
        let f = p.frame();
        let t = Tcp {
            src_port: u16::from_be_bytes([f[l4], f[l4 + 1]]),
            dst_port: u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]),
            seq: u32::from_be_bytes(f[l4 + 4..l4 + 8].try_into().unwrap()),
            ack: u32::from_be_bytes(f[l4 + 8..l4 + 12].try_into().unwrap()),
            flags: f[l4 + 13],
        };
        let doff = usize::from(f[l4 + 12] >> 4) * 4;
        let ip_total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let end = (14 + ip_total).min(f.len());
        let payload = &f[(l4 + doff).min(end)..end];
        if p.offload.gso_type == GsoType::TcpV4 && self.largest_tso.is_none_or(|(len, _)| f.len() > len) {
            self.largest_tso = Some((f.len(), p.offload));
        }
        let guest_mac: [u8; 6] = f[6..12].try_into().unwrap();
        if t.dst_port == HOST_PORT_OUT {
            return self.outbound(guest_mac, t);
        }
        let reply = |seq: u32, ack: u32, flags: u8| Tcp {
            src_port: t.dst_port,
            dst_port: t.src_port,
            seq,
            ack,
            flags,
        };
        let our_isn = INBOUND_ISN;
        if t.flags & SYN != 0 {
            self.inbound.retain(|(port, _)| *port != t.src_port);
            self.inbound.push((
                t.src_port,
                Inbound { guest_port: t.dst_port, rcv_nxt: t.seq.wrapping_add(1), ..Inbound::default() },
            ));
            let (fr, off) =
                tcp_frame(self.mac, guest_mac, reply(our_isn, t.seq.wrapping_add(1), SYN | ACK), &[], false);
            return self.send(&fr, off);
        }
        let Some((_, conn)) = self.inbound.iter_mut().find(|(port, _)| *port == t.src_port) else {
            return;
        };
        if t.seq == conn.rcv_nxt {
            if !payload.is_empty() && conn.acks_held_until.is_none() {
                conn.acks_held_until = Some(Instant::now() + ACK_HOLD);
            }
            conn.data.extend_from_slice(payload);
            conn.rcv_nxt = conn.rcv_nxt.wrapping_add(payload.len() as u32);
            if t.flags & FIN != 0 {
                conn.rcv_nxt = conn.rcv_nxt.wrapping_add(1);
                conn.fin = true;
            }
        }
        let (ack, fin) = (conn.rcv_nxt, conn.fin);
        if payload.is_empty() && t.flags & FIN == 0 {
            return; // a bare ACK
        }
        if conn.acks_held_until.is_some_and(|until| Instant::now() < until) {
            conn.ack_owed = true;
            return;
        }
        let flags = if fin { ACK | FIN } else { ACK };
        let (fr, off) =
            tcp_frame(self.mac, guest_mac, reply(our_isn.wrapping_add(1), ack, flags), &[], false);
        self.send(&fr, off);
    }

    /// The ACKs held back by `ACK_HOLD`, once it has passed.
    fn send_owed_acks(&mut self) {
        let (Some(guest_mac), now) = (self.guest_mac, Instant::now()) else { return };
        let mut owed = Vec::new();
        for (guest_src_port, conn) in &mut self.inbound {
            if conn.ack_owed && conn.acks_held_until.is_some_and(|until| now >= until) {
                conn.ack_owed = false;
                let flags = if conn.fin { ACK | FIN } else { ACK };
                owed.push(Tcp {
                    src_port: conn.guest_port,
                    dst_port: *guest_src_port,
                    seq: INBOUND_ISN.wrapping_add(1),
                    ack: conn.rcv_nxt,
                    flags,
                });
            }
        }
        for t in owed {
            let (fr, off) = tcp_frame(self.mac, guest_mac, t, &[], false);
            self.send(&fr, off);
        }
    }

    /// The host's connection to the guest's port 5002.
    fn outbound(&mut self, guest_mac: [u8; 6], t: Tcp) {
        match self.out_state {
            OutState::SynSent if t.flags & (SYN | ACK) == SYN | ACK => {
                let ack = t.seq.wrapping_add(1);
                self.out_state = OutState::Established { ack, data_acked: false };
                self.send_data(guest_mac, ack);
            }
            OutState::Established { ack, data_acked } => {
                let data_acked = data_acked || (t.flags & ACK != 0 && t.ack == OUT_FIN_SEQ + 1);
                let mut ack = ack;
                if t.flags & FIN != 0 {
                    // nc -l half-closes at once (its stdin is /dev/null).
                    ack = t.seq.wrapping_add(1);
                    let s = Tcp {
                        src_port: HOST_PORT_OUT,
                        dst_port: 5002,
                        seq: OUT_FIN_SEQ + 1,
                        ack,
                        flags: ACK,
                    };
                    let (fr, off) = tcp_frame(self.mac, guest_mac, s, &[], false);
                    self.send(&fr, off);
                }
                self.out_state = OutState::Established { ack, data_acked };
            }
            _ => {}
        }
    }

    /// The whole payload as one TCP super-frame (`GSO_TCPV4`, partial checksum) under
    /// label [`TO_GUEST_LABEL`], then FIN.
    fn send_data(&mut self, guest_mac: [u8; 6], ack: u32) {
        let s = Tcp { src_port: HOST_PORT_OUT, dst_port: 5002, seq: OUT_ISN + 1, ack, flags: ACK | PSH };
        let (fr, mut off) = tcp_frame(self.mac, guest_mac, s, &payload_pattern(TO_GUEST), true);
        off.gso_type = GsoType::TcpV4;
        off.gso_size = MSS;
        let mut labelled = fr[..12].to_vec();
        labelled.extend_from_slice(&[0x88, 0x47]);
        labelled.extend_from_slice(&((TO_GUEST_LABEL << 12) | 0x100 | 64).to_be_bytes());
        labelled.extend_from_slice(&fr[14..]);
        off.csum_start += 4;
        off.hdr_len = 54 + 4;
        self.send(&labelled, off);
        let fin = Tcp { seq: OUT_FIN_SEQ, flags: ACK | FIN, ..s };
        let (fr, off) = tcp_frame(self.mac, guest_mac, fin, &[], false);
        self.send(&fr, off);
        self.out_last_sent = Instant::now();
    }

    fn connect_to_guest(&mut self) {
        let Some(guest_mac) = self.guest_mac else { return };
        let s = Tcp { src_port: HOST_PORT_OUT, dst_port: 5002, seq: OUT_ISN, ack: 0, flags: SYN };
        let (fr, off) = tcp_frame(self.mac, guest_mac, s, &[], false);
        self.send(&fr, off);
        self.out_state = OutState::SynSent;
        self.out_last_sent = Instant::now();
    }

    /// Resends the SYN or the data if the guest has not answered within 2 s.
    fn retransmit(&mut self) {
        if self.out_last_sent.elapsed() < Duration::from_secs(2) {
            return;
        }
        match self.out_state {
            OutState::SynSent => self.connect_to_guest(),
            OutState::Established { ack, data_acked: false } => {
                if let Some(mac) = self.guest_mac {
                    self.send_data(mac, ack);
                }
            }
            _ => {}
        }
    }

    fn inbound_data(&self, guest_port_to: u16) -> Option<&Inbound> {
        self.inbound.iter().map(|(_, c)| c).find(|c| c.guest_port == guest_port_to)
    }
}

/// True once the guest's script has ended well; panics with the guest's console, results
/// and QEMU's stderr if QEMU exited or the script failed.
fn guest_done(guest: &mut Guest, host: &Host) -> bool {
    match guest.wait_for(DONE_MARKER, Duration::from_millis(1)) {
        Ok(_) => true,
        Err(GuestError::Timeout { .. }) => false,
        Err(e) => panic!(
            "{e}\nport: {:?}\n{:?}\nfeatures {:?}, {} ARP and {} echo replies",
            host.port.stats(),
            host.port.vhost_stats(),
            host.port.negotiated_features(),
            host.arp_replies,
            host.echo_replies
        ),
    }
}

fn boot(image: &GuestImage, name: &str, socket: &std::path::Path, script: &str) -> Guest {
    Guest::boot(
        image,
        GuestConfig {
            name: name.into(),
            nics: vec![Nic::vhost_user(socket)],
            script: script.into(),
            accel: Accel::Auto,
            script_timeout: Duration::from_secs(90),
            // QEMU 7.2 under TCG crashes starting a vhost-user NIC that uses MSI-X
            // (`msix_set_vector_notifiers` in `vhost_net_start`): legacy interrupts.
            append: "pci=nomsi".into(),
            ..GuestConfig::default()
        },
    )
    .unwrap_or_else(|e| panic!("booting {name}: {e}"))
}

const NET_SETUP: &str = "
ip link set eth0 up || fail link
ip addr add 198.18.50.2/24 dev eth0 || fail addr
";

#[test]
fn guest_pings_and_streams_tcp_super_frames_through_the_port_and_reconnects() {
    let started = Instant::now();
    let image = GuestImage::build(&GuestCache::default_location()).expect("guest image");
    eprintln!("guest image ready after {:?}", started.elapsed());
    let dir = TempDir::new("vhost-guest");
    let socket = dir.path().join("g0.sock");
    let port = VhostUserPort::open(0, "guest0", &socket, &VhostUserOptions::default()).unwrap();
    let mut host = Host::new(port);

    // --- first guest: ping, a TCP stream to the host, a labelled super-frame to the guest
    // (its kernel MPLS pops the label and delivers) and back.
    let script = format!(
        "{NET_SETUP}
sysctl -qw net.mpls.platform_labels=2000 net.mpls.conf.eth0.input=1 || fail mpls-sysctl
ip -f mpls route add {TO_GUEST_LABEL} dev lo || fail mpls-route
ping -c 3 -W 5 198.18.50.1 > /tmp/ping 2>&1 || fail \"ping: $(cat /tmp/ping)\"
result PING-OK
( nc -l -p 5002 > /tmp/rx; echo done > /tmp/rxdone ) &
retry 10 sh -c 'netstat -ltn | grep -q :5002' || fail listener
result LISTENING
dd if=/dev/zero bs=65536 count={count} 2>/dev/null | timeout 30 nc 198.18.50.1 5001
result TCP-SENT
retry 40 test -f /tmp/rxdone || fail \"no data on 5002\"
result \"RX-BYTES $(wc -c < /tmp/rx)\"
timeout 30 nc 198.18.50.1 5003 < /tmp/rx
result ECHOED
",
        count = TO_HOST / 65536
    );
    let boot1 = Instant::now();
    let mut guest = boot(&image, "vhost1", &socket, &script);
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut connected_to_guest = false;
    // (features, caps) while the guest is connected: it powers off at the end.
    let mut negotiated = None;
    loop {
        host.pump(Duration::from_millis(100));
        if let Some(f) = host.port.negotiated_features() {
            negotiated = Some((f, host.port.info().caps));
        }
        let results = guest.results();
        if !connected_to_guest && results.contains("LISTENING") {
            host.connect_to_guest();
            connected_to_guest = true;
        }
        if guest_done(&mut guest, &host) {
            break;
        }
        assert!(Instant::now() < deadline, "first guest timed out:\n{results}\n{}", guest.output());
    }
    // The guest's final FIN/ACKs.
    host.pump(Duration::from_millis(300));
    let results = guest.results();
    eprintln!("first guest done after {:?}; results:\n{results}", boot1.elapsed());
    assert!(
        results.contains("VMPLS-GUEST-DONE rc=0"),
        "guest script failed:\n{results}\nconsole:\n{}\nport: {:?} {:?} features {:?}, {} ARP and {} echo replies",
        guest.output(),
        host.port.stats(),
        host.port.vhost_stats(),
        host.port.negotiated_features(),
        host.arp_replies,
        host.echo_replies,
    );
    let (features, caps) = negotiated.expect("the guest negotiated features");
    assert!(caps.tso4 && caps.tso6 && caps.csum, "features {features:#x} caps {caps:?}");
    assert!(host.arp_replies >= 1);
    assert!(host.echo_replies >= 3, "{} echo replies", host.echo_replies);

    let stream = host.inbound_data(5001).expect("a TCP stream to port 5001");
    assert_eq!(stream.data.len(), TO_HOST, "bytes received from the guest");
    assert!(stream.data.iter().all(|b| *b == 0));
    let (len, off) = host
        .largest_tso
        .unwrap_or_else(|| panic!("no TCP super-frame from the guest; port {:?}", host.port.stats()));
    assert!(len > 1514 && off.gso_size > 0 && off.needs_csum, "{len} {off:?}");
    eprintln!("largest super-frame from the guest: {len} bytes, {off:?}");

    // The super-frame the host sent came back intact, byte for byte.
    assert!(results.contains(&format!("RX-BYTES {TO_GUEST}")), "{results}");
    let echo = host.inbound_data(5003).expect("the echo stream");
    assert!(echo.data == payload_pattern(TO_GUEST), "echoed {} bytes, content differs", echo.data.len());

    let s = host.port.stats();
    let v = host.port.vhost_stats();
    eprintln!("{s:?}\n{v:?}");
    assert_eq!(s.rx_dropped(), 0);
    assert_eq!(v.rx_chain_too_short + v.rx_chain_bad_address + v.rx_bad_header, 0);
    // The labelled super-frame was cut by the port (virtio-net has no MPLS GSO) into MSS
    // segments with partial checksums (the guest completes them: GUEST_CSUM), which the
    // guest's kernel popped and its TCP took: the echo above is the proof.
    assert_eq!((s.tx_segmented, s.tx_segments), (1, TO_GUEST.div_ceil(MSS as usize) as u64), "{s:?}");

    // --- the guest goes away; the port notices and keeps listening.
    drop(guest);
    let gone = Instant::now();
    while host.port.is_connected() && gone.elapsed() < Duration::from_secs(10) {
        host.pump(Duration::from_millis(50));
    }
    assert!(!host.port.is_connected(), "disconnect not seen");
    // Frames for a guest that is not there are dropped and counted, not an error.
    let before = host.port.vhost_stats().tx_not_connected;
    host.send(&[0u8; 60], Repr::default());
    assert_eq!(host.port.vhost_stats().tx_not_connected, before + 1);

    // --- a new QEMU on the same socket: negotiates afresh and pings.
    host.arp_replies = 0;
    host.echo_replies = 0;
    let boot2 = Instant::now();
    let script = format!("{NET_SETUP}\nping -c 2 -W 5 198.18.50.1 || fail ping\nresult PING-OK\n");
    let mut guest = boot(&image, "vhost2", &socket, &script);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !guest_done(&mut guest, &host) {
        host.pump(Duration::from_millis(100));
        assert!(Instant::now() < deadline, "second guest timed out:\n{}", guest.output());
    }
    let results = guest.results();
    eprintln!("second guest done after {:?}", boot2.elapsed());
    assert!(results.contains("PING-OK") && results.contains("rc=0"), "{results}");
    assert!(host.echo_replies >= 2);
    drop(guest);
    let gone = Instant::now();
    while host.port.is_connected() && gone.elapsed() < Duration::from_secs(10) {
        host.pump(Duration::from_millis(50));
    }
    let v = host.port.vhost_stats();
    assert_eq!((v.connections, v.disconnections), (2, 2), "{v:?}");
    eprintln!("total {:?}", started.elapsed());
}
