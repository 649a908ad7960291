//! Test scaffolding: the namespaces, veth links and packet sockets of `vmpls-testkit`, and
//! frame builders. Needs root.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use vmpls_testkit::{End, Netns, PacketSocket, mac_str, veth};

/// An MPLS label stack entry.
pub fn lse(label: u32, tc: u8, bos: bool, ttl: u8) -> [u8; 4] {
    ((label << 12) | (u32::from(tc) << 9) | (u32::from(bos) << 8) | u32::from(ttl)).to_be_bytes()
}

/// An IPv4/UDP packet 198.18.0.1 -> `dst` with `payload` bytes and a valid header checksum.
pub fn ipv4_udp(dst: [u8; 4], ttl: u8, payload: usize) -> Vec<u8> {
    let total = 20 + 8 + payload;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&[198, 18, 0, 1]);
    p[16..20].copy_from_slice(&dst);
    let c = !fold(sum16(&p[..20]));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&1234u16.to_be_bytes());
    p[22..24].copy_from_slice(&5678u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

/// An IPv4/TCP packet 198.18.0.1 -> `dst` (ACK, 20-byte header) with `payload` bytes.
pub fn ipv4_tcp(dst: [u8; 4], payload: usize) -> Vec<u8> {
    let mut p = ipv4_udp(dst, 64, payload + 12);
    p[9] = 6;
    p[10..12].fill(0);
    let c = !fold(sum16(&p[..20]));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[32] = 0x50; // data offset: 5 words
    p[33] = 0x10; // ACK
    p
}

pub fn sum16(b: &[u8]) -> u32 {
    b.chunks(2).map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))).sum()
}

pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// An Ethernet frame.
pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Sends `total` bytes from h1 to `server` (in h2) over the kernel's TCP; the server checks
/// every byte and answers with the count. Returns it.
pub fn transfer(h1: &Netns, h2: &Netns, server: SocketAddr, total: u64) -> u64 {
    let listener = h2.run(|| TcpListener::bind(server).expect("bind in h2"));
    listener.set_nonblocking(true).unwrap();
    std::thread::scope(|s| {
        let srv = s.spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut conn = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut got = 0u64;
            loop {
                let n = conn.read(&mut buf).expect("server read");
                if n == 0 {
                    break;
                }
                for (k, b) in buf[..n].iter().enumerate() {
                    assert_eq!(*b, pattern(got + k as u64), "byte {} corrupted", got + k as u64);
                }
                got += n as u64;
            }
            conn.write_all(&got.to_be_bytes()).unwrap();
            got
        });
        let cli = s.spawn(move || {
            h1.enter();
            let mut c = TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect from h1");
            c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut sent = 0u64;
            let mut chunk = vec![0u8; 1 << 16];
            while sent < total {
                let n = chunk.len().min((total - sent) as usize);
                for (k, b) in chunk[..n].iter_mut().enumerate() {
                    *b = pattern(sent + k as u64);
                }
                c.write_all(&chunk[..n]).expect("client write");
                sent += n as u64;
            }
            c.shutdown(Shutdown::Write).unwrap();
            let mut ack = [0u8; 8];
            c.read_exact(&mut ack).expect("the server's count");
            u64::from_be_bytes(ack)
        });
        let at_server = srv.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        let at_client = cli.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        assert_eq!(at_server, at_client);
        at_server
    })
}
