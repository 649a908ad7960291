//! The flow hash that picks an ECMP next hop.
//!
//! Every packet of one flow must hash alike, so that a flow stays on one path and is not
//! reordered. Inputs, as the kernel and VPP take them: the label stack (reserved labels
//! skipped; an entropy label after the entropy label indicator 7 ends the label part,
//! RFC 6790), then below the bottom of the stack the IPv4/IPv6 addresses, protocol and,
//! for unfragmented TCP/UDP, the ports.

use vmpls_wire::{ip, ipv4, ipv6, mpls};

/// Accumulates 32-bit words into a flow hash (murmur3's mixing steps).
#[derive(Debug, Clone, Copy)]
pub struct FlowHasher(u32);

impl Default for FlowHasher {
    fn default() -> Self {
        FlowHasher(0x9747_b28c)
    }
}

impl FlowHasher {
    /// Mixes one word in.
    #[inline]
    pub fn write(&mut self, word: u32) {
        let mut k = word.wrapping_mul(0xcc9e_2d51);
        k = k.rotate_left(15).wrapping_mul(0x1b87_3593);
        self.0 ^= k;
        self.0 = self.0.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }

    /// Mixes a byte slice in, four bytes at a time.
    #[inline]
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(4);
        for c in &mut chunks {
            self.write(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 4];
            w[..rest.len()].copy_from_slice(rest);
            self.write(u32::from_be_bytes(w));
        }
    }

    /// The final, avalanche-mixed hash.
    #[inline]
    pub fn finish(self) -> u32 {
        let mut h = self.0;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2_ae35);
        h ^ (h >> 16)
    }
}

/// Hashes a label stack starting at `stack` (the first entry) and, if the stack ends
/// within the buffer, the IP packet under it. Never panics on short input: it hashes
/// whatever is there.
pub fn mpls_flow_hash(stack: &[u8]) -> u32 {
    let mut h = FlowHasher::default();
    let mut off = 0;
    let mut after_eli = false;
    while let Some(e) = stack.get(off..).and_then(|b| mpls::Entry::new_checked(b).ok()) {
        let label = e.label();
        let bottom = e.bottom_of_stack();
        off += mpls::ENTRY_LEN;
        if after_eli {
            // The entropy label carries the flow identity the ingress computed: it alone
            // decides, as RFC 6790 section 4.3 asks of transit LSRs.
            h.write(label);
            return h.finish();
        }
        if label == mpls::ENTROPY_LABEL_INDICATOR {
            after_eli = true;
        } else if label >= mpls::FIRST_UNRESERVED {
            h.write(label);
        }
        if bottom {
            ip_flow_words(&mut h, &stack[off..]);
            return h.finish();
        }
    }
    h.finish()
}

/// Hashes an IP packet: addresses, protocol, and ports for unfragmented TCP/UDP.
pub fn ip_flow_hash(ip: &[u8]) -> u32 {
    let mut h = FlowHasher::default();
    ip_flow_words(&mut h, ip);
    h.finish()
}

/// The fixed header's fields only: the header is not validated beyond its length (lengths
/// and checksum are not looked at), so a flow hashes alike whatever state its packets are in.
fn ip_flow_words(h: &mut FlowHasher, ip: &[u8]) {
    match ip::Version::of_packet(ip) {
        Some(ip::Version::Ipv4) if ip.len() >= ipv4::HEADER_LEN => {
            let p = ipv4::Packet::new_unchecked(ip);
            let proto = p.protocol();
            h.write(p.src_addr().to_bits());
            h.write(p.dst_addr().to_bits());
            h.write(u32::from(proto));
            if !p.is_fragment() {
                ports(h, proto, ip.get(p.header_len()..));
            }
        }
        Some(ip::Version::Ipv6) if ip.len() >= ipv6::HEADER_LEN => {
            let p = ipv6::Packet::new_unchecked(ip);
            let next = p.next_header();
            h.write_bytes(&p.src_addr().octets());
            h.write_bytes(&p.dst_addr().octets());
            h.write(u32::from(next));
            // The flow label already names the flow when the sender set one.
            h.write(p.flow_label());
            ports(h, next, ip.get(ipv6::HEADER_LEN..));
        }
        _ => {}
    }
}

