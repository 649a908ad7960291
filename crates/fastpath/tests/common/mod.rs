//! Test scaffolding: the namespaces, veth links and packet sockets of `vmpls-testkit`, and
//! frame builders. Needs root.

#![allow(dead_code)]

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
