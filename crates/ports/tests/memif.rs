//! Two memif ports of one process, a server and a client on a socket in a temporary
//! directory: the handshake, frames both ways, a super-frame crossing whole as a chain of
//! descriptors with its offload metadata, and reconnection after the server goes away.

use std::time::{Duration, Instant};

use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{MemifOptions, MemifPort, MemifRole, Port};
use vmpls_wire::virtio_net;

/// A directory of the test's own for the socket, removed on drop (also on failure).
struct SocketDir(std::path::PathBuf);

impl SocketDir {
    fn new(tag: &str) -> SocketDir {
        let dir = std::env::temp_dir().join(format!("vmpls-memif-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        SocketDir(dir)
    }

    fn socket(&self) -> std::path::PathBuf {
        self.0.join("memif.sock")
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Turns both ports (the control sockets) until both are connected, within 5 s.
fn connect(a: &mut MemifPort, b: &mut MemifPort, pool: &mut PacketPool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    while !(a.is_connected() && b.is_connected()) {
        assert!(Instant::now() < deadline, "no connection: {a:?} {b:?}");
        a.recv_batch(pool, &mut out, 64).unwrap();
        b.recv_batch(pool, &mut out, 64).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(out.is_empty());
}

/// Receives on `port` until `n` frames came, within 2 s.
fn receive(port: &mut MemifPort, pool: &mut PacketPool, n: usize) -> Vec<Packet> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        port.recv_batch(pool, &mut out, 64).unwrap();
    }
    out
}

fn frame(len: usize, seed: u8) -> Packet {
    let mut f: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect();
    f[12..14].copy_from_slice(&[0x88, 0x47]);
    Packet::from_frame(0, &f)
}

#[test]
fn frames_cross_both_ways_and_a_super_frame_crosses_whole_with_its_offload() {
    let dir = SocketDir::new("both");
    let path = dir.socket();
    let mut pool = PacketPool::new(256);
    let mut server = MemifPort::open(0, "srv", &MemifOptions::new(&path, MemifRole::Server, 7)).unwrap();
    let mut client = MemifPort::open(1, "cli", &MemifOptions::new(&path, MemifRole::Client, 7)).unwrap();
    connect(&mut server, &mut client, &mut pool);
    // Two vmpls ends: offloads offered.
    assert!(server.info().caps.tso4 && client.info().caps.mpls_gso);

    for (from_client, sizes) in [(true, [60usize, 1514, 2048 + 100]), (false, [64, 4000, 9000])] {
        let (tx, rx) = if from_client { (&mut client, &mut server) } else { (&mut server, &mut client) };
        let mut batch: Vec<Packet> = sizes.iter().enumerate().map(|(i, &n)| frame(n, i as u8)).collect();
        let want: Vec<Vec<u8>> = batch.iter().map(|p| p.frame().to_vec()).collect();
        assert_eq!(tx.send_batch(&mut batch, &mut pool).unwrap(), 3);
        let got = receive(rx, &mut pool, 3);
        let got: Vec<Vec<u8>> = got.iter().map(|p| p.frame().to_vec()).collect();
        assert_eq!(got, want, "from the client: {from_client}");
    }

    // A 64 KiB TCP super-frame: 33 descriptors of 2 KiB, offload metadata with it.
    let mut big = frame(65000, 3);
    big.offload = virtio_net::Repr {
        needs_csum: true,
        gso_type: virtio_net::GsoType::TcpV4,
        hdr_len: 14 + 4 + 20 + 20,
        gso_size: 1448,
        csum_start: 14 + 4 + 20,
        csum_offset: 16,
        ..virtio_net::Repr::default()
    };
    let want = (big.frame().to_vec(), big.offload);
    assert_eq!(client.send_batch(&mut vec![big], &mut pool).unwrap(), 1);
    let got = receive(&mut server, &mut pool, 1);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].frame().to_vec(), got[0].offload), want);
    assert_eq!(got[0].port, 0);
    let s = server.stats();
    assert_eq!((s.rx_packets, s.tx_packets, s.rx_dropped()), (4, 3, 0));
}

#[test]
fn the_client_reconnects_when_the_server_comes_back() {
    let dir = SocketDir::new("again");
    let path = dir.socket();
    let mut pool = PacketPool::new(64);
    // The client first: nobody listens yet.
    let mut client = MemifPort::open(0, "cli", &MemifOptions::new(&path, MemifRole::Client, 0)).unwrap();
    let mut server = MemifPort::open(1, "srv", &MemifOptions::new(&path, MemifRole::Server, 0)).unwrap();
    connect(&mut server, &mut client, &mut pool);
    drop(server);
    // The client sees the hang-up; a frame sent meanwhile is counted, not queued.
    let mut out = Vec::new();
    for _ in 0..100 {
        client.recv_batch(&mut pool, &mut out, 64).unwrap();
        if !client.is_connected() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!client.is_connected());
    client.send_batch(&mut vec![frame(100, 0)], &mut pool).unwrap();
    assert_eq!(client.stats().tx_dropped, 1);
    assert!(!client.info().caps.tso4, "no offloads without a peer");
    let mut server = MemifPort::open(1, "srv", &MemifOptions::new(&path, MemifRole::Server, 0)).unwrap();
    connect(&mut server, &mut client, &mut pool);
    assert_eq!(client.memif_stats().connects, 2);
    assert_eq!(client.memif_stats().disconnects, 1);
}

#[test]
fn a_client_asking_for_another_id_is_refused() {
    let dir = SocketDir::new("id");
    let path = dir.socket();
    let mut pool = PacketPool::new(64);
    let mut server = MemifPort::open(0, "srv", &MemifOptions::new(&path, MemifRole::Server, 1)).unwrap();
    let mut client = MemifPort::open(1, "cli", &MemifOptions::new(&path, MemifRole::Client, 2)).unwrap();
    let mut out = Vec::new();
    for _ in 0..50 {
        server.recv_batch(&mut pool, &mut out, 64).unwrap();
        client.recv_batch(&mut pool, &mut out, 64).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!server.is_connected() && !client.is_connected());
    assert!(server.memif_stats().protocol_errors >= 1);
}