fn ports(h: &mut FlowHasher, proto: u8, l4: Option<&[u8]>) {
    use vmpls_wire::ipv4::protocol::{TCP, UDP};
    if (proto == TCP || proto == UDP)
        && let Some((src, dst)) = l4.and_then(ip::ports)
    {
        h.write((u32::from(src) << 16) | u32::from(dst));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp(src_port: u16) -> Vec<u8> {
        let mut ip = vec![0u8; 40];
        ip[0] = 0x45;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[198, 18, 1, 2]);
        ip[16..20].copy_from_slice(&[198, 18, 2, 2]);
        ip[20..22].copy_from_slice(&src_port.to_be_bytes());
        ip[22..24].copy_from_slice(&5201u16.to_be_bytes());
        ip
    }

    fn entry(label: u32, bottom: bool) -> [u8; 4] {
        ((label << 12) | if bottom { 0x100 } else { 0 } | 64).to_be_bytes()
    }

    #[test]
    fn same_flow_same_hash_other_ttl() {
        let mut a = entry(1002, true).to_vec();
        a.extend(ipv4_tcp(40000));
        let mut b = a.clone();
        b[3] = 3; // another TTL on the label
        b[4 + 8] = 7; // and on the IP header
        assert_eq!(mpls_flow_hash(&a), mpls_flow_hash(&b));
    }

    #[test]
    fn ports_spread_flows() {
        let hashes: std::collections::HashSet<u32> = (0..100)
            .map(|p| {
                let mut f = entry(1002, true).to_vec();
                f.extend(ipv4_tcp(40000 + p));
                mpls_flow_hash(&f) % 2
            })
            .collect();
        assert_eq!(hashes.len(), 2);
    }

    #[test]
    fn entropy_label_alone_decides() {
        let mut a = entry(1002, false).to_vec();
        a.extend(entry(7, false));
        a.extend(entry(5555, true));
        let mut b = a.clone();
        a.extend(ipv4_tcp(1));
        b.extend(ipv4_tcp(2));
        assert_eq!(mpls_flow_hash(&a), mpls_flow_hash(&b));
    }

    #[test]
    fn reserved_labels_are_skipped() {
        let mut a = entry(0, false).to_vec();
        a.extend(entry(1002, true));
        a.extend(ipv4_tcp(9));
        let mut b = entry(1002, true).to_vec();
        b.extend(ipv4_tcp(9));
        assert_eq!(mpls_flow_hash(&a), mpls_flow_hash(&b));
    }

    #[test]
    fn short_input_does_not_panic() {
        let mut f = entry(1002, true).to_vec();
        f.extend(ipv4_tcp(1));
        for n in 0..f.len() {
            mpls_flow_hash(&f[..n]);
            ip_flow_hash(&f[4..4 + n.min(f.len() - 4)]);
        }
    }

    /// Hashes of a few packets as the hash computed them before it read through the
    /// wire views: a flow must keep its path across the change.
    #[test]
    fn hash_values_are_stable() {
        let v4 = ipv4_tcp(40000);
        let mut v4_frag = v4.clone();
        v4_frag[6] = 0x20; // MF: the ports are left out
        let mut v4_opts = vec![0x46];
        v4_opts.extend_from_slice(&v4[1..20]);
        v4_opts[9] = 17;
        v4_opts.extend_from_slice(&[0x94, 4, 0, 0]);
        v4_opts.extend_from_slice(&v4[20..]);
        let mut v6 = vec![0x60, 0x0e, 0xe0, 0x41, 0, 8, 17, 64];
        v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v6.extend_from_slice(&[0x9c, 0x41, 0x13, 0x89, 0, 8, 0, 0]);
        let mut labelled = entry(1002, false).to_vec();
        labelled.extend(entry(3, false));
        labelled.extend(entry(2002, true));
        labelled.extend(&v6);
        let got = [
            ip_flow_hash(&v4),
            ip_flow_hash(&v4_frag),
            ip_flow_hash(&v4_opts),
            ip_flow_hash(&v6),
            ip_flow_hash(&v6[..42]),
            ip_flow_hash(&v6[..39]),
            mpls_flow_hash(&labelled),
            mpls_flow_hash(&labelled[..10]),
        ];
        assert_eq!(
            got,
            [0x8bdfe152, 0x8f7d6bec, 0x21331616, 0x26edd29e, 0x3b644260, 0xebb6c228, 0x468e3a39, 0xfd6719d0]
        );
    }
}
